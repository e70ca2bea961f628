"""2-D convolution, a per-channel scale (C, 1, 1), sigmoid, plus a per-channel bias."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, H, W = (16, 32, 64, 128, 128) if FULL else (2, 3, 8, 10, 9)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.scale = nn.Parameter(torch.randn(out_channels, 1, 1))
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.conv(x) * self.scale) + self.bias


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT]
