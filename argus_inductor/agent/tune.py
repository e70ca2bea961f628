"""Policy search for the general op classes (argus_inductor.ops.library: conv, reductions, norms, pooling,
scans, losses, elementwise chains) on the call's own operands.

The agent's planner searches the GEMM, attention and MoE spaces from the knowledge base. The library
classes have a simpler space: the tile sizes of each kernel (its `B*` constexprs), its warp count and
its pipeline depth. Their kernels are fixed DSL text. So the search is a coordinate descent from the
template policy:
- double or halve one knob at a time, keeping a move when it is at least `gain` faster;
- test every candidate against the torch reference on the same operands (a wrong or failing candidate
  is dropped);
- send the fastest candidate to the invariant checker (ops.make_entry). If the checker rejects it, the
  next fastest is tried; the template is the last resort.
"""
from __future__ import annotations

import copy
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..kernels.policies import rescaled_steps
from ..runtime.checks import agrees, rel_error, tolerance
from ..runtime.timing import time_ms, waited_s

TILE_KNOB = re.compile(r"^B[A-Z0-9]{1,3}$")  # tile constexprs: BO, BR, BI, BM, BN, BK, BL, BC, B2, B3, ...
MAX_TILE = 8192
GROWTH = 4                                 # a kernel's tiles may hold at most this many times the template's elements
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4)


@dataclass
class TuneResult:
    policy: dict[str, dict[str, Any]]          # kernel name -> policy dict (CacheEntry.policy)
    ms: float                                  # its time
    template_ms: float                         # the template policy's time on the same operands
    method: str                                # how both were timed
    tried: list[dict[str, Any]] = field(default_factory=list)  # every candidate: policy, ms or why it was dropped

    @property
    def speedup(self) -> float:
        return self.template_ms / self.ms if self.ms > 0 else 1.0

    def timings(self) -> dict[str, Any]:
        return {"ms": round(self.ms, 5), "template_ms": round(self.template_ms, 5), "method": self.method,
                "candidates": len(self.tried), "speedup_vs_template": round(self.speedup, 3)}


