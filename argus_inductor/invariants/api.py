"""The checker's entry points: verify one kernel, or every kernel of a source file."""
from __future__ import annotations

import ast
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import z3

from ..dsl.errors import DSLError
from ..dsl.ir import KernelIR
from ..dsl.lowering import resolve_consts
from ..dsl.policy import LAUNCH_FIELDS, Policy
from ..dsl.runtime import Kernel, kernels_from_source
from .assumptions import SHAPES, parse_assumption
from .base import BudgetExceeded
from .counterexample import Violation, render, source_line
from .interpreter import CheckerError, Interpreter, StagingHook, default_staging
from .obligations import kernel_obligations, solve
from .readsets import ReadSet
from .tags import ax, free_vars, simp, subst

SPECIALIZED_TIMEOUT_MS = 10_000
SYMBOLIC_TIMEOUT_MS = 30_000
# The time one `verify` may take in all (interpretation and every z3 query), unless the caller gives budget_s (the
# CLI: --budget-s). Past it the result is "NOT PROVED: budget", never a hang: text an LLM wrote (a huge unrolled
# loop, a shape that makes every query hard) cannot stall the agent, warm-up or a cache load. The library's kernels
# take 0.1-2 s specialized and up to about 20 s symbolic.
DEFAULT_BUDGET_S = 60.0
QUANTIFIED_VACUITY_MS = 500


@dataclass
class VerificationResult:
    kernel: str
    ok: bool                       # no violation found and every assertion could be checked
    violations: list[Violation]
    seconds: float
    mode: str                      # "specialized" (all shapes given) or "symbolic"
    obligations: int = 0
    undecided: list[str] = field(default_factory=list)  # obligations z3 could not settle in time
    errors: list[str] = field(default_factory=list)     # assertions the checker could not read
    notes: list[str] = field(default_factory=list)
    budget: str = ""  # why the time budget ran out before the proof was done ("" when it did not)

    @property
    def proved(self) -> bool:
        """ok, and every obligation was decided (nothing left unknown)."""
        return self.ok and not self.undecided

    @property
    def status(self) -> str:
        """'proved', 'violated' (a violation or an unreadable assertion), 'not proved: budget' or 'not proved:
        undecided'."""
        if not self.ok:
            return "violated"
        if self.budget:
            return "not proved: budget"
        return "not proved: undecided" if self.undecided else "proved"

    def text(self) -> str:
        if self.proved:
            head = f"{self.kernel}: OK ({self.obligations} obligations proved, {self.mode}, {self.seconds:.2f} s)"
        elif self.ok and self.budget:
            head = f"{self.kernel}: NOT PROVED: budget ({self.budget}; {self.mode}, {self.seconds:.2f} s)"
        elif self.ok:
            head = (f"{self.kernel}: NOT PROVED, no violation found but {len(self.undecided)} undecided "
                    f"({self.mode}, {self.seconds:.2f} s)")
        else:
            head = (f"{self.kernel}: {len(self.violations) + len(self.errors)} problem(s) "
                    f"({self.mode}, {self.seconds:.2f} s)")
        lines = [head]
        lines += [f"  error: {e}" for e in self.errors]
        lines += [v.text() for v in self.violations]
        lines += [f"  undecided: {u}" for u in self.undecided]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "ok": self.ok, "proved": self.proved, "verdict": self.status, "mode": self.mode,
                "seconds": round(self.seconds, 4), "obligations": self.obligations,
                "violations": [v.to_json() for v in self.violations], "errors": self.errors,
                "undecided": self.undecided, **({"notes": self.notes} if self.notes else {}),
                **({"budget": self.budget} if self.budget else {})}


def as_policy(policy: Policy | Mapping[str, Any] | None) -> Policy:
    if policy is None:
        return Policy()
    if isinstance(policy, Policy):
        return policy
    return Policy.make(**dict(policy))


def _as_run(kernel_name: str, policy: Policy) -> Policy:
    """The policy as it runs: a warp_specialize request whose tiles the kernel's Gluon lowering does not take runs
    the Triton lowering at those tiles (and is proved so); one it takes is proved under the lowering's ring."""
    if not policy.warp_specialize:
        return policy
    from ..dsl.lowerings import takes

    return policy if takes(kernel_name, policy) else replace(policy, warp_specialize=False)


_Z3 = threading.RLock()  # z3's Python API shares one context: one verification at a time in a process (the
#                          background swap-in of runtime/tiers.py proves kernels beside the model's own first runs)


