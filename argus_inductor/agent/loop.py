"""synthesize(signature): the agent's loop for one signature.

    baseline: the template default plan (always tried first: the reference of the interpreter's reward and
              the kernel to fall back on)
    repeat within the budget (trials, seconds, patience):
        planner proposes (LLM: DSL source + plan; offline: a plan for a template)
        -> rules (known-infeasible plans are refused without a compile)
        -> DSL compile -> invariants (a counterexample goes back to the planner: up to N repair rounds)
        -> lower -> correctness against the PyTorch reference -> benchmark -> reward
    winner: the best-rewarded trial that also passes more correctness trials on fresh inputs at odd shapes of
            the same signature
Every trial is appended to kernels/<key>.trials.jsonl in the cache directory; the winner goes into the cache
(CacheEntry) and its plans into the experience store (warm start for the nearest signatures).
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import env_number
from ..dsl import Kernel, Policy
from ..runtime.signature import Signature
from ..specs import Problem, problem_from_signature, signature_for, spec
from ..specs.plan import Plan
from . import hardware as hw
from . import rules, store, synthesizer
from .evaluate import Candidate, Evaluator, Outcome
from .experience import ExperienceStore
from .llm import LLMClient, LLMError
from .llm import from_env as llm_from_env
from .llm_policy import LLMPolicy
from .offline import OfflinePolicy
from .planner import Planner, PlanningContext, PlanPolicy, Proposal, Reward, Step
from .space import build

log = logging.getLogger("argus_inductor.agent")


class SynthesisError(RuntimeError):
    """No verified, correct kernel was found (or the signature cannot be synthesized here)."""

    def __init__(self, message: str, trail_path: Path | None = None, trail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message + (f" (trail: {trail_path})" if trail_path else ""))
        self.trail_path = trail_path
        self.trail = trail or []


@dataclass
class Budget:
    trials: int = 16            # trials after the baseline, repairs included
    seconds: float = 120.0      # wall clock for the search (the winner's confirmation runs after)
    repair_rounds: int = 3      # failed trials in a row the planner may spend repairing
    test_trials: int = 3        # extra correctness trials of the winner (fresh inputs, odd shapes)
    patience: int = 8           # stop after this many trials without a 1% better reward (0: never)

    @staticmethod
    def for_target(target: str) -> Budget:
        """The default budget for `target`, with ARGUS_AGENT_TRIALS / ARGUS_AGENT_SECONDS overriding it."""
        b = Budget(trials=5, seconds=300.0, repair_rounds=2, test_trials=2, patience=4) if target == "interpret" \
            else Budget()
        return replace(b, trials=env_number("ARGUS_AGENT_TRIALS", b.trials, int, positive=True),
                       seconds=env_number("ARGUS_AGENT_SECONDS", b.seconds, float, positive=True))


@dataclass
class SynthesisResult:
    signature: Signature
    problem: Problem
    kernels: dict[str, Kernel]
    policies: dict[str, Policy]
    plan: Plan
    dsl_source: str
    triton_source: str
    verification: dict[str, Any]
    timings: dict[str, Any]
    origin: str                  # template | llm
    policy: str                  # baseline | offline | llm: which policy proposed the winner
    trail: list[dict[str, Any]]
    trail_path: Path | None
    notes: list[str] = field(default_factory=list)

    def policy_dict(self) -> dict[str, Any]:
        """What the cache stores (argus_inductor.ops reads it): the Policy.as_dict() of the one searched kernel
        (SPLIT_K > 1 in it selects split-k, whose cast pass has a fixed policy), {kernel: Policy.as_dict()} for
        several (MoE)."""
        main = [k for k in self.policies if k not in spec(self.problem.op).aux]
        if len(main) == 1:
            return self.policies[main[0]].as_dict()
        return {k: self.policies[k].as_dict() for k in main}

    def cache_entry(self, origin: str = "synthesized") -> Any:
        import torch
        import triton

        from ..config import VERSION as __version__

        return store.make_entry(signature=self.signature.as_dict(), dsl_source=self.dsl_source,
                                triton_source=self.triton_source, policy=self.policy_dict(),
                                verification=self.verification, timings=self.timings,
                                versions={"torch": torch.__version__, "triton": triton.__version__,
                                          "argus_inductor": __version__},
                                origin=origin)

    def run(self, inputs: dict[str, Any]) -> Any:
        """Launch the winning kernel(s) on an op's inputs (the keys spec(op).make_inputs produces)."""
        return spec(self.problem.op).run(self.problem, self.kernels, self.policies, inputs)


