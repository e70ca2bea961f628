"""A regime nobody tuned: y = A @ x with a column x and K in the millions (A 2048 x 1048576: 8 GiB read
once; the bound is bytes)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
M, K = (2048, 1048576) if FULL else (32, 4096)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, 1)]
