"""The LLM policy's prompt: the op's semantics and reference code, the signature, the hardware, the kernel
contract and template, the search space, the knowledge-base entries that apply, and the history of
(plan, outcome, counterexample, reward)."""
from __future__ import annotations

import json

from ..dsl import lang
from ..dsl.limits import MAX_UNROLL
from ..specs import templates
from ..specs.base import signature_text
from .planner import PlanningContext, Step

MAX_HISTORY = 12

SYSTEM = """You write GPU kernels in the Argus tile DSL, a small Python-syntax language that is parsed (never \
executed) into an IR, checked by an invariant prover, and lowered to Triton.

Reply with exactly two fenced blocks:
1. ```python: the kernel module. Only `from argus_inductor.dsl import *` and functions decorated with exactly \
`@kernel`; no other imports, statements, decorators or helper functions, no aliases (anything else is rejected). \
Static loops (static_range, unrolled_range) unroll at most {max_unroll} loop bodies in all: write longer loops with \
range(...).
2. ```json: the plan, {"techniques": [knowledge-base ids], "knobs": {"<kernel name>": {"<knob>": value, ...}}}. \
Knobs are the kernel's constexpr parameters and the launch fields num_warps, num_stages, grid_order \
("row"|"grouped"), group_m, persistent, programs_per_sm.

Keep each kernel's name and runtime parameter list exactly as the contract gives them. Tile extents are powers of \
two, mma operands at least 16 in every dimension; ragged edges are masked automatically. When the last attempt \
failed, its counterexample names the program, loop iteration, thread and element where an invariant breaks: fix \
that cause. A kernel that fails verification or the correctness test earns reward 0.

DSL operations:
{ops}"""


def dsl_reference() -> str:
    return "\n".join(f"- {getattr(fn, '__doc__', '') or name}" for name, fn in sorted(lang.BUILTINS.items()))


def system_prompt() -> str:
    return SYSTEM.replace("{ops}", dsl_reference()).replace("{max_unroll}", f"{MAX_UNROLL:,}")


def _history(history: list[Step]) -> str:
    if not history:
        return "No trials yet."
    rows = ["| trial | by | plan | status | reward |", "| --- | --- | --- | --- | --- |"]
    for s in history[-MAX_HISTORY:]:
        plan = s.plan.describe() if s.plan else "-"
        rows.append(f"| {s.index} | {s.policy}/{s.origin} | {plan} | {s.status} | {s.reward:.3f} |")
    out = ["\n".join(rows)]
    best = max((s for s in history if s.ok), key=lambda s: s.reward, default=None)
    if best is not None:
        plan = best.plan.describe() if best.plan else ""
        out.append(f"Best so far: trial {best.index}, reward {best.reward:.3f}, plan {plan}")
    last = history[-1]
    if not last.ok:
        out.append(f"## Last attempt (trial {last.index}) failed\n{last.feedback}")
        if last.source:
            out.append(f"Its source:\n```python\n{last.source}\n```")
    return "\n\n".join(out)


def user_prompt(ctx: PlanningContext, history: list[Step], reward_source: str) -> str:
    spec, prob, sp = ctx.spec, ctx.problem, ctx.space
    contract = spec.contract(prob)
    parts = [
        f"# Op: {spec.name}\n{spec.semantics}",
        f"## Reference (PyTorch)\n```python\n{spec.reference_source().strip()}\n```",
        f"## Signature\n{ctx.signature.short() if ctx.signature else prob.short()}; regime: {sp.regime}; "
        f"dims: {json.dumps(prob.dims)}; dtype {prob.dtype}; layouts {list(prob.layouts) or 'row-major'}",
        f"## Hardware\n{ctx.hardware.describe()}; target {ctx.target}. Reward: {reward_source}.",
        "## Contract\n" + "\n".join(signature_text(k) for k in contract.values()),
        f"## Template (correct, verified; improve on it)\n```python\n{templates.dsl_source(contract).strip()}\n```",
        "## Search space\n" + json.dumps(sp.variants.get(next(iter(sp.variants)), {}), default=str) +
        f"\nTemplate default plan: {sp.default.describe()}",
        "## Techniques that apply (knowledge base)\n" + "\n\n".join(e.render(sp.regime) for e in sp.entries),
        "## History\n" + _history(history),
        "## Task\nPropose the next kernel and plan to raise the reward. Reply with the ```python and ```json blocks.",
    ]
    return "\n\n".join(parts)


def messages(ctx: PlanningContext, history: list[Step], reward_source: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt()},
            {"role": "user", "content": user_prompt(ctx, history, reward_source)}]
