"""Linear + ReLU, then LayerNorm and a max over the features."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, IN, OUT = (2048, 2048, 2048) if FULL else (16, 32, 64)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(torch.relu(self.fc(x)))
        return y.amax(dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, IN)]


def get_init_inputs() -> list:
    return [IN, OUT]
