"""A regime nobody tuned: causal attention with head dim 64 at 1024 tokens (B 16, H 16), half precision."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, H, S, D = (16, 16, 1024, 64) if FULL else (1, 2, 16, 64)
T, CAUSAL = S, True


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    dt = torch.float16 if FULL else torch.float32
    return [torch.randn(B, H, S, D, dtype=dt), torch.randn(B, H, T, D, dtype=dt), torch.randn(B, H, T, D, dtype=dt)]
