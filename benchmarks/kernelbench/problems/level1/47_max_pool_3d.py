"""Max pooling over three spatial dimensions (kernel 3, stride 2, padding 1, ceil mode)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, C, D, H, W = (16, 32, 64, 64, 64) if FULL else (2, 2, 5, 7, 6)


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int) -> None:
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size, stride=stride, padding=padding, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, C, D, H, W)]


def get_init_inputs() -> list:
    return [3, 2, 1]
