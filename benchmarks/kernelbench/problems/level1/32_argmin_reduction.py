"""Argmin over the middle dimension of a 3-D tensor."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, R, C = (16, 4096, 4095) if FULL else (3, 37, 21)


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=self.dim)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, R, C)]


def get_init_inputs() -> list:
    return [1]
