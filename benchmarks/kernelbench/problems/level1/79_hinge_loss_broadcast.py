"""A regime nobody tuned: an elementwise-then-mean loss over a broadcast, mean(clamp(1 - predictions * targets, 0))
with one +-1 target per column, (32768, 32768) against (32768,): summed as it is computed, or two passes through a
4 GiB intermediate."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, D = (32768, 32768) if FULL else (24, 71)


class Model(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, D), torch.randint(0, 2, (D,)).float() * 2 - 1]
