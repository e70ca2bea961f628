"""The decode RMSNorm (kernels/rms_rounded.py: the library's rmsnorm_kernel at ROUND=1) proves at odd shapes and over symbolic ones, and planted bugs
are rejected at their line: a mean square that skips the row's first chunk, a weight read one column off, and a
store one column off (a lane written twice, another never)."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy
from argus_inductor.invariants import verify
from argus_inductor.kernels.norms import rmsnorm_kernel

from .planted import assert_planted_bug_rejected

POLICY = dict(BR=1, BC=16, ROUND=1)
SHAPES = dict(R=3, C=37)


@pytest.mark.parametrize("pol", [POLICY, dict(BR=2, BC=32, ROUND=1), dict(BR=4, BC=16)], ids=["BR1", "BR2", "unrounded"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
def test_rms_kernel_proves(pol: dict, symbolic: bool) -> None:
    res = verify(rmsnorm_kernel, Policy.make(**pol), None if symbolic else SHAPES)
    assert res.ok and res.proved, res.text()


BUGS = [
    ("for c0 in range(0, C, BC):", "for c0 in range(BC, C, BC):", "assert_tag((tag_of(ss, \"sum(C).lo\")"),
    ("w = load(W[rc]).to(float32)", "w = load(W[rc + 1]).to(float32)", "assert_tag(tag_of(w[None, :], \"C\")"),
    ("store(Y[rr, rc], n * w[None, :])", "store(Y[rr, rc + 1], n * w[None, :])", "store(Y[rr, rc + 1]"),
]


@pytest.mark.parametrize("old,new,assertion", BUGS, ids=[b[1] for b in BUGS])
def test_planted_rms_bug_is_rejected_at_its_line(old: str, new: str, assertion: str) -> None:
    # the first occurrence of `old`: the statistics loop's header
    assert_planted_bug_rejected(rmsnorm_kernel, Policy.make(**POLICY), SHAPES, old, new, assertion, "norms.py")
