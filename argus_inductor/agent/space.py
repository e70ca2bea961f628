"""The search space of one problem: for each kernel variant, each kernel's knobs and their candidate values
(from the applicable knowledge-base entries, pruned by the rules), with the entries' preferred values as
priors."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .. import ops
from ..kernels.policies import rescaled_steps
from ..specs import OpSpec, Problem, plan_from_policy, signature_for, templates
from ..specs.base import kernel_knobs
from ..specs.plan import Plan
from . import kb, rules
from .hardware import Hardware

Space = rules.Space


def template_plan(op: OpSpec, problem: Problem, target: str) -> Plan:
    """The plan a search starts from: the policy argus_inductor.ops runs for this problem's signature on a cache
    miss (its template: the same tiles and lowering, the Gluon one included), with the op's techniques. A warmed
    entry is then never a plan the backend would have beaten without one. The op's own default plan where the
    backend has no template for the problem (an op or epilogue only the agent knows)."""
    own = op.default_plan(problem, target)
    try:
        sig = signature_for(problem, "cpu")
        backend = plan_from_policy(problem, ops.spec_for(sig).template(sig, target))
    except (KeyError, TypeError, ValueError, StopIteration):
        return own
    if set(backend.knobs) != set(own.knobs):  # another variant than the op's own rule (split-K or not)
        return Plan(backend.knobs, note=own.note)
    return replace(own, knobs={k: backend.knobs[k] or own.knobs[k] for k in own.knobs})


def _sorted(values: list[Any]) -> list[Any]:
    if all(isinstance(v, bool) for v in values):
        return sorted(set(values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sorted(set(values))
    return list(dict.fromkeys(values))


@dataclass
class SearchSpace:
    spec: OpSpec
    problem: Problem
    hardware: Hardware
    target: str
    regime: str
    entries: list[kb.Entry]                       # the applicable knowledge-base entries
    variants: dict[str, Space]                    # variant -> kernel -> knob -> values
    priors: dict[str, dict[str, dict[str, Any]]]  # variant -> kernel -> knob -> preferred value
    default: Plan

    def context(self, variant: str) -> rules.Context:
        return rules.Context(self.spec, self.problem, self.hardware, self.target,
                             self.spec.variants(self.problem)[variant])

    def variant_of(self, plan: Plan) -> str | None:
        for name, sp in self.variants.items():
            if set(sp) == set(plan.knobs):
                return name
        return None

    def complete(self, plan: Plan) -> Plan:
        """Fill the knobs a plan leaves out: the default plan's values, else the priors."""
        variant = self.variant_of(plan)
        if variant is None:
            return plan
        knobs: dict[str, dict[str, Any]] = {}
        for kname, sp in self.variants[variant].items():
            base = dict(self.default.knobs.get(kname, {}))
            for knob in sp:
                base.setdefault(knob, self.priors[variant][kname].get(knob, sp[knob][0]))
            mine = plan.knobs.get(kname, {})
            if "BK" in mine and "KSTEPS" not in mine:  # the default's static K steps, rescaled to the plan's step
                base = rescaled_steps(base, mine["BK"])
            base.update(mine)
            knobs[kname] = base
        return Plan(knobs, tuple(dict.fromkeys(plan.techniques + self.techniques_of(Plan(knobs)))), plan.note)

    def prior_plan(self, variant: str | None = None) -> Plan:
        variant = variant or next(iter(self.variants))
        plan = Plan({k: dict(v) for k, v in self.priors[variant].items()}, note=f"knowledge-base priors ({variant})")
        return self.complete(plan)

    def snap(self, plan: Plan) -> Plan:
        """Move each knob to the nearest value the space allows (for plans borrowed from other signatures)."""
        variant = self.variant_of(plan)
        if variant is None:
            return plan
        out = plan
        for kname, sp in self.variants[variant].items():
            for knob, values in sp.items():
                v = plan.get(kname, knob)
                if v is None or v in values:
                    continue
                if isinstance(v, (int, float)) and all(isinstance(x, (int, float)) for x in values):
                    out = out.with_knob(kname, knob, min(values, key=lambda x: abs(x - v)))
                else:
                    out = out.with_knob(kname, knob, values[0])
        return out

    def techniques_of(self, plan: Plan) -> tuple[str, ...]:
        """The applicable entries the plan's templates implement, and those whose knobs it sets away from the
        template default."""
        ids = {e.id for e in self.entries}
        out = [t for k in plan.knobs if k in templates.TEMPLATES for t in templates.TEMPLATES[k].techniques
               if t in ids]
        for e in self.entries:
            for kname, kv in plan.knobs.items():
                if any(k.name in kv and kv[k.name] != self.default.get(kname, k.name, object()) for k in e.knobs):
                    out.append(e.id)
                    break
        return tuple(dict.fromkeys(out))

    def size(self) -> int:
        n = 0
        for sp in self.variants.values():
            m = 1
            for knobs in sp.values():
                for values in knobs.values():
                    m *= len(values)
            n += m
        return n


