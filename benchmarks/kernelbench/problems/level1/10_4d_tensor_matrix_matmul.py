"""A 4-D tensor times a matrix over its last dim: einsum('bijl,lk->bijk')."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, I, J, L, K = (8, 64, 128, 256, 768) if FULL else (2, 3, 5, 16, 24)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bijl,lk->bijk", a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, I, J, L), torch.randn(L, K)]


def get_init_inputs() -> list:
    return []
