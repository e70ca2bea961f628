"""Batched matmul, InstanceNorm1d over each (batch, row), then the max over the columns."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
BT, M, K, N = (64, 512, 512, 1024) if FULL else (3, 12, 16, 20)


class Model(nn.Module):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.norm = nn.InstanceNorm1d(rows)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.bmm(a, b)).amax(dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(BT, M, K), torch.randn(BT, K, N)]


def get_init_inputs() -> list:
    return [M]
