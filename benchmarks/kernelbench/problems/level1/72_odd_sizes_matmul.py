"""A regime nobody tuned: C = A @ B at sizes no tile divides (3001 x 4097 @ 4097 x 1999)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
M, N, K = (3001, 1999, 4097) if FULL else (33, 17, 45)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]
