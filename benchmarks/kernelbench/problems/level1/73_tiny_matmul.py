"""A regime nobody tuned: C = A @ B at 7 x 29 @ 29 x 13, where the launch is the whole cost."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
M, N, K = 7, 13, 29


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]
