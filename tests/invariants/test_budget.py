"""Every `verify` has a time budget: a kernel that would keep the checker busy (an LLM reply with a huge static_range,
say) comes back "NOT PROVED: budget" in about the budget's time, never a hang; and the checker unrolls static_range
only up to a bound, reading a longer one as a range loop (issue 41)."""
from __future__ import annotations

import time

import pytest

from argus_inductor import cli
from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import loops, verify
from argus_inductor.invariants.api import DEFAULT_BUDGET_S

LONG = '''from argus_inductor.dsl import *


@kernel
def long_unroll(X: Tensor("N"), Y: Tensor("N"), BLOCK: constexpr = 16):
    (p,) = tile_grid(cdiv(N, BLOCK))
    r = p * BLOCK + arange(BLOCK)
    x = load(X[r])
    acc = zeros((BLOCK,), float32)
    for i in static_range(4000):
        acc = acc + x
    store(Y[r], acc)
'''


def _kernel():
    return kernels_from_source(LONG, "long.py")["long_unroll"]


def test_a_huge_static_range_is_read_as_a_range_loop_not_unrolled():
    """static_range(100000) took the checker about 38 s to unroll (and N = 10^8 stalled it for good). The DSL now
    refuses more than 4,096 unrolled bodies when it reads the text (dsl/limits.py); within that, past the checker's
    own bound, a static loop is one symbolic iteration for all, proved in well under a second."""
    t0 = time.perf_counter()
    res = verify(_kernel(), Policy.make(BLOCK=16), {"N": 100})
    assert time.perf_counter() - t0 < 5.0
    assert res.proved, res.text()
    assert any("static_range of 4000 iterations is checked as a range loop" in n for n in res.notes), res.notes


def test_a_verification_past_its_budget_is_not_proved_budget(monkeypatch):
    """With the unrolling bound lifted, the same kernel would keep the checker busy for tens of seconds: the budget
    stops it and says so (a clear verdict, not an exception from inside the interpreter)."""
    monkeypatch.setattr(loops, "STATIC_UNROLL_LIMIT", 10**9)
    t0 = time.perf_counter()
    res = verify(_kernel(), Policy.make(BLOCK=16), {"N": 100}, budget_s=0.2)
    took = time.perf_counter() - t0
    assert took < 3.0, f"the 0.2 s budget took {took:.1f} s"
    assert res.status == "not proved: budget" and res.ok and not res.proved
    assert res.budget and "0.2 s budget ran out" in res.budget
    assert "NOT PROVED: budget" in res.text()
    assert res.to_json()["verdict"] == "not proved: budget"


def test_the_budget_is_documented_and_checked():
    assert DEFAULT_BUDGET_S == 60.0
    assert "budget_s" in verify.__doc__
    with pytest.raises(ValueError, match="budget_s"):
        verify(_kernel(), Policy.make(BLOCK=16), {"N": 100}, budget_s=0)


def test_cli_budget_flag_reports_not_proved(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(loops, "STATIC_UNROLL_LIMIT", 10**9)
    f = tmp_path / "long.py"
    f.write_text(LONG)
    t0 = time.perf_counter()
    rc = cli.main(["verify", str(f), "--shape", "N=100", "--budget-s", "0.2"])
    assert time.perf_counter() - t0 < 3.0
    out = capsys.readouterr().out
    assert rc == 3 and "NOT PROVED: budget" in out


def test_verify_help_prints(capsys):
    """`argus verify --help` printed a ValueError (a bare '%' in a help string) instead of the help."""
    with pytest.raises(SystemExit) as e:
        cli.main(["verify", "--help"])
    assert e.value.code == 0
    assert "--budget-s" in capsys.readouterr().out
