"""C = A^T @ B^T with A (K, M) and B (N, K) stored untransposed."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
M, K, N = (2048, 4096, 3072) if FULL else (40, 24, 33)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a.T, b.T)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(K, M), torch.randn(N, K)]


def get_init_inputs() -> list:
    return []
