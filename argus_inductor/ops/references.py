"""What each Argus op computes, in plain torch that Inductor can compile: the measured swap-in's fallback side.

Each function takes its op's arguments (the node id too, ignored) and returns the op's result. Put in an op node's
place (graph/swapin.py), it is what Inductor compiles for that subgraph without Argus: an extern cuBLAS/cuDNN call
and the fused epilogue Inductor generates around it, or its own kernels, and it is what the swap-in times against
the Argus plan. Every function is traceable (no data-dependent shapes), so AOTAutograd can trace it into the graph.
Ops that write an operand in place (the decode step's rope_cache) have no reference here: they are not swapped.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..kernels.gemm import ACTIVATION_FNS
from .library import LIBRARY, parse_args


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, node_id: str = "") -> Tensor:
    return ACTIVATION_FNS[activation](F.linear(x, weight, bias))


def linear_residual(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor, activation: str,
                    node_id: str = "") -> Tensor:
    return residual + ACTIVATION_FNS[activation](F.linear(x, weight, bias))


def gate_up(x: Tensor, w_gate: Tensor, w_up: Tensor, activation: str, node_id: str = "") -> Tensor:
    return ACTIVATION_FNS[activation](F.linear(x, w_gate)) * F.linear(x, w_up)


def linear_cat(x: Tensor, w0: Tensor, w1: Tensor, w2: Tensor, node_id: str = "") -> Tensor:
    return torch.cat([F.linear(x, w) for w in (w0, w1, w2)], -1)


def bmm(a: Tensor, b: Tensor, node_id: str = "") -> Tensor:
    return torch.bmm(a, b)


def kv_heads_repeated(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """k and v with each key/value head repeated for its group of query heads (transformers' repeat_kv)."""
    group = q.shape[1] // k.shape[1]
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float | None, node_id: str = "",
              positions: bool = False) -> Tensor:
    """SDPA as transformers calls it without a mask: grouped heads through enable_gqa where the head dims are equal
    and at most 256, through repeated key/value heads otherwise."""
    if q.shape[1] != k.shape[1] and not k.shape[-1] == v.shape[-1] <= 256:
        k, v = kv_heads_repeated(q, k, v)
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=gqa)


def attention_mask(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None, node_id: str = "",
                   positions: bool = False) -> Tensor:
    """SDPA with the mask as transformers calls it (grouped heads as repeated key/value heads, never enable_gqa), with
    a float mask in q's dtype. On the H200 (torch 2.11.0+cu130), SDPA with bf16 q, k, v and a float32 mask went to
    cuDNN's attention and came back wrong (relative error 0.1 to 0.27 at a decode step, with or without grouped
    heads; the same mask in bf16, or the math backend, 2e-3): the batch-32 decode's fallback side gave wrong logits,
    and the output check, judging by that same call, put the right Argus plan out (tests/backend/test_references.py,
    tests/backend/test_decode_gpu.py)."""
    k, v = kv_heads_repeated(q, k, v)
    if mask.is_floating_point() and q.is_floating_point():
        mask = mask.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def moe(hidden: Tensor, topk_weights: Tensor, topk_ids: Tensor, w1: Tensor, w2: Tensor, node_id: str = "") -> Tensor:
    """The experts step as transformers' grouped_mm experts run it: the routed rows sorted by expert, one grouped GEMM
    for gate and up, SiLU-gated, one for down, weighted and summed back per token."""
    t, hd = hidden.shape
    e, i2, _ = w1.shape
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1).to(torch.int64)
    order = flat.argsort(stable=True)
    token = order // k
    # rows per expert as a count of static shape (bincount's shape depends on the ids' values, so Inductor could not
    # compile this reference alone for the measured swap-in)
    counts = torch.zeros(e, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
    offs = counts.cumsum(0).to(torch.int32)
    gu = torch._grouped_mm(hidden[token], w1.transpose(1, 2), offs=offs)
    h = F.silu(gu[:, : i2 // 2]) * gu[:, i2 // 2:]
    y = torch._grouped_mm(h, w2.transpose(1, 2), offs=offs)
    w = topk_weights.reshape(-1)[order].float()
    out = torch.zeros(t, hd, dtype=torch.float32, device=hidden.device).index_add_(0, token, y.float() * w[:, None])
    return out.to(hidden.dtype)


def library(name: str, tensors: Sequence[Tensor | None], args: str, node_id: str = "") -> Tensor:
    return LIBRARY[name].reference(list(tensors), parse_args(args))


def rms_norm(x: Tensor, weight: Tensor, eps: float, node_id: str = "") -> Tensor:
    return library("rms_norm_rounded", [x, weight], _eps(eps))


def embedding_rms_norm(ids: Tensor, table: Tensor, weight: Tensor, eps: float, node_id: str = "") -> Tensor:
    return library("embedding_rms_norm_rounded", [ids, table, weight], _eps(eps))


def _eps(eps: float) -> str:
    from .library import canonical_args

    return canonical_args({"eps": float(eps)})


# op name (OpOverload.name()) -> its reference
REFERENCES: dict[str, Callable[..., Tensor]] = {
    "argus::linear": linear, "argus::linear_residual": linear_residual, "argus::gate_up": gate_up,
    "argus::linear_cat": linear_cat, "argus::bmm": bmm, "argus::attention": attention,
    "argus::attention_mask": attention_mask, "argus::moe": moe, "argus::library": library,
    "argus::rms_norm": rms_norm, "argus::embedding_rms_norm": embedding_rms_norm,
}


def reference_for(target: Any) -> Callable[..., Tensor] | None:
    """The reference of an op overload (torch.ops.argus.X.default), or None (an op with no reference: it writes an
    operand in place, or it is not Argus's)."""
    name = getattr(target, "name", None)
    return REFERENCES.get(name()) if callable(name) else None


__all__ = ["REFERENCES", "kv_heads_repeated", "reference_for"]
