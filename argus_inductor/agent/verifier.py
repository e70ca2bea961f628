"""The one place the agent calls the invariant checker (argus_inductor.invariants), adapted to what the loop
needs: ok, the counterexample texts, the time, and a JSON summary for the cache."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..dsl import Kernel, Policy


@dataclass
class Check:
    ok: bool
    counterexamples: list[str] = field(default_factory=list)  # one text per violation (or checker error)
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    available: bool = True                                    # False: no checker could be imported

    def text(self) -> str:
        return "\n".join(self.counterexamples)


def _checker() -> Any:
    try:
        from ..invariants.api import verify
    except ImportError:
        try:
            from ..invariants import verify  # type: ignore[attr-defined,no-redef]
        except ImportError:
            return None
    return verify


def check(kernel: Kernel, policy: Policy, shapes: dict[str, int], assumptions: list[str],
          reads: Sequence[Any] = ()) -> Check:
    """Prove the kernel's invariants under a policy at concrete shapes, and what its op's read sets say each output
    element reads (specs/reads.py: the same spec a library kernel is checked against)."""
    verify = _checker()
    t0 = time.perf_counter()
    if verify is None:
        return Check(False, ["the invariant checker (argus_inductor.invariants) is not available"],
                     0.0, {"status": "not verified", "reason": "checker unavailable"}, available=False)
    shapes = {k: v for k, v in shapes.items() if k in kernel.ir.symbols}
    kw: dict[str, Any] = {"reads": list(reads)} if reads else {}
    if assumptions:
        names = set(kernel.ir.symbols) | {p.name for p in kernel.ir.constexprs} | {t.name for t in kernel.ir.tensors}
        usable = [a for a in assumptions if _names(a) <= names]
        if usable:
            kw["assumptions"] = usable
    try:
        res = verify(kernel, policy, shapes, **kw)
    except TypeError:  # a checker without the assumptions keyword
        res = verify(kernel, policy, shapes)
    except Exception as e:  # a checker fault is a failed check with its message, never a crash of the loop
        return Check(False, [f"invariant checker error: {type(e).__name__}: {e}"], time.perf_counter() - t0,
                     {"status": "checker error", "error": str(e)[:500]})
    texts = [_violation_text(v) for v in getattr(res, "violations", [])]
    texts += [f"error: {e}" for e in getattr(res, "errors", [])]
    undecided = list(getattr(res, "undecided", []))
    # an obligation z3 could not settle in time is not a proof: the kernel does not pass
    texts += [f"undecided (the checker could not settle it in time): {u}" for u in undecided]
    ok = bool(res.ok) and not undecided
    summary = res.to_json() if hasattr(res, "to_json") else {"ok": ok}
    summary["ok"] = ok
    summary.setdefault("status", "verified" if ok else "violated" if not res.ok else "undecided")
    return Check(ok, texts, float(getattr(res, "seconds", time.perf_counter() - t0)), summary)


def _violation_text(v: Any) -> str:
    t = getattr(v, "text", None)
    return t() if callable(t) else str(v)


def _names(text: str) -> set[str]:
    import ast

    return {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}
