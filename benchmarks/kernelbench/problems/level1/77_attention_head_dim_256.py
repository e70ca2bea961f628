"""A regime nobody tuned: causal attention with head dim 256 (B 4, H 8, 2048 tokens), half precision."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, H, S, D = (4, 8, 2048, 256) if FULL else (1, 2, 16, 32)
T, CAUSAL = S, True


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    dt = torch.float16 if FULL else torch.float32
    return [torch.randn(B, H, S, D, dtype=dt), torch.randn(B, H, T, D, dtype=dt), torch.randn(B, H, T, D, dtype=dt)]
