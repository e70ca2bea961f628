"""Transposed 2-D convolution: 4x4 kernel, stride 2, padding 1 (doubles the resolution)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, H, W = (16, 64, 32, 64, 64) if FULL else (2, 6, 5, 5, 6)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT]
