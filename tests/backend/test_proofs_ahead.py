"""The swap-in sends its members' plans to the checker's worker processes before it measures them
(ARGUS_CHECKER_WORKERS; ops.prove_ahead), and the verdicts stored with their entries are the ones those workers
made: the same as the caller's own checker gives, none left waiting. Without workers nothing is sent."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus_inductor import ops
from argus_inductor.config import Options, checker_workers
from argus_inductor.graph import rewrite
from argus_inductor.graph.swapin import swap_in
from argus_inductor.ops import entries

from .graphs import capture
from .test_swapin import Clock


def _mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.linear(F.gelu(F.linear(x, w1)), w2)


def _eager(fn, args, kwargs):
    return lambda *tensors: fn(*args, **kwargs)


def _verdicts() -> dict[str, dict]:
    out = {}
    for e in ops.kernel_cache().entries():
        v = {n: {k: x for k, x in r.items() if k != "seconds"} for n, r in e.verification["kernels"].items()}
        out[e.sig().key()] = {"status": e.verification["status"], "kernels": v}
    return out


def _swap_in() -> dict[str, dict]:
    gm, inputs = capture(_mlp, torch.randn(8, 32), torch.randn(48, 32), torch.randn(16, 48))
    assert rewrite(gm, ("gemm",))
    decided = swap_in(gm, inputs, "interpret", timer=Clock(1.0, 2.0), compile_fallback=_eager, devices=("cpu",))
    assert len(decided) == 2
    return _verdicts()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_members_plans_are_proved_in_the_workers_with_the_callers_verdicts(
        fresh_cache: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    monkeypatch.setenv("ARGUS_CHECKER_WORKERS", "0")
    ops.set_active_options(Options.resolve())
    alone = _swap_in()
    assert len(alone) == 2 and all(v["status"] == "verified" for v in alone.values())
    # again from an empty cache, with the workers
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(fresh_cache / "second"))
    ops.forget_plans()
    monkeypatch.setenv("ARGUS_CHECKER_WORKERS", str(workers))
    ops.set_active_options(Options.resolve())
    taken, _ = entries.proofs_from_workers()
    assert _swap_in() == alone
    now, pending = entries.proofs_from_workers()
    assert pending == 0  # every proof sent ahead was asked for
    assert (now - taken > 0) is (workers >= 2)


def test_the_number_of_workers_is_read_with_a_clear_error() -> None:
    assert checker_workers(3) == 3 and checker_workers("0") == 0 and 0 <= checker_workers("auto") <= 4
    for bad in ("-1", "two"):
        with pytest.raises(ValueError, match="ARGUS_CHECKER_WORKERS"):
            checker_workers(bad)
    with pytest.raises(ValueError, match="checker_workers|ARGUS_CHECKER_WORKERS"):
        Options.resolve({"checker_workers": "many"})


STORED = """
import sys, torch, torch.nn as nn
sys.path.insert(0, {tests!r})
import argus_inductor
from argus_inductor.graph.swapin import measuring_with
from argus_inductor.ops import entries
from backend.test_swapin import Clock
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.Linear(48, 16)).eval()
x = torch.randn(8, 32)
with measuring_with(Clock(1.0, 2.0), ("cpu",)), torch.no_grad():
    f = torch.compile(model, backend="argus", options={{"ops": "gemm"}})
    torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
    assert argus_inductor.settle(timeout=600)
print("PROOFS", *entries.proofs_from_workers())
"""


def test_a_stored_verdict_s_plans_are_proved_by_the_workers_while_the_first_call_compiles(tmp_path: Path) -> None:
    """A process that finds the verdicts stored (Argus won) runs those plans from its first call, so it proves
    their cache entries again first: the deferred swap-in sends them to the workers. The first process measured
    (in the background) and stored the verdicts; the second takes its proofs from the workers."""
    import os
    import subprocess
    import sys

    code = STORED.format(tests=str(Path(__file__).resolve().parents[1]))
    env = {**os.environ, "ARGUS_CACHE_DIR": str(tmp_path / "cache"), "ARGUS_INTERPRET": "1", "TRITON_INTERPRET": "1"}
    runs = []
    for workers in ("0", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True,
                             env={**env, "ARGUS_CHECKER_WORKERS": workers}).stdout
        runs.append([int(v) for v in next(ln for ln in out.splitlines() if ln.startswith("PROOFS")).split()[1:]])
    (first_taken, _), (taken, left) = runs
    assert first_taken == 0 and taken >= 2 and left == 0, runs
