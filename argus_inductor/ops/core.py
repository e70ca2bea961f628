"""The core of the ops: the active options and the targets Argus runs on, what an op is (OpSpec: its kernels,
template policies and the constants a signature fixes), the registry of op specs, and a plan (the kernels and
policies one signature runs with, and where they came from).

May import: config, dsl, kernels, hopper, specs, runtime. The op families (gemm.py, attention.py, moe.py,
library.py) register their specs here; entries.py, plans.py and dispatch.py build on it.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..config import Options
from ..dsl import Kernel, Policy, kernels_from_source
from ..kernels.gemm import TF32_SPLIT_POLICY, tf32_split, tf32x3_split_pays
from ..kernels.policies import fit_shared_memory, fp32_precision
from ..runtime import timing
from ..runtime.cache import CacheEntry, KernelCache
from ..runtime.signature import Signature, device_arch

log = logging.getLogger("argus_inductor")
_ACTIVE = Options.resolve()
SUPPORTED_ARCHS = ("sm_90", "gfx942")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DSL_HEADER = "from argus_inductor.dsl import *\n\n"
LOCK = threading.Lock()
_SAID: set[str] = set()


def say_once(msg: str, level: int = logging.WARNING) -> None:
    with LOCK:
        if msg in _SAID:
            return
        _SAID.add(msg)
    log.log(level, msg)


# what the modules over this one memoize per call site and per signature; each registers how to forget it
FORGET: list[Callable[[], None]] = []


def forget_memos() -> None:
    """Drop every memo registered in FORGET (the next call of each signature resolves its plan again)."""
    for forget in FORGET:
        forget()


def set_active_options(opts: Options) -> None:
    global _ACTIVE
    if opts != _ACTIVE:
        forget_memos()  # plans were resolved under the old options (cache dir, on-miss, interpret)
    _ACTIVE = opts
    timing.set_lock(opts.tune_lock)


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
    # a miss under ARGUS_ON_MISS=synthesize searches this op's policies on the call's operands (the library's op
    # classes) rather than asking the agent to write its kernels
    tunes: bool = False

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


def epilogue_parts(sig: Signature) -> list[str]:
    return [p for p in sig.epilogue.replace(",", "+").split("+") if p]


ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def for_dtype(p: Policy, sig: Signature, target: str, b_tiles: int = 1) -> Policy:
    """A template tuned on 2-byte inputs made to fit the signature's dtype: staged tiles within shared memory
    (the float32 precision is OpSpec.policies' to set, for every plan)."""
    if target == "interpret":
        return p
    return fit_shared_memory(p, ELEM_BYTES.get(sig.dtypes[0], 4), b_tiles, target=target)


def gluon_fallbacks(kernel: Kernel, fallbacks: Callable[[Signature, Policy, int], list[Policy]]) \
        -> Callable[[Signature, dict[str, Policy], str | None], dict[str, tuple[Kernel, Policy]]]:
    """OpSpec.host_kernels for a kernel with a Gluon lowering: where the plan's policy runs that lowering (on
    NVIDIA), the Triton policies its declined launches run (`fallbacks(sig, policy, element size)`), by the name
    verify_plan reports; verify_plan proves them at the kernel's own shapes."""
    def host_kernels(sig: Signature, policies: dict[str, Policy],
                     target: str | None) -> dict[str, tuple[Kernel, Policy]]:
        from ..hopper import takes

        p = policies.get(kernel.name)
        if target not in (None, "cuda") or p is None or not p.warp_specialize or not takes(kernel.name, p):
            return {}
        out = {}
        for f in fallbacks(sig, p, ELEM_BYTES.get(sig.dtypes[0], 4)):
            tiles = "x".join(str(f.const(c)) for c in ("BM", "BN", "BK") if f.const(c) is not None)
            out[f"{kernel.name} (Triton fallback {tiles}, {f.num_stages} stages)"] = (kernel, f)
        return out
    return host_kernels


SPECS: dict[str, OpSpec] = {}  # op name -> spec; each op family's module adds its own
# signature -> its spec where the op name alone does not say (a GEMM's epilogue picks the fused kernel; a library
# class's spec is made per signature); each returns None for signatures not its own
RESOLVERS: list[Callable[[Signature], OpSpec | None]] = []


def spec_for(sig: Signature) -> OpSpec:
    """The spec of the op a signature is of: a resolver's answer, else SPECS by the op's name."""
    for resolve in RESOLVERS:
        spec = resolve(sig)
        if spec is not None:
            return spec
    return SPECS[sig.op]


# --------------------------------------------------------------------------------------------------
# Plans: the kernels and policy a signature runs with, and where they came from

_CACHES: dict[str, KernelCache] = {}


def kernel_cache(opts: Options | None = None) -> KernelCache:
    """The KernelCache of the active options' ARGUS_CACHE_DIR."""
    root = (opts or _ACTIVE).cache_dir or str(Path.home() / ".cache" / "argus")
    with LOCK:
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
    policy: dict[str, Any] = field(default_factory=dict)  # the policy dict it was made from (CacheEntry.policy)
    verification: dict[str, Any] | None = None  # a miss's plan: the checker's verdict at its signature (plan_for)

    def label(self) -> str:
        return f"{self.source} ({self.detail})" if self.detail else self.source


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


def verification_summary(v: dict[str, Any]) -> str:
    status = v.get("status")
    if status == "verified":
        return "verified"
    if status == "violations":
        return f"verification found {v.get('problems', '?')} problem(s)"
    if status == "undecided":
        return f"no counterexample; {v.get('undecided', '?')} obligation(s) undecided in the checker's time"
    return str(status or "not verified")


def plan_from_entry(spec: OpSpec, sig: Signature, entry: CacheEntry, source: str, detail: str) -> Plan:
    pols = spec.policies(entry.policy, sig)
    return Plan(_kernels_of(spec, entry.dsl_source, pols), pols, source, detail, policy=dict(entry.policy))