def verify(kernel: Kernel | KernelIR, policy: Policy | Mapping[str, Any] | None = None,
           shapes: Mapping[str, int] | None = None, *, assumptions: Sequence[str] = (),
           staging: StagingHook | None = default_staging, timeout_ms: int | None = None,
           budget_s: float | None = None, reads: Sequence[ReadSet] = ()) -> VerificationResult:
    """Prove a kernel's data-flow invariants under a policy (tile sizes are concrete).

    shapes: concrete values for some or all shape symbols (M=..., N=...); the rest stay symbolic
    (>= 1, plus `assumptions`). assumptions: Python expressions over shape symbols, constexprs and
    integer tensors (a tensor name stands for every one of its elements), e.g. "H % HK == 0",
    "0 <= block_expert < E". staging: how pipelined loops stage their loads (None: no pipelining check).
    timeout_ms: z3's limit per obligation. budget_s: the whole verification's limit (DEFAULT_BUDGET_S); past
    it the result's status is "not proved: budget" (ok, not proved, the reason in `budget` and `undecided`).
    reads: the op's read sets (readsets.ReadSet, from argus_inductor.specs.reads): what each element of an
    output must read, proved at its stores (none: the kernel-wide obligations and the kernel's own assertions only).
    """
    with _Z3:  # the budget counts from here: a wait for another thread's proof is not this one's time
        return _verify(kernel, policy, shapes, assumptions, staging, timeout_ms, budget_s, reads)


def _verify(kernel: Kernel | KernelIR, policy: Policy | Mapping[str, Any] | None, shapes: Mapping[str, int] | None,
            assumptions: Sequence[str], staging: StagingHook | None, timeout_ms: int | None,
            budget_s: float | None, reads: Sequence[ReadSet]) -> VerificationResult:
    ir = kernel.ir if isinstance(kernel, Kernel) else kernel
    pol = _as_run(ir.name, as_policy(policy))
    t0 = time.perf_counter()
    budget = DEFAULT_BUDGET_S if budget_s is None else float(budget_s)
    if not budget > 0:
        raise ValueError(f"budget_s must be a positive number of seconds, not {budget_s!r}")
    deadline = t0 + budget
    shapes = dict(shapes or {})
    unknown = sorted(set(shapes) - set(ir.symbols))
    if unknown:
        raise ValueError(f"kernel '{ir.name}' has no shape symbol {', '.join(unknown)} "
                         f"(its symbols: {', '.join(ir.symbols) or 'none'})")
    consts = resolve_consts(ir, pol)
    sym = {s: (z3.IntVal(int(shapes[s])) if s in shapes else z3.Int(s)) for s in ir.symbols}
    mode = "specialized" if all(s in shapes for s in ir.symbols) else "symbolic"
    timeout = timeout_ms or (SPECIALIZED_TIMEOUT_MS if mode == "specialized" else SYMBOLIC_TIMEOUT_MS)
    outputs = {tp.name for tp in ir.tensors}
    stray = [r.output for r in reads if r.output not in outputs]
    if stray:
        raise ValueError(f"kernel '{ir.name}' has no tensor {', '.join(sorted(set(stray)))} that its read set "
                         f"names as the output (its tensors: {', '.join(sorted(outputs))}): keep the op's parameter "
                         "names")
    interp = Interpreter(ir, pol, consts, sym, staging, deadline, budget, reads)
    try:
        interp.run()
    except BudgetExceeded as e:
        why = f"{e}, before any obligation was checked (raise it with budget_s= or --budget-s)"
        return VerificationResult(ir.name, True, [], time.perf_counter() - t0, mode, undecided=[f"budget: {why}"],
                                  notes=list(dict.fromkeys(interp.notes)), budget=why)
    except CheckerError as e:
        return VerificationResult(ir.name, False, [], time.perf_counter() - t0, mode,
                                  errors=[f"line {e.line}: {e}"])
    except Exception as e:  # a checker bug must not pass for a proof, nor crash the caller
        return VerificationResult(ir.name, False, [], time.perf_counter() - t0, mode,
                                  errors=[f"internal checker error ({type(e).__name__}: {e}); please report "
                                          "this kernel"])
    background = list(interp.background)
    always = [v >= 1 for s, v in sym.items() if s not in shapes]
    background += [parse_assumption(a, interp) for a in assumptions]
    pid_vars = [v for _, v, _ in interp.pids]
    extents = {t.name: [sym[d] for d in t.dims] for t in ir.tensors}
    obligations = interp.obligations + kernel_obligations(interp.accesses, interp.renamer(), extents,
                                                          interp.dim_extent, interp.index_lines)
    false_assumes = _false_assumes(interp, always + background, _capped(timeout, deadline))
    if false_assumes:  # every obligation would hold vacuously under a precondition that cannot hold
        return VerificationResult(ir.name, False, [], time.perf_counter() - t0, mode, len(obligations), errors=[
            f"line {line}: the kernel assumes `{source_line(ir, line).strip()}`, which is false at these shapes and "
            "this policy (every obligation would hold vacuously under it): choose a policy or shapes it holds for"
            for line in false_assumes])
    violations: list[Violation] = []
    undecided: list[str] = []
    seen: set[tuple[str, int]] = set()
    trace = os.environ.get("ARGUS_VERIFY_TRACE") not in (None, "", "0")
    budget_why = ""
    for k, ob in enumerate(obligations):
        if (ob.kind, ob.op.line) in seen:
            continue
        if time.perf_counter() >= deadline:
            left = len(obligations) - k
            budget_why = (f"the {budget:g} s budget ran out with {left} of {len(obligations)} obligations not checked "
                          "(raise it with budget_s= or --budget-s)")
            break
        facts = instantiate_assumes(interp.assumes, pid_vars, ob.formula)
        out = solve(ob, always + relevant(background + facts, ob.formula), _capped(timeout, deadline), deadline)
        if trace:
            print(f"  [{out.seconds:7.3f}s] {out.status:9s} {ob.kind} line {ob.op.line}", file=sys.stderr)
        if out.status == "violated":
            seen.add((ob.kind, ob.op.line))
            violations.append(render(ir, ob, out.model, pol.num_warps, sym))
        elif out.status == "unknown":
            undecided.append(f"{ob.kind} at line {ob.op.line}" + (f": {out.reason}" if out.reason else ""))
    violations.sort(key=lambda v: v.line)
    undecided += list(dict.fromkeys(interp.unfollowed))
    if budget_why:
        undecided.append(f"budget: {budget_why}")
    notes = list(dict.fromkeys(interp.notes))
    errors = list(dict.fromkeys(interp.errors))
    errors += [] if budget_why else _vacuous_assertions(interp, always + background, deadline, timeout)
    if pol.warp_specialize and staging is not None:
        # the policy runs a hand-written Gluon lowering (_as_run kept the request): prove from its source that it
        # keeps the ring discipline the staging hook assumed (argus_inductor.hopper.rings)
        from ..dsl.lowerings import ring_proof

        errors += [f"Gluon lowering: {p}" for p in ring_proof(ir.name, pol.num_stages)]
        if not errors:
            notes.append(f"the Gluon lowering's rings are proved at {pol.num_stages} slots (fill, "
                         "read-after-fill, release-after-retire, release-once)")
    return VerificationResult(ir.name, not violations and not errors, violations, time.perf_counter() - t0, mode,
                              len(obligations), undecided, errors=errors, notes=notes, budget=budget_why)


