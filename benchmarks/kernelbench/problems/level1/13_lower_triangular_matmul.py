"""tril(A @ B) for lower-triangular A and B."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N = 4096 if FULL else 48


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tril(torch.matmul(a, b))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, N).tril(), torch.randn(N, N).tril()]


def get_init_inputs() -> list:
    return []
