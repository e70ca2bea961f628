"""torch.ops.argus.*: the custom ops matched subgraphs become. Each has a fake (meta) implementation so
Inductor and dynamic shapes see through it, and a real one that runs an Argus kernel for the tensors'
shape signature, or the aten op where Argus does not apply.

Where a call's kernel comes from (the report's "kernel" column):

- cache: the disk cache (argus_inductor.cache) has an entry for the signature; its stored policy (and
  its DSL kernels, when the agent wrote new ones) are used.
- synthesized: ARGUS_ON_MISS=synthesize and the agent (argus_inductor.agent.synthesize) produced a
  kernel now; it is stored in the cache.
- default: ARGUS_ON_MISS=default (the default) - the library kernel with the policy of the nearest
  solved signature of the same op/epilogue/dtypes whose template is this signature's (one regime of the
  template rules), else the template default of policies.py; the signature is recorded for `argus warmup`.
- fallback: the aten op (ARGUS_ON_MISS=fallback on a miss, a device or dtype Argus does not run on,
  or a kernel that failed to launch).
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from . import reporting as _report
from .cache import CacheEntry, KernelCache
from .config import Options
from .dsl import Kernel, Policy, kernels_from_source
from .kernels.attention import (
    attention_decode,
    attention_decode_merge,
    attention_decode_part,
    attention_decode_split,
    attention_fwd,
    mask_operand,
    nonnegative_scale,
    split_policies,
)
from .kernels.gemm import (
    ACTIVATION_FNS,
    ACTIVATIONS,
    TF32_SPLIT_POLICY,
    bias_act_cast,
    bmm_kernel,
    cat_epilogue,
    cat_shapes,
    cat_widths,
    gemm_epilogue,
    gemm_splitk,
    gemv_cat,
    split_operands,
    tf32_split,
    tf32x3_split_pays,
)
from .kernels.gemm_residual import gemm_gate_up, gemm_residual
from .kernels.launch import pow2
from .kernels.moe import gate_up_rows, gather_policy, gathers_rows, moe_align, moe_down, moe_gate_up, moe_gather
from .kernels.pointwise import broadcasts_to
from .policies import (
    attention_fallbacks,
    attention_policy,
    fit_attention,
    fit_shared_memory,
    gemm_fallbacks,
    gemm_policy,
    gemv_cat_policy,
    gemv_columns,
    gemv_policy,
    gemv_static_steps,
    gluon_reads,
    moe_down_fallback,
    moe_gate_up_fallback,
    moe_policies,
    presplit_gemm_policy,
    weight_k_major,
)
from .signature import Signature, device_arch, make_signature

log = logging.getLogger("argus_inductor")
_ACTIVE = Options.resolve()
SUPPORTED_ARCHS = ("sm_90", "gfx942")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DSL_HEADER = "from argus_inductor.dsl import *\n\n"
_LOCK = threading.Lock()
_SAID: set[str] = set()


def _say_once(msg: str, level: int = logging.WARNING) -> None:
    with _LOCK:
        if msg in _SAID:
            return
        _SAID.add(msg)
    log.log(level, msg)


def set_active_options(opts: Options) -> None:
    global _ACTIVE
    if opts != _ACTIVE:
        _forget_calls()  # plans were resolved under the old options (cache dir, on-miss, interpret)
    _ACTIVE = opts


def active_options() -> Options:
    return _ACTIVE


def target_for(device: torch.device, opts: Options | None = None) -> str | None:
    """The Triton target Argus kernels use for tensors on `device`, or None where Argus does not run."""
    opts = opts or _ACTIVE
    if device.type == "cpu":
        return "interpret" if opts.interpret else None
    if device.type == "cuda":
        arch = device_arch(device)
        if arch in SUPPORTED_ARCHS:
            return "hip" if arch.startswith("gfx") else "cuda"
    return None


# --------------------------------------------------------------------------------------------------
# Op specs: which library kernels an op runs, their template policies, the constants a signature fixes


@dataclass(frozen=True)
class OpSpec:
    name: str
    kernels: tuple[Kernel, ...]
    template: Callable[[Signature, str], dict[str, Any]]   # policy dict (see CacheEntry.policy)
    consts: Callable[[Signature], dict[str, dict[str, Any]]]  # kernel name -> constexprs the signature fixes
    shapes: Callable[[Signature], dict[str, dict[str, int]]]  # kernel name -> shape symbols, for the checker
    # policy dict -> the kernels that run and their policies, where that is not one per kernel
    select: Callable[[dict[str, Any], Signature], dict[str, Policy]] | None = None
    # mma kernels that take pre-split float32 operands (tf32_split) for three-pass tf32 where that pays
    presplit: tuple[str, ...] = ()
    # kernel name -> (shape symbols, assumptions) for the checker, where the op's host guarantees more than the
    # signature's dims say (MoE: the routing's block layout); None: `shapes` with no assumptions
    checks: Callable[[Signature, dict[str, Policy]], dict[str, tuple[dict[str, int], list[str]]]] | None = None
    # kernels the op's host runs with fixed policies of their own, proven with the plan's (MoE: the row gather);
    # (signature, plan policies, target) -> name -> (kernel, policy)
    host_kernels: Callable[[Signature, dict[str, Policy], str | None], dict[str, tuple[Kernel, Policy]]] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kernels)

    @property
    def helpers(self) -> tuple[Kernel, ...]:
        """Kernels a plan adds with the precision it runs at, not with its policy: the operand split of pre-split
        three-pass tf32 (the library's wherever a cached entry's text predates it)."""
        return (tf32_split,) if self.presplit else ()

    def policies(self, policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
        """Policy dict -> a Policy for each kernel that runs, with the signature's constants applied. A float32
        signature's mma precision is not a tuning knob: it is what torch's settings ask for now (fp32_precision),
        whatever the stored policy says (an agent plan timed at tf32 must not answer at tf32 accuracy when torch
        promises float32 matmuls)."""
        if self.select is not None:
            out = self.select(policy, sig)
        else:
            per = {self.names[0]: policy} if len(self.kernels) == 1 else {n: policy.get(n, {}) for n in self.names}
            consts = self.consts(sig)
            out = {n: Policy.make(**dict(per[n])).with_consts(**consts.get(n, {})) for n in self.names}
        if sig.dtypes and sig.dtypes[0] == "float32" and sig.arch != "cpu":
            prec = fp32_precision(sig.op)
            out = {n: replace(p, input_precision=prec) for n, p in out.items()}
            if prec == "tf32x3" and self.presplits(sig) and any(n in out for n in self.presplit):
                # hi*hi + hi*lo + lo*hi as one tf32 GEMM over 3K on operands split once (kernels.gemm.tf32_split)
                out = {n: replace(p, input_precision="tf32") if n in self.presplit else p for n, p in out.items()}
                out["tf32_split"] = Policy.make(**TF32_SPLIT_POLICY)
        return out

    def presplits(self, sig: Signature) -> bool:
        """Whether this signature's three-pass tf32 GEMM runs on pre-split operands (kernels.gemm)."""
        if not self.presplit:
            return False
        d = sig.dims()
        return tf32x3_split_pays(d.get("M", 1), d["N"], d["K"])

    def checked_shapes(self, sig: Signature, policies: dict[str, Policy]) -> dict[str, dict[str, int]]:
        """Shape symbols per kernel for the checker: the signature's, with K tripled for the mma kernels that
        run on pre-split operands (tf32_split itself is proven for every shape)."""
        shapes = self.shapes(sig)
        if "tf32_split" in policies:
            shapes = {n: {**v, "K": 3 * v["K"]} if n in self.presplit and "K" in v else v for n, v in shapes.items()}
        return shapes


