"""Depthwise 2-D convolution (groups = channels): 3x3 kernel, stride 1, padding 1."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, C, H, W = (16, 64, 128, 128) if FULL else (2, 6, 9, 8)


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, C, H, W)]


def get_init_inputs() -> list:
    return [C, 3]