def device_for(sig: Signature, device: str | None) -> tuple[str, str]:
    """(torch device, Triton target) for the signature's architecture on this machine."""
    import torch

    from ..dsl.runtime import interpret_requested

    if sig.arch == "cpu":
        if not interpret_requested() and not interpreting():
            raise SynthesisError("CPU signatures run under the Triton interpreter: set ARGUS_INTERPRET=1 before "
                                 "Python starts")
        return "cpu", "interpret"
    if not torch.cuda.is_available():
        raise SynthesisError(f"signature {sig.short()} is for {sig.arch}, and this process sees no GPU")
    dev = device or f"cuda:{torch.cuda.current_device()}"
    from ..runtime.signature import device_arch

    here = device_arch(torch.device(dev))
    if here != sig.arch:
        raise SynthesisError(f"signature {sig.short()} is for {sig.arch}; {dev} is {here}")
    return dev, "hip" if getattr(torch.version, "hip", None) else "cuda"


def interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _policies(policy: str | PlanPolicy | list[PlanPolicy], llm: LLMClient | None, reward_source: str,
              seed: int | None) -> tuple[list[PlanPolicy], list[str]]:
    notes: list[str] = []
    if isinstance(policy, list):
        return policy, notes
    if not isinstance(policy, str):
        return [policy, OfflinePolicy(seed)], notes
    if policy not in ("auto", "offline", "llm"):
        raise ValueError(f"policy must be auto, offline or llm, got {policy!r}")
    if policy == "offline":
        return [OfflinePolicy(seed)], notes
    client = llm
    if client is None:
        try:
            client = llm_from_env()
        except LLMError as e:
            notes.append(f"LLM not configured ({e}); offline policy")
            client = None
    if client is None:
        if policy == "llm":
            raise SynthesisError("policy 'llm' needs an endpoint: set ARGUS_LLM_BASE_URL and ARGUS_LLM_MODEL")
        return [OfflinePolicy(seed)], notes
    return [LLMPolicy(client, reward_source), OfflinePolicy(seed)], notes


def synthesize(signature: Signature | Problem, *, policy: str | PlanPolicy | list[PlanPolicy] = "auto",
               llm: LLMClient | None = None, budget: Budget | None = None, cache_root: Path | str | None = None,
               device: str | None = None, write_cache: bool = True, origin: str = "synthesized",
               seed: int | None = None, progress: Callable[[str], None] | None = None) -> SynthesisResult:
    """Find a verified, tested, timed kernel for one signature.

    signature: a Signature (as argus_inductor.ops makes it), or a Problem (its signature is derived for the
    problem's device). policy: "auto" (the LLM when ARGUS_LLM_BASE_URL is set, else offline), "offline", "llm",
    or policy objects. Writes the cache entry (write_cache) and the trail under cache_root (ARGUS_CACHE_DIR).
    Raises SynthesisError (and only that) when no kernel passes or the signature cannot be synthesized here.
    """
    try:
        return _synthesize(signature, policy, llm, budget, cache_root, device, write_cache, origin, seed, progress)
    except SynthesisError:
        raise
    except Exception as e:  # an unexpected fault is still a clean error for the caller (the backend falls back)
        log.debug("synthesis failed", exc_info=True)
        raise SynthesisError(f"synthesis failed: {type(e).__name__}: {e}") from e


