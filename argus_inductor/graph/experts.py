"""argus_inductor.optimize(model): module-level rewrites that graph matching cannot do by itself.

transformers' sparse-MoE blocks (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3, ...) keep their experts in
an `*Experts` module with stacked weights (gate_up_proj (E, 2I, H), down_proj (E, H, I)) called as
experts(hidden_states, top_k_index, top_k_weights). With transformers' default grouped_mm / batched_mm
experts implementation that call traces into one Dynamo graph and backend="argus" replaces it there
(argus_inductor.graph.moe); the eager implementation loops over experts with data-dependent
shapes and breaks the graph. optimize(model) swaps each such module for ArgusExperts, whose forward is
one call of torch.ops.argus.moe, so the whole block compiles with no graph break under any backend:

    model = argus_inductor.optimize(model)        # in place; returns the model
    compiled = torch.compile(model, backend="argus")
"""
from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn as nn

from .. import ops  # noqa: F401  (registers torch.ops.argus.moe)
from ..runtime import reporting as _report

log = logging.getLogger("argus_inductor")


class ArgusExperts(nn.Module):
    """Stands in for a transformers experts module; shares its Parameters (no copy)."""

    def __init__(self, experts: nn.Module, name: str) -> None:
        super().__init__()
        self.gate_up_proj = experts.gate_up_proj
        self.down_proj = experts.down_proj
        self.num_experts = int(self.gate_up_proj.shape[0])
        self.replaces = type(experts).__name__
        self.node_id = f"optimize:{name}"
        _report.record_match(self.node_id, "moe", f"{name} ({self.replaces}, via optimize)")

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        return torch.ops.argus.moe(hidden_states, top_k_weights, top_k_index, self.gate_up_proj, self.down_proj,
                                   self.node_id)

    def extra_repr(self) -> str:
        e, i2, h = self.gate_up_proj.shape
        return f"replaces={self.replaces}, experts={e}, hidden={h}, intermediate={i2 // 2}"


def _silu(act: Any) -> bool:
    if isinstance(act, nn.SiLU):
        return True
    name = type(act).__name__
    return name in ("SiLUActivation", "SiLU") or getattr(act, "__name__", "") == "silu"


def why_not(module: nn.Module) -> str | None:
    """None when `module` is an experts module ArgusExperts can stand in for, else the reason it is not."""
    w1, w2 = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(w1, torch.Tensor) or not isinstance(w2, torch.Tensor):
        return "no stacked gate_up_proj / down_proj weights"
    if w1.dim() != 3 or w2.dim() != 3:
        return "expert weights are not 3-D"
    e, i2, h = w1.shape
    if w2.shape[0] != e or i2 % 2 or tuple(w2.shape[1:]) != (h, i2 // 2):
        return f"weights {tuple(w1.shape)}, {tuple(w2.shape)} are not (E, 2I, H) and (E, H, I)"
    if getattr(module, "is_transposed", False):
        return "transposed expert weights"
    if not getattr(module, "is_concatenated", True):
        return "interleaved gate/up rows"
    if getattr(module, "has_bias", False) or getattr(module, "gate_up_proj_bias", None) is not None:
        return "expert biases"
    if not getattr(module, "has_gate", True):
        return "no gate"
    if getattr(module, "has_post_expert_norm", False):
        return "a norm after each expert"
    if not _silu(getattr(module, "act_fn", None)):
        return f"activation {type(getattr(module, 'act_fn', None)).__name__} is not SiLU"
    return None


def optimize(model: nn.Module) -> nn.Module:
    """Swap every transformers sparse-MoE experts module of `model` for ArgusExperts (in place).

    Returns the model. Modules that do not fit (another activation, biases, transposed or interleaved
    weights) are left as they are and named in the log. Safe to call more than once."""
    root = getattr(model, "_orig_mod", model)  # a torch.compile'd module: rewrite what it wraps
    swapped, skipped = [], []
    for name, mod in list(root.named_modules()):
        if isinstance(mod, ArgusExperts) or not type(mod).__name__.endswith("Experts"):
            continue
        if not hasattr(mod, "gate_up_proj"):
            continue
        reason = why_not(mod)
        if reason is not None:
            skipped.append(f"{name} ({type(mod).__name__}): {reason}")
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = root.get_submodule(parent_name) if parent_name else root
        setattr(parent, attr, ArgusExperts(mod, name))
        swapped.append(name)
    for s in skipped:
        log.warning("argus.optimize: left %s", s)
    log.info("argus.optimize: %d MoE experts module(s) now run torch.ops.argus.moe", len(swapped))
    return model
