"""The measured swap-in: whether an Argus plan replaces what Inductor would run for the same subgraph.

On a GPU each Argus op signature is decided once by timing both sides on the device, with the method every Argus
measurement uses (runtime/timing.py: CUDA-graph replay over rotated operand copies, L2 cold): the Argus plan, and
the op's reference (references.py) compiled alone by Inductor (its extern cuBLAS/cuDNN call and the epilogue it
fuses, or its own kernels). The faster side runs; within TIE of each other Inductor's does (the graph Inductor would
have compiled anyway). The verdict and both times are stored in the signature's cache entry under the device
model, so later processes (and other machines of that model) decide without timing. A timing that fails counts
against its side. On the Triton interpreter times mean nothing: the template rule stands and the report says so.

Both sides must also compute what the op's reference computes: before the timing, each side's output on the first
operand copy is compared with the reference run eagerly (disagreement()), on float32 copies of 16-bit operands where it
runs so (graph/swapin.py). A side off by more than AGREE is out of the choice and the report says why; a fast wrong
answer never wins.

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
AGREE = {"16-bit": 5e-2, "32-bit": 1e-2}  # relative error against the eager reference at which a side is out: far
#                      above rounding (bf16 outputs read 3e-3 to 2e-2 against it), far below a wrong answer (a
#                      wrong decode attention read 0.7 to 0.87 in the H200 e2e of 2026-11-29)
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


def _tensors(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def disagreement(out: Any, ref: Any) -> float:
    """How far `out` (a tensor, or a tuple of them) is from `ref`: the relative error of the finite values in
    float32, over all tensors together; infinite where the shapes differ or a value is non-finite on one side and
    not the same on the other (a NaN for a NaN, an infinity of the same sign)."""
    import torch

    outs, refs = _tensors(out), _tensors(ref)
    if len(outs) != len(refs) or any(o.shape != r.shape for o, r in zip(outs, refs)):
        return float("inf")
    num = den = 0.0
    for o, r in zip(outs, refs):
        o, r = o.detach().float(), r.detach().float()
        finite = torch.isfinite(r)
        if not torch.equal(finite, torch.isfinite(o)) or not torch.equal(torch.isnan(o), torch.isnan(r)) or \
                not torch.equal(o[torch.isinf(r)], r[torch.isinf(r)]):
            return float("inf")
        num += float((o[finite] - r[finite]).double().pow(2).sum())
        den += float(r[finite].double().pow(2).sum())
    if num == 0.0:
        return 0.0
    return (num / den) ** 0.5 if den > 0 else float("inf")


def agree_limit(out: Any) -> float:
    """AGREE for the output's dtype: 16-bit where its widest floating tensor is, else (float32, integers) 32-bit."""
    sizes = [t.element_size() for t in _tensors(out) if t.is_floating_point()]
    return AGREE["16-bit"] if sizes and max(sizes) <= 2 else AGREE["32-bit"]


__all__ = ["AGREE", "TIE", "Verdict", "agree_limit", "choose", "disagreement", "measure", "stored"]
