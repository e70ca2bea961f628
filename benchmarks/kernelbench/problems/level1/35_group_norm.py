"""Group normalization (nn.GroupNorm) of a 4-D tensor."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N, C, G, H, W = (16, 64, 8, 256, 256) if FULL else (2, 12, 4, 5, 7)


class Model(nn.Module):
    def __init__(self, num_groups: int, num_features: int) -> None:
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, C, H, W)]


def get_init_inputs() -> list:
    return [G, C]