def _capped(timeout_ms: int, deadline: float) -> int:
    """z3's time limit for one query: the per-obligation limit, or what is left of the budget (at least 1 ms: z3
    reads 0 as no limit)."""
    return max(1, min(timeout_ms, int((deadline - time.perf_counter()) * 1000)))


def _vacuous_assertions(interp: Interpreter, facts: list[z3.BoolRef], deadline: float, timeout_ms: int) -> list[str]:
    """The assert_tags that hold only because the tags they read are defined at no element at all where the program
    reaches them (a tag a where masked everywhere, a tag_of a range that is empty): an error naming the assertion,
    never a silent pass. An assertion in code no program reaches at these shapes (a loop that runs zero times) is
    not one."""
    out = []
    for op, shape, ctx, live in interp.vacuity:
        if z3.is_true(simp(live)) or time.perf_counter() >= deadline:
            continue
        coords = [z3.Int(f"vac:{d}") for d in range(len(shape))]
        sub = [(ax(d), c) for d, c in enumerate(coords)]
        dom = [z3.And(c >= 0, c < n) for c, n in zip(coords, shape)]
        def sat(*extra: z3.BoolRef) -> bool:
            s = z3.Solver()
            s.set("timeout", _capped(min(timeout_ms, 2000), deadline))
            s.add(*facts, *interp.background, *dom, subst(ctx, sub), *extra)
            return s.check() == z3.sat
        if not sat(subst(live, sub)) and sat():  # applies nowhere, though the program reaches it
            text = source_line(interp.ir, op.line).strip()
            out.append(f"line {op.line}: `{text}` holds vacuously: the tags it reads are defined at no element here "
                       "(masked, or an empty range), so it states nothing; assert on a value that carries them")
    return out


