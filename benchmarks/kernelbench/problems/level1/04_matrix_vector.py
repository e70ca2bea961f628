"""y = A @ x with x a column vector (K, 1)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
M, K = (8192, 8192) if FULL else (64, 96)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs() -> list:
    return []
