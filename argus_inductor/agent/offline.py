"""The offline policy: used when no LLM endpoint is configured.

Order of proposals:
  1. repair: the last trial failed -> match its outcome text (violation kind, counterexample, launch error)
     against the failure modes of the applicable knowledge-base entries and apply the matching fix to the plan
     (up to `repair_rounds` in a row);
  2. seeds: the plans of the nearest solved signatures (warm start, snapped into this space), then the
     knowledge-base prior plan of each variant;
  3. local search around the best plans so far: a bandit over moves (kernel, knob, direction) scored by the
     gains such moves brought earlier in this history, a bonus for moving onto a knowledge-base preferred
     value, and an exploration term;
  4. random plans drawn with knowledge-base priors, then nothing.
Plans a rule rejects up front (shared memory, registers, ...) are skipped without a trial.
"""
from __future__ import annotations

import math
import random
from typing import Any

from ..specs.plan import Plan
from . import rules
from .kb import Entry
from .planner import PlanningContext, Proposal, Step


def _step_along(values: list[Any], v: Any, direction: int) -> Any | None:
    if v not in values:
        return None
    i = values.index(v) + direction
    return values[i] if 0 <= i < len(values) else None


def apply_action(ctx: PlanningContext, plan: Plan, action: dict[str, Any]) -> Plan | None:
    """A failure mode's fix applied to a plan (None: it changes nothing here)."""
    variant = ctx.space.variant_of(plan)
    if variant is None:
        return None
    space = ctx.space.variants[variant]
    out = plan
    for verb, arg in action.items():
        for kname, knobs in space.items():
            if verb == "set":
                for knob, value in dict(arg).items():
                    if knob in knobs or knob in plan.knobs.get(kname, {}):
                        out = out.with_knob(kname, knob, value)
                continue
            for knob in (arg if isinstance(arg, list) else [arg]):
                if knob not in knobs:
                    continue
                cur = out.get(kname, knob)
                values = knobs[knob]
                if verb in ("decrement", "increment"):
                    new = _step_along(values, cur, -1 if verb == "decrement" else 1)
                elif isinstance(cur, (int, float)):
                    target = cur / 2 if verb == "halve" else cur * 2
                    fit = [x for x in values if (x <= target if verb == "halve" else x >= target)]
                    new = (max(fit) if verb == "halve" else min(fit)) if fit else None
                else:
                    new = None
                if new is not None:
                    out = out.with_knob(kname, knob, new)
    return None if out.key() == plan.key() else out


