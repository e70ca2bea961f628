"""Linear, a per-feature scale, then BatchNorm1d (eval mode: running statistics)."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, IN, OUT = (1024, 4096, 4096) if FULL else (11, 20, 13)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x) * self.scale)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, IN)]


def get_init_inputs() -> list:
    return [IN, OUT]
