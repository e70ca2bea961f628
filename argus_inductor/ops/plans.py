"""Which plan a signature runs: the cache's entry (proved again where an older checker proved it), else by
ARGUS_ON_MISS the agent's synthesis or a library op's policy search, the policy of the nearest solved signature
of the same template, or the template; memoized per process.

The agent sits above the ops: they reach it only through the loader the package root installs (install_agent),
which gives an object with `synthesize(sig, **offered)` and `tune` (search, ranked).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from ..dsl import Policy
from ..runtime.cache import CacheEntry, KernelCache
from ..runtime.signature import Signature
from . import entries
from .core import (
    LOCK,
    OpSpec,
    Plan,
    active_options,
    forget_memos,
    kernel_cache,
    library_kernels,
    plan_from_entry,
    say_once,
    spec_for,
    verification_summary,
)
from .entries import make_entry, proved_by_older_checker

_PLANS: dict[tuple[str, str, str, bool], Plan] = {}
_REFUSED: dict[str, str] = {}  # signature key -> why the checker refused the plan a miss would have run
# () -> the agent (argus_inductor.agent): what ARGUS_ON_MISS=synthesize asks to synthesize a signature
# (`synthesize(sig, **offered)`) and to search a library op's policies (`tune.search`, `tune.ranked`). Installed by
# the package root, which sits above both; None: no agent (a miss takes the default plan and says so).
_AGENT: Callable[[], Any] | None = None
NO_AGENT = "no agent installed to search policies"  # what a library miss says where nothing handed the ops the agent


def install_agent(loader: Callable[[], Any] | None) -> None:
    """Hand the ops the agent: `loader()` returns it (imported when a miss first asks for it)."""
    global _AGENT
    _AGENT = loader


def _agent() -> Any:
    if _AGENT is None:
        return None
    try:
        return _AGENT()
    except ImportError:
        return None


def _agent_synthesize() -> Callable[..., Any] | None:
    fn = getattr(_agent(), "synthesize", None)
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
        plan = plan_from_entry(spec, sig, entry, "synthesized", "agent")
        kernel_cache().put(sig.key(), entry)
        return plan, ""
    except Exception as e:
        say_once(f"argus: the agent failed on {sig.short()}: {type(e).__name__}: {e}")
        return None, f"agent failed ({type(e).__name__}: {e}); used the default plan"


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
    return plan_from_entry(spec, sig, entry, "synthesized", detail), ""


def tune_library(spec: OpSpec, sig: Signature, target: str, run_plan: Callable[[Plan, str], Tensor],
                 reference: Callable[[], Tensor], cache: KernelCache) -> tuple[CacheEntry | None, str]:
    """The policy search of agent/tune.py for a library signature (run_plan(plan, target) launches it on fixed
    operands, reference() is torch's output on them), then the checker on the fastest candidate (the next
    fastest where it fails). The winner is stored in `cache` with its timings. Returns (entry, what happened);
    entry None when nothing was stored."""
    tune = getattr(_agent(), "tune", None)
    if tune is None:
        return None, NO_AGENT

    opts = active_options()

    def run(policy: dict[str, Any]) -> Tensor:
        pols = spec.policies(policy, sig)
        return run_plan(Plan(library_kernels(spec, pols), pols, "synthesized"), target)

    try:
        res = tune.search(spec.template(sig, target), run, target, reference(), seconds=opts.tune_seconds,
                          max_candidates=opts.tune_candidates)
    except Exception as e:
        say_once(f"argus: tuning {sig.short()} failed ({type(e).__name__}: {e}); using the template policy")
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
        say_once(f"argus: cannot read the kernel cache in {cache.root} ({e})")
    if near is not None:
        entry, dist = near
        try:  # its policy, the library's kernels: the neighbour's own text (an agent's) was proved for it, not here
            pols = spec.policies(entry.policy, sig)
            return Plan(library_kernels(spec, pols), pols, "default", f"policy of nearest solved {entry.sig().short()}",
                        policy=dict(entry.policy))
        except Exception as e:
            say_once(f"argus: cached entry for {entry.sig().short()} is unusable ({e}); using the template")
    policy = spec.template(sig, target)
    pols = spec.policies(policy, sig)
    return Plan(library_kernels(spec, pols), pols, "default", "template policy", policy=policy)


def _proved_again(spec: OpSpec, sig: Signature, entry: CacheEntry, target: str, cache: KernelCache
                  ) -> CacheEntry | None:
    """`entry` proved again by this process's checker before it is believed (once a process per contents): the cache
    may be shared, and anyone who can write its folder can write an entry whose checksum matches. None where the
    entry cannot be read as a plan, or fails the checker while saying this checker passed it: set aside, a miss,
    rebuilt by `argus warmup`. An entry an older checker proved keeps this checker's verdict (stored once; one it
    now rejects runs as a miss and is made again by `argus warmup`)."""
    if entries.proved_here(sig, entry) or not active_options().verify:
        return entry
    try:
        plan = plan_from_entry(spec, sig, entry, "cache", "")
        verdict = entries.verify_plan(spec, sig, plan.kernels, plan.policies, target)
    except Exception as e:  # text that is not the DSL, a policy no kernel takes (BM=3, num_warps=0), ...
        cache.set_aside(sig.key(), f"cannot be read as a plan ({type(e).__name__}: {str(e)[:300]})")
        return None
    if verdict.get("status") == "violations" and entry.verification.get("status") != "violations" \
            and not proved_by_older_checker(entry):  # an older checker's proof is stale, this one's is false
        cache.set_aside(sig.key(), f"says {verification_summary(entry.verification)} but this checker finds "
                                   f"{verification_summary(verdict)}")
        return None
    if verdict.get("status") != entry.verification.get("status") or proved_by_older_checker(entry):
        entry = replace(entry, verification=verdict)
        try:
            cache.put(sig.key(), entry)
        except (OSError, ValueError) as e:
            say_once(f"argus: cannot update the cache entry {cache.path(sig.key())} ({e})")
    entries.mark_proved(sig, entry)
    return entry


def plan_for(sig: Signature, target: str, ctx: dict[str, Any] | None = None) -> Plan | None:
    """The kernels and policies `sig` runs with, or None for the aten op (ARGUS_ON_MISS=fallback on a miss)."""
    opts = active_options()
    memo = (sig.key(), opts.on_miss, opts.cache_dir)
    with LOCK:
        hit = _PLANS.get(memo)
        refused = sig.key() in _REFUSED
    if hit is not None or refused:
        return hit
    spec = spec_for(sig)
    cache = kernel_cache(opts)
    plan: Plan | None = None
    entry = cache.get(sig.key())
    if entry is not None:
        entry = _proved_again(spec, sig, entry, target, cache)
    if entry is not None and entry.verification.get("status") == "violations":
        say_once(f"argus: cache entry {cache.path(sig.key())} fails the invariant checker "
                  f"({verification_summary(entry.verification)}); treating it as a miss")
        entry = None
    if entry is not None:
        try:
            plan = plan_from_entry(spec, sig, entry, "cache",
                                    f"{entry.origin}, {verification_summary(entry.verification)}")
        except Exception as e:
            say_once(f"argus: cache entry {cache.path(sig.key())} cannot be used ({type(e).__name__}: {e}); "
                      "treating it as a miss")
            entry = None
    if plan is None:
        if opts.on_miss == "fallback":
            cache.record_miss(sig)
            return None
        note = ""
        if opts.on_miss == "synthesize":
            tune = _tune_library if spec.tunes else _synthesize
            plan, note = tune(spec, sig, target, ctx or {})
        if plan is None:
            plan = _default_plan(spec, sig, target, cache)
            cache.record_miss(sig)
            if note:
                plan.notes.append(note)
            if not _proved_before_it_runs(spec, sig, plan, target):
                return None
    with LOCK:
        _PLANS[memo] = plan
    return plan


def _proved_before_it_runs(spec: OpSpec, sig: Signature, plan: Plan, target: str) -> bool:
    """Prove a miss's plan (the nearest solved policy or the template, on the library's kernels) at `sig`'s shapes
    before its first run, as a cache entry is proved when first read; False (the aten op runs, said once) where the
    checker finds a violation. The verdict rides on the plan (the swap-in stores it with the entry); an undecided
    one runs, with a note."""
    if not active_options().verify:
        return True
    plan.verification = entries.verify_plan(spec, sig, plan.kernels, plan.policies, target)
    status = plan.verification.get("status")
    if status == "violations":
        why = f"the invariant checker rejects the {plan.detail} ({verification_summary(plan.verification)})"
        say_once(f"argus: {sig.short()}: {why}; Inductor's op runs")
        with LOCK:
            _REFUSED[sig.key()] = why
        return False
    if status == "verified":
        plan.detail = f"{plan.detail}, verified"  # the report's "default (template policy, verified)"
    else:
        plan.notes.append(f"not proved: {verification_summary(plan.verification)}")
    return True


def refusal(sig: Signature) -> str | None:
    """Why `sig` runs the aten op because the checker refused the plan its miss would have run (None: it did not)."""
    with LOCK:
        return _REFUSED.get(sig.key())


def prove_ahead(sigs: list[Signature], target: str) -> int:
    """Start proving, in the checker's worker processes, the plans these signatures will be proved with: a cache
    entry's (proved again at its first load) or, on a miss under ARGUS_ON_MISS=default, the nearest-or-template plan
    (proved before its first run). Nothing runs and nothing is recorded: a miss under synthesize or fallback, and a
    plan this process already holds, send nothing. The number of kernels sent."""
    opts = active_options()
    if not opts.verify:
        return 0
    cache = kernel_cache(opts)
    sent = 0
    for sig in dict.fromkeys(sigs):
        try:
            spec = spec_for(sig)
            with LOCK:
                held = any(m[0] == sig.key() for m in _PLANS)
            if held:
                continue
            entry = cache.get(sig.key())
            if entry is not None and not entries.proved_here(sig, entry):
                plan = plan_from_entry(spec, sig, entry, "cache", "")
            elif entry is None and opts.on_miss == "default":
                plan = _default_plan(spec, sig, target, cache)
            else:
                continue
            sent += entries.prove_ahead(spec, sig, plan.kernels, plan.policies, target)
        except Exception:  # only a head start: the proof itself comes when the plan is used
            continue
    return sent


def forget_plan(sig: Signature) -> None:
    """Drop `sig`'s remembered plan (its next call reads the cache again)."""
    with LOCK:
        for memo in [m for m in _PLANS if m[0] == sig.key()]:
            del _PLANS[memo]
        _REFUSED.pop(sig.key(), None)


def forget_plans() -> None:
    """Drop the in-process memo of plans (the next call of each signature reads the cache again)."""
    with LOCK:
        _PLANS.clear()
        _REFUSED.clear()
        forget_memos()


