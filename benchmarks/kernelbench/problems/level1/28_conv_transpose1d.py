"""Transposed 1-D convolution: kernel 5, stride 3, padding 2, dilation 2, no bias."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, L = (16, 64, 32, 8192) if FULL else (2, 5, 4, 11)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, 5, stride=3, padding=2, dilation=2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, L)]


def get_init_inputs() -> list:
    return [CIN, COUT]
