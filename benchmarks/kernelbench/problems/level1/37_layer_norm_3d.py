"""Layer normalization (nn.LayerNorm) over the last three dims of a 4-D tensor."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
N, F, D1, D2 = (16, 64, 256, 256) if FULL else (3, 4, 5, 7)


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, F, D1, D2)]


def get_init_inputs() -> list:
    return [(F, D1, D2)]
