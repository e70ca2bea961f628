"""2-D convolution (3x3), minus a constant, HardSwish, then a clamp."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, H, W = (16, 32, 64, 128, 128) if FULL else (2, 3, 8, 10, 9)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, subtract: float) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3)
        self.subtract = subtract

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.hardswish(self.conv(x) - self.subtract)
        return torch.clamp(y, min=-0.5, max=2.0)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT, 0.5]
