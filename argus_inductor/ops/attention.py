"""The attention ops: argus::attention (causal or not, GQA) and argus::attention_mask (a mask the kernel reads),
their spec (prefill and decode kernels, split-KV for a decode step with few key/value heads, the Gluon lowering's
Triton fallbacks) and host function.
"""
from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from ..dsl import Kernel, Policy
from ..kernels.attention import (
    attention_decode,
    attention_decode_merge,
    attention_decode_part,
    attention_decode_split,
    attention_fwd,
    mask_operand,
    nonnegative_scale,
    split_policies,
)
from ..kernels.launch import pow2
from ..kernels.pointwise import broadcasts_to
from ..kernels.policies import attention_fallbacks, attention_policy, fit_attention, gluon_reads
from ..runtime import reporting as _report
from ..runtime.signature import Signature, make_signature
from . import references
from .core import ELEM_BYTES, SPECS, OpSpec, Plan, epilogue_parts, gluon_fallbacks
from .dispatch import lowering_note, meta_key, present, run_op

_attention_gluon_fallbacks = gluon_fallbacks(attention_fwd, lambda s, p, elem: attention_fallbacks(p, elem))


def _attention_host_kernels(sig: Signature, policies: dict[str, Policy],
                            target: str | None) -> dict[str, tuple[Kernel, Policy]]:
    """The Gluon lowering's Triton fallbacks, and for a decode plan the split-KV kernels its host runs where the
    batch's key/value heads are too few programs for the GPU (kernels.attention.decode_split_chunks)."""
    out = _attention_gluon_fallbacks(sig, policies, target)
    dec = policies.get("attention_decode")
    if dec is not None:
        d = sig.dims()
        part, merge = split_policies(d["H"] // d["HK"], d["D"], "mask" in sig.epilogue.split(","), dec)
        out["attention_decode_part (split-KV)"] = (attention_decode_part, part)
        out["attention_decode_merge (split-KV)"] = (attention_decode_merge, merge)
    return out


def _attention_template(sig: Signature, target: str) -> dict[str, Any]:
    d = sig.dims()
    parts = epilogue_parts(sig)
    p = attention_policy(d["S"], d["D"], target, "mask" in parts, gluon=gluon_reads(sig.dtypes[0]))
    if target != "interpret":
        p = fit_attention(p, builtins.max(16, pow2(d["D"])), ELEM_BYTES.get(sig.dtypes[0], 4),
                          has_mask="mask" in parts, target=target)
    return p.as_dict()


def _attention_dims(sig: Signature) -> dict[str, int]:
    return {k: v for k, v in sig.dims().items() if k in ("Z", "H", "HK", "S", "T", "D")}


def _attention_consts(sig: Signature) -> dict[str, dict[str, Any]]:
    d = sig.dims()["D"]
    parts = epilogue_parts(sig)
    return {"attention_fwd": {"BD": builtins.max(16, pow2(d)), "CAUSAL": int("causal" in parts),
                              "HAS_MASK": int("mask" in parts), "SAFE": _safe(sig)}}


def _safe(sig: Signature) -> int:
    """The kernels' SAFE: 1 (a query row with no visible key is zero, SDPA's), 0 for a signature whose epilogue says
    "nanrows" (softmax then a matmul, an attention written out: NaN)."""
    return int("nanrows" not in epilogue_parts(sig))


def _attention_select(policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
    """attention_fwd; for one query token (no causal mask) attention_decode, which packs the query heads
    of a key/value group into one tile so each K/V row is read once per group."""
    dims = dict(sig.dynamic_dims)
    st = sig.dims()
    p = Policy.make(**dict(policy))
    bd = builtins.max(16, pow2(st["D"]))
    group = st["H"] // st["HK"]
    has_mask = int("mask" in epilogue_parts(sig))
    if dims.get("S") == "1" and "causal" not in epilogue_parts(sig) and group <= 64 and "BG" not in dict(p.consts):
        dec = Policy.make(BG=builtins.max(16, pow2(group)), BN=p.const("BN", 64), BD=bd,
                          HAS_MASK=has_mask, SAFE=_safe(sig))
        return {"attention_decode": replace(dec, num_warps=p.num_warps, num_stages=p.num_stages)}
    if "BG" in dict(p.consts):  # a stored decode policy
        return {"attention_decode": p.with_consts(BD=bd, HAS_MASK=has_mask, SAFE=_safe(sig))}
    return {"attention_fwd": p.with_consts(**_attention_consts(sig)["attention_fwd"])}



SPECS["attention"] = OpSpec("attention", (attention_fwd, attention_decode), _attention_template, _attention_consts,
                    lambda s: {n: _attention_dims(s) for n in ("attention_fwd", "attention_decode")},
                    _attention_select, host_kernels=_attention_host_kernels)


def attention_out(q: Tensor, v: Tensor, positions: bool) -> Tensor:
    """The attention ops' output (Z, H, S, Dv): contiguous, or with `positions` in (Z, S, H, Dv) memory, so that
    the transpose(1, 2) every transformers attention applies next is contiguous and its .contiguous() no copy
    (a 16 MB copy a layer at Llama-3-8B's 1x2048 prefill)."""
    z, h, s = q.shape[:3]
    if positions:
        return q.new_empty(z, s, h, v.shape[-1]).transpose(1, 2)
    return q.new_empty(z, h, s, v.shape[-1])


def _attention_run(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None, node_id: str,
                   fallback: Callable[[], Tensor], mask: Tensor | None = None, positions: bool = False,
                   nan_rows: bool = False) -> Tensor:
    z, h, s, d = q.shape
    hk, t = k.shape[1], k.shape[2]
    sc = scale if scale is not None else 1.0 / math.sqrt(d)

    def sig() -> Signature:
        parts = ("causal" if causal else "", f"gqa{h // hk}" if h != hk else "", "mask" if mask is not None else "",
                 "nanrows" if nan_rows else "")
        return make_signature("attention", ",".join(p for p in parts if p), [q, k, v], {"H": h, "HK": hk, "D": d},
                              {"Z": z, "S": s, "T": t})

    def run(plan: Plan, target: str) -> Tensor:
        out = attention_out(q, v, positions)  # the layout the fake says
        name = "attention_decode" if "attention_decode" in plan.policies else "attention_fwd"
        qs, scs = nonnegative_scale(q, sc)
        pol = plan.policies[name]
        if pol.warp_specialize and target == "cuda":
            _report.note(node_id, lowering_note(name, pol, qs, k, v, out, scs))
        m = mask_operand(mask, q, k)
        chunks = attention_decode_split(qs, k, v, m, out, scs, *split_policies(h // hk, d, mask is not None, pol),
                                        target) if name == "attention_decode" else 0
        if chunks:
            _report.note(node_id, f"split-KV decode: {chunks} chunks of {t // chunks} keys a program "
                                  "(attention_decode_part + attention_decode_merge)")
        else:
            plan.kernels[name](qs, k, v, m, out, scs, policy=pol, target=target)
        return out

    def fallback_in_layout() -> Tensor:  # SDPA returns q's layout; the op's fake (and the kernels) attention_out's
        return attention_out(q, v, positions).copy_(fallback())

    if v.shape != k.shape or h % hk or q.shape[0] != k.shape[0] or q.shape[-1] != d:
        return fallback_in_layout()
    if mask is not None and (not (mask.dtype == torch.bool or mask.is_floating_point()) or not broadcasts_to(
            mask.shape, (z, h, s, t))):
        return fallback_in_layout()
    if z * h * s * v.shape[-1] == 0:  # an empty batch, no queries: nothing to compute, no kernel to launch
        return attention_out(q, v, positions)
    if t == 0:  # no keys: zeros, as SDPA's (and softmax over no keys times no values)
        return attention_out(q, v, positions).zero_()
    return run_op(node_id, sig, run, fallback_in_layout, [q, k, v], (causal, meta_key(mask), nan_rows),
                  flops=4 * z * h * s * t * d,  # as FlopCounterMode counts SDPA (the mask ignored)
                  inputs=present(q, k, v, mask))


def softmax_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float | None) -> Tensor:
    """softmax(q k^T * scale + mask) v as an attention written out computes it (a row whose every score is -inf is
    NaN, where SDPA's is zero), GQA by repeating k and v; a bool mask keeps True."""
    k, v = references.kv_heads_repeated(q, k, v)
    scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores + (torch.where(mask, 0.0, -math.inf) if mask.dtype == torch.bool else mask)
    return torch.softmax(scores, -1).to(v.dtype) @ v


@torch.library.custom_op("argus::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float | None, node_id: str,
              positions: bool = False, nan_rows: bool = False) -> Tensor:
    """softmax(q k^T * scale [causal]) v for q (Z, H, S, D), k/v (Z, HK, T, D), H % HK == 0; `positions`: the
    output in (Z, S, H, D) memory (attention_out). A query row with no visible key (every score -inf, from
    infinite inputs) is zero as SDPA's, or with `nan_rows` NaN, as an attention written out as softmax and matmul
    computes it (softmax_attention; not causal)."""

    def fallback() -> Tensor:
        if nan_rows:
            return softmax_attention(q, k, v, None, scale)
        return references.attention(q, k, v, is_causal, scale)

    return _attention_run(q, k, v, is_causal, scale, node_id, fallback, positions=positions, nan_rows=nan_rows)


@attention.register_fake
def _(q, k, v, is_causal, scale, node_id, positions=False, nan_rows=False):
    return attention_out(q, v, positions)


# flexible layout: a decode step's mask, computed in the graph and read by every layer's op, is computed once (see
# library_ops' rope_cache)
@torch.library.custom_op("argus::attention_mask", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def attention_mask(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None, node_id: str,
                   positions: bool = False, nan_rows: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v (a bool mask keeps True) for q (Z, H, S, D), k/v (Z, HK, T, D), the mask
    broadcasting to (Z, H, S, T). The kernel reads the mask itself: nothing is decided from its values on the
    host, so the op never synchronizes and can be captured in a CUDA graph. `positions`, `nan_rows`: as
    attention's (a row the mask hides every key from: zero as SDPA's, or NaN with `nan_rows`)."""

    def fallback() -> Tensor:
        if nan_rows:
            return softmax_attention(q, k, v, mask, scale)
        return references.attention_mask(q, k, v, mask, scale)  # the mask in q's dtype (see there)

    return _attention_run(q, k, v, False, scale, node_id, fallback, mask, positions, nan_rows)


@attention_mask.register_fake
def _(q, k, v, mask, scale, node_id, positions=False, nan_rows=False):
    return attention_out(q, v, positions)


