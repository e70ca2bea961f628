"""diag(a) @ B: a diagonal matrix built from a vector times a matrix."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N, M = (4096, 4096) if FULL else (48, 40)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.diag(a) @ b


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs() -> list:
    return []
