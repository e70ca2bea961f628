"""The measured swap-in: whether an Argus plan replaces what Inductor would run for the same subgraph.

On a GPU each Argus op signature is decided once by timing both sides on the device, with the method every Argus
measurement uses (runtime/timing.py: CUDA-graph replay over rotated operand copies, L2 cold): the Argus plan, and
the op's reference (references.py) compiled alone by Inductor (its extern cuBLAS/cuDNN call and the epilogue it
fuses, or its own kernels). The faster side runs; within TIE of each other Inductor's does (the graph Inductor would
have compiled anyway). The verdict and both times are stored in the signature's cache entry under the device
model, so later processes (and other machines of that model) decide without timing. A timing that fails counts
against its side. On the Triton interpreter times mean nothing: the template rule stands and the report says so.

ARGUS_SWAPIN: measure (the default), always (Argus's plan, unmeasured), never (Inductor's everywhere).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

TIE = 0.02           # Argus must be more than 2% faster to replace Inductor's code
REP_MS = 4           # timing per side and round (tens of ms of device time a signature with the warm-ups)
ROUNDS = 3           # the sides timed in turn, A B A B A B, each keeping its median: a transient load on the device
#                      (another process's work) lands on both sides, not on one
DECISIVE = 3.0       # a round in which Argus's plan took EXPENSIVE_MS or more and this many times the fallback's
EXPENSIVE_MS = 10.0  # ends the timing: the rounds would cost seconds of device time (a float32 GEMM at full precision
#                      ran 94x slower than SGEMM on the H200, 271 ms a call) for the verdict the first gave, and that
#                      verdict is Inductor's code, which the rule never regrets. Short calls keep all their rounds.
Timer = Callable[[list[Callable[[], Any]], str, int, str | None], tuple[float, str]]


@dataclass(frozen=True)
class Verdict:
    winner: str                    # "argus" | "fallback"
    argus_ms: float | None         # None: the Argus side failed to run or time
    fallback_ms: float | None      # None: the fallback failed to compile, run or time
    fallback: str                  # what the fallback side is ("cuBLAS + Inductor epilogue", ...)
    method: str                    # how both were timed
    why: str = ""                  # a failure that decided it, if any
    measured: float = 0.0          # time.time() of the measurement

    def speedup(self) -> float | None:
        """The winner's time advantage (loser's ms / winner's ms), where both sides were timed."""
        if not self.argus_ms or not self.fallback_ms:
            return None
        a, f = self.argus_ms, self.fallback_ms
        return f / a if self.winner == "argus" else a / f

    def text(self) -> str:
        """The report's line: which won and by how much."""
        s = self.speedup()
        times = (f" (argus {self.argus_ms:.4f} ms, {self.fallback} {self.fallback_ms:.4f} ms, {self.method})"
                 if self.argus_ms and self.fallback_ms else "")
        if self.winner == "argus":
            head = f"swap-in: argus, {s:.2f}x faster than {self.fallback}" if s else "swap-in: argus"
        else:
            head = f"swap-in: fallback: {self.fallback}, {s:.2f}x faster than argus" if s \
                else f"swap-in: fallback: {self.fallback}"
        return head + times + (f"; {self.why}" if self.why else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Verdict | None:
        """A stored verdict, or None where it is not one (an older or damaged record: measured again)."""
        try:
            v = Verdict(str(d["winner"]), _ms(d.get("argus_ms")), _ms(d.get("fallback_ms")), str(d["fallback"]),
                        str(d["method"]), str(d.get("why", "")), float(d.get("measured", 0.0)))
        except (KeyError, TypeError, ValueError):
            return None
        return v if v.winner in ("argus", "fallback") else None


def _ms(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    if not x > 0 or x != x:
        raise ValueError("a time must be positive")
    return x


def choose(argus_ms: float | None, fallback_ms: float | None) -> str:
    """The side that runs: Argus only where it ran and is more than TIE faster than a fallback that ran."""
    if argus_ms is None:
        return "fallback"
    if fallback_ms is None:
        return "argus"
    return "argus" if argus_ms < fallback_ms * (1 - TIE) else "fallback"


def measure(argus_fns: list[Callable[[], Any]], fallback_fns: list[Callable[[], Any]] | None, fallback: str,
            timer: Timer, target: str = "cuda", rep_ms: int = REP_MS, why_no_fallback: str = "") -> Verdict:
    """Time both sides (each list: the same call on independent operand copies, each already run once) and decide.
    `timer` is runtime.timing.time_ms (a fake clock in tests). A side whose timing raises is not timed."""
    why: list[str] = []
    times: dict[str, list[float]] = {"argus": [], "fallback": []}
    method = ""
    if fallback_fns is None:
        why.append(why_no_fallback or "no fallback to time")
    sides: dict[str, list[Callable[[], Any]] | None] = {"argus": argus_fns or None, "fallback": fallback_fns}
    for _ in range(ROUNDS):
        for side, fns in sides.items():
            if fns is None:
                continue
            try:
                ms, how = timer(fns, target, rep_ms, method or None)
            except Exception as e:  # a side that fails to time is not timed at all
                what = "the Argus plan" if side == "argus" else "the fallback"
                why.append(f"{what} failed to time ({type(e).__name__}: {e})")
                sides[side], times[side] = None, []
                continue
            times[side].append(ms)
            method = method or how
        if times["argus"] and times["fallback"] and times["argus"][-1] >= EXPENSIVE_MS and \
                times["argus"][-1] > DECISIVE * times["fallback"][-1]:
            break
    argus_ms = statistics.median(times["argus"]) if times["argus"] else None
    fallback_ms = statistics.median(times["fallback"]) if times["fallback"] else None
    return Verdict(choose(argus_ms, fallback_ms), argus_ms, fallback_ms, fallback, method, "; ".join(why),
                   time.time())


def stored(entry: Any, device: str) -> Verdict | None:
    """The verdict `entry` (a CacheEntry, or None) carries for `device` (signature.device_model)."""
    if entry is None:
        return None
    d = entry.swapin.get(device)
    return Verdict.from_dict(d) if isinstance(d, dict) else None


__all__ = ["TIE", "Verdict", "choose", "measure", "stored"]
