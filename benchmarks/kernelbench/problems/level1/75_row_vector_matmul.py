"""A regime nobody tuned: one row times a wide matrix, y = x @ W with x 1 x 8192 and W 8192 x 28672 (a decode
step's MLP projection; the bound is W's bytes)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
K, N = (8192, 28672) if FULL else (64, 48)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(1, K), torch.randn(K, N)]
