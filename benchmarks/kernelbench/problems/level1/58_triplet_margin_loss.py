"""Triplet margin loss (p = 2) of anchor, positive and negative embeddings."""
import os

import torch
import torch.nn as nn

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
B, D = (1024, 8192) if FULL else (8, 45)


class Model(nn.Module):
    def __init__(self, margin: float) -> None:
        super().__init__()
        self.loss = nn.TripletMarginLoss(margin=margin)

    def forward(self, anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        return self.loss(anchor, positive, negative)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(B, D), torch.randn(B, D), torch.randn(B, D)]


def get_init_inputs() -> list:
    return [1.0]
