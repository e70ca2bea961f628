"""The decode RMSNorm kernel (kernels/rms_rounded.py) proves at odd shapes and over symbolic ones, and planted bugs
are rejected at their line: a mean square that skips the row's first chunk, a weight read one column off, and a
store one column off (a lane written twice, another never)."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.rms_rounded import rms_norm_rows

from .planted import assert_flags_one_of, first_line

POLICY = dict(BO=1, BR=16)
SHAPES = dict(O=3, L=37)


@pytest.mark.parametrize("pol", [POLICY, dict(BO=2, BR=32)], ids=["BO1", "BO2"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
def test_rms_kernel_proves(pol: dict, symbolic: bool) -> None:
    res = verify(rms_norm_rows, Policy.make(**pol), None if symbolic else SHAPES)
    assert res.ok and res.proved, res.text()


BUGS = [
    ("        for l0 in range(0, L, BR):\n            rl = l0 + arange(BR)\n            x = load(X[ro, rl]).to(float32)\n"
     "            s = s + sum(x * x, 1)", "for l0 in range(BR, L, BR):", "assert_tag((tag_of(s, \"sum(L).lo\")"),
    ("w = load(W[rl]).to(float32)", "w = load(W[rl + 1]).to(float32)", "assert_tag(tag_of(w[None, :], \"L\")"),
    ("store(Y[ro, rl], n * w[None, :])", "store(Y[ro, rl + 1], n * w[None, :])", "store(Y[ro, rl + 1]"),
]


@pytest.mark.parametrize("old,new,assertion", BUGS, ids=[b[1] for b in BUGS])
def test_planted_rms_bug_is_rejected_at_its_line(old: str, new: str, assertion: str) -> None:
    text = "from argus_inductor.dsl import *\n" + rms_norm_rows.ir.source

    def check(src: str):
        k = kernels_from_source(src, filename="rms_rounded.py")["rms_norm_rows"]
        return verify(k, Policy.make(**POLICY), SHAPES)

    if old.startswith(" "):  # the first loop only: replace its header
        assert old.strip().splitlines()[0].strip() in text
        bad = text.replace("for l0 in range(0, L, BR):", new, 1)
    else:
        assert old in text, "rms_norm_rows changed: update this test"
        bad = text.replace(old, new, 1)
    assert check(text).ok
    res = check(bad)
    assert not res.ok, f"`{new}` was not rejected"
    assert_flags_one_of(res, {first_line(bad, new.strip()), first_line(bad, assertion)})
    assert "thread" in res.text()
