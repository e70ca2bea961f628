"""Softmax over the channel dim (1) of a 4-D tensor (a strided reduction)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N, C, H, W = (16, 64, 128, 128) if FULL else (2, 13, 5, 7)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, C, H, W)]


def get_init_inputs() -> list:
    return []