def build(spec: OpSpec, problem: Problem, hardware: Hardware, target: str) -> SearchSpace:
    regime = spec.regime(problem)
    entries = kb.applicable(problem.op, regime, hardware.family, problem.dtype)
    default = template_plan(spec, problem, target)
    variants: dict[str, Space] = {}
    priors: dict[str, dict[str, dict[str, Any]]] = {}
    for vname, kernels in spec.variants(problem).items():
        space: Space = {}
        prior: dict[str, dict[str, Any]] = {}
        for kname, k in kernels.items():
            if kname in spec.aux:
                space[kname], prior[kname] = {}, {}
                continue
            fixed = set(spec.fixed_consts(problem, kname, default))
            allowed = kernel_knobs(k) - fixed
            knobs: dict[str, list[Any]] = {}
            pref: dict[str, tuple[int, Any]] = {}
            for e in entries:
                # an entry for this regime (or only this hardware) outranks a general one
                specific = (0 if "any" in e.regimes else 1) + (1 if len(e.hardware) == 1 else 0)
                for knob in e.knobs:
                    if knob.name not in allowed:
                        continue
                    knobs.setdefault(knob.name, []).extend(knob.values)
                    p = knob.preferred(regime)
                    if p is not None and (knob.name not in pref or specific > pref[knob.name][0]):
                        pref[knob.name] = (specific, p)
            for knob, v in default.knobs.get(kname, {}).items():
                if knob in knobs and v not in knobs[knob]:
                    knobs[knob].append(v)
            space[kname] = {kn: _sorted(vals) for kn, vals in knobs.items()}
            prior[kname] = {kn: p for kn, (_, p) in pref.items()}
        if vname != next(iter(spec.variants(problem))) and not any(
                kn in sp for sp in space.values() for kn in _variant_knobs(kernels)):
            continue  # no applicable entry asks for this variant
        ctx = rules.Context(spec, problem, hardware, target, kernels)
        for r in rules.space_rules():
            r.fn(ctx, space)
        if any(not values for sp in space.values() for values in sp.values()):
            continue  # a rule left a knob without any value: this variant does not fit the problem
        for kname, sp in space.items():
            prior[kname] = {kn: (v if v in sp.get(kn, [v]) else _nearest(sp[kn], v)) for kn, v in prior[kname].items()
                            if kn in sp}
        variants[vname] = space
        priors[vname] = prior
    return SearchSpace(spec, problem, hardware, target, regime, entries, variants, priors, default)


def _variant_knobs(kernels: dict[str, Any]) -> set[str]:
    """Constexprs that only a variant's kernels declare (e.g. SPLIT_K): the entry naming one opens the variant."""
    names: set[str] = set()
    for k in kernels.values():
        names |= {p.name for p in k.ir.constexprs}
    return names - {"BM", "BN", "BK", "BR", "BC", "BD", "BG", "HAS_BIAS", "ACT", "CAUSAL", "TOPK"}


def _nearest(values: list[Any], v: Any) -> Any:
    if isinstance(v, (int, float)) and all(isinstance(x, (int, float)) for x in values):
        return min(values, key=lambda x: abs(x - v))
    return values[0]
