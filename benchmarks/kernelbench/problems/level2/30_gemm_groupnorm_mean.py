"""Linear, then GroupNorm over the features, then the mean over the features."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, IN, OUT, G = (2048, 4096, 4096, 32) if FULL else (13, 32, 48, 4)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, num_groups: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.gn = nn.GroupNorm(num_groups, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(self.fc(x)).mean(dim=1, keepdim=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, IN)]


def get_init_inputs() -> list:
    return [IN, OUT, G]
