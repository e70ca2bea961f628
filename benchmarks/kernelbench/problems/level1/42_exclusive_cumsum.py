"""Exclusive prefix sum (each element is the sum of the elements strictly before it) along dimension 1."""
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
        head = torch.zeros_like(x.narrow(self.dim, 0, 1))
        shifted = torch.cat((head, x.narrow(self.dim, 0, x.size(self.dim) - 1)), dim=self.dim)
        return torch.cumsum(shifted, dim=self.dim)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, L)]


def get_init_inputs() -> list:
    return [1]
