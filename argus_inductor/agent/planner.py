"""In-context reinforcement learning over plans for one signature.

A policy proposes a plan (and, for the LLM policy, the kernel source); the loop evaluates it; the reward
comes back; the next proposal is conditioned on the whole history of (plan, outcome, counterexample,
reward). Two policies share one interface (PlanPolicy): the LLM policy (llm_policy.py) and the offline
policy (offline.py, a bandit over local moves with knowledge-base priors). When the LLM policy becomes
unavailable (endpoint down, replies unusable) the planner falls back to the offline policy for the rest of
the budget.

Reward (explicit, recorded with every trial):
    "peer"              on a GPU: peer_ms / ms, speed relative to the fastest vendor implementation
    "template-default"  under the interpreter (timings mean nothing for a GPU) or where no peer runs:
                        default_ms / ms, relative to the template default plan of the same signature
    0                   for a kernel that fails verification, lowering, launch or the correctness test
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..runtime.signature import Signature
from ..specs import OpSpec, Problem
from ..specs.plan import Plan
from .evaluate import Candidate, Outcome
from .hardware import Hardware
from .space import SearchSpace


class PolicyUnavailable(Exception):
    """A policy cannot propose any more (e.g. the LLM endpoint is down): the planner falls back."""


@dataclass
class PlanningContext:
    signature: Signature | None
    spec: OpSpec
    problem: Problem
    space: SearchSpace
    hardware: Hardware
    target: str
    warm: list[tuple[Plan, float]] = field(default_factory=list)  # plans of the nearest solved signatures, distance
    repair_rounds: int = 3
    deadline: float | None = None   # time.monotonic() when the search's budget ends: no request may run past it


@dataclass
class Proposal:
    plan: Plan | None
    candidate: Candidate | None = None     # set by the LLM policy (its kernels); None: instantiate the template
    rejection: str | None = None           # the reply could not become a candidate (why)
    repair_of: int | None = None           # index of the failed step this tries to fix
    move: tuple[str, str, int] | None = None  # (kernel, knob, direction) for a local-search step
    parent: int | None = None              # the step a local move starts from
    rationale: str = ""
    reply: str | None = None


@dataclass
class Step:
    index: int
    policy: str                     # which policy proposed it (baseline, offline, llm)
    origin: str                     # template | llm
    plan: Plan | None
    outcome: Outcome | None
    reward: float
    feedback: str                   # what the next proposal is told about this one
    source: str | None = None       # the DSL source (LLM candidates)
    repair_of: int | None = None
    move: tuple[str, str, int] | None = None
    rationale: str = ""
    parent_reward: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not None and self.outcome.ok and self.reward > 0

    @property
    def status(self) -> str:
        if self.outcome is None:
            return "rejected"
        return self.outcome.status if self.reward > 0 or not self.outcome.ok else "no-reward"

    def to_json(self) -> dict[str, Any]:
        return {"trial": self.index, "policy": self.policy, "origin": self.origin,
                "plan": self.plan.to_json() if self.plan else None,
                "outcome": self.outcome.to_json() if self.outcome else {"status": "rejected"},
                "reward": self.reward, "feedback": self.feedback, "repair_of": self.repair_of,
                "move": list(self.move) if self.move else None, "rationale": self.rationale,
                "source": self.source}


class PlanPolicy(Protocol):
    name: str

    def propose(self, ctx: PlanningContext, history: list[Step]) -> Proposal | None:
        """The next plan, or None when it has nothing left to try."""
        ...


@dataclass
class Reward:
    source: str                     # "peer:<name>" or "template-default"
    reference_ms: float | None = None

    def __call__(self, outcome: Outcome | None) -> float:
        if outcome is None or not outcome.ok or outcome.ms is None or not outcome.ms > 0:
            return 0.0
        if self.reference_ms is None or not math.isfinite(self.reference_ms):
            return 1.0
        return self.reference_ms / outcome.ms


class Planner:
    """Holds the history and the policies; asks the first available policy for the next proposal."""

    def __init__(self, ctx: PlanningContext, policies: list[PlanPolicy], reward: Reward) -> None:
        if not policies:
            raise ValueError("the planner needs at least one policy")
        self.ctx = ctx
        self.policies = list(policies)
        self.reward = reward
        self.history: list[Step] = []
        self.notes: list[str] = []

    @property
    def active(self) -> PlanPolicy:
        return self.policies[0]

    def propose(self) -> tuple[PlanPolicy, Proposal] | None:
        while self.policies:
            pol = self.policies[0]
            try:
                prop = pol.propose(self.ctx, self.history)
            except PolicyUnavailable as e:
                self.notes.append(f"{pol.name} policy unavailable ({e}); falling back")
                self.policies.pop(0)
                continue
            if prop is None:
                if len(self.policies) > 1 and pol.name == "llm":
                    self.notes.append("llm policy has nothing more to propose; continuing offline")
                    self.policies.pop(0)
                    continue
                return None
            return pol, prop
        return None

    def best(self) -> Step | None:
        ok = [s for s in self.history if s.ok]
        return max(ok, key=lambda s: s.reward) if ok else None

    def record(self, step: Step) -> None:
        self.history.append(step)

    def rescore(self, reward: Reward) -> None:
        """Recompute every reward against a new reference (e.g. once the template default is timed)."""
        self.reward = reward
        for s in self.history:
            if s.outcome is not None and s.outcome.ok:
                s.reward = reward(s.outcome)
