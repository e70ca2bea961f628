"""Matmul, L1 normalization along dim 1, scaling, then log-softmax along dim 1."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, K, N = (4096, 2048, 8192) if FULL else (13, 32, 40)


class Model(nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight
        y = y / torch.sum(torch.abs(y), dim=1, keepdim=True)
        return torch.log_softmax(y * 100.0, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, K)]


def get_init_inputs() -> list:
    return [K, N]
