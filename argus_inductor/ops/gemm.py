"""The GEMM ops: argus::linear (bias, activation), argus::linear_residual, argus::gate_up, argus::linear_cat and
argus::bmm, their specs (templates by regime: GEMV, split-K, pre-split three-pass tf32, tensor-core tiles) and host
functions.
"""
from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..dsl import Policy
from ..kernels.gemm import (
    ACTIVATION_FNS,
    ACTIVATIONS,
    bias_act_cast,
    bmm_kernel,
    cat_epilogue,
    cat_shapes,
    cat_widths,
    gemm_epilogue,
    gemm_splitk,
    gemv_cat,
    tf32x3_split_pays,
)
from ..kernels.gemm_residual import gemm_gate_up, gemm_residual
from ..kernels.policies import (
    fp32_precision,
    gemm_fallbacks,
    gemm_policy,
    gemv_cat_policy,
    gemv_columns,
    gemv_policy,
    gemv_static_steps,
    gluon_reads,
    ieee_chain_split,
    presplit_gemm_policy,
    weight_k_major,
)
from ..runtime import reporting as _report
from ..runtime.signature import Signature, make_signature
from .core import RESOLVERS, SPECS, OpSpec, Plan, epilogue_parts, for_dtype, gluon_fallbacks, spec_for
from .dispatch import dummy, epilogue_of, lowering_note, meta_key, present, presplit_operands, run_op


def _act_of(sig: Signature) -> int:
    for p in epilogue_parts(sig):
        a = p.split("*")[0]
        if a in ACTIVATIONS and a != "none":
            return ACTIVATIONS[a]
    return 0



def _presplit_template(sig: Signature, target: str) -> Policy | None:
    """The template of a float32 GEMM that runs three-pass tf32 on pre-split operands (OpSpec.policies), else None."""
    if target == "interpret" or sig.dtypes[0] != "float32" or fp32_precision(sig.op) != "tf32x3":
        return None
    d = sig.dims()
    m, n, k = d.get("M", 1), d["N"], d["K"]
    return presplit_gemm_policy(m, n, k) if tf32x3_split_pays(m, n, k) else None


def _gemm_base(sig: Signature, target: str, gluon: bool = False, split: bool = True) -> Policy:
    """The tile policy of a GEMM-family signature: the CUDA-core path (policies.gemv_policy) where the op's kernel
    has one (a GEMV constexpr) and the shape takes it, else gemm_policy."""
    d = sig.dims()
    m, n, k = d.get("M", 1), d["N"], d["K"]
    gemv = any(c.name == "GEMV" for c in SPECS[sig.op].kernels[0].ir.constexprs)
    gemv_pol = gemv_policy(m, n, target, k, weight_k_major(sig.layouts)) if gemv else None
    if gemv_pol is not None:
        gemv_pol = _gemv_columns(gemv_pol, sig)
    if gemv_pol is not None and any(c.name == "KSTEPS" for c in SPECS[sig.op].kernels[0].ir.constexprs):
        gemv_pol = _gemv_steps(gemv_pol, sig)
    return gemv_pol or gemm_policy(m, n, k, target, gluon=gluon, split=split)


def _weights(sig: Signature) -> int:
    """The weights a GEMV program streams a K step: 2 for gate*up (gate_up, or gemm[silu*up] as the backend signs
    it), else 1."""
    return 2 if spec_for(sig) is SPECS["gate_up"] else 1


def _gemv_columns(policy: Policy, sig: Signature) -> Policy:
    """A one-column GEMV policy with two columns a program where K is a static dim whose loop is long
    (policies.gemv_columns)."""
    static = dict(sig.static_dims)
    if policy.const("BN") != 1 or "K" not in static:
        return policy
    bn = gemv_columns(static["K"], policy.const("BK"), _weights(sig))
    return policy.with_consts(BN=bn) if bn != 1 else policy


