"""Linear, a scale, plus a residual-like per-row tensor, then tanh."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, IN, OUT = (1024, 4096, 4096) if FULL else (16, 64, 48)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x) * self.scale + residual)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, IN), torch.randn(B, OUT)]


def get_init_inputs() -> list:
    return [IN, OUT, 0.5]
