"""The planted-bug suite: every correct kernel is proven (no false alarm), every mutant is rejected
with a counterexample that names the mutated line, at concrete shapes and symbolically."""
from __future__ import annotations

import pytest

from argus_inductor.invariants import VerificationResult, default_staging, verify_source

from .suite import CASES, Case, Mutant

MODES = ["specialized", "symbolic"]


def run(case: Case, source: str, mode: str, staging=default_staging) -> VerificationResult:
    shapes = case.shapes if mode == "specialized" else None
    (res,) = verify_source(source, f"<{case.name}>", case.make_policy(), shapes, kernels=[case.kernel],
                           assumptions=case.assumptions, staging=staging)
    assert res.mode == mode
    return res


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_correct_kernel_is_proven(case: Case, mode: str) -> None:
    res = run(case, case.source, mode)
    assert res.ok and res.proved, res.text()
    assert res.obligations > 0
    limit = 2.0 if mode == "specialized" else 20.0
    assert res.seconds < limit, f"{case.name} took {res.seconds:.2f} s ({mode})"


MUTANTS = [(c, m) for c in CASES for m in c.mutants]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case,mutant", MUTANTS, ids=[f"{c.name}: {m.name}" for c, m in MUTANTS])
def test_mutant_is_rejected_at_its_line(case: Case, mutant: Mutant, mode: str) -> None:
    res = run(case, mutant.apply(case.source), mode, mutant.staging or default_staging)
    assert not res.ok, f"mutant survived: {mutant.name}\n{res.text()}"
    want = mutant.expected_line(case.source)
    named = [v for v in res.violations if want in v.lines]
    assert named, f"no counterexample names line {want}:\n{res.text()}"
    v = named[0]
    assert v.message and v.source.strip() and v.kernel == case.kernel
    text = v.text()
    assert f":{v.line}" in text and v.message in text


def test_every_kernel_has_five_mutants() -> None:
    assert len(CASES) >= 8
    for case in CASES:
        assert len(case.mutants) >= 5, case.name
        for m in case.mutants:
            if m.old:
                assert m.old in case.source, (case.name, m.name)
                assert m.apply(case.source) != case.source


def test_counterexample_names_program_iteration_element_and_thread() -> None:
    """The off-by-one K offset: 'program (...), iteration k=..., element (i, j) held by thread t
    (warp w, lane l) at line L: mma multiplied A's K index x with B's K index y'."""
    case = next(c for c in CASES if c.name == "gemm+bias+act")
    mutant = next(m for m in case.mutants if m.name == "off-by-one K offset in A")
    res = run(case, mutant.apply(case.source), "specialized")
    v = next(v for v in res.violations if v.kind == "mma-agreement")
    ex = v.executions[0]
    assert set(ex.program) == {"pm", "pn"} and set(ex.iterations) == {"k"}
    assert ex.iterations["k"] % 32 == 0 and 0 <= ex.iterations["k"] < 100
    assert len(ex.element) == 2 and ex.thread is not None
    assert ex.thread["thread"] == 32 * ex.thread["warp"] + ex.thread["lane"]
    assert v.values["a"] == v.values["b"] + 1  # A's K index is one past B's
    assert "mma multiplied A's K index" in v.headline and "thread" in v.headline and f"line {v.line}" in v.headline
    assert v.shapes == {"M": 200, "N": 136, "K": 100}


def test_proofs_from_several_threads_give_the_verdicts_they_give_alone() -> None:
    """The background swap-in (runtime/tiers.py) proves kernels in a thread of its own while the model's thread may
    prove others: z3's Python API shares one context, so verification takes turns. Four threads prove correct
    kernels and mutants at once; each verdict and counterexample line is the one a lone run gives."""
    import threading

    jobs = [(c, c.source, "specialized") for c in CASES[:4]] + \
        [(c, c.mutants[0].apply(c.source), "specialized") for c in CASES[:4]]
    alone = [(r.ok, tuple(v.line for v in r.violations)) for r in (run(c, s, m) for c, s, m in jobs)]
    got: dict[int, tuple] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for k in range(i, len(jobs), 4):
                c, s, m = jobs[k]
                r = run(c, s, m)
                got[k] = (r.ok, tuple(v.line for v in r.violations))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert [got[k] for k in range(len(jobs))] == alone
    assert alone[:4] == [(True, ())] * 4 and not any(ok for ok, _ in alone[4:])
