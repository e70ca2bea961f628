"""Turns a proposal into a candidate kernel.

Offline: the plan picks a template variant of the kernel library (or kb/templates/), instantiated with the
plan's knobs. LLM: the reply's DSL source is read by the DSL frontend only (kernels_from_source parses it and
never executes it; an import of anything but argus_inductor.dsl, any other top-level statement, a function not
decorated with the DSL's @kernel alone, and text past the bounds of dsl/limits.py are rejected with a message the
next prompt carries, so such text never becomes a candidate, nor the cache's dsl_source). The kernels must keep the
template's parameter lists (the contract the host code launches them with)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..dsl import DSLError, Kernel, kernels_from_source
from ..specs import OpSpec, Problem, templates
from ..specs.base import runtime_params
from ..specs.plan import Plan
from .evaluate import Candidate


@dataclass
class Rejection:
    """A reply that never became a candidate, and why (fed back to the model)."""

    reason: str


_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def extract(reply: str) -> tuple[str | None, dict | None]:
    """(DSL source, plan JSON) from a reply: the first python (or unlabelled) fenced block that defines a
    function, and the first json block."""
    code = plan = None
    for lang, body in _FENCE.findall(reply or ""):
        lang = lang.lower()
        if plan is None and lang == "json":
            try:
                v = json.loads(body)
                plan = v if isinstance(v, dict) else None
            except ValueError:
                plan = None
        elif code is None and lang in ("", "python", "py") and re.search(r"^\s*(@\w+\s*)?def\s", body, re.M):
            code = body
    return code, plan


def from_template(spec: OpSpec, problem: Problem, plan: Plan) -> Candidate:
    variant = spec.variant_of(problem, plan)
    kernels = dict(spec.variants(problem)[variant])
    return Candidate(plan, kernels, templates.dsl_source(kernels), "template")


def check_contract(spec: OpSpec, problem: Problem, found: dict[str, Kernel]) -> dict[str, Kernel] | Rejection:
    """The reply's kernels by contract name; kernels it leaves out come from the template."""
    contract = spec.contract(problem)
    unknown = sorted(set(found) - set(contract))
    if unknown and not set(found) & set(contract):
        return Rejection(f"the reply defines {', '.join(unknown)}, but the kernel(s) must be named "
                         f"{', '.join(contract)} with the parameter lists given")
    out: dict[str, Kernel] = {}
    for name, tmpl in contract.items():
        k = found.get(name)
        if k is None:
            out[name] = tmpl
            continue
        want, got = runtime_params(tmpl), runtime_params(k)
        if want != got:
            return Rejection(f"kernel {name} must take the runtime parameters "
                             f"{', '.join(n + (f' (rank {r})' if r >= 0 else ' (scalar)') for n, r in want)} in this "
                             f"order; the reply has {', '.join(n for n, _ in got) or 'none'}")
        out[name] = k
    return out


def from_reply(spec: OpSpec, problem: Problem, reply: str, fallback_plan: Plan) -> Candidate | Rejection:
    """A candidate from an LLM reply, or why the reply cannot be one."""
    if not reply or not reply.strip():
        return Rejection("the reply was empty")
    code, plan_json = extract(reply)
    if code is None:
        return Rejection("the reply holds no DSL kernel: put the whole kernel module in one ```python fenced block "
                         "(imports from argus_inductor.dsl and @kernel functions only)")
    try:
        found = kernels_from_source(code, "<llm reply>")
    except DSLError as e:
        return Rejection(f"the DSL frontend rejected the kernel source: {e}")
    except (SyntaxError, RecursionError, ValueError) as e:
        return Rejection(f"the kernel source could not be read: {e}")
    kernels = check_contract(spec, problem, found)
    if isinstance(kernels, Rejection):
        return kernels
    plan = fallback_plan
    if plan_json is not None:
        try:
            plan = Plan.from_json(plan_json, tuple(kernels))
        except ValueError as e:
            return Rejection(f"the plan JSON is not valid: {e}")
        plan = Plan({k: {**fallback_plan.knobs.get(k, {}), **plan.knobs.get(k, {})} for k in kernels},
                    plan.techniques, plan.note)
    else:
        plan = Plan({k: dict(fallback_plan.knobs.get(k, {})) for k in kernels}, fallback_plan.techniques,
                    "the reply gave no plan JSON: the previous plan's knobs")
    # knobs the new kernels do not declare are dropped only if they are constexprs of the template that the
    # reply removed (e.g. a kernel specialised for no bias); unknown knobs stay and fail with a message
    cleaned = {}
    for k, kv in plan.knobs.items():
        declared = {p.name for p in kernels[k].ir.constexprs}
        tmpl = {p.name for p in spec.contract(problem)[k].ir.constexprs}
        cleaned[k] = {n: v for n, v in kv.items() if n in declared or n not in tmpl}
    plan = Plan(cleaned, plan.techniques, plan.note)
    source = code if all(found.get(k) is kernels[k] for k in kernels) else \
        code + "\n" + templates.dsl_source({k: v for k, v in kernels.items() if found.get(k) is not v})
    return Candidate(plan, kernels, source, "llm")
