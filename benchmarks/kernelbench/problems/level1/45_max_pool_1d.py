"""Max pooling over one spatial dimension (kernel 4, stride 2, padding 2, dilation 3)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, C, L = (64, 64, 8192) if FULL else (2, 3, 37)


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int) -> None:
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, C, L)]


def get_init_inputs() -> list:
    return [4, 2, 2, 3]