def _synthesize(signature: Signature | Problem, policy: str | PlanPolicy | list[PlanPolicy], llm: LLMClient | None,
                budget: Budget | None, cache_root: Path | str | None, device: str | None, write_cache: bool,
                origin: str, seed: int | None, progress: Callable[[str], None] | None) -> SynthesisResult:
    t_start = time.perf_counter()
    if isinstance(signature, Problem):
        problem = signature
        sig = signature_for(problem, "cpu" if problem.device == "cpu" else arch_of(problem.device))
    else:
        sig = signature
        try:
            problem = problem_from_signature(sig, "cpu")
        except (KeyError, ValueError) as e:
            raise SynthesisError(f"cannot synthesize {sig.short()}: {e}") from None
    dev, target = device_for(sig, device)
    problem = replace(problem, device=dev)
    op = spec(problem.op)
    budget = budget or Budget.for_target(target)
    root = Path(cache_root) if cache_root is not None else store.default_root()
    key = sig.key()
    trail = store.Trail(store.trail_path(root, key))
    say = progress or (lambda m: log.info(m))
    hardware = hw.for_arch(sig.arch)
    space = build(op, problem, hardware, target)
    experience = ExperienceStore(root)
    warm = experience.nearest(sig)
    ev = Evaluator(op, problem, target, dict(sig.dynamic_dims), seed)
    peer = ev.peer()
    reward = Reward(f"peer:{peer[0]}", peer[1]) if peer else Reward("template-default")
    pols, notes = _policies(policy, llm, reward.source, seed)
    # the search's end as a time.monotonic() value, for the LLM policy: a request in flight is cut there
    deadline = time.monotonic() + budget.seconds - (time.perf_counter() - t_start)
    ctx = PlanningContext(sig, op, problem, space, hardware, target, warm, budget.repair_rounds, deadline)
    planner = Planner(ctx, pols, reward)
    trail.write("start", {"signature": sig.as_dict(), "problem": problem.short(), "target": target,
                          "policies": [p.name for p in pols], "reward_source": reward.source,
                          "peer": {"name": peer[0], "ms": peer[1]} if peer else None,
                          "budget": budget.__dict__, "space_size": space.size(),
                          "entries": [e.id for e in space.entries], "warm_start": [p.describe() for p, _ in warm]})

    def record(step: Step, seconds: float) -> None:
        planner.record(step)
        trail.write("trial", {**step.to_json(), "seconds": round(seconds, 3)})
        o = step.outcome
        ms = f"{o.ms:.4f} ms" if o is not None and o.ms is not None else step.status
        plan = step.plan.describe() if step.plan else "-"
        say(f"{sig.short()}: trial {step.index} [{step.policy}/{step.origin}] {plan} -> {ms}, reward {step.reward:.3f}")

    # baseline: the template default
    t0 = time.perf_counter()
    base_cand = synthesizer.from_template(op, problem, space.default)
    base = ev.evaluate(base_cand)
    if base.ok and reward.source == "template-default":
        reward = Reward("template-default", base.ms)
        planner.rescore(reward)
    record(Step(0, "baseline", "template", space.default, base, reward(base), base.feedback()),
           time.perf_counter() - t0)
    sources: dict[int, Candidate] = {0: base_cand}

    best_reward = planner.history[0].reward
    stale = 0
    while len(planner.history) <= budget.trials and time.perf_counter() - t_start < budget.seconds:
        t0 = time.perf_counter()
        got = planner.propose()
        if got is None:
            break
        if time.perf_counter() - t_start >= budget.seconds:  # the proposal took the rest (an LLM request cut there)
            notes.append("the budget ran out while the next trial was proposed")
            break
        pol, prop = got
        step = _trial(ctx, ev, planner, pol.name, prop, len(planner.history), sources)
        record(step, time.perf_counter() - t0)
        if step.reward > best_reward * 1.01:
            best_reward, stale = step.reward, 0
        else:
            stale += 1
        if budget.patience and stale >= budget.patience:
            notes.append(f"stopped after {stale} trials without a 1% gain")
            break
    notes += planner.notes
    skipped = sum(len(p.skipped) for p in pols if isinstance(p, OfflinePolicy))
    if skipped:
        notes.append(f"{skipped} plan(s) refused by rules without a trial")

    # the winner: best reward that also passes the confirmation trials
    rng = random.Random(seed)
    for step in sorted((s for s in planner.history if s.ok), key=lambda s: -s.reward):
        cand = sources[step.index]
        bad = ev.confirm(cand, budget.test_trials, rng)
        if bad is not None:
            step.reward = 0.0
            trail.write("confirm_failed", {"trial": step.index, "outcome": bad.to_json()})
            notes.append(f"trial {step.index} failed its confirmation: {bad.message}")
            continue
        return _finish(sig, problem, op, ev, planner, step, cand, reward, peer, trail, experience, root, key,
                       write_cache, origin, notes, t_start)
    trail.write("failed", {"notes": notes})
    raise SynthesisError(f"no verified, correct kernel for {sig.short()} in {len(planner.history)} trial(s)",
                         trail.path, [s.to_json() for s in planner.history])


