"""1-D convolution with stride 3 and dilation 4, no padding, no bias."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, L = (16, 32, 64, 16384) if FULL else (2, 4, 6, 37)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, dilation: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, L)]


def get_init_inputs() -> list:
    return [CIN, COUT, 3, 3, 4]
