"""A regime nobody tuned: C = A @ B with M = N = 256 and K = 524288 (a 256 x 256 output: without split-K or
stream-K a few CTAs walk all of K)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
M, N, K = (256, 256, 524288) if FULL else (16, 16, 8192)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]
