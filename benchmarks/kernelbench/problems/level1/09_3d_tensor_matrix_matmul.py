"""A 3-D tensor times a matrix: (N, M, K) @ (K, L)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N, M, K, L = (16, 1024, 2048, 768) if FULL else (3, 20, 24, 16)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, M, K), torch.randn(K, L)]


def get_init_inputs() -> list:
    return []
