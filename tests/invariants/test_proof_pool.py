"""invariants/pool.py: kernels proved in worker processes get the verdict the caller's own checker gives (planted bug
and its counterexample line included); a worker that cannot prove a job (another kernel under the name, a module
that kills it) fails that job only, and the caller proves it itself; a kernel read from text is never sent."""
from __future__ import annotations

import importlib
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from argus_inductor.dsl import kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.invariants.pool import ProofJob, ProofPool, job_for, wait

from .suite import CASES

CASE = next(c for c in CASES if c.mutants and not c.mutants[0].staging)
MUTANT = next(m for m in CASE.mutants if m.old and not m.staging)


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Any:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> ProofJob:
    """The job proving CASE's correct kernel, defined in a module `name` of its own."""
    mod = _module(tmp_path, monkeypatch, name, CASE.source)
    return job_for(getattr(mod, CASE.kernel), CASE.make_policy(), CASE.shapes, CASE.assumptions, 20.0, ())


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
        got = futures[mod.__name__].result(timeout=120)
        _same(got, verify(getattr(mod, CASE.kernel), policy, CASE.shapes, assumptions=CASE.assumptions,
                          budget_s=20.0).to_json())
    proved, refuted = futures["argus_pool_ok"].result(), futures["argus_pool_bad"].result()
    assert proved["proved"] and not refuted["ok"]
    assert any(MUTANT.expected_line(CASE.source) in [v["line"], *v["related"]] for v in refuted["violations"]), refuted


def test_a_job_the_worker_cannot_prove_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   pool: ProofPool) -> None:
    job = _job(tmp_path, monkeypatch, "argus_pool_ok2")
    # the kernel under that name is not the one the caller read (its source changed since): refused
    other = replace(job, digest="0" * 24)
    with pytest.raises(RuntimeError, match="is not the kernel the caller read"):
        pool.submit(other).result(timeout=120)
    # a module whose import ends the worker process: the job fails, and the next job gets a new worker
    (tmp_path / "argus_pool_dies.py").write_text("import os\nos._exit(3)\n")
    dies = replace(job, module="argus_pool_dies")
    with pytest.raises(RuntimeError, match="exited"):
        pool.submit(dies).result(timeout=120)
    assert pool.submit(job).result(timeout=120)["proved"]


def test_a_job_no_worker_has_started_is_taken_back_by_its_caller(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """wait() on a job still queued takes it back (the caller proves the kernel rather than wait idle); on one a
    worker runs, it waits for the verdict."""
    job = _job(tmp_path, monkeypatch, "argus_pool_ok3")
    one = ProofPool(1, idle_s=20)
    try:
        first, second = one.submit(job), one.submit(job)  # the worker takes the first and starts its process
        for _ in range(1000):
            if first.running():
                break
            time.sleep(0.01)
        assert wait(second, 120) is None and second.cancelled()
        assert wait(first, 120)["proved"]
    finally:
        one.close()


def test_a_kernel_read_from_text_is_proved_by_its_caller() -> None:
    k = kernels_from_source(CASE.source)[CASE.kernel]
    assert k.module is None
    assert job_for(k, CASE.make_policy(), CASE.shapes, CASE.assumptions, 20.0, ()) is None


def test_a_refused_job_keeps_its_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job the worker refuses (another kernel under the name) is that job's failure, not the worker's: the same
    process proves the next one."""
    job = _job(tmp_path, monkeypatch, "argus_pool_ok4")
    one = ProofPool(1, idle_s=20)
    try:
        assert one.submit(job).result(timeout=120)["proved"]
        pid = one.workers[0].proc.pid
        with pytest.raises(RuntimeError, match="is not the kernel"):
            one.submit(replace(job, digest="1" * 24)).result(timeout=120)
        assert one.submit(job).result(timeout=120)["proved"] and one.workers[0].proc.pid == pid
    finally:
        one.close()
