"""3-D convolution, Softplus, then a scale by a constant."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, D, H, W = (8, 16, 32, 16, 32, 32) if FULL else (1, 2, 4, 5, 6, 7)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scale: float) -> None:
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(self.conv(x)) * self.scale


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, D, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT, 2.0]
