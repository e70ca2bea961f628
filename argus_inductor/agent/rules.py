"""Rules: the knowledge base's entries turned into code that shapes the search space and prunes plans.

Every rule names the entry it implements (tests/agent/test_kb.py checks both directions: each
`rule:<id>` an entry claims exists here, and each rule's entry exists).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..dsl import Kernel
from ..specs import OpSpec, Problem, next_pow2
from ..specs.plan import Plan
from .hardware import Hardware

TILE_KNOBS = ("BM", "BN", "BK", "BR", "BC")
Space = dict[str, dict[str, list[Any]]]


@dataclass(frozen=True)
class Context:
    """What a rule may look at."""

    spec: OpSpec
    problem: Problem
    hardware: Hardware
    target: str
    kernels: dict[str, Kernel]


@dataclass(frozen=True)
class Rule:
    id: str
    entry: str                                  # the knowledge-base entry it implements
    kind: str                                   # "space" (edits value lists) or "plan" (accepts/rejects a plan)
    fn: Callable[..., Any]
    doc: str


RULES: dict[str, Rule] = {}


def rule(rule_id: str, entry: str, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        RULES[rule_id] = Rule(rule_id, entry, kind, fn, (fn.__doc__ or "").strip())
        return fn
    return deco


# ---- space rules: (ctx, space) -> None, editing the value lists in place (an emptied list drops the variant) --

@rule("tile-fits-problem", "ragged-edge-masking", "space")
def _tile_fits(ctx: Context, space: Space) -> None:
    """A tile larger than the (power-of-two rounded) dim it tiles only computes masked-off lanes."""
    for kname, knobs in space.items():
        for knob, dim in ctx.spec.tile_dims.get(kname, {}).items():
            if knob in knobs and dim in ctx.problem.dims:
                cap = next_pow2(ctx.problem.dims[dim], 16)
                knobs[knob] = [v for v in knobs[knob] if v <= cap] or [min(knobs[knob])]


@rule("interpreter-small-tiles", "tile-shape", "space")
def _interpreter(ctx: Context, space: Space) -> None:
    """Under the interpreter timings say nothing about the GPU: keep tiles small and launch knobs fixed so each
    trial is quick, while still exercising the program mappings (grid order, persistence) the checker proves."""
    if ctx.target != "interpret":
        return
    for knobs in space.values():
        for knob in TILE_KNOBS:
            if knob in knobs:
                small = [v for v in knobs[knob] if v <= 32]
                knobs[knob] = small or [min(knobs[knob])]
        for knob, keep in (("num_warps", 4), ("num_stages", 3), ("programs_per_sm", 1), ("group_m", 2)):
            if knob in knobs:
                knobs[knob] = [keep]


@rule("mma-minimum", "tile-shape", "space")
def _mma_min(ctx: Context, space: Space) -> None:
    """mma operands need every extent >= 16 (tensor-core minimum)."""
    for knobs in space.values():
        for knob in ("BM", "BN", "BK"):
            if knob in knobs:
                knobs[knob] = [v for v in knobs[knob] if v >= 16] or [16]


@rule("fp32-input-precision", "fp32-accumulation", "space")
def _precision(ctx: Context, space: Space) -> None:
    """input_precision only changes anything for float32 inputs; elsewhere it stays at its default."""
    for knobs in space.values():
        if "input_precision" in knobs and (ctx.problem.dtype != "float32" or ctx.target == "interpret"):
            knobs["input_precision"] = ["tf32"]


@rule("moe-block-m", "moe-token-sorting", "space")
def _moe_bm(ctx: Context, space: Space) -> None:
    """Padding each expert's rows to BM wastes up to BM-1 rows per expert: BM no larger than the expected
    rows per expert (rounded up to a power of two, at least 16)."""
    if ctx.problem.op != "moe":
        return
    d = ctx.problem.dims
    per_expert = max(1, d["T"] * d["TOPK"] // d["E"])
    cap = next_pow2(per_expert, 16)
    knobs = space.get("moe_gate_up", {})
    if "BM" in knobs:
        knobs["BM"] = [v for v in knobs["BM"] if v <= cap] or [16]


@rule("split-k-slices", "split-k", "space")
def _split_k(ctx: Context, space: Space) -> None:
    """Split K only as far as each slice keeps at least two BK blocks (none left: the variant is dropped)."""
    knobs = space.get("gemm_splitk")
    if not knobs or "SPLIT_K" not in knobs:
        return
    k = ctx.problem.dims.get("K", 1)
    bk_min = min(knobs.get("BK", [16]))
    knobs["SPLIT_K"] = [s for s in knobs["SPLIT_K"] if s > 1 and k // s >= 2 * bk_min]


# ---- plan rules: (ctx, plan) -> str | None (why the plan is rejected before it is tried) --------------

def _bytes(ctx: Context) -> int:
    return 4 if ctx.problem.dtype == "float32" else 2


@rule("smem-budget", "shared-memory-staging", "plan")
def _smem(ctx: Context, plan: Plan) -> str | None:
    """num_stages copies of the A and B tiles must fit the shared memory one program may use."""
    if ctx.target == "interpret":
        return None
    for kname, kv in plan.knobs.items():
        bm, bn, bk = kv.get("BM", ctx.spec.fixed_consts(ctx.problem, kname, plan).get("BM", 16)), kv.get("BN"), \
            kv.get("BK")
        if bn is None or bk is None:
            continue
        # Triton's pipeliner allocates num_stages buffers for wgmma-sized tiles (BM >= 64) and num_stages - 1 for
        # the small-M mma path (measured on H100: BM=128,BN=256,BK=128,s3 needs 288 KiB; BM=16,BN=32,BK=512,s5 fits)
        stages = max(1, int(kv.get("num_stages", 3)) - (0 if bm >= 64 else 1))
        need = stages * (bm * bk + bk * bn) * _bytes(ctx)
        if need > ctx.hardware.smem_bytes:
            return (f"{kname}: {stages} staged copies of a {bm}x{bk} and a {bk}x{bn} tile need {need // 1024} KiB of "
                    f"shared memory, more than {ctx.hardware.smem_bytes // 1024} KiB")
    return None


@rule("register-budget", "warp-count", "plan")
def _registers(ctx: Context, plan: Plan) -> str | None:
    """The float32 accumulator tile spread over the program's threads must fit the register file
    (about 256 registers a thread, half of them for the accumulator)."""
    if ctx.target == "interpret":
        return None
    for kname, kv in plan.knobs.items():
        bm = kv.get("BM", ctx.spec.fixed_consts(ctx.problem, kname, plan).get("BM"))
        bn = kv.get("BN")
        if bm is None or bn is None:
            continue
        threads = ctx.hardware.warp_size * int(kv.get("num_warps", 4))
        acc = (2 if kname in ("moe_gate_up", "gemm_gate_up") else 1) * bm * bn
        if acc / threads > 128:
            return (f"{kname}: a {bm}x{bn} float32 accumulator over {threads} threads needs {acc // threads} "
                    "registers each")
    return None


@rule("grid-order-needs-tiles", "grouped-grid-order", "plan")
def _grouped(ctx: Context, plan: Plan) -> str | None:
    """A grouped order only helps when there are several row bands; group_m is irrelevant otherwise."""
    for kv in plan.knobs.values():
        if kv.get("grid_order") == "grouped" and kv.get("group_m", 8) < 1:
            return "group_m must be >= 1"
    return None


@rule("persistent-programs", "persistent-kernel", "plan")
def _persistent(ctx: Context, plan: Plan) -> str | None:
    """programs_per_sm only means something for a persistent launch."""
    for kv in plan.knobs.values():
        if not kv.get("persistent", False) and int(kv.get("programs_per_sm", 1)) != 1:
            return "programs_per_sm > 1 needs persistent=True"
    return None


def space_rules() -> list[Rule]:
    return [r for r in RULES.values() if r.kind == "space"]


def plan_rules() -> list[Rule]:
    return [r for r in RULES.values() if r.kind == "plan"]


def reject_reason(ctx: Context, plan: Plan) -> str | None:
    """Why a plan is known to fail before trying it (None: try it)."""
    for r in plan_rules():
        why = r.fn(ctx, plan)
        if why:
            return f"{why} (rule {r.id}, kb {r.entry})"
    return None
