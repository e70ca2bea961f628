"""Batch normalization (nn.BatchNorm2d, eval mode: running statistics) of a 4-D tensor."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N, C, H, W = (16, 64, 256, 256) if FULL else (3, 6, 5, 7)


class Model(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)
        with torch.no_grad():  # non-trivial running statistics and affine parameters
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, C, H, W)]


def get_init_inputs() -> list:
    return [C]