def _gemv_steps(policy: Policy, sig: Signature) -> Policy:
    """A GEMV policy with its K loop as static steps (KSTEPS) where K is a static dim of the signature and
    policies.gemv_static_steps finds they pay (a short loop over one weight): the checker proves at the signature's K
    that the steps cover it (measured: NOTES.md, GEMM decode)."""
    static = dict(sig.static_dims)
    if "K" not in static:
        return policy
    steps = gemv_static_steps(static["K"], policy.const("BK"), policy.const("BN"), _weights(sig))
    return policy.with_consts(KSTEPS=steps) if steps else policy


def _gemm_template(sig: Signature, target: str) -> dict[str, Any]:
    split = _presplit_template(sig, target)
    if split is not None:
        return split.as_dict()
    # the Gluon lowering's tiles are sized for 2-byte operands: others take Triton's
    p = _gemm_base(sig, target, gluon=gluon_reads(sig.dtypes[0]))
    if target != "interpret" and sig.dtypes[0] == "float32" and fp32_precision(sig.op) == "ieee" and \
            p.const("GEMV", 0) != 1:  # (the GEMV path sums each K lane apart: chains of K / BK)
        p = ieee_chain_split(p, sig.dims()["K"])
    return (p if p.warp_specialize else for_dtype(p, sig, target)).as_dict()


def _unsplit(p: Policy) -> Policy:
    """The policy without split-K (the residual and gate*up kernels keep the whole K loop)."""
    return p.without_consts("SPLIT_K")


def _gemm_fused_template(sig: Signature, target: str) -> dict[str, Any]:
    split = _presplit_template(sig, target)
    if split is not None:
        return split.as_dict()
    return for_dtype(_gemm_base(sig, target, split=False), sig, target).as_dict()


