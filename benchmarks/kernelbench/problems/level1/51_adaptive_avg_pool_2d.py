"""Adaptive average pooling to (1, 1): the global pool at the end of a CNN."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, C, H, W = (128, 2048, 7, 7) if FULL else (2, 5, 7, 9)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, C, H, W)]


def get_init_inputs() -> list:
    return []
