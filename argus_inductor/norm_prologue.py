"""Fuse an RMSNorm into the one-row GEMVs that read it, as their prologue.

At decode with one sequence, each transformer layer normalizes its hidden row before the attention's q, k and v
projections (argus.linear_cat) and before the MLP's gate and up (argus.gate_up). Left to Inductor, each norm is a
launch of its own that writes the normalized row for the GEMV to read back: on the H100 five launches and about
12 us of Llama decode's 0.70 ms a token, plus the idle gap each launch leaves in the step. The GEMV reads the
whole row in its K loop anyway, so its kernels (gemv_cat, gemm_gate_up, NORM=1) gather the row's sum of squares
there, multiply the row by the norm weight as they load it, and scale each column's sum by rsqrt(mean + eps) once
at the end.

The norm is transformers' (LlamaRMSNorm and its copies in Mistral, Mixtral, Qwen2 and DeepSeek-V3):
`weight * (h.float() * rsqrt(h.float().pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)`. It is fused only where
every use of its output is such a GEMV of one row known at compile time (otherwise the norm would still run), and
only for 2-byte activations. The fused kernels keep the normalized row in float32 instead of rounding it to
bfloat16 before the weight multiplies it: closer to the exact value, not bit-identical to eager.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from . import reporting as report
from .matchers import _bind, _drop, _is, _num, _static_rows, _val

FUSING_OPS = (torch.ops.argus.linear_cat.default, torch.ops.argus.gate_up.default)  # args: (x, ..., node_id)
_HALF = (torch.float16, torch.bfloat16)


def _eps(n: Any) -> float | fx.Node | None:
    """The norm's eps: a number, or under dynamic=True the node Dynamo reads the module's float from (a SymFloat,
    `.item()` of a scalar input), which the fused op then takes as its argument; else None."""
    if isinstance(n, (int, float)) and not isinstance(n, bool):
        return float(n)
    v = n.meta.get("example_value", n.meta.get("val")) if isinstance(n, fx.Node) else None
    return n if isinstance(v, torch.SymFloat) else None


def _rsqrt_of_mean_square(r: Any, x32: fx.Node) -> float | fx.Node | None:
    """eps when r = rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps), each step used once, else None."""
    if not (_is(r, {torch.rsqrt}, ("rsqrt",)) and len(r.users) == 1 and len(r.args) == 1):
        return None
    add = r.args[0]
    if not (_is(add, {operator.add, torch.add}, ("add",)) and len(add.args) == 2 and len(add.users) == 1):
        return None
    for mean, eps in (add.args, add.args[::-1]):
        if not (_is(mean, {torch.mean}, ("mean",)) and len(mean.users) == 1) or _eps(eps) is None:
            continue
        a = _bind(mean, ["input", "dim", "keepdim"])
        sq = a.get("input")
        if a.get("keepdim") is not True or a.get("dim") not in (-1, [-1], (-1,), _val(x32).dim() - 1):
            continue
        if not (isinstance(sq, fx.Node) and len(sq.users) == 1 and sq.args and sq.args[0] is x32):
            continue
        if (_is(sq, {torch.pow, operator.pow}, ("pow",)) and _num(sq.args[1]) == 2.0) or \
                (_is(sq, {operator.mul, torch.mul}, ("mul",)) and sq.args[1] is x32):
            return _eps(eps)
    return None


def rms_norm_of(x: Any) -> tuple[fx.Node, fx.Node, float | fx.Node, fx.Node] | None:
    """(h, weight, eps, x) when node x is transformers' RMSNorm of h over its last dim, else None."""
    if not (_is(x, {operator.mul, torch.mul}, ("mul",)) and len(x.args) == 2 and not x.kwargs):
        return None
    xv = _val(x)
    for w, c in (x.args, x.args[::-1]):
        wv = _val(w)
        if xv is None or wv is None or not isinstance(c, fx.Node) or len(c.users) != 1:
            continue
        if not (_is(c, set(), ("to",)) and len(c.args) == 2 and c.args[1] == xv.dtype and not c.kwargs):
            continue
        normed = c.args[0]  # x32 * rsqrt(mean(x32^2) + eps), either order
        if not (_is(normed, {operator.mul, torch.mul}, ("mul",)) and len(normed.args) == 2 and len(normed.users) == 1):
            continue
        for x32, r in (normed.args, normed.args[::-1]):
            x32v = _val(x32)
            if x32v is None or x32v.dtype != torch.float32 or not _is(x32, set(), ("to", "float")):
                continue
            if x32.target == "to" and (len(x32.args) != 2 or x32.args[1] != torch.float32 or x32.kwargs):
                continue
            eps = _rsqrt_of_mean_square(r, x32)
            h = x32.args[0]
            hv = _val(h)
            if eps is None or hv is None or hv.dtype != xv.dtype or hv.dtype not in _HALF:
                continue
            if wv.dim() != 1 or wv.dtype != xv.dtype or wv.shape[0] != hv.shape[-1] or \
                    tuple(hv.shape) != tuple(xv.shape):
                continue
            return h, w, eps, x
    return None


def fuse_norm_prologues(g: fx.Graph) -> int:
    """Rewrite every RMSNorm whose uses are all one-row argus.linear_cat / argus.gate_up ops into those ops' norm
    prologue (their norm_weight and eps arguments); returns how many norms were fused."""
    fused = 0
    for n in list(g.nodes):
        if n.op != "call_function" or n.target not in FUSING_OPS or len(n.args) != 5:
            continue
        x = n.args[0]
        norm = rms_norm_of(x)
        if norm is None:
            continue
        h, w, eps, _ = norm
        users = list(x.users)
        if not all(u.op == "call_function" and u.target in FUSING_OPS and len(u.args) == 5 and u.args[0] is x
                   and x not in u.args[1:] for u in users):
            continue
        xv = _val(x)
        if xv is None or _static_rows(xv) != 1:
            continue
        for u in users:
            u.args = (h, *u.args[1:], w, eps)
            report.note(u.args[4], "RMSNorm fused as the kernel's prologue (NORM=1)")
        _drop(g, [x])
        fused += 1
    return fused
