"""A regime nobody tuned: a batched matmul whose batch dims broadcast, (4, 1, M, K) @ (1, 8, K, N) -> (4, 8, M, N)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B1, B2, M, N, K = (4, 8, 512, 256, 1024) if FULL else (2, 3, 8, 8, 16)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B1, 1, M, K), torch.randn(1, B2, K, N)]
