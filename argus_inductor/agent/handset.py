"""The hand-set reference: the best policy per shape from benchmarks/sweep.py's JSON output, as a plan of the
agent's op specs, so warm-up can time it next to what the agent found (same process, same inputs)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..specs import Problem, plan_from_policy
from ..specs.plan import Plan


def _key(op: str, dims: dict[str, Any], causal: bool = False) -> tuple[Any, ...]:
    if op == "gemm":
        return ("gemm", dims["M"], dims["N"], dims["K"])
    if op == "moe":
        return ("moe", dims["T"], dims["HD"], dims["I"], dims["E"], dims["TOPK"])
    return ("attention", dims["Z"], dims["H"], dims["HK"], dims["S"], dims["T"], dims["D"], bool(causal))


def load(paths: list[Path | str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """(op, dims...) -> {"policy": dict, "ms": float}: the fastest correct candidate of each file; a later file
    overrides an earlier one for the shapes it covers (pass the newest sweep last)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in paths:
        best: dict[tuple[Any, ...], dict[str, Any]] = {}
        rows = json.loads(Path(p).read_text()).get("rows", [])
        for r in rows:
            if "ms" not in r or "policy" not in r:
                continue
            if r.get("op") == "gemm":
                key = _key("gemm", {"M": r["m"], "N": r["n"], "K": r["k"]})
            elif r.get("op") == "moe":
                t, hd, inter, e, topk = r["shape"]
                key = _key("moe", {"T": t, "HD": hd, "I": inter, "E": e, "TOPK": topk})
            elif r.get("op") == "attention":
                z, h, hk, s, t, d, causal = r["shape"]
                key = _key("attention", {"Z": z, "H": h, "HK": hk, "S": s, "T": t, "D": d}, causal)
            else:
                continue
            if key not in best or r["ms"] < best[key]["ms"]:
                best[key] = {"policy": r["policy"], "ms": r["ms"], "file": str(p)}
        out.update(best)
    return out


def lookup(table: dict[tuple[Any, ...], dict[str, Any]], problem: Problem) -> dict[str, Any] | None:
    if problem.op == "gemm" and not problem.epilogue:
        return table.get(_key("gemm", problem.dims))
    if problem.op == "attention":
        return table.get(_key("attention", problem.dims, "causal" in problem.epilogue.split(",")))
    if problem.op == "moe":
        return table.get(_key("moe", problem.dims))
    return None


def as_plan(problem: Problem, policy: dict[str, Any]) -> Plan:
    """A sweep policy as a plan of the agent's op spec (SPLIT_K picks split-k; constants the kernel does not
    declare, e.g. BM for the decode kernel, are dropped as the library's host wrappers drop them)."""
    plan = plan_from_policy(problem, policy)
    return Plan(plan.knobs, note="hand-set (benchmarks/sweep.py)")
