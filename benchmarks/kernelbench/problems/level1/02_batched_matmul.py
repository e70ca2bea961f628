"""C[b] = A[b] @ B[b] (torch.bmm)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, M, K, N = (32, 512, 1024, 256) if FULL else (3, 24, 40, 16)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, M, K), torch.randn(B, K, N)]


def get_init_inputs() -> list:
    return []