class OfflinePolicy:
    name = "offline"

    def __init__(self, seed: int | None = None, exploration: float = 0.35, prior_bonus: float = 0.08) -> None:
        self.rng = random.Random(seed)
        self.exploration = exploration
        self.prior_bonus = prior_bonus
        self.skipped: list[tuple[str, str]] = []   # (plan, why) rejected by rules without a trial

    # ---- helpers ----------------------------------------------------------------------------------
    def _fresh(self, ctx: PlanningContext, plan: Plan, tried: set[str]) -> bool:
        plan = ctx.space.complete(plan)
        if plan.key() in tried:
            return False
        variant = ctx.space.variant_of(plan)
        if variant is None:
            return False
        why = rules.reject_reason(ctx.space.context(variant), plan)
        if why:
            self.skipped.append((plan.describe(), why))
            tried.add(plan.key())
            return False
        return True

    @staticmethod
    def _tried(history: list[Step]) -> set[str]:
        return {s.plan.key() for s in history if s.plan is not None}

    # ---- 1. repair ----------------------------------------------------------------------------------
    def repair(self, ctx: PlanningContext, history: list[Step], tried: set[str]) -> Proposal | None:
        last = history[-1] if history else None
        if last is None or last.ok or last.plan is None or last.origin != "template":
            return None
        streak = 0
        for s in reversed(history):
            if s.ok:
                break
            streak += 1
        if streak > ctx.repair_rounds:
            return None
        text = last.feedback
        used = set(last.plan.techniques)
        entries: list[Entry] = sorted(ctx.space.entries, key=lambda e: e.id not in used)
        for e in entries:
            for fm in e.failure_modes:
                if not fm.action or not fm.matches(text):
                    continue
                fixed = apply_action(ctx, last.plan, fm.action)
                if fixed is not None and self._fresh(ctx, fixed, tried):
                    fixed = ctx.space.complete(fixed)
                    return Proposal(Plan(fixed.knobs, fixed.techniques, f"repair: {e.id}/{fm.name}"),
                                    repair_of=last.index, rationale=f"{e.id}: {fm.fix}")
        return None

    # ---- 2. seeds -----------------------------------------------------------------------------------
    def seeds(self, ctx: PlanningContext) -> list[tuple[Plan, str]]:
        out = []
        for plan, dist in ctx.warm:
            snapped = ctx.space.snap(ctx.space.complete(plan))
            out.append((snapped, f"warm start from a solved signature at distance {dist:.2f}"))
        out.append((ctx.space.complete(ctx.space.default), "template default"))
        for v in ctx.space.variants:
            out.append((ctx.space.prior_plan(v), f"knowledge-base priors ({v})"))
        return out

    # ---- 3. local search --------------------------------------------------------------------------
    def move_stats(self, history: list[Step]) -> dict[tuple[str, int], list[float]]:
        stats: dict[tuple[str, int], list[float]] = {}
        for s in history:
            if s.move is None or not s.parent_reward:
                continue
            gain = (s.reward / s.parent_reward - 1.0) if s.reward > 0 else -1.0
            stats.setdefault((s.move[1], s.move[2]), []).append(gain)
        return stats

    def neighbors(self, ctx: PlanningContext, plan: Plan) -> list[tuple[Plan, tuple[str, str, int]]]:
        variant = ctx.space.variant_of(plan)
        if variant is None:
            return []
        out = []
        for kname, knobs in ctx.space.variants[variant].items():
            for knob, values in knobs.items():
                for d in (-1, 1):
                    nv = _step_along(values, plan.get(kname, knob), d)
                    if nv is not None:
                        out.append((plan.with_knob(kname, knob, nv), (kname, knob, d)))
        for other in ctx.space.variants:  # switching variant keeps the knobs both share
            if other == variant:
                continue
            base = ctx.space.prior_plan(other)
            for kname, kv in base.knobs.items():
                for knob in list(kv):
                    for src in plan.knobs.values():
                        if knob in src and src[knob] in ctx.space.variants[other][kname].get(knob, [src[knob]]):
                            base = base.with_knob(kname, knob, src[knob])
            out.append((base, ("*", f"variant:{other}", 1)))
        return out

    def local(self, ctx: PlanningContext, history: list[Step], tried: set[str]) -> Proposal | None:
        ranked = sorted((s for s in history if s.ok), key=lambda s: -s.reward)
        if not ranked:
            return None
        stats = self.move_stats(history)
        total = sum(len(v) for v in stats.values()) + 1
        for inc in ranked[:3]:
            assert inc.plan is not None
            variant = ctx.space.variant_of(inc.plan)
            prior = ctx.space.priors.get(variant or "", {})
            scored = []
            for plan, move in self.neighbors(ctx, inc.plan):
                if not self._fresh(ctx, plan, tried):
                    continue
                gains = stats.get((move[1], move[2]), [])
                mean = sum(gains) / len(gains) if gains else 0.0
                bonus = self.prior_bonus if prior.get(move[0], {}).get(move[1]) == plan.get(move[0], move[1]) else 0.0
                explore = self.exploration * math.sqrt(math.log(total + 1) / (len(gains) + 1))
                scored.append((mean + bonus + explore + self.rng.random() * 1e-3, plan, move))
            if scored:
                _, plan, move = max(scored, key=lambda t: t[0])
                plan = ctx.space.complete(plan)
                return Proposal(Plan(plan.knobs, plan.techniques, f"local move {move[1]} {move[2]:+d}"), move=move,
                                parent=inc.index, rationale=f"neighbor of trial {inc.index} (reward {inc.reward:.3f})")
        return None

    # ---- 4. random ----------------------------------------------------------------------------------
    def sample(self, ctx: PlanningContext, tried: set[str]) -> Proposal | None:
        for _ in range(64):
            variant = self.rng.choice(list(ctx.space.variants))
            plan = ctx.space.prior_plan(variant)
            for kname, knobs in ctx.space.variants[variant].items():
                for knob, values in knobs.items():
                    if self.rng.random() < 0.5:
                        plan = plan.with_knob(kname, knob, self.rng.choice(values))
            if self._fresh(ctx, plan, tried):
                plan = ctx.space.complete(plan)
                return Proposal(Plan(plan.knobs, plan.techniques, "random draw around the priors"),
                                rationale="local search exhausted")
        return None

    def propose(self, ctx: PlanningContext, history: list[Step]) -> Proposal | None:
        tried = self._tried(history)
        prop = self.repair(ctx, history, tried)
        if prop is not None:
            return prop
        for plan, why in self.seeds(ctx):
            if self._fresh(ctx, plan, tried):
                plan = ctx.space.complete(plan)
                return Proposal(Plan(plan.knobs, plan.techniques, why), rationale=why)
        return self.local(ctx, history, tried) or self.sample(ctx, tried)