def _epi_parts(sig: Signature) -> list[str]:
    return [p for p in sig.epilogue.replace(",", "+").split("+") if p]


def _act_of(sig: Signature) -> int:
    for p in _epi_parts(sig):
        a = p.split("*")[0]
        if a in ACTIVATIONS and a != "none":
            return ACTIVATIONS[a]
    return 0


_ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


CONV_OPS = ("conv", "conv_chain")  # signatures whose float32 precision follows cuDNN's setting, not matmul's


def fp32_precision(op: str = "gemm") -> str:
    """The mma precision of float32 inputs, as torch's own settings ask: for matmuls torch's float32 matmul
    precision ('highest', the default -> three-pass tf32, float32 accuracy on tensor cores; 'high'/'medium' ->
    tf32); for convolutions torch.backends.cudnn.allow_tf32 (on by default -> tf32, as cuDNN runs them)."""
    if op in CONV_OPS:
        return "tf32" if torch.backends.cudnn.allow_tf32 else "tf32x3"
    return "tf32x3" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _for_dtype(p: Policy, sig: Signature, target: str, b_tiles: int = 1) -> Policy:
    """A template tuned on 2-byte inputs made to fit the signature's dtype: staged tiles within shared memory
    (the float32 precision is OpSpec.policies' to set, for every plan)."""
    if target == "interpret":
        return p
    return fit_shared_memory(p, _ELEM_BYTES.get(sig.dtypes[0], 4), b_tiles, target=target)


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
    policies.gemv_static_steps finds they pay (a short loop over one weight), unless ARGUS_GEMV_STEPS=0: the checker
    proves at the signature's K that the steps cover it."""
    static = dict(sig.static_dims)
    if not active_options().gemv_steps or "K" not in static:
        return policy
    steps = gemv_static_steps(static["K"], policy.const("BK"), policy.const("BN"), _weights(sig))
    return policy.with_consts(KSTEPS=steps) if steps else policy


def _gemm_template(sig: Signature, target: str) -> dict[str, Any]:
    split = _presplit_template(sig, target)
    if split is not None:
        return split.as_dict()
    # the Gluon lowering's tiles are sized for 2-byte operands: others take Triton's
    p = _gemm_base(sig, target, gluon=gluon_reads(sig.dtypes[0]))
    return (p if p.warp_specialize else _for_dtype(p, sig, target)).as_dict()


def _unsplit(p: Policy) -> Policy:
    """The policy without split-K (the residual and gate*up kernels keep the whole K loop)."""
    return p.without_consts("SPLIT_K")


def _gemm_fused_template(sig: Signature, target: str) -> dict[str, Any]:
    split = _presplit_template(sig, target)
    if split is not None:
        return split.as_dict()
    return _for_dtype(_gemm_base(sig, target, split=False), sig, target).as_dict()


