"""Self-attention block: QKV projection, scaled dot-product attention, output projection, residual add."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, S, H, D = (8, 1024, 16, 64) if FULL else (1, 16, 2, 16)


class Model(nn.Module):
    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(heads * head_dim, 3 * heads * head_dim, bias=False)
        self.out = nn.Linear(heads * head_dim, heads * head_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(o.transpose(1, 2).reshape(b, s, -1))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, S, H * D)]


def get_init_inputs() -> list:
    return [H, D]
