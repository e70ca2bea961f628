"""Hinge loss mean(clamp(1 - predictions * targets, min=0)) with +-1 targets."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, D = (1024, 8192) if FULL else (8, 45)


class Model(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, D), torch.randint(0, 2, (B, D)).float() * 2 - 1]


def get_init_inputs() -> list:
    return []