def knobs(policy: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(kernel, knob) pairs the search may move: power-of-two tile constexprs, num_warps, num_stages."""
    out = []
    for name, p in sorted(policy.items()):
        for k, v in sorted(p.items()):
            if TILE_KNOB.match(k) and isinstance(v, int) and not isinstance(v, bool) and v >= 1 and v & (v - 1) == 0:
                out.append((name, k))
        out += [(name, "num_warps"), (name, "num_stages")]
    return out


def moved(policy: dict[str, dict[str, Any]], name: str, knob: str, up: bool) -> dict[str, dict[str, Any]] | None:
    """`policy` with one knob doubled (up) or halved, or None where that leaves the knob's range."""
    v = policy[name].get(knob, 4 if knob == "num_warps" else 3)
    if knob == "num_stages":
        nv = v + 1 if up else v - 1
        ok = nv in STAGES
    elif knob == "num_warps":
        nv = v * 2 if up else v // 2
        ok = nv in WARPS
    else:
        nv = v * 2 if up else v // 2
        ok = 1 <= nv <= MAX_TILE
    if not ok:
        return None
    out = copy.deepcopy(policy)
    out[name] = rescaled_steps(out[name], nv) if knob == "BK" else {**out[name], knob: nv}
    return out


def tile_elements(policy: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per kernel, the product of its tile knobs (how many elements its tiles hold, roughly)."""
    out = {}
    for name in policy:
        out[name] = math.prod(policy[name][k] for n, k in knobs(policy) if n == name and TILE_KNOB.match(k))
    return out


def neighbours(policy: dict[str, dict[str, Any]],
               limit: dict[str, int] | None = None) -> Iterator[dict[str, dict[str, Any]]]:
    """One-knob moves of `policy`, each knob up then down; `limit` caps each kernel's tile elements (a tile
    far larger than the template's spills registers and compiles for long: never the winner)."""
    for name, knob in knobs(policy):
        for up in (True, False):
            cand = moved(policy, name, knob, up)
            if cand is None:
                continue
            if limit is not None and name in limit and tile_elements(cand)[name] > limit[name]:
                continue
            yield cand


def key(policy: dict[str, dict[str, Any]]) -> str:
    return repr(sorted((n, sorted(p.items())) for n, p in policy.items()))


def _poisoned(reference: Any) -> None:
    """Leave a block the size of the output, filled with NaN (or -1 for an integer output), at the top of the
    device allocator's free list, where the next run's torch.empty takes it: a candidate that does not write part
    of its output shows the poison, not the values an earlier run left in that memory (a rotary table tile
    narrower than its rows once passed that way with the template's output still in the block)."""
    if not isinstance(reference, torch.Tensor) or reference.device.type != "cuda":
        return
    block = torch.empty_like(reference)
    block.fill_(float("nan") if block.is_floating_point() else -1)
    del block


def search(template: dict[str, dict[str, Any]], run: Callable[[dict[str, dict[str, Any]]], Any], target: str,
           reference: Any, seconds: float = 20.0, max_candidates: int = 24, gain: float = 0.03) -> TuneResult:
    """Coordinate descent over `template`'s knobs. run(policy) launches the op with that policy and returns its
    output; `reference` is torch's output on the same operands. The template must agree with it (ValueError
    otherwise: a wrong template is not tuned); a candidate may differ from it by at most four times the
    template's own error (or the dtype's floor). Returns the fastest agreeing candidate (the template when none
    is faster by `gain`). Timing holds ARGUS_TUNE_LOCK (bench.exclusive)."""
    _poisoned(reference)
    out = run(template)
    ok, why = agrees(out, reference, tolerance(reference) if isinstance(reference, torch.Tensor) else 0.0)
    if not ok:
        raise ValueError(f"the template policy disagrees with torch: {why}")
    tol = 0.0
    if out.is_floating_point():
        tol = max(tolerance(reference), 4 * rel_error(out, reference)[0])
    t_ms, method = time_ms([lambda: run(template)], target)
    tried: list[dict[str, Any]] = [{"policy": template, "ms": t_ms, "template": True}]
    best, best_ms = template, t_ms
    seen = {key(template)}
    t0, w0 = time.perf_counter(), waited_s()

    def budget_left() -> bool:  # time spent waiting for other processes' timing does not count
        return len(tried) < max_candidates and time.perf_counter() - t0 - (waited_s() - w0) < seconds

    limit = {n: GROWTH * e for n, e in tile_elements(template).items()}
    improved = True
    while improved and budget_left():
        improved = False
        for cand in neighbours(best, limit):
            if not budget_left():
                break
            k = key(cand)
            if k in seen:
                continue
            seen.add(k)
            row: dict[str, Any] = {"policy": cand}
            tried.append(row)
            try:
                _poisoned(reference)
                ok, why = agrees(run(cand), reference, tol)
                if not ok:
                    row["dropped"] = why
                    continue
                ms, _ = time_ms([lambda c=cand: run(c)], target, method=method)  # type: ignore[misc]
            except Exception as e:  # does not compile (registers, shared memory) or launch: not a candidate
                row["dropped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                continue
            row["ms"] = ms
            if ms < best_ms * (1 - gain):
                best, best_ms = cand, ms
                improved = True
                break  # restart the sweep around the new best
    return TuneResult(best, best_ms, t_ms, method, tried)


def ranked(result: TuneResult) -> list[tuple[dict[str, dict[str, Any]], float]]:
    """(policy, ms) of the candidates that ran and agreed, fastest first (what to hand the checker in turn)."""
    rows = [r for r in result.tried if "ms" in r and math.isfinite(r["ms"])]
    return [(r["policy"], r["ms"]) for r in sorted(rows, key=lambda r: r["ms"])]