def _false_assumes(interp: Interpreter, facts: list[z3.BoolRef], timeout_ms: int) -> list[int]:
    """The lines of the in-kernel assumes that no program can satisfy at these shapes and this policy (a tile
    narrower than the dimension it assumes it covers): z3 finds them unsatisfiable with the shape facts."""
    out = []
    for a, line in zip(interp.assumes, interp.assume_lines):
        s = z3.Solver()
        # a fact over all of an index tensor (permutation(...)) has a model z3 may look for long: a contradiction in
        # one is found fast or not at all
        s.set("timeout", min(timeout_ms, QUANTIFIED_VACUITY_MS) if z3.is_quantifier(a) or z3.is_and(a) else timeout_ms)
        s.add(*facts, a)
        if s.check() == z3.unsat:
            out.append(line)
    return out


def instantiate_assumes(assumes: list[z3.BoolRef], pids: list[z3.ArithRef], formula: z3.BoolRef
                        ) -> list[z3.BoolRef]:
    """An in-kernel `assume` holds in every program; an obligation gets it for the programs it names
    (its program ids, and their primed copies for two-execution obligations)."""
    if not assumes:
        return []
    names = free_vars(formula)
    out = list(assumes)
    suffixes = {n[len(p.decl().name()):] for n in names for p in pids
                if n.startswith(p.decl().name()) and n != p.decl().name()}
    for suf in sorted(suffixes):
        if suf.startswith("'"):
            ren = [(p, z3.Int(p.decl().name() + suf)) for p in pids]
            out += [z3.substitute(a, *ren) for a in assumes]
    return out


def relevant(background: list[z3.BoolRef], formula: z3.BoolRef) -> list[z3.BoolRef]:
    """The background facts that share symbols (transitively) with the formula; unrelated axioms
    (e.g. about an index tensor the obligation never reads) only slow the solver down."""
    names = set(free_vars(formula))
    todo = [(b, set(free_vars(b))) for b in background]
    out: list[z3.BoolRef] = []
    changed = True
    while changed:
        changed = False
        rest = []
        for b, fv in todo:
            if fv & names or not fv:
                out.append(b)
                names |= fv
                changed = True
            else:
                rest.append((b, fv))
        todo = rest
    return out


def verify_source(source: str, filename: str = "<source>", policy: Policy | Mapping[str, Any] | None = None,
                  shapes: Mapping[str, int] | None = None, *, kernels: Sequence[str] | None = None,
                  assumptions: Sequence[str] = (), staging: StagingHook | None = default_staging,
                  timeout_ms: int | None = None, budget_s: float | None = None,
                  reads: Sequence[ReadSet] = ()) -> list[VerificationResult]:
    """Verify every kernel of a module's source (read, never executed). Policy constants and shapes
    a kernel does not declare are ignored for that kernel."""
    found = kernels_from_source(source, filename)
    pol = as_policy(policy)
    results = []
    for name, k in found.items():
        if kernels is not None and name not in kernels:
            continue
        declared = {p.name for p in k.ir.constexprs}
        kp = Policy.make(**{n: v for n, v in pol.consts if n in declared},
                         **{f: getattr(pol, f) for f in LAUNCH_FIELDS})
        ks = {s: v for s, v in (shapes or {}).items() if s in k.ir.symbols}
        names = set(k.ir.symbols) | declared | {t.name for t in k.ir.tensors if t.dtype_kind == "int"}
        ka = [a for a in assumptions if _kernel_names(a, names) <= names]
        tensors = {tp.name for tp in k.ir.tensors}
        kr = [r for r in reads if r.output in tensors]
        results.append(verify(k, kp, ks, assumptions=ka, staging=staging, timeout_ms=timeout_ms, budget_s=budget_s,
                              reads=kr))
    return results


def _names(text: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}


def _kernel_names(text: str, names: set[str]) -> set[str]:
    """The names of an assumption a kernel must declare for it to apply: not its quantified variables (lower-case
    names the kernel does not have) nor the forms' own (nondecreasing, implies, ...)."""
    return {n for n in _names(text) if n in names or not (n.islower() or n in SHAPES or n == "implies")}


def verify_file(path: str, policy: Policy | Mapping[str, Any] | None = None, shapes: Mapping[str, int] | None = None,
                **kw: Any) -> list[VerificationResult]:
    with open(path) as f:
        source = f.read()
    return verify_source(source, path, policy, shapes, **kw)


__all__ = ["verify", "verify_source", "verify_file", "VerificationResult", "parse_assumption", "DSLError",
           "DEFAULT_BUDGET_S"]
