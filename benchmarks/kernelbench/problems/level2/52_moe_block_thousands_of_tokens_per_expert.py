"""A regime nobody tuned: a Mixtral-style sparse MoE block (8 experts, top-2) on 8192 tokens, about 2048 tokens an
expert: grouped GEMMs with many rows, bound by the tensor cores."""
import os

import torch
import torch.nn as nn
import transformers

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
TOKENS, HIDDEN, INTER, EXPERTS, TOP_K = (8192, 1024, 3584, 8, 2) if FULL else (40, 32, 24, 4, 2)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        cfg = transformers.MixtralConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_local_experts=EXPERTS,
                                         num_experts_per_tok=TOP_K)
        cfg._experts_implementation = "grouped_mm"  # traced whole (the eager expert loop breaks every graph)
        self.block = transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(cfg)
        with torch.no_grad():  # experts' weights at nn.Linear's scale (the module leaves them uninitialized)
            for p in self.block.parameters():
                p.uniform_(-p.shape[-1] ** -0.5, p.shape[-1] ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


def get_init_inputs() -> list:
    return []


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(1, TOKENS, HIDDEN)]