def _gate_up_template(sig: Signature, target: str) -> dict[str, Any]:
    p = _gemm_base(sig, target, split=False)
    if target != "interpret" and p.const("BN", 64) > 128:  # two accumulators: half the tile width
        p = p.with_consts(BN=p.const("BN") // 2)
    return for_dtype(p, sig, target, b_tiles=2).as_dict()


def _gemm_select(policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
    """gemm_epilogue, or with SPLIT_K > 1 the split-K kernel (fp32 partial sums) then bias/act/cast."""
    epi = _bias_consts(sig)
    p = Policy.make(**dict(policy))
    if int(p.const("SPLIT_K", 1) or 1) > 1:
        return {"gemm_splitk": p, "bias_act_cast": Policy.make(BM=16, BN=128, **epi)}
    return {"gemm_epilogue": _unsplit(p).with_consts(**epi)}


def _fused_select(name: str, consts: Callable[[Signature], dict[str, Any]]) \
        -> Callable[[dict[str, Any], Signature], dict[str, Policy]]:
    def select(policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
        return {name: _unsplit(Policy.make(**dict(policy))).with_consts(**consts(sig))}
    return select


def _gemm_shapes(sig: Signature) -> dict[str, int]:
    d = sig.dims()
    return {"M": d.get("M", 1), "N": d["N"], "K": d["K"]}


def _bias_consts(sig: Signature) -> dict[str, int]:
    return {"HAS_BIAS": int("bias" in epilogue_parts(sig)), "ACT": _act_of(sig)}



SPECS["gemm"] = OpSpec("gemm", (gemm_epilogue, gemm_splitk, bias_act_cast), _gemm_template,
               lambda s: {"gemm_epilogue": _bias_consts(s)},
               lambda s: {n: _gemm_shapes(s) for n in ("gemm_epilogue", "gemm_splitk", "bias_act_cast")},
               _gemm_select, presplit=("gemm_epilogue",), host_kernels=gluon_fallbacks(
                   gemm_epilogue, lambda s, p, elem: gemm_fallbacks(p, s.dims()["N"], s.dims()["K"], elem)))
SPECS["gemm_residual"] = OpSpec("gemm_residual", (gemm_residual,), _gemm_fused_template,
                        lambda s: {"gemm_residual": _bias_consts(s)},
                        lambda s: {"gemm_residual": _gemm_shapes(s)},
                        _fused_select("gemm_residual", _bias_consts), presplit=("gemm_residual",))
SPECS["gate_up"] = OpSpec("gate_up", (gemm_gate_up,), _gate_up_template,
                  lambda s: {"gemm_gate_up": {"ACT": _act_of(s)}}, lambda s: {"gemm_gate_up": _gemm_shapes(s)},
                  _fused_select("gemm_gate_up", lambda s: {"ACT": _act_of(s)}), presplit=("gemm_gate_up",))
SPECS["gemv_cat"] = OpSpec("gemv_cat", (gemv_cat,),
                           lambda s, target: _gemv_steps(gemv_cat_policy(target, s.dims()["K"]), s).as_dict(),
                   lambda s: {}, lambda s: {"gemv_cat": cat_shapes(s.epilogue, s.dims())},
                   _fused_select("gemv_cat", lambda s: {}))
SPECS["bmm"] = OpSpec("bmm", (bmm_kernel,), _gemm_fused_template, lambda s: {},
              lambda s: {"bmm_kernel": {**_gemm_shapes(s), "Bt": s.dims()["B"]}}, presplit=("bmm_kernel",))


def _resolve(sig: Signature) -> OpSpec | None:
    """A GEMM signature's spec by its epilogue: gate*up, a residual add, three projections side by side."""
    if sig.op != "gemm":
        return None
    parts = epilogue_parts(sig)
    if any("*up" in p for p in parts):
        return SPECS["gate_up"]
    if "residual" in parts:
        return SPECS["gemm_residual"]
    if cat_widths(sig.epilogue):
        return SPECS["gemv_cat"]
    return SPECS["gemm"]


RESOLVERS.append(_resolve)

# --------------------------------------------------------------------------------------------------
# The ops


def degenerate(m: int, n: int, k: int) -> bool:
    """A GEMM with an empty output (M or N of 0: nothing to compute) or an empty sum (K = 0: the output is the
    epilogue of zeros). The op answers with the aten op (exactly eager's), not a launch: no tile policy or proof is
    made for an empty dimension, and the replay of an empty result could not tell it from an operand."""
    return m == 0 or n == 0 or k == 0


@torch.library.custom_op("argus::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, node_id: str) -> Tensor:
    """act(x @ weight.T + bias) for x (..., K), weight (N, K)."""
    k = x.shape[-1]
    n = weight.shape[0]
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)  # (not -1: with K = 0 the rows are not implied)

    def sig() -> Signature:
        return make_signature("gemm", epilogue_of("bias" if bias is not None else "", activation), [x2, weight],
                              {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        b = bias if bias is not None else dummy(out)
        if "gemm_splitk" in plan.policies:  # fp32 partial sums over K slices, then bias/activation/cast
            part = torch.zeros(m, n, dtype=torch.float32, device=x.device)
            plan.kernels["gemm_splitk"](x2, weight.t(), part, policy=plan.policies["gemm_splitk"], target=target)
            plan.kernels["bias_act_cast"](part, b, out, policy=plan.policies["bias_act_cast"], target=target)
        else:
            a, w = presplit_operands(plan, target, x2, weight.t())
            pol = plan.policies["gemm_epilogue"]
            if pol.warp_specialize and target == "cuda":
                _report.note(node_id, lowering_note("gemm_epilogue", pol, a, w, b, out))
            plan.kernels["gemm_epilogue"](a, w, b, out, policy=pol, target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return ACTIVATION_FNS[activation](F.linear(x, weight, bias))

    if degenerate(m, n, k):
        return fallback()
    # the bias is read by the kernels too: an operand of the replay, its metadata part of the call key
    return run_op(node_id, sig, run, fallback, [x, weight], (activation, meta_key(bias)),
                  flops=2 * m * n * k, inputs=present(x, weight, bias))


@linear.register_fake
def _(x, weight, bias, activation, node_id):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("argus::linear_residual", mutates_args=())
def linear_residual(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor, activation: str,
                    node_id: str) -> Tensor:
    """residual + act(x @ weight.T + bias) for x (..., K), weight (N, K), residual (..., N)."""
    k = x.shape[-1]
    n = weight.shape[0]
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)
    r2 = residual.reshape(m, n)

    def sig() -> Signature:
        return make_signature("gemm", epilogue_of("bias" if bias is not None else "", activation, "residual"),
                              [x2, weight, r2], {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        a, w = presplit_operands(plan, target, x2, weight.t())
        plan.kernels["gemm_residual"](a, w, bias if bias is not None else dummy(out), r2, out,
                                      policy=plan.policies["gemm_residual"], target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return residual + ACTIVATION_FNS[activation](F.linear(x, weight, bias))

    if degenerate(m, n, k):
        return fallback()
    return run_op(node_id, sig, run, fallback, [x, weight, residual], (activation, meta_key(bias)),
                  flops=2 * m * n * k, inputs=present(x, weight, residual, bias))


@linear_residual.register_fake
def _(x, weight, bias, residual, activation, node_id):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("argus::gate_up", mutates_args=())
def gate_up(x: Tensor, w_gate: Tensor, w_up: Tensor, activation: str, node_id: str) -> Tensor:
    """act(x @ w_gate.T) * (x @ w_up.T) for x (..., K), w_gate and w_up (N, K): the gated MLP's first half."""
    k = x.shape[-1]
    n = w_gate.shape[0]
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)

    def sig() -> Signature:
        return make_signature("gemm", f"{activation}*up", [x2, w_gate, w_up], {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        a, wg, wu = presplit_operands(plan, target, x2, w_gate.t(), w_up.t())
        plan.kernels["gemm_gate_up"](a, wg, wu, out, policy=plan.policies["gemm_gate_up"], target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return ACTIVATION_FNS[activation](F.linear(x, w_gate)) * F.linear(x, w_up)

    if degenerate(m, n, k):
        return fallback()
    return run_op(node_id, sig, run, fallback, [x, w_gate, w_up], (activation,),
                  flops=4 * m * n * k)


@gate_up.register_fake
def _(x, w_gate, w_up, activation, node_id):
    return x.new_empty(*x.shape[:-1], w_gate.shape[0])


@torch.library.custom_op("argus::linear_cat", mutates_args=())
def linear_cat(x: Tensor, w0: Tensor, w1: Tensor, w2: Tensor, node_id: str) -> Tensor:
    """[x @ w0.T | x @ w1.T | x @ w2.T] for x (..., K) and bias-free weights (N_i, K): three projections of one
    input (an attention's q, k and v at decode) as one launch, their outputs side by side."""
    k = x.shape[-1]
    widths = (w0.shape[0], w1.shape[0], w2.shape[0])
    n = builtins.sum(widths)
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)

    def sig() -> Signature:
        return make_signature("gemm", cat_epilogue(widths), [x2, w0, w1, w2], {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        plan.kernels["gemv_cat"](x2, w0.t(), w1.t(), w2.t(), out, policy=plan.policies["gemv_cat"], target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return torch.cat([F.linear(x, w) for w in (w0, w1, w2)], -1)

    if degenerate(m, min(widths), k):
        return fallback()
    return run_op(node_id, sig, run, fallback, [x, w0, w1, w2], flops=2 * m * n * k)


@linear_cat.register_fake
def _(x, w0, w1, w2, node_id):
    return x.new_empty(*x.shape[:-1], w0.shape[0] + w1.shape[0] + w2.shape[0])


@torch.library.custom_op("argus::bmm", mutates_args=())
def bmm(a: Tensor, b: Tensor, node_id: str) -> Tensor:
    bt, m, k = a.shape
    n = b.shape[2]

    def sig() -> Signature:
        return make_signature("bmm", "", [a, b], {"N": n, "K": k}, {"B": bt, "M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(bt, m, n, dtype=a.dtype, device=a.device)
        a3, b3 = presplit_operands(plan, target, a, b)
        plan.kernels["bmm_kernel"](a3, b3, out, policy=plan.policies["bmm_kernel"], target=target)
        return out

    if degenerate(bt * m, n, k):
        return torch.bmm(a, b)
    return run_op(node_id, sig, run, lambda: torch.bmm(a, b), [a, b],
                  flops=2 * bt * m * n * k)


@bmm.register_fake
def _(a, b, node_id):
    return a.new_empty(a.shape[0], a.shape[1], b.shape[2])


