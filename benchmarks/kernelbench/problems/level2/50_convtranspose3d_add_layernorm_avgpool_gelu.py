"""ConvTranspose3d, plus a learned scalar, LayerNorm over the last dim, 3-D average pooling, then GELU."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, D, H, W = (16, 32, 32, 8, 16, 16) if FULL else (1, 3, 4, 3, 4, 3)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, width: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(torch.tensor(1.0))
        self.norm = nn.LayerNorm(2 * width)
        self.pool = nn.AvgPool3d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x) + self.bias)
        return torch.nn.functional.gelu(self.pool(y))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, D, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT, W]
