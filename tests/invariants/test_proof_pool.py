"""invariants/pool.py: kernels proved in worker processes get the verdict the caller's own checker gives (planted bug
and its counterexample line included); a worker that cannot prove a job (another kernel under the name, a module
that kills it) fails that job only, and the caller proves it itself; a kernel read from text is never sent."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from argus_inductor.dsl import kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.invariants.pool import ProofPool, job_for, wait

from .suite import CASES

CASE = next(c for c in CASES if c.mutants and not c.mutants[0].staging)
MUTANT = next(m for m in CASE.mutants if m.old and not m.staging)


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Any:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    got, want = dict(got), dict(want)
    got.pop("seconds"), want.pop("seconds")
    assert got == want


@pytest.fixture
def pool():
    p = ProofPool(2, idle_s=20)
    yield p
    p.close()


def test_a_worker_gives_the_verdict_the_caller_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    pool: ProofPool) -> None:
    ok = _module(tmp_path, monkeypatch, "argus_pool_ok", CASE.source)
    bad = _module(tmp_path, monkeypatch, "argus_pool_bad", MUTANT.apply(CASE.source))
    policy = CASE.make_policy()
    futures = {}
    for mod in (ok, bad):
        k = getattr(mod, CASE.kernel)
        assert k.module == mod.__name__
        futures[mod.__name__] = pool.submit(job_for(k, policy, CASE.shapes, CASE.assumptions, 20.0, ()))
    for mod in (ok, bad):
        got = wait(futures[mod.__name__], 120)
        assert got is not None, f"the worker failed on {mod.__name__}"
        _same(got, verify(getattr(mod, CASE.kernel), policy, CASE.shapes, assumptions=CASE.assumptions,
                          budget_s=20.0).to_json())
    proved, refuted = wait(futures["argus_pool_ok"], 1), wait(futures["argus_pool_bad"], 1)
    assert proved["proved"] and not refuted["ok"]
    assert any(MUTANT.expected_line(CASE.source) in [v["line"], *v["related"]] for v in refuted["violations"]), refuted


def test_a_job_the_worker_cannot_prove_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   pool: ProofPool) -> None:
    ok = _module(tmp_path, monkeypatch, "argus_pool_ok2", CASE.source)
    k = getattr(ok, CASE.kernel)
    job = job_for(k, CASE.make_policy(), CASE.shapes, CASE.assumptions, 20.0, ())
    # the kernel under that name is not the one the caller read (its source changed since): refused
    other = job.__class__(**{**job.__dict__, "digest": "0" * 24})
    assert wait(pool.submit(other), 120) is None
    # a module whose import ends the worker process: the job fails, and the next job gets a new worker
    (tmp_path / "argus_pool_dies.py").write_text("import os\nos._exit(3)\n")
    dies = job.__class__(**{**job.__dict__, "module": "argus_pool_dies"})
    assert wait(pool.submit(dies), 120) is None
    assert wait(pool.submit(job), 120)["proved"]


def test_a_kernel_read_from_text_is_proved_by_its_caller() -> None:
    k = kernels_from_source(CASE.source)[CASE.kernel]
    assert k.module is None
    assert job_for(k, CASE.make_policy(), CASE.shapes, CASE.assumptions, 20.0, ()) is None
