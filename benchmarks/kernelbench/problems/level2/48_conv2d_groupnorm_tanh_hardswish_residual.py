"""Conv2d, GroupNorm, tanh, hardswish, the conv output added back, then a logsumexp over the channels."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, H, W, G = (64, 16, 64, 64, 64, 8) if FULL else (2, 3, 8, 7, 6, 4)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, groups: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3)
        self.gn = nn.GroupNorm(groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv(x)
        y = F.hardswish(torch.tanh(self.gn(c))) + c
        return torch.logsumexp(y, dim=1, keepdim=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT, G]
