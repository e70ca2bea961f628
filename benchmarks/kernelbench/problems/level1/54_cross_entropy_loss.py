"""Cross entropy of logits against int64 class indices, mean over the batch."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, C = (4096, 32000) if FULL else (13, 37)


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, C), torch.randint(0, C, (B,))]


def get_init_inputs() -> list:
    return []
