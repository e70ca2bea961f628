"""Grouped 2-D convolution: 4 groups, 3x3 kernel, asymmetric input, padding (1, 2), stride (1, 2)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, H, W = (16, 64, 128, 64, 96) if FULL else (2, 8, 12, 7, 9)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, groups: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=(1, 2), padding=(1, 2), groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT, 4]
