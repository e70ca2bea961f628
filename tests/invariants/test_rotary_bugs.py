"""The rotary tables' kernel proves at ragged shapes and over symbolic ones, and planted bugs are rejected at their
line: the row mask dropped (a cos row past R lands on the sin rows: written twice), the sin rows stored one row
early (cos's last row written twice, sin's last never), the angles read one column off."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy
from argus_inductor.invariants import verify
from argus_inductor.kernels.rotary import rotary_table_rows

from .planted import assert_planted_bug_rejected

POLICIES = [dict(BR=4, BD=16), dict(BR=16, BD=128), dict(BR=8, BD=32)]


def _shapes(pol: dict) -> dict:
    return dict(R=13, D=pol["BD"] - 2, R2=26)


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: f"BR{p['BR']}-BD{p['BD']}")
@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
def test_rotary_kernel_proves(pol: dict, symbolic: bool) -> None:
    res = verify(rotary_table_rows, Policy.make(**pol), None if symbolic else _shapes(pol))
    assert res.ok and res.proved, res.text()


BUGS = [
    ("live = (rr < R)[:, None] & (rd < D)[None, :]", "live = (rd < D)[None, :]", "store(Y[R + rr, rd]"),
    ("store(Y[R + rr, rd], sin(e), mask=live)", "store(Y[R + rr - 1, rd], sin(e), mask=live)",
     "store(Y[R + rr - 1, rd]"),
    ("e = load(E[rr, rd], mask=live, other=0.0).to(float32)",
     "e = load(E[rr, rd + 1], mask=live, other=0.0).to(float32)", "e = load(E[rr, rd + 1]"),
]


@pytest.mark.parametrize("old,new,line", BUGS, ids=[b[1] for b in BUGS])
def test_planted_rotary_bug_is_rejected_at_its_line(old: str, new: str, line: str) -> None:
    pol = POLICIES[0]
    assert_planted_bug_rejected(rotary_table_rows, Policy.make(**pol), _shapes(pol), old, new, line, "rotary.py")
