"""A regime nobody tuned: a Qwen3-MoE-style sparse MoE block (128 experts, top-8, softmax router) on 16 tokens, so
about one token reaches each expert: the bound is the bytes of the experts the routing picks."""
import os

import torch
import torch.nn as nn
import transformers

# SIZE knob: small on the CPU (Argus kernels interpreted), full with ARGUS_KB_FULL=1 or on a GPU.
FULL = os.environ.get("ARGUS_KB_FULL") == "1" or torch.cuda.is_available()
TOKENS, HIDDEN, INTER, EXPERTS, TOP_K = (16, 2048, 768, 128, 8) if FULL else (6, 32, 24, 16, 4)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        cfg = transformers.Qwen3MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=INTER, num_experts=EXPERTS,
                                          num_experts_per_tok=TOP_K, norm_topk_prob=True)
        cfg._experts_implementation = "grouped_mm"  # traced whole (the eager expert loop breaks every graph)
        self.block = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(cfg)
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
