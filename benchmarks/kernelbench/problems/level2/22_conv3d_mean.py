"""3-D convolution, SiLU, then the mean over the spatial dimensions (a pooled feature per channel)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, D, H, W = (8, 16, 32, 32, 32, 32) if FULL else (2, 3, 5, 4, 6, 5)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.conv(x)).mean(dim=(2, 3, 4))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, D, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT]
