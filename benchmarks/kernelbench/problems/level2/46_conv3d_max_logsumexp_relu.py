"""Conv3d, then the max over depth, a logsumexp over the channels (kept), then ReLU."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, CIN, COUT, D, H, W = (16, 16, 32, 16, 32, 32) if FULL else (2, 3, 5, 4, 6, 5)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).amax(dim=2)
        return torch.relu(torch.logsumexp(y, dim=1, keepdim=True))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, CIN, D, H, W)]


def get_init_inputs() -> list:
    return [CIN, COUT]