def arch_of(device: str) -> str:
    import torch

    from ..runtime.signature import device_arch

    return device_arch(torch.device(device))


def _trial(ctx: PlanningContext, ev: Evaluator, planner: Planner, policy: str, prop: Proposal, index: int,
           sources: dict[int, Candidate]) -> Step:
    parent = planner.history[prop.parent].reward if prop.parent is not None else None
    common = dict(repair_of=prop.repair_of, move=prop.move, rationale=prop.rationale, parent_reward=parent)
    if prop.rejection is not None or prop.plan is None:
        why = prop.rejection or "no plan"
        return Step(index, policy, "llm" if policy == "llm" else "template", None, None, 0.0,
                    f"status: rejected\n{why}", source=None, **common)
    cand = prop.candidate
    if cand is None:
        try:
            cand = synthesizer.from_template(ctx.spec, ctx.problem, prop.plan)
        except (ValueError, KeyError) as e:
            out = Outcome("invalid_plan", str(e))
            return Step(index, policy, "template", prop.plan, out, 0.0, out.feedback(), **common)
    variant = ctx.space.variant_of(cand.plan)  # LLM kernels keep the contract's names: the same rules apply
    why = rules.reject_reason(ctx.space.context(variant), cand.plan) if variant else None
    out = Outcome("invalid_plan", why) if why else ev.evaluate(cand)
    sources[index] = cand
    src = cand.source if cand.origin == "llm" else None
    return Step(index, policy, cand.origin, cand.plan, out, planner.reward(out), out.feedback(), source=src, **common)


def _finish(sig: Signature, problem: Problem, op: Any, ev: Evaluator, planner: Planner, step: Step, cand: Candidate,
            reward: Reward, peer: tuple[str, float] | None, trail: store.Trail, experience: ExperienceStore,
            root: Path, key: str, write_cache: bool, origin: str, notes: list[str], t_start: float) -> SynthesisResult:
    out = step.outcome
    assert out is not None and step.plan is not None
    pols = op.policies(problem, cand.plan, cand.kernels)
    base = planner.history[0].outcome
    timings: dict[str, Any] = {
        "ms": out.ms, "method": out.method, "reward": step.reward, "reward_source": reward.source,
        "default_ms": base.ms if base is not None and base.ok else None,
        "peer": peer[0] if peer else None, "peer_ms": peer[1] if peer else None,
        "speed_vs_peer": (peer[1] / out.ms) if peer and out.ms else None,
        "trials": len(planner.history), "seconds": round(time.perf_counter() - t_start, 2), "winner_trial": step.index,
        "plan": cand.plan.to_json(), "policy": step.policy, "candidate": cand.origin,
    }
    if timings["default_ms"] and out.ms:
        timings["speed_vs_default"] = timings["default_ms"] / out.ms
    result = SynthesisResult(sig, problem, cand.kernels, pols, cand.plan, cand.source, out.triton_source,
                             out.verification, timings, cand.origin, step.policy,
                             [s.to_json() for s in planner.history], trail.path, notes)
    if write_cache:
        store.open_cache(root).put(key, result.cache_entry(origin))
    ranked = sorted((s for s in planner.history if s.ok and s.plan is not None and s.origin == "template"),
                    key=lambda s: -s.reward)
    plans = [(s.plan, s.reward) for s in ranked[:3] if s.plan is not None]
    if cand.origin == "template" and all(p.key() != cand.plan.key() for p, _ in plans):
        plans.insert(0, (cand.plan, step.reward))
    if plans:
        experience.add(sig, plans, reward.source, {"op": problem.op, "dims": problem.dims})
    trail.write("result", {"winner": step.index, "timings": timings, "notes": notes})
    return result