def _gate_up_template(sig: Signature, target: str) -> dict[str, Any]:
    p = _gemm_base(sig, target, split=False)
    if target != "interpret" and p.const("BN", 64) > 128:  # two accumulators: half the tile width
        p = p.with_consts(BN=p.const("BN") // 2)
    return _for_dtype(p, sig, target, b_tiles=2).as_dict()


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
    return {"HAS_BIAS": int("bias" in _epi_parts(sig)), "ACT": _act_of(sig)}


def _gluon_fallbacks(kernel: Kernel, fallbacks: Callable[[Signature, Policy, int], list[Policy]]) \
        -> Callable[[Signature, dict[str, Policy], str | None], dict[str, tuple[Kernel, Policy]]]:
    """OpSpec.host_kernels for a kernel with a Gluon lowering: where the plan's policy runs that lowering (on
    NVIDIA), the Triton policies its declined launches run (`fallbacks(sig, policy, element size)`), by the name
    verify_plan reports; verify_plan proves them at the kernel's own shapes."""
    def host_kernels(sig: Signature, policies: dict[str, Policy],
                     target: str | None) -> dict[str, tuple[Kernel, Policy]]:
        from .hopper import takes

        p = policies.get(kernel.name)
        if target not in (None, "cuda") or p is None or not p.warp_specialize or not takes(kernel.name, p):
            return {}
        out = {}
        for f in fallbacks(sig, p, _ELEM_BYTES.get(sig.dtypes[0], 4)):
            tiles = "x".join(str(f.const(c)) for c in ("BM", "BN", "BK") if f.const(c) is not None)
            out[f"{kernel.name} (Triton fallback {tiles}, {f.num_stages} stages)"] = (kernel, f)
        return out
    return host_kernels


_attention_gluon_fallbacks = _gluon_fallbacks(attention_fwd, lambda s, p, elem: attention_fallbacks(p, elem))


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
    parts = _epi_parts(sig)
    p = attention_policy(d["S"], d["D"], target, "mask" in parts, gluon=gluon_reads(sig.dtypes[0]))
    if target != "interpret":
        p = fit_attention(p, builtins.max(16, pow2(d["D"])), _ELEM_BYTES.get(sig.dtypes[0], 4),
                          has_mask="mask" in parts, target=target)
    return p.as_dict()


def _attention_dims(sig: Signature) -> dict[str, int]:
    return {k: v for k, v in sig.dims().items() if k in ("Z", "H", "HK", "S", "T", "D")}


def _attention_consts(sig: Signature) -> dict[str, dict[str, Any]]:
    d = sig.dims()["D"]
    return {"attention_fwd": {"BD": builtins.max(16, pow2(d)),
                              "CAUSAL": int("causal" in _epi_parts(sig)), "HAS_MASK": int("mask" in _epi_parts(sig))}}


def _attention_select(policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
    """attention_fwd; for one query token (no causal mask) attention_decode, which packs the query heads
    of a key/value group into one tile so each K/V row is read once per group."""
    dims = dict(sig.dynamic_dims)
    st = sig.dims()
    p = Policy.make(**dict(policy))
    bd = builtins.max(16, pow2(st["D"]))
    group = st["H"] // st["HK"]
    has_mask = int("mask" in _epi_parts(sig))
    if dims.get("S") == "1" and "causal" not in _epi_parts(sig) and group <= 64 and "BG" not in dict(p.consts):
        dec = Policy.make(BG=builtins.max(16, pow2(group)), BN=p.const("BN", 64), BD=bd,
                          HAS_MASK=has_mask)
        return {"attention_decode": replace(dec, num_warps=p.num_warps, num_stages=p.num_stages)}
    if "BG" in dict(p.consts):  # a stored decode policy
        return {"attention_decode": p.with_consts(BD=bd, HAS_MASK=has_mask)}
    return {"attention_fwd": p.with_consts(**_attention_consts(sig)["attention_fwd"])}


def _moe_template(sig: Signature, target: str) -> dict[str, Any]:
    d = sig.dims()
    up, down = moe_policies(d["T"], d["TOPK"], d["E"], target, gluon=gluon_reads(sig.dtypes[0]))
    if target != "interpret":  # gate and up tiles staged together; the down GEMM's rows are the gate-up's BM
        elem = _ELEM_BYTES.get(sig.dtypes[0], 4)
        if not up.warp_specialize:  # a Gluon ring's slots are sized by its lowering (policy_fits), as the down's
            up = fit_shared_memory(up, elem, b_tiles=2, target=target)
        if not down.warp_specialize:
            down = fit_shared_memory(down.with_consts(BM=up.const("BM", 16)), elem, target=target).without_consts("BM")
    return {"moe_gate_up": up.as_dict(), "moe_down": down.as_dict()}


def _moe_checks(sig: Signature, policies: dict[str, Policy]) -> dict[str, tuple[dict[str, int], list[str]]]:
    """What ops.moe's host guarantees its kernels, as the agent's MoE spec states it for its proofs: the block
    layout moe_align_block makes (NB blocks of BM rows, P = NB * BM, real blocks' experts below E, sorted ids at
    most T * TOPK), at the signature's dims; with GATHERED=1 the gate-up reads the P gathered rows (T == P), which
    moe_gather wrote."""
    from .agent.opspecs import problem_from_signature, spec

    moe_spec, problem = spec("moe"), problem_from_signature(sig)
    out = {name: moe_spec.verify_shapes(problem, name, pol) for name, pol in policies.items()}
    if "moe_gate_up" in out and gathers_rows(policies["moe_gate_up"]):
        shapes, assumptions = out["moe_gate_up"]
        out["moe_gate_up"] = ({**shapes, "T": shapes["P"]}, [*assumptions, "T == P"])
        out["moe_gather"] = ({"T": shapes["T"], "HD": shapes["HD"], "P": shapes["P"]}, [])
    return out


def _moe_host_kernels(sig: Signature, policies: dict[str, Policy],
                      target: str | None) -> dict[str, tuple[Kernel, Policy]]:
    """The row gather that gate_up_rows runs before a GATHERED=1 gate-up, at the policy it runs it with; where the
    gate-up or the down runs its Gluon lowering (on NVIDIA), the Triton policy a launch it declines runs."""
    from .hopper import takes

    out: dict[str, tuple[Kernel, Policy]] = {}
    up = policies.get("moe_gate_up")
    if up is not None and gathers_rows(up):
        out["moe_gather"] = (moe_gather, gather_policy(target, sig.dims()["TOPK"]))
        if target in (None, "cuda") and up.warp_specialize and takes(moe_gate_up.name, up):
            f = moe_gate_up_fallback(up)
            out[f"moe_gate_up (Triton fallback, {f.num_stages} stages)"] = (moe_gate_up, f)
    down = policies.get("moe_down")
    if target in (None, "cuda") and down is not None and down.warp_specialize and takes(moe_down.name, down):
        f = moe_down_fallback(down)
        out[f"moe_down (Triton fallback, {f.num_stages} stages)"] = (moe_down, f)
    return out


def _moe_consts(sig: Signature) -> dict[str, dict[str, Any]]:
    topk = sig.dims()["TOPK"]
    return {"moe_gate_up": {"TOPK": topk}, "moe_down": {"TOPK": topk}}


def _moe_select(policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
    """The gate-up and down policies with TOPK; the down GEMM walks the gate-up's row blocks, so its BM is the
    gate-up's whatever a stored policy says."""
    consts = _moe_consts(sig)
    up = Policy.make(**dict(policy.get("moe_gate_up", {}))).with_consts(**consts["moe_gate_up"])
    down = Policy.make(**dict(policy.get("moe_down", {}))).with_consts(**consts["moe_down"], BM=up.const("BM", 16))
    return {"moe_gate_up": up, "moe_down": down}


SPECS: dict[str, OpSpec] = {
    "gemm": OpSpec("gemm", (gemm_epilogue, gemm_splitk, bias_act_cast), _gemm_template,
                   lambda s: {"gemm_epilogue": _bias_consts(s)},
                   lambda s: {n: _gemm_shapes(s) for n in ("gemm_epilogue", "gemm_splitk", "bias_act_cast")},
                   _gemm_select, presplit=("gemm_epilogue",), host_kernels=_gluon_fallbacks(
                       gemm_epilogue, lambda s, p, elem: gemm_fallbacks(p, s.dims()["N"], s.dims()["K"], elem))),
    "gemm_residual": OpSpec("gemm_residual", (gemm_residual,), _gemm_fused_template,
                            lambda s: {"gemm_residual": _bias_consts(s)},
                            lambda s: {"gemm_residual": _gemm_shapes(s)},
                            _fused_select("gemm_residual", _bias_consts), presplit=("gemm_residual",)),
    "gate_up": OpSpec("gate_up", (gemm_gate_up,), _gate_up_template,
                      lambda s: {"gemm_gate_up": {"ACT": _act_of(s)}}, lambda s: {"gemm_gate_up": _gemm_shapes(s)},
                      _fused_select("gemm_gate_up", lambda s: {"ACT": _act_of(s)}), presplit=("gemm_gate_up",)),
    "gemv_cat": OpSpec("gemv_cat", (gemv_cat,), lambda s, target: _gemv_steps(gemv_cat_policy(target, s.dims()["K"]),
                                                                         s).as_dict(),
                       lambda s: {}, lambda s: {"gemv_cat": cat_shapes(s.epilogue, s.dims())},
                       _fused_select("gemv_cat", lambda s: {})),
    "bmm": OpSpec("bmm", (bmm_kernel,), _gemm_fused_template, lambda s: {},
                  lambda s: {"bmm_kernel": {**_gemm_shapes(s), "Bt": s.dims()["B"]}}, presplit=("bmm_kernel",)),
    "attention": OpSpec("attention", (attention_fwd, attention_decode), _attention_template, _attention_consts,
                        lambda s: {n: _attention_dims(s) for n in ("attention_fwd", "attention_decode")},
                        _attention_select, host_kernels=_attention_host_kernels),
    "moe": OpSpec("moe", (moe_gate_up, moe_down), _moe_template, _moe_consts,
                  lambda s: {"moe_gate_up": {"HD": s.dims()["HD"], "I": s.dims()["I"], "E": s.dims()["E"]},
                             "moe_down": {"HD": s.dims()["HD"], "I": s.dims()["I"], "E": s.dims()["E"]}},
                  _moe_select, checks=_moe_checks, host_kernels=_moe_host_kernels),
}


_LIBRARY_SPECS: dict[tuple[str, str], OpSpec] = {}


def spec_for(sig: Signature) -> OpSpec:
    if sig.op not in SPECS and sig.op != "gemm":
        from . import library_ops as lib

        if sig.op in lib.LIBRARY:  # a library op class: plans by the same cache rules, policies from its host
            key = (sig.op, sig.epilogue)  # functions, kernels its own or generated for its chain
            with _LOCK:
                spec = _LIBRARY_SPECS.get(key)
            if spec is None:
                spec = OpSpec(sig.op, lib.kernels_of(sig), lib.template_policies, lambda s: {}, lib.verify_shapes,
                              lib.select_policies)
                with _LOCK:
                    _LIBRARY_SPECS[key] = spec
            return spec
    if sig.op == "gemm":
        parts = _epi_parts(sig)
        if any("*up" in p for p in parts):
            return SPECS["gate_up"]
        if "residual" in parts:
            return SPECS["gemm_residual"]
        if cat_widths(sig.epilogue):
            return SPECS["gemv_cat"]
    return SPECS[sig.op]


# --------------------------------------------------------------------------------------------------
# Plans: the kernels and policy a signature runs with, and where they came from

_CACHES: dict[str, KernelCache] = {}


def kernel_cache(opts: Options | None = None) -> KernelCache:
    """The KernelCache of the active options' ARGUS_CACHE_DIR."""
    root = (opts or _ACTIVE).cache_dir or str(Path.home() / ".cache" / "argus")
    with _LOCK:
        c = _CACHES.get(root)
        if c is None:
            c = _CACHES[root] = KernelCache(Path(root))
        return c


@dataclass
class Plan:
    kernels: dict[str, Kernel]
    policies: dict[str, Policy]
    source: str                    # cache | synthesized | default
    detail: str = ""
    notes: list[str] = field(default_factory=list)

    def label(self) -> str:
        return f"{self.source} ({self.detail})" if self.detail else self.source


_PLANS: dict[tuple[str, str, str, bool], Plan] = {}


def dsl_source(kernels: tuple[Kernel, ...] | list[Kernel]) -> str:
    """The DSL text of `kernels`, readable again with kernels_from_source."""
    return DSL_HEADER + "\n\n".join(k.ir.source.rstrip() + "\n" for k in kernels)


def library_kernels(spec: OpSpec, names: Iterable[str]) -> dict[str, Kernel]:
    lib = {k.name: k for k in (*spec.kernels, *spec.helpers)}
    return {n: lib[n] for n in names}


def _kernels_of(spec: OpSpec, text: str, names: Iterable[str]) -> dict[str, Kernel]:
    """The kernels `names` as an entry's DSL source defines them (the library's when it is the library's
    text). An agent-written kernel keeps the library kernel's name and parameters."""
    names = list(names)
    lib = library_kernels(spec, names)
    if text == dsl_source(list(lib.values())):
        return lib
    found = kernels_from_source(text, filename="<argus cache>")
    helpers = {k.name for k in spec.helpers}
    missing = [n for n in names if n not in found and n not in helpers]
    if missing:
        raise ValueError(f"the cached DSL source defines no kernel {', '.join(missing)} (op {spec.name} runs "
                         f"{', '.join(names)} with the library's parameters)")
    return {n: found.get(n) or lib[n] for n in names}


def _verification_summary(v: dict[str, Any]) -> str:
    status = v.get("status")
    if status == "verified":
        return "verified"
    if status == "violations":
        return f"verification found {v.get('problems', '?')} problem(s)"
    if status == "undecided":
        return f"no counterexample; {v.get('undecided', '?')} obligation(s) undecided in the checker's time"
    return str(status or "not verified")


def _plan_from_entry(spec: OpSpec, sig: Signature, entry: CacheEntry, source: str, detail: str) -> Plan:
    pols = spec.policies(entry.policy, sig)
    return Plan(_kernels_of(spec, entry.dsl_source, pols), pols, source, detail)


def _verifier() -> Callable[..., Any] | None:
    """The invariant checker's verify(kernel, policy, shapes=None), where that package provides it.

    Hook: the checker lives in argus_inductor.invariants (being written alongside); until it exports
    verify, entries are stored with {"status": "not verified"}."""
    try:
        from . import invariants
    except ImportError:
        return None
    fn = getattr(invariants, "verify", None)
    if fn is None:
        try:
            from .invariants.api import verify as fn  # type: ignore[no-redef]
        except ImportError:
            return None
    return fn if callable(fn) else None


# The checker's version in each verdict it stores. Bumped when the checker comes to reject what it used to prove, so
# that entries an older one proved are proved again when first loaded (plan_for). 2: in-kernel assumptions that
# no element satisfies at the verified shapes and policy (a vacuous proof) are rejected (session 25). 3: fill values
# (a reduction over lanes that read no input must take its identity there) and zero-trip reductions (issue 42).
CHECKER_VERSION = 3


def verify_plan(spec: OpSpec, sig: Signature, kernels: dict[str, Kernel],
                policies: dict[str, Policy], target: str | None = None) -> dict[str, Any]:
    """Run the invariant checker on each kernel of a plan, and on the kernels its host runs with policies of their
    own (for `target`), at the signature's shapes; a JSON summary."""
    fn = _verifier()
    if fn is None:
        return {"status": "not verified", "reason": "argus_inductor.invariants provides no verify()"}
    checks = spec.checks(sig, policies) if spec.checks is not None else \
        {n: (v, []) for n, v in spec.checked_shapes(sig, policies).items()}
    results: dict[str, Any] = {}
    problems = undecided = 0
    runs = {n: (k, policies[n]) for n, k in kernels.items()}
    if spec.host_kernels is not None:
        runs.update(spec.host_kernels(sig, policies, target))
    for name, (k, pol) in runs.items():
        # a host kernel of the plan's own (a Gluon lowering's Triton fallback) is proved at that kernel's shapes
        shapes, assumptions = checks.get(name) or checks.get(k.ir.name, ({}, []))
        want = {s: v for s, v in shapes.items() if s in k.ir.symbols}
        try:
            r = fn(k, pol, want, assumptions=assumptions) if assumptions else fn(k, pol, want)
            js = r.to_json() if hasattr(r, "to_json") else {"ok": bool(getattr(r, "ok", r))}
        except Exception as e:  # the checker is young: its failure is a result, not a crash
            js = {"ok": False, "errors": [f"checker raised {type(e).__name__}: {e}"]}
        results[name] = js
        if not js.get("ok"):
            problems += builtins.max(1, len(js.get("violations", [])) + len(js.get("errors", [])))
        undecided += len(js.get("undecided", []))
    # no counterexample, but an obligation z3 could not settle in time is not a proof: said so, not rejected
    status = "violations" if problems else ("undecided" if undecided else "verified")
    return {"status": status, "problems": problems, "undecided": undecided, "kernels": results,
            "checker": CHECKER_VERSION}


def _proved_by_older_checker(entry: CacheEntry) -> bool:
    v = entry.verification
    version = v.get("checker", 1)
    return v.get("status") in ("verified", "undecided") and (not isinstance(version, int) or version < CHECKER_VERSION)


def entry_current(entry: CacheEntry | None) -> bool:
    """Whether `entry` stands as a plan: present, not rejected by the checker, not proved only by an older one (what
    `argus warmup` leaves alone unless --force)."""
    return entry is not None and entry.verification.get("status") != "violations" and \
        not _proved_by_older_checker(entry)


def _reverified(spec: OpSpec, sig: Signature, entry: CacheEntry, target: str, cache: KernelCache) -> CacheEntry:
    """`entry` proved again by this checker, and stored with the new verdict (once per entry, not per process)."""
    plan = _plan_from_entry(spec, sig, entry, "cache", "")
    entry = replace(entry, verification=verify_plan(spec, sig, plan.kernels, plan.policies, target))
    try:
        cache.put(sig.key(), entry)
    except OSError as e:
        _say_once(f"argus: cannot update the cache entry {cache.path(sig.key())} ({e})")
    return entry


def _versions(sig: Signature) -> dict[str, Any]:
    torch_v, triton_v, argus_v = sig.versions
    return {"torch": torch_v, "triton": triton_v, "argus_inductor": argus_v, "cache_format": 1}


def make_entry(sig: Signature, policy: dict[str, Any] | None = None, origin: str = "warmup",
               target: str | None = None, kernels: dict[str, Kernel] | None = None,
               timings: dict[str, Any] | None = None, verification: dict[str, Any] | None = None,
               verify: bool | None = None) -> CacheEntry:
    """A cache entry for `sig`: the DSL and generated Triton source, the policy (template default when
    none is given), the checker's verdict, timings and versions."""
    spec = spec_for(sig)
    target = target or ("interpret" if sig.arch == "cpu" else ("hip" if sig.arch.startswith("gfx") else "cuda"))
    policy = policy if policy is not None else spec.template(sig, target)
    pols = spec.policies(policy, sig)
    kernels = kernels or library_kernels(spec, pols)
    tri = []
    for name, k in kernels.items():
        try:
            tri.append(f"# ---- {name} ({pols[name].key()})\n{k.triton_source(pols[name], target)}")
        except Exception as e:
            tri.append(f"# ---- {name}: lowering failed: {type(e).__name__}: {e}")
    if verification is None:
        do = _ACTIVE.verify if verify is None else verify
        verification = verify_plan(spec, sig, kernels, pols, target) if do else {"status": "not verified",
                                                                          "reason": "ARGUS_VERIFY=0"}
    return CacheEntry(signature=sig.as_dict(), dsl_source=dsl_source(list(kernels.values())),
                      triton_source="\n\n".join(tri), policy=policy, verification=verification,
                      timings=dict(timings or {}), versions=_versions(sig), origin=origin)


def warm(sig: Signature, policy: dict[str, Any] | None = None, origin: str = "warmup",
         cache: KernelCache | None = None) -> CacheEntry:
    """Build and store the entry for `sig` (template policy unless one is given); what `argus warmup`
    does for a signature it does not send to the agent."""
    entry = make_entry(sig, policy, origin)
    (cache or kernel_cache()).put(sig.key(), entry)
    return entry


def _agent_synthesize() -> Callable[..., Any] | None:
    try:
        from . import agent
    except ImportError:
        return None
    fn = getattr(agent, "synthesize", None)
    return fn if callable(fn) else None


def _synthesize(spec: OpSpec, sig: Signature, target: str, ctx: dict[str, Any]) -> tuple[Plan | None, str]:
    fn = _agent_synthesize()
    if fn is None:
        return None, "agent not available (argus_inductor.agent has no synthesize()); used the default plan"
    offered = {"reference": ctx.get("reference"), "example_inputs": ctx.get("tensors"), "target": target,
               "kernels": {k.name: k for k in spec.kernels}, "cache": kernel_cache(),
               "cache_root": kernel_cache().root, "template_policy": spec.template(sig, target)}
    try:
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in offered.items() if takes_any or k in params}
        result = fn(sig, **kwargs)
        if result is None:
            return None, "the agent found no kernel; used the default plan"
        if isinstance(result, CacheEntry):
            entry = result
            entry.origin = "synthesized"
        elif callable(getattr(result, "cache_entry", None)):  # the agent's SynthesisResult
            entry = result.cache_entry("synthesized")
        else:
            pol = result.as_dict() if isinstance(result, Policy) else dict(result.get("policy", result))
            entry = make_entry(sig, pol, "synthesized", target)
        plan = _plan_from_entry(spec, sig, entry, "synthesized", "agent")
        kernel_cache().put(sig.key(), entry)
        return plan, ""
    except Exception as e:
        _say_once(f"argus: the agent failed on {sig.short()}: {type(e).__name__}: {e}")
        return None, f"agent failed ({type(e).__name__}: {e}); used the default plan"


def _is_library(sig: Signature) -> bool:
    from .library_ops import LIBRARY

    return sig.op in LIBRARY


def _tune_library(spec: OpSpec, sig: Signature, target: str, ctx: dict[str, Any]) -> tuple[Plan | None, str]:
    """A library op class's miss under ARGUS_ON_MISS=synthesize: tune_library on the call's own operands."""
    run_plan, reference = ctx.get("run"), ctx.get("reference")
    if run_plan is None or reference is None:
        return None, "no operands to tune on; used the default plan"
    if target != "interpret" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return None, "miss met inside a CUDA-graph capture (nothing can be timed there); used the default plan"
    entry, detail = tune_library(spec, sig, target, run_plan, reference, kernel_cache())
    if entry is None:
        return None, detail + "; used the default plan"
    return _plan_from_entry(spec, sig, entry, "synthesized", detail), ""


def tune_library(spec: OpSpec, sig: Signature, target: str, run_plan: Callable[[Plan, str], Tensor],
                 reference: Callable[[], Tensor], cache: KernelCache) -> tuple[CacheEntry | None, str]:
    """The policy search of agent/tune.py for a library signature (run_plan(plan, target) launches it on fixed
    operands, reference() is torch's output on them), then the checker on the fastest candidate (the next
    fastest where it fails). The winner is stored in `cache` with its timings. Returns (entry, what happened);
    entry None when nothing was stored."""
    from .agent import tune

    opts = _ACTIVE

    def run(policy: dict[str, Any]) -> Tensor:
        pols = spec.policies(policy, sig)
        return run_plan(Plan(library_kernels(spec, pols), pols, "synthesized"), target)

    try:
        res = tune.search(spec.template(sig, target), run, target, reference(), seconds=opts.tune_seconds,
                          max_candidates=opts.tune_candidates)
    except Exception as e:
        _say_once(f"argus: tuning {sig.short()} failed ({type(e).__name__}: {e}); using the template policy")
        return None, f"tuning failed ({type(e).__name__}: {e})"
    for policy, ms in tune.ranked(res):
        timings = {**res.timings(), "ms": round(ms, 5)}
        entry = make_entry(sig, policy, "synthesized", target, timings=timings)
        if entry.verification.get("status") == "violations":
            continue
        cache.put(sig.key(), entry)
        speed = res.template_ms / ms if ms > 0 else 1.0
        return entry, f"tuned, {speed:.2f}x the template in {len(res.tried)} candidates"
    return None, "the checker rejected every tuned candidate"


def _same_template(spec: OpSpec, sig: Signature, target: str) -> Callable[[Signature], bool]:
    """Whether another signature's template is this one's: the two are in one regime of the op's rules (decode
    GEMV or tensor-core tiles, one wave or many, ...), so a policy tuned for one is a refinement for the other. A
    policy from another regime is not (a prefill GEMM's 128x256 persistent tiles for a one-row GEMV)."""
    try:
        mine = spec.template(sig, target)
    except (KeyError, TypeError, ValueError):
        return lambda other: False

    def accept(other: Signature) -> bool:
        try:
            return spec_for(other).template(other, target) == mine
        except (KeyError, TypeError, ValueError):
            return False
    return accept


def _default_plan(spec: OpSpec, sig: Signature, target: str, cache: KernelCache) -> Plan:
    near = None
    try:
        near = cache.nearest(sig, accept=_same_template(spec, sig, target))
    except OSError as e:
        _say_once(f"argus: cannot read the kernel cache in {cache.root} ({e})")
    if near is not None:
        entry, dist = near
        try:
            return _plan_from_entry(spec, sig, entry, "default", f"policy of nearest solved {entry.sig().short()}")
        except Exception as e:
            _say_once(f"argus: cached entry for {entry.sig().short()} is unusable ({e}); using the template")
    pols = spec.policies(spec.template(sig, target), sig)
    return Plan(library_kernels(spec, pols), pols, "default", "template policy")


def plan_for(sig: Signature, target: str, ctx: dict[str, Any] | None = None) -> Plan | None:
    """The kernels and policies `sig` runs with, or None for the aten op (ARGUS_ON_MISS=fallback on a miss)."""
    opts = _ACTIVE
    memo = (sig.key(), opts.on_miss, opts.cache_dir, opts.gemv_steps)  # and the options the templates read
    with _LOCK:
        hit = _PLANS.get(memo)
    if hit is not None:
        return hit
    spec = spec_for(sig)
    cache = kernel_cache(opts)
    plan: Plan | None = None
    entry = cache.get(sig.key())
    if entry is not None and _proved_by_older_checker(entry):
        try:
            entry = _reverified(spec, sig, entry, target, cache)
        except Exception as e:  # an entry whose kernels cannot even be read is handled below
            _say_once(f"argus: cache entry {cache.path(sig.key())} could not be proved again ({type(e).__name__}: "
                      f"{e})")
    if entry is not None and entry.verification.get("status") == "violations":
        _say_once(f"argus: cache entry {cache.path(sig.key())} fails the invariant checker "
                  f"({_verification_summary(entry.verification)}); treating it as a miss")
        entry = None
    if entry is not None:
        try:
            plan = _plan_from_entry(spec, sig, entry, "cache",
                                    f"{entry.origin}, {_verification_summary(entry.verification)}")
        except Exception as e:
            _say_once(f"argus: cache entry {cache.path(sig.key())} cannot be used ({type(e).__name__}: {e}); "
                      "treating it as a miss")
            entry = None
    if plan is None:
        if opts.on_miss == "fallback":
            cache.record_miss(sig)
            return None
        note = ""
        if opts.on_miss == "synthesize":
            tune = _tune_library if _is_library(sig) else _synthesize
            plan, note = tune(spec, sig, target, ctx or {})
        if plan is None:
            plan = _default_plan(spec, sig, target, cache)
            cache.record_miss(sig)
            if note:
                plan.notes.append(note)
    with _LOCK:
        _PLANS[memo] = plan
    return plan


def forget_plans() -> None:
    """Drop the in-process memo of plans (the next call of each signature reads the cache again)."""
    with _LOCK:
        _PLANS.clear()
        _forget_calls()


# --------------------------------------------------------------------------------------------------
# Running one op call

_SIG_MEMO: dict[tuple, Signature] = {}
# call site + operand metadata -> (signature, its short name, plan, target, fallback reason); its FLOPs. Dropped
# with the plans.
_RESOLVED: dict[tuple, tuple[Signature, str, Plan | None, str | None, str | None]] = {}
_FLOPS: dict[tuple, int] = {}
# call site + operand metadata -> the recorded launches of its plan (argus_inductor.replay), or None where the
# host function cannot be replayed. Dropped with the plans.
_REPLAYS: dict[tuple, Any] = {}
# call site + operand metadata -> what a call needs where its plan's launches replay: (recording, report name,
# kernel source, FLOPs). The hot path of run_op. Dropped with the plans.
_HOT: dict[tuple, tuple[Any, str, str, int]] = {}
# while argus_inductor.inline records an op call: each launch recording made, (recording or None, why not,
# the tensors it replays on); calls neither replay nor reuse a recording then
_CAPTURED: list[tuple[Any, str | None, list[Tensor]]] | None = None


@contextlib.contextmanager
def capturing_recordings() -> Iterator[list[tuple[Any, str | None, list[Tensor]]]]:
    """Within it, every op call that runs a plan records its launches afresh (argus_inductor.replay) and lists
    the recording in the list it yields."""
    global _CAPTURED
    outer, _CAPTURED = _CAPTURED, []
    try:
        yield _CAPTURED
    finally:
        _CAPTURED = outer


def _forget_calls() -> None:
    """Drop the per-call-site memos together: resolved plans, FLOPs and recorded launches."""
    _RESOLVED.clear()
    _FLOPS.clear()
    _REPLAYS.clear()
    _HOT.clear()


def _memo_sig(parts: tuple, make: Callable[[], Signature]) -> Signature:
    s = _SIG_MEMO.get(parts)
    if s is None:
        s = make()
        if len(_SIG_MEMO) > 4096:
            _SIG_MEMO.clear()
        _SIG_MEMO[parts] = s
    return s


def tensor_key(t: Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device)


_RECORDING = threading.local()  # .seen: the signatures of the Argus op calls made inside recording_signatures()


class SignatureRecorded(Exception):
    """Raised by an Argus op's host function inside recording_signatures() once its signature is recorded."""


@contextlib.contextmanager
def recording_signatures() -> Iterator[list[Signature]]:
    """Inside: an Argus op's host function appends its call's signature to the yielded list and raises
    SignatureRecorded instead of planning and launching (no cache, no report): how `argus warmup --config` learns
    the signatures of a model from its traced graph's fake values (agent/trace.py)."""
    prev = getattr(_RECORDING, "seen", None)
    _RECORDING.seen = seen = []
    try:
        yield seen
    finally:
        _RECORDING.seen = prev


def run_op(node_id: str, sig_fn: Callable[[], Signature], kernel_fn: Callable[[Plan, str], Tensor],
           fallback_fn: Callable[[], Tensor], tensors: list[Tensor], memo: tuple = (),
           flops: int | Callable[[Tensor], int] = 0, inputs: list[Tensor] | None = None,
           key: tuple | None = None) -> Tensor:
    """One call of an Argus op: its signature, its plan (or the aten fallback), the launch, and the report entry
    (source, time, and the call's FLOPs as FlopCounterMode counts them: a number, or a function of the output).
    `inputs`: every tensor the host function reads (default `tensors`), for replaying its launches; `memo` and
    the metadata of `tensors` must decide everything else the host function does. `key`: call_key(node_id, memo,
    tensors), where the caller has it already."""
    if key is None:
        key = call_key(node_id, memo, tensors)
        out = replay_hot(key, node_id, tensors, tensors if inputs is None else inputs)
        if out is not None:
            return out
    hit = _RESOLVED.get(key)  # this call site with these shapes was resolved before
    if hit is not None:
        sig, short, plan, target, reason = hit
    else:  # a call site met for the first time (a graph's node ids are its own: a traced one's are fresh)
        sig = _memo_sig(key, sig_fn)
        seen = getattr(_RECORDING, "seen", None)
        if seen is not None:
            seen.append(sig)
            raise SignatureRecorded(node_id)
        target = target_for(tensors[0].device)
        reason = None
        plan = None
        if target is None:
            reason = f"fallback (no Argus target for {device_arch(tensors[0].device)})"
        elif any(t.dtype not in DTYPES for t in tensors):
            reason = f"fallback (dtype {next(t.dtype for t in tensors if t.dtype not in DTYPES)} not supported)"
        else:
            plan = plan_for(sig, target, {"reference": fallback_fn, "tensors": tensors, "run": kernel_fn})
            if plan is None:
                reason = "fallback (cache miss, ARGUS_ON_MISS=fallback)"
        with _LOCK:
            if len(_RESOLVED) > 4096:
                _forget_calls()
            short = sig.short()  # the report's name for it, worked out once
            _RESOLVED[key] = (sig, short, plan, target, reason)
    t0 = _clock_start(tensors[0])
    out = None
    ran = False  # the plan's kernels ran (not the aten op)
    if plan is not None:
        try:
            out = _launch(key, plan, target, kernel_fn, tensors if inputs is None else inputs)  # type: ignore
            source = plan.label()
            ran = True
        except Exception as e:
            _say_once(f"argus: the {plan.source} kernel for {sig.short()} failed ({type(e).__name__}: {e}); "
                      "using the aten op")
            reason = f"fallback (kernel failed: {type(e).__name__})"
    if out is None:
        out = fallback_fn()
        source = reason or "fallback"
    ms = _clock_ms(tensors[0], t0)
    if callable(flops):
        n = _FLOPS.get(key)
        if n is None:
            n = _FLOPS[key] = flops(out)
    else:
        n = flops
    _report.record_call(node_id, short, source, ms, plan.notes if plan is not None else None, n)
    rec = _REPLAYS.get(key)
    if ran and rec is not None and rec.result[0] == "buf":
        with _LOCK:
            _HOT[key] = (rec, short, source, n)
    return out


def call_key(node_id: str, memo: tuple, tensors: list[Tensor]) -> tuple:
    """What identifies a call of an op at a call site: the site, the memo, the metadata of `tensors`."""
    return (node_id, *memo, *(tensor_key(t) for t in tensors))


def replay_hot(key: tuple, node_id: str, tensors: list[Tensor], inputs: list[Tensor]) -> Tensor | None:
    """A call of a call site whose plan's launches replay into a fresh output: the replay and the report entry,
    nothing else. None where the call site has no such recording, or it cannot replay this call (an operand
    aligned differently, replay turned off, a launch that raised): the caller goes the full way (run_op), which
    says what went wrong."""
    hot = _HOT.get(key)
    if hot is None or not _ACTIVE.replay or _CAPTURED is not None:
        return None
    rec, short, source, flops = hot
    t0 = _clock_start(tensors[0])
    try:
        out = rec.replay(inputs)
    except Exception:
        return None
    if out is None:
        return None
    _report.record_call(node_id, short, source, _clock_ms(tensors[0], t0), None, flops)
    return out


def _clock_start(t: Tensor) -> float | None:
    """The start of a call's report time, or None where it is not timed: a host clock costs nothing on the CPU;
    on a GPU (a synchronization each side) only when reporting, and never inside a graph capture."""
    if t.is_cuda and not (_ACTIVE.report and not torch.cuda.is_current_stream_capturing()):
        return None
    if t.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def _clock_ms(t: Tensor, t0: float | None) -> float | None:
    """Milliseconds since _clock_start's `t0` (None where the call was not timed)."""
    if t0 is None:
        return None
    if t.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _launch(key: tuple, plan: Plan, target: str, kernel_fn: Callable[[Plan, str], Tensor],
            inputs: list[Tensor]) -> Tensor:
    """The plan's host function on this call's operands: replayed from its recorded launches where this call site
    with this metadata was recorded before, recorded now on its first call (argus_inductor.replay)."""
    capturing = _CAPTURED is not None  # argus_inductor.inline records afresh and keeps the recording itself
    if not capturing and not _ACTIVE.replay:
        return kernel_fn(plan, target)
    rec = False if capturing else _REPLAYS.get(key, False)
    if rec is False:
        from .replay import record

        out, rec, why = record(lambda: kernel_fn(plan, target), inputs)
        if capturing:
            _CAPTURED.append((rec, why, list(inputs)))
            return out
        if why is not None:
            log.debug("argus: no replay for %s: %s", key[0], why)
        with _LOCK:
            _REPLAYS[key] = rec
        return out
    if rec is not None:
        out = rec.replay(inputs)
        if out is not None:
            return out
    return kernel_fn(plan, target)


def _meta(t: Tensor | None) -> tuple | None:
    """An optional operand's part of a call key: its metadata, or None where it is absent."""
    return None if t is None else tensor_key(t)


def _present(*ts: Tensor | None) -> list[Tensor]:
    """The operands a call's host function reads (what its replay takes), the absent ones left out."""
    return [t for t in ts if t is not None]


def _epilogue(*parts: str) -> str:
    return "+".join(p for p in parts if p and p != "none")


def _dummy(t: Tensor) -> Tensor:
    return t.new_empty(1)


def _presplit(plan: Plan, target: str, a: Tensor, *bs: Tensor) -> tuple[Tensor, ...]:
    """A (.., M, K) and each B (.., K, N) as the plan's mma kernel takes them: unchanged, or where the plan runs
    three-pass tf32 on pre-split operands (kernels.gemm.split_operands)."""
    if "tf32_split" not in plan.policies:
        return (a, *bs)
    return split_operands(a, *bs, policy=plan.policies["tf32_split"], target=target,
                          kernel_fn=plan.kernels["tf32_split"])


# --------------------------------------------------------------------------------------------------
# The ops


@torch.library.custom_op("argus::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, node_id: str) -> Tensor:
    """act(x @ weight.T + bias) for x (..., K), weight (N, K)."""
    k = x.shape[-1]
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]

    def sig() -> Signature:
        return make_signature("gemm", _epilogue("bias" if bias is not None else "", activation), [x2, weight],
                              {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        b = bias if bias is not None else _dummy(out)
        if "gemm_splitk" in plan.policies:  # fp32 partial sums over K slices, then bias/activation/cast
            part = torch.zeros(m, n, dtype=torch.float32, device=x.device)
            plan.kernels["gemm_splitk"](x2, weight.t(), part, policy=plan.policies["gemm_splitk"], target=target)
            plan.kernels["bias_act_cast"](part, b, out, policy=plan.policies["bias_act_cast"], target=target)
        else:
            a, w = _presplit(plan, target, x2, weight.t())
            pol = plan.policies["gemm_epilogue"]
            if pol.warp_specialize and target == "cuda":
                _report.note(node_id, _lowering_note("gemm_epilogue", pol, a, w, b, out))
            plan.kernels["gemm_epilogue"](a, w, b, out, policy=pol, target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return ACTIVATION_FNS[activation](F.linear(x, weight, bias))

    # the bias is read by the kernels too: an operand of the replay, its metadata part of the call key
    return run_op(node_id, sig, run, fallback, [x, weight], (activation, _meta(bias)),
                  flops=2 * m * n * k, inputs=_present(x, weight, bias))


@linear.register_fake
def _(x, weight, bias, activation, node_id):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("argus::linear_residual", mutates_args=())
def linear_residual(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor, activation: str,
                    node_id: str) -> Tensor:
    """residual + act(x @ weight.T + bias) for x (..., K), weight (N, K), residual (..., N)."""
    k = x.shape[-1]
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    r2 = residual.reshape(m, n)

    def sig() -> Signature:
        return make_signature("gemm", _epilogue("bias" if bias is not None else "", activation, "residual"),
                              [x2, weight, r2], {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        a, w = _presplit(plan, target, x2, weight.t())
        plan.kernels["gemm_residual"](a, w, bias if bias is not None else _dummy(out), r2, out,
                                      policy=plan.policies["gemm_residual"], target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return residual + ACTIVATION_FNS[activation](F.linear(x, weight, bias))

    return run_op(node_id, sig, run, fallback, [x, weight, residual], (activation, _meta(bias)),
                  flops=2 * m * n * k, inputs=_present(x, weight, residual, bias))


@linear_residual.register_fake
def _(x, weight, bias, residual, activation, node_id):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("argus::gate_up", mutates_args=())
def gate_up(x: Tensor, w_gate: Tensor, w_up: Tensor, activation: str, node_id: str) -> Tensor:
    """act(x @ w_gate.T) * (x @ w_up.T) for x (..., K), w_gate and w_up (N, K): the gated MLP's first half."""
    k = x.shape[-1]
    n = w_gate.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]

    def sig() -> Signature:
        return make_signature("gemm", f"{activation}*up", [x2, w_gate, w_up], {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        a, wg, wu = _presplit(plan, target, x2, w_gate.t(), w_up.t())
        plan.kernels["gemm_gate_up"](a, wg, wu, out, policy=plan.policies["gemm_gate_up"], target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return ACTIVATION_FNS[activation](F.linear(x, w_gate)) * F.linear(x, w_up)

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
    x2 = x.reshape(-1, k)
    m = x2.shape[0]

    def sig() -> Signature:
        return make_signature("gemm", cat_epilogue(widths), [x2, w0, w1, w2], {"N": n, "K": k}, {"M": m})

    def run(plan: Plan, target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        plan.kernels["gemv_cat"](x2, w0.t(), w1.t(), w2.t(), out, policy=plan.policies["gemv_cat"], target=target)
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return torch.cat([F.linear(x, w) for w in (w0, w1, w2)], -1)

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
        a3, b3 = _presplit(plan, target, a, b)
        plan.kernels["bmm_kernel"](a3, b3, out, policy=plan.policies["bmm_kernel"], target=target)
        return out

    return run_op(node_id, sig, run, lambda: torch.bmm(a, b), [a, b],
                  flops=2 * bt * m * n * k)


@bmm.register_fake
def _(a, b, node_id):
    return a.new_empty(a.shape[0], a.shape[1], b.shape[2])


_GLUON_LOWERINGS = {"attention_fwd": "TMA loader warp, two wgmma consumer warp groups",
                    "gemm_epilogue": "TMA loader warp, wgmma consumer warp groups, one tile a program",
                    "moe_gate_up": "TMA loader warp, wgmma consumer warp groups, gate and up tiles a slot"}


def _lowering_note(name: str, policy: Policy, *operands: Any) -> str:
    """Which lowering a warp-specialized plan's call of kernel `name` takes, for the report (`operands`: what the
    lowering's `declines` takes after the policy)."""
    from .hopper import lowering_for

    gluon = lowering_for(name)
    why = "no Gluon in this Triton" if gluon is None else gluon.declines(policy, *operands)
    return (f"{name}: the Gluon lowering ({_GLUON_LOWERINGS[name]})" if why is None
            else f"{name}: the Triton lowering at the Triton template (the Gluon kernel declines: {why})")


def attention_out(q: Tensor, v: Tensor, positions: bool) -> Tensor:
    """The attention ops' output (Z, H, S, Dv): contiguous, or with `positions` in (Z, S, H, Dv) memory, so that
    the transpose(1, 2) every transformers attention applies next is contiguous and its .contiguous() no copy
    (a 16 MB copy a layer at Llama-3-8B's 1x2048 prefill)."""
    z, h, s = q.shape[:3]
    if positions:
        return q.new_empty(z, s, h, v.shape[-1]).transpose(1, 2)
    return q.new_empty(z, h, s, v.shape[-1])


def _attention_run(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None, node_id: str,
                   fallback: Callable[[], Tensor], mask: Tensor | None = None, positions: bool = False) -> Tensor:
    z, h, s, d = q.shape
    hk, t = k.shape[1], k.shape[2]
    sc = scale if scale is not None else 1.0 / math.sqrt(d)

    def sig() -> Signature:
        parts = ("causal" if causal else "", f"gqa{h // hk}" if h != hk else "", "mask" if mask is not None else "")
        return make_signature("attention", ",".join(p for p in parts if p), [q, k, v], {"H": h, "HK": hk, "D": d},
                              {"Z": z, "S": s, "T": t})

    def run(plan: Plan, target: str) -> Tensor:
        out = attention_out(q, v, positions)  # the layout the fake says
        name = "attention_decode" if "attention_decode" in plan.policies else "attention_fwd"
        qs, scs = nonnegative_scale(q, sc)
        pol = plan.policies[name]
        if pol.warp_specialize and target == "cuda":
            _report.note(node_id, _lowering_note(name, pol, qs, k, v, out, scs))
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
    return run_op(node_id, sig, run, fallback_in_layout, [q, k, v], (causal, _meta(mask)),
                  flops=4 * z * h * s * t * d,  # as FlopCounterMode counts SDPA (the mask ignored)
                  inputs=_present(q, k, v, mask))


@torch.library.custom_op("argus::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float | None, node_id: str,
              positions: bool = False) -> Tensor:
    """softmax(q k^T * scale [causal]) v for q (Z, H, S, D), k/v (Z, HK, T, D), H % HK == 0; `positions`: the
    output in (Z, S, H, D) memory (attention_out)."""
    h, hk = q.shape[1], k.shape[1]

    def fallback() -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=h != hk)

    return _attention_run(q, k, v, is_causal, scale, node_id, fallback, positions=positions)


@attention.register_fake
def _(q, k, v, is_causal, scale, node_id, positions=False):
    return attention_out(q, v, positions)


# flexible layout: a decode step's mask, computed in the graph and read by every layer's op, is computed once (see
# library_ops' rope_cache)
@torch.library.custom_op("argus::attention_mask", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def attention_mask(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None, node_id: str,
                   positions: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v (a bool mask keeps True) for q (Z, H, S, D), k/v (Z, HK, T, D), the mask
    broadcasting to (Z, H, S, T). The kernel reads the mask itself: nothing is decided from its values on the
    host, so the op never synchronizes and can be captured in a CUDA graph. `positions`: as attention's."""
    h, hk = q.shape[1], k.shape[1]

    def fallback() -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=h != hk)

    return _attention_run(q, k, v, False, scale, node_id, fallback, mask, positions)


@attention_mask.register_fake
def _(q, k, v, mask, scale, node_id, positions=False):
    return attention_out(q, v, positions)


def moe_reference(hidden: Tensor, topk_weights: Tensor, topk_ids: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    """The MoE expert step in plain torch (what the aten fallback runs)."""
    inter = w1.shape[1] // 2
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    for e in range(w1.shape[0]):
        tok, j = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        gu = F.linear(hidden[tok], w1[e])
        y = F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], w2[e])
        out.index_add_(0, tok, y.float() * topk_weights[tok, j, None].float())
    return out.to(hidden.dtype)


@torch.library.custom_op("argus::moe", mutates_args=())
def moe(hidden: Tensor, topk_weights: Tensor, topk_ids: Tensor, w1: Tensor, w2: Tensor, node_id: str) -> Tensor:
    """sum_j topk_weights[t, j] * (silu(x W1g[e]^T) * (x W1u[e]^T)) W2[e]^T, e = topk_ids[t, j].

    hidden (T, HD); topk_weights and topk_ids (T, topk), the ids integers or a router's float32 whole numbers (the
    backend hands the op router_topk's packed ids as they are); w1 (E, 2I, HD) gate rows over up rows;
    w2 (E, HD, I): transformers' stacked expert weights (gate_up_proj, down_proj)."""
    t, hd = hidden.shape
    e, i2, _ = w1.shape
    topk = topk_ids.shape[1]

    def sig() -> Signature:
        return make_signature("moe", f"top{topk},silu", [hidden, w1, w2],
                              {"E": e, "I": i2 // 2, "HD": hd, "TOPK": topk}, {"T": t})

    def run(plan: Plan, target: str) -> Tensor:
        p_up, p_down = plan.policies["moe_gate_up"], plan.policies["moe_down"]  # one BM (_moe_select)
        sorted_ids, block_expert = moe_align(topk_ids, e, p_up.const("BM", 16))
        h = torch.empty(sorted_ids.numel(), i2 // 2, dtype=hidden.dtype, device=hidden.device)
        before = None
        if p_up.warp_specialize and target == "cuda":
            def before(rows: Tensor) -> None:
                _report.note(node_id, _lowering_note("moe_gate_up", p_up, rows, w1, sorted_ids, block_expert, h))
        gate_up_rows(hidden, w1, sorted_ids, block_expert, h, p_up, target, plan.kernels["moe_gate_up"], before)
        y = torch.zeros(t, hd, dtype=torch.float32, device=hidden.device)
        plan.kernels["moe_down"](h, w2, sorted_ids, block_expert, topk_weights.reshape(-1).contiguous(), y,
                                 policy=p_down, target=target)
        return y.to(hidden.dtype)

    def fallback() -> Tensor:
        return moe_reference(hidden, topk_weights, topk_ids, w1, w2)

    if t == 0:
        return hidden.new_zeros(hidden.shape)
    # the routing tensors' metadata is part of the call's memo key: the host function reads them (and a replay of
    # its launches must see the same dtypes and layouts)
    return run_op(node_id, sig, run, fallback, [hidden, w1, w2], (topk, tensor_key(topk_weights), tensor_key(topk_ids)),
                  flops=t * topk * 6 * hd * (i2 // 2),  # gate+up (2 x 2*HD*I) and down (2*I*HD) per pair
                  inputs=[hidden, w1, w2, topk_weights, topk_ids])


@moe.register_fake
def _(hidden, topk_weights, topk_ids, w1, w2, node_id):
    return hidden.new_empty(hidden.shape)
