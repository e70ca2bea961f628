"""Cache entries of a plan: the invariant checker's verdict on its kernels (verify_plan), whether a stored verdict
still stands (entry_current), and the entry `argus warmup` and a synthesis store (make_entry, warm).
"""
from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..config import checker_workers
from ..dsl import Kernel, Policy
from ..invariants.pool import ProofJob, job_for, shared_pool, wait
from ..runtime import reporting as _report
from ..runtime.cache import CacheEntry, KernelCache, checksum
from ..runtime.signature import Signature
from ..specs.reads import kernel_reads
from .core import LOCK, OpSpec, active_options, dsl_source, kernel_cache, library_kernels, spec_for


def _verifier() -> Callable[..., Any] | None:
    """The invariant checker's verify(kernel, policy, shapes=None), where that package provides it.

    Hook: the checker lives in argus_inductor.invariants (being written alongside); until it exports
    verify, entries are stored with {"status": "not verified"}."""
    try:
        from .. import invariants
    except ImportError:
        return None
    fn = getattr(invariants, "verify", None)
    if fn is None:
        try:
            from ..invariants.api import verify as fn  # type: ignore[no-redef]
        except ImportError:
            return None
    return fn if callable(fn) else None


# The checker's version in each verdict it stores. Bumped when the checker comes to reject what it used to prove, so
# that entries an older one proved are proved again when first loaded (plan_for). 2: in-kernel assumptions that
# no element satisfies at the verified shapes and policy (a vacuous proof) are rejected (session 25). 3: fill values
# (a reduction over lanes that read no input must take its identity there) and zero-trip reductions (issue 42).
# 4: each kernel is proved against its op's read sets (specs/reads.py: what every output element must read), on the
# backend's path as on the agent's.
# 5: a position tag two terms of a sum share holds where either term has it (was: where the first did), so a sum of a
# chain with a constant branch (softplus, clamp) covers its whole tile; write-all witnesses solve a transposed
# convolution's phase addresses (digits of weight > 1, div/mod digits' extents), so its proof no longer enumerates
# programs (7.7 s -> 0.9 s at level-2 problem 21's shapes).
CHECKER_VERSION = 5


def verify_plan(spec: OpSpec, sig: Signature, kernels: dict[str, Kernel],
                policies: dict[str, Policy], target: str | None = None) -> dict[str, Any]:
    """Run the invariant checker on each kernel of a plan, and on the kernels its host runs with policies of their
    own (for `target`), at the signature's shapes; a JSON summary."""
    with _report.phase("checker"):
        return _verify_plan(spec, sig, kernels, policies, target)


def _calls(spec: OpSpec, sig: Signature, kernels: dict[str, Kernel], policies: dict[str, Policy],
           target: str | None) -> list[tuple[str, Kernel, Policy, dict[str, int], list[str], tuple[Any, ...]]]:
    """The checker's calls for a plan: (name, kernel, policy, shapes, assumptions, read sets) for each kernel of the
    plan and each kernel its host runs with a policy of its own (for `target`)."""
    checks = spec.checks(sig, policies) if spec.checks is not None else \
        {n: (v, []) for n, v in spec.checked_shapes(sig, policies).items()}
    runs = {n: (k, policies[n]) for n, k in kernels.items()}
    if spec.host_kernels is not None:
        runs.update(spec.host_kernels(sig, policies, target))
    out = []
    for name, (k, pol) in runs.items():
        # a host kernel of the plan's own (a Gluon lowering's Triton fallback) is proved at that kernel's shapes
        shapes, assumptions = checks.get(name) or checks.get(k.ir.name, ({}, []))
        out.append((name, k, pol, {s: v for s, v in shapes.items() if s in k.ir.symbols}, list(assumptions),
                    kernel_reads(k.ir.name, sig.epilogue)))
    return out


# proofs started ahead in worker processes (prove_ahead), by job; _verify_plan takes a verdict from here when the
# same call comes, and proves the kernel itself where there is none or its worker failed
_AHEAD: dict[ProofJob, Future[dict[str, Any]]] = {}
_AHEAD_LOCK = threading.Lock()
_TAKEN = [0]  # verdicts verify_plan took from the workers, in this process


def proofs_from_workers() -> tuple[int, int]:
    """(verdicts verify_plan took from the checker's workers so far, proofs sent ahead not yet asked for)."""
    with _AHEAD_LOCK:
        return _TAKEN[0], len(_AHEAD)


