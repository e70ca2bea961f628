"""Linear, sigmoid, the sum over the features, then a logsumexp over the batch."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, IN, OUT = (1024, 4096, 4096) if FULL else (9, 24, 17)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.fc(x)).sum(dim=1)
        return torch.logsumexp(s, dim=0)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, IN)]


def get_init_inputs() -> list:
    return [IN, OUT]
