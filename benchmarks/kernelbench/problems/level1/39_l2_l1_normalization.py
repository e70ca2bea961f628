"""L2 normalization along dim 1, then L1 normalization along dim 1, of a 2-D tensor."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, D = (16384, 16383) if FULL else (7, 100)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x / torch.norm(x, p=2, dim=1, keepdim=True)
        return y / torch.sum(torch.abs(y), dim=1, keepdim=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, D)]


def get_init_inputs() -> list:
    return []
