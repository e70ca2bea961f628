"""Inclusive prefix product along dimension 1 of a 2-D tensor (values near 1 keep products finite)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, L = (128, 4000) if FULL else (4, 37)


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=self.dim)


def get_inputs() -> list[torch.Tensor]:
    return [1.0 + 0.001 * torch.randn(B, L)]


def get_init_inputs() -> list:
    return [1]
