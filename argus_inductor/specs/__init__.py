"""What each op computes: its semantics, reference, inputs and peers, and how a plan becomes its kernels' policies;
the mapping between shape signatures and concrete problems. Shared by the ops (proof obligations of their host
functions) and the agent (what it synthesizes and tests against).

May import: dsl, kernels, runtime.signature. Imported by ops and agent; never imports them.

Signature conventions (the tensors each op's signature is made from, as argus_inductor.ops makes them):
    gemm       [x (M, K), weight (N, K)]            static N, K          dynamic M      epilogue "bias+silu", ...
               [x, weight, residual (M, N)]  epilogue "...+residual";  [x, w_gate, w_up]  epilogue "silu*up"
    bmm        [a (B, M, K), b (B, K, N)]           static N, K          dynamic B, M
    attention  [q (Z,H,S,D), k, v (Z,HK,T,D)]       static H, HK, D      dynamic Z, S, T  epilogue "causal,gqa4"
    moe        [x (T, HD), w1 (E,2I,HD), w2 (E,HD,I)] static HD, I, E, TOPK  dynamic T  epilogue "top2,silu"
    softmax / rmsnorm / layernorm  [x (R, C) (, w (C,), b (C,))]  static C  dynamic R
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..dsl.policy import LAUNCH_FIELDS
from ..runtime.signature import Signature, device_arch, device_model, make_signature
from .attention import AttentionSpec
from .base import DTYPES, OpSpec, Problem, next_pow2
from .gemm import BmmSpec, GemmSpec, parse_epilogue
from .moe import MoeSpec
from .norms import RowSpec
from .plan import Plan

SPECS: dict[str, OpSpec] = {s.name: s for s in (
    GemmSpec(), BmmSpec(), AttentionSpec(), MoeSpec(), RowSpec("softmax"), RowSpec("rmsnorm"), RowSpec("layernorm"))}


def spec(op: str) -> OpSpec:
    if op not in SPECS:
        raise KeyError(f"the agent has no op '{op}'; known: {', '.join(SPECS)}")
    return SPECS[op]


def problem_from_signature(sig: Signature, device: str = "cpu") -> Problem:
    s = spec(sig.op)
    dims = sig.dims()
    want = set(s.static) | set(s.dynamic)
    if set(dims) != want:
        raise ValueError(f"signature {sig.short()} has dims {sorted(dims)}, but op '{sig.op}' expects "
                         f"{sorted(want)}")
    if sig.dtypes[0] not in DTYPES:
        raise ValueError(f"signature {sig.short()}: dtype {sig.dtypes[0]} is not supported")
    return Problem(sig.op, sig.epilogue, {k: dims[k] for k in (*s.static, *s.dynamic)}, sig.dtypes[0],
                   tuple(sig.layouts), device)


def _view(layout: str, rank: int) -> torch.Tensor:
    """A tiny tensor with the layout a signature records (make_signature reads dtype and strides only)."""
    if rank == 1:
        return torch.empty(2)
    t = torch.empty(*([1] * (rank - 2)), 2, 2)
    return t.transpose(-1, -2) if layout == "col" else t


def signature_for(problem: Problem, arch: str, device: str | None = None) -> Signature:
    """The signature argus_inductor.ops computes for tensors of this problem on a device of `arch`; `device`: its GPU
    model (runtime.signature.device_model; default: the visible GPU's where it is of `arch`, else none)."""
    s = spec(problem.op)
    d = problem.dims
    ranks = {"gemm": (2, 2), "bmm": (3, 3), "attention": (4, 4, 4), "moe": (2, 3, 3), "softmax": (2,),
             "rmsnorm": (2, 1), "layernorm": (2, 1, 1)}[problem.op]
    if problem.op == "gemm":
        epi = parse_epilogue(problem.epilogue)
        if epi.residual or epi.gate_up:  # [x, weight, residual] and [x, w_gate, w_up]
            ranks = (2, 2, 2)
        elif epi.cat:  # [x, w0, w1, w2]
            ranks = (2, 2, 2, 2)
    layouts = problem.layouts or tuple("row" if r > 1 else "vec" for r in ranks)
    dt = DTYPES[problem.dtype]
    tensors = [_view(lay, r).to(dt) if lay != "vec" else torch.empty(2, dtype=dt) for lay, r in zip(layouts, ranks)]
    sig = make_signature(problem.op, problem.epilogue, tensors, {k: d[k] for k in s.static},
                         {k: d[k] for k in s.dynamic})
    if device is None:
        device = ""
        if torch.cuda.is_available() and arch == device_arch(torch.device("cuda")):
            device = device_model(torch.device("cuda"))
    return replace(sig, arch=arch, device=device)


def attention_epilogue(h: int, hk: int, causal: bool) -> str:
    """The epilogue string argus_inductor.ops gives an attention signature."""
    return ",".join(p for p in ("causal" if causal else "", f"gqa{h // hk}" if h != hk else "") if p)


def moe_epilogue(topk: int) -> str:
    """The epilogue string argus_inductor.ops gives a MoE signature."""
    return f"top{topk},silu"


def plan_from_policy(problem: Problem, policy: dict[str, Any]) -> Plan:
    """A plan from a policy dict as the cache keeps it (CacheEntry.policy) or benchmarks/sweep.py writes it: flat
    for one kernel (SPLIT_K > 1 picks split-k; helper kernels get their fixed policy), {kernel: dict} for several.
    Constants the kernel does not declare are dropped, constants the signature fixes are re-derived."""
    op = spec(problem.op)
    if policy and all(isinstance(v, dict) for v in policy.values()):
        for kernels in op.variants(problem).values():
            if set(policy) <= set(kernels):
                return Plan({k: _knobs(op, problem, k, kernels[k], policy.get(k, {})) for k in kernels},
                            note="from a stored policy")
        raise ValueError(f"no variant of {problem.op} has the kernels {sorted(policy)}")
    split = int(policy.get("SPLIT_K", 1) or 1) > 1
    for kernels in op.variants(problem).values():
        main = next(k for k in kernels if k not in op.aux)
        declared = {p.name for p in kernels[main].ir.constexprs}
        if split != ("SPLIT_K" in declared):
            continue
        plan = {k: ({} if k != main else _knobs(op, problem, k, kernels[k], policy)) for k in kernels}
        return Plan(plan, note="from a stored policy")
    raise ValueError(f"no variant of {problem.op} takes the policy {policy}")


def _knobs(op: OpSpec, problem: Problem, name: str, kernel: Any, policy: dict[str, Any]) -> dict[str, Any]:
    declared = {p.name for p in kernel.ir.constexprs}
    fixed = op.fixed_consts(problem, name, Plan({}))
    return {k: v for k, v in policy.items() if (k in LAUNCH_FIELDS or k in declared) and k not in fixed}


__all__ = ["SPECS", "spec", "Problem", "OpSpec", "problem_from_signature", "signature_for",
           "attention_epilogue", "moe_epilogue", "plan_from_policy", "next_pow2"]
