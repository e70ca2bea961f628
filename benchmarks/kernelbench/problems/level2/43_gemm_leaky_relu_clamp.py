"""Linear, LeakyReLU (slope 0.1), then a clamp to [-1, 1]."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, IN, OUT = (1024, 4096, 4096) if FULL else (16, 64, 48)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.leaky_relu(self.fc(x), negative_slope=0.1)
        return torch.clamp(y, -1.0, 1.0)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, IN)]


def get_init_inputs() -> list:
    return [IN, OUT]
