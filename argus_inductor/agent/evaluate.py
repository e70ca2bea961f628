"""One trial of a candidate kernel: policies from the plan -> invariants -> lowering -> correctness against the
reference on random inputs -> timing. Every failure becomes an Outcome with text for the next proposal;
nothing here raises to the loop."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..dsl import DSLError, Kernel, LaunchError, Policy
from ..runtime import timing as bench
from ..runtime.checks import rel_error
from ..specs import OpSpec, Problem
from ..specs.base import Inputs, generator
from ..specs.plan import Plan
from . import verifier

OK = "ok"
FAILED = ("rejected", "invalid_plan", "dsl_error", "verify_failed", "launch_error", "wrong", "error")


@dataclass
class Candidate:
    plan: Plan
    kernels: dict[str, Kernel]
    source: str                  # DSL module text (readable with kernels_from_source)
    origin: str                  # "template" or "llm"


@dataclass
class Outcome:
    status: str                  # ok, or one of FAILED
    message: str = ""            # what went wrong, in words (what the next proposal is told)
    counterexample: str = ""     # the invariant checker's counterexample(s)
    ms: float | None = None
    method: str = ""
    rel_err: float | None = None
    verification: dict[str, Any] = field(default_factory=dict)
    triton_source: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    seed: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def feedback(self) -> str:
        parts = [f"status: {self.status}"]
        if self.message:
            parts.append(self.message)
        if self.counterexample:
            parts.append("counterexample:\n" + self.counterexample)
        return "\n".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "counterexample": self.counterexample,
                "ms": self.ms, "method": self.method, "rel_err": self.rel_err,
                "verified": bool(self.verification.get("ok", False)), "seconds": self.seconds, "seed": self.seed}


class Evaluator:
    """Evaluates candidates for one problem; keeps its inputs, reference and checks between trials."""

    def __init__(self, spec: OpSpec, problem: Problem, target: str, buckets: dict[str, str] | None = None,
                 seed: int | None = None, rep_ms: int = 40) -> None:
        self.spec = spec
        self.problem = problem
        self.target = target
        self.buckets = buckets or {}
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.rep_ms = rep_ms
        self.method = bench.DO_BENCH if target != "interpret" and not spec.capturable else None
        self._inputs: Inputs | None = None
        self._ref: torch.Tensor | None = None
        self._checks: dict[tuple[str, str, str], verifier.Check] = {}
        self._peer: tuple[str, float] | None = None
        self._copies: list[Inputs] | None = None

    # ---- stages -----------------------------------------------------------------------------------------
    def policies(self, cand: Candidate) -> dict[str, Policy] | Outcome:
        try:
            return self.spec.policies(self.problem, cand.plan, cand.kernels)
        except DSLError as e:
            return Outcome("dsl_error", f"the plan does not fit the kernel: {e}")
        except (ValueError, TypeError) as e:
            return Outcome("invalid_plan", f"invalid plan {cand.plan.describe()}: {e}")

    def verify(self, cand: Candidate, policies: dict[str, Policy]) -> Outcome | dict[str, Any]:
        summaries: dict[str, Any] = {}
        for name, k in cand.kernels.items():
            pol = policies[name]
            key = (k.ir.fingerprint(), pol.key(), name)
            chk = self._checks.get(key)
            if chk is None:
                try:
                    shapes, assumptions = self.spec.verify_args(self.problem, name, pol, self.buckets)
                    chk = verifier.check(k, pol, shapes, assumptions, self.spec.read_sets(self.problem, name))
                except DSLError as e:
                    return Outcome("dsl_error", f"{name}: {e}")
                self._checks[key] = chk
            summaries[name] = chk.summary
            if not chk.ok:
                return Outcome("verify_failed", f"{name} violates its invariants under policy {pol.key()}",
                               counterexample=chk.text(),
                               verification={"ok": False, "status": "violations", "kernels": summaries})
        from ..ops import CHECKER_VERSION

        return {"ok": True, "status": "verified", "kernels": summaries, "checker": CHECKER_VERSION}

    def lower(self, cand: Candidate, policies: dict[str, Policy]) -> Outcome | str:
        texts = []
        for name, k in cand.kernels.items():
            try:
                texts.append(k.compile(policies[name], self.target).triton_source)
            except DSLError as e:
                return Outcome("dsl_error", f"{name} does not lower: {e}")
            except Exception as e:  # a lowering fault must not end the loop
                return Outcome("error", f"{name} does not lower ({type(e).__name__}: {e})")
        return "\n\n".join(texts)

    def inputs(self) -> tuple[Inputs, torch.Tensor]:
        if self._inputs is None:
            self._inputs = self.spec.make_inputs(self.problem, generator(self.problem.device, self.seed))
            self._ref = self.spec.reference(self.problem, self._inputs)
        assert self._ref is not None
        return self._inputs, self._ref

    def test(self, cand: Candidate, policies: dict[str, Policy], problem: Problem | None = None,
             seed: int | None = None) -> Outcome | None:
        """None when the candidate matches the reference (within the op's tolerance)."""
        if problem is None:
            inputs, ref = self.inputs()
            problem = self.problem
        else:
            inputs = self.spec.make_inputs(problem, generator(problem.device, seed or 0))
            ref = self.spec.reference(problem, inputs)
        try:
            out = self.spec.run(problem, cand.kernels, policies, inputs, poison=True)
        except LaunchError as e:
            return Outcome("launch_error", f"launch failed on {problem.short()}: {e}")
        except DSLError as e:
            return Outcome("dsl_error", f"{e}")
        except Exception as e:  # e.g. an out-of-resources error Triton raises its own way
            return Outcome("launch_error", f"launch failed on {problem.short()} ({type(e).__name__}: {e})")
        err, where = rel_error(out, ref)
        tol = self.spec.tolerance(problem, self.target)
        if not err <= tol:
            used = seed if seed is not None else self.seed
            return Outcome("wrong", f"wrong result on {problem.short()} (seed {used}): relative error {err:.3e} > "
                                    f"{tol:.1e}; {where}", rel_err=err)
        return None

    def operand_sets(self) -> list[Inputs]:
        """The main inputs and, on a GPU, enough independent copies to keep L2 cold across calls."""
        inputs, _ = self.inputs()
        if self._copies is None:
            self._copies = []
            if self.target != "interpret":
                size = sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))
                gen = generator(self.problem.device, self.seed + 1)
                self._copies = [self.spec.make_inputs(self.problem, gen) for _ in range(bench.rotation(size))]
        return [inputs, *self._copies]

    def time(self, cand: Candidate, policies: dict[str, Policy]) -> tuple[float, str]:
        sets = self.operand_sets()
        spec, prob = self.spec, self.problem
        fns = [lambda inp=inp: spec.run(prob, cand.kernels, policies, inp) for inp in sets]
        for f in fns[1:]:
            f()
        ms, how = bench.time_ms(fns, self.target, self.rep_ms, self.method)
        self.method = self.method or how
        return ms, how

    # ---- a whole trial --------------------------------------------------------------------------------
    def evaluate(self, cand: Candidate, timed: bool = True) -> Outcome:
        sec: dict[str, float] = {}
        t0 = time.perf_counter()
        pols = self.policies(cand)
        if isinstance(pols, Outcome):
            return pols
        ver = self.verify(cand, pols)
        sec["verify"] = time.perf_counter() - t0
        if isinstance(ver, Outcome):
            ver.seconds = sec
            return ver
        t1 = time.perf_counter()
        low = self.lower(cand, pols)
        sec["lower"] = time.perf_counter() - t1
        if isinstance(low, Outcome):
            low.verification, low.seconds = ver, sec
            return low
        t2 = time.perf_counter()
        bad = self.test(cand, pols)
        sec["test"] = time.perf_counter() - t2
        if bad is not None:
            bad.verification, bad.triton_source, bad.seconds, bad.seed = ver, low, sec, self.seed
            return bad
        ms, how = None, ""
        if timed:
            t3 = time.perf_counter()
            try:
                ms, how = self.time(cand, pols)
            except Exception as e:
                return Outcome("launch_error", f"timing failed ({type(e).__name__}: {e})", verification=ver,
                               triton_source=low, seconds=sec, seed=self.seed)
            sec["time"] = time.perf_counter() - t3
        return Outcome(OK, ms=ms, method=how, verification=ver, triton_source=low, seconds=sec, seed=self.seed)

    def confirm(self, cand: Candidate, trials: int, rng: random.Random) -> Outcome | None:
        """More correctness trials on fresh random inputs at odd shapes of the same signature."""
        pols = self.policies(cand)
        if isinstance(pols, Outcome):
            return pols
        for _ in range(trials):
            prob = self.spec.test_problem(self.problem, self.buckets, rng)
            bad = self.test(cand, pols, prob, seed=rng.randrange(2**31))
            if bad is not None:
                return bad
        return None

    def peer(self) -> tuple[str, float] | None:
        """(name, ms) of the fastest peer, timed like our kernels; None on the interpreter or without peers."""
        if self.target == "interpret":
            return None
        if self._peer is None:
            sets = self.operand_sets()
            best: tuple[str, float] | None = None
            for name in self.spec.peers(self.problem, sets[0]):
                try:
                    fns = [self.spec.peers(self.problem, inp)[name] for inp in sets]
                    for f in fns:
                        f()
                    ms, _ = bench.time_ms(fns, self.target, self.rep_ms, self.method)
                except Exception:  # a peer that does not run here (backend missing) is skipped
                    continue
                if best is None or ms < best[1]:
                    best = (name, ms)
            self._peer = best or ("none", float("nan"))
        return self._peer if self._peer[0] != "none" else None
