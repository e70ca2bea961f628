"""Log-softmax over dim 1 of a 2-D tensor."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, D = (4096, 16383) if FULL else (7, 100)


class Model(nn.Module):
    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, D)]


def get_init_inputs() -> list:
    return [1]