def prove_ahead(spec: OpSpec, sig: Signature, kernels: dict[str, Kernel], policies: dict[str, Policy],
                target: str | None = None) -> int:
    """Start proving the plan's kernels in the checker's worker processes (ARGUS_CHECKER_WORKERS), so that a later
    verify_plan of the same plan finds the verdicts made; the number of kernels sent (0 without workers)."""
    opts = active_options()
    pool = shared_pool(checker_workers(opts.checker_workers)) if opts.verify else None
    if pool is None:
        return 0
    sent = 0
    for _, k, pol, shapes, assumptions, reads in _calls(spec, sig, kernels, policies, target):
        job = job_for(k, pol, shapes, assumptions, opts.verify_budget, reads)
        with _AHEAD_LOCK:
            if job is None or job in _AHEAD:
                continue
            _AHEAD[job] = pool.submit(job)
        sent += 1
    return sent


def _verify_plan(spec: OpSpec, sig: Signature, kernels: dict[str, Kernel], policies: dict[str, Policy],
                 target: str | None) -> dict[str, Any]:
    fn = _verifier()
    if fn is None:
        return {"status": "not verified", "reason": "argus_inductor.invariants provides no verify()"}
    results: dict[str, Any] = {}
    problems = undecided = 0
    budget = active_options().verify_budget
    for name, k, pol, want, assumptions, reads in _calls(spec, sig, kernels, policies, target):
        with _AHEAD_LOCK:  # (no job is built, its source hashed, where nothing was sent ahead)
            job = job_for(k, pol, want, assumptions, budget, reads) if _AHEAD else None
            ahead = _AHEAD.pop(job, None) if job is not None else None
        # a worker's verdict on the same call; a worker that failed or ran far past the budget: proved here
        js = wait(ahead, 2 * budget + 30) if ahead is not None else None
        if js is not None:
            with _AHEAD_LOCK:
                _TAKEN[0] += 1
        else:
            try:
                r = fn(k, pol, want, assumptions=assumptions, budget_s=budget, reads=reads)
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


def proved_by_older_checker(entry: CacheEntry) -> bool:
    v = entry.verification
    version = v.get("checker", 1)
    return v.get("status") in ("verified", "undecided") and (not isinstance(version, int) or version < CHECKER_VERSION)


_PROVED: set[tuple[str, str]] = set()  # (key, what was proved) of the entries this process proved itself


def _proof_stamp(sig: Signature, entry: CacheEntry) -> tuple[str, str]:
    """What a proof of `entry` is about: its signature, kernels and policy (not its timings or swap-in verdicts)."""
    return sig.key(), checksum({"dsl": entry.dsl_source, "policy": entry.policy})


def mark_proved(sig: Signature, entry: CacheEntry) -> None:
    """Note that this process proved `entry`'s kernels itself (they are not proved again when read back)."""
    with LOCK:
        _PROVED.add(_proof_stamp(sig, entry))


def proved_here(sig: Signature, entry: CacheEntry) -> bool:
    """Whether this process proved `entry`'s kernels and policy itself."""
    return _proof_stamp(sig, entry) in _PROVED


def entry_current(entry: CacheEntry | None) -> bool:
    """Whether `entry` stands as a solved plan: present, not rejected by the checker, not proved only by an older
    one, not a miss's template plan kept for its swap-in verdict (origin "default"): what `argus warmup` leaves
    alone unless --force."""
    return entry is not None and entry.verification.get("status") != "violations" and \
        not proved_by_older_checker(entry) and entry.origin != "default"


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
    proved = verification is None and (active_options().verify if verify is None else verify)
    if verification is None:
        do = active_options().verify if verify is None else verify
        verification = verify_plan(spec, sig, kernels, pols, target) if do else {"status": "not verified",
                                                                          "reason": "ARGUS_VERIFY=0"}
    entry = CacheEntry(signature=sig.as_dict(), dsl_source=dsl_source(list(kernels.values())),
                       triton_source="\n\n".join(tri), policy=policy, verification=verification,
                       timings=dict(timings or {}), versions=_versions(sig), origin=origin)
    if proved:  # this process's checker proved it just now
        mark_proved(sig, entry)
    return entry


def warm(sig: Signature, policy: dict[str, Any] | None = None, origin: str = "warmup",
         cache: KernelCache | None = None) -> CacheEntry:
    """Build and store the entry for `sig` (template policy unless one is given); what `argus warmup`
    does for a signature it does not send to the agent."""
    entry = make_entry(sig, policy, origin)
    (cache or kernel_cache()).put(sig.key(), entry)
    return entry


