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


# the embedding's rows and their norm in one launch (rms_rounded.embedding_rmsnorm_kernel): the gather proves under the
# embedding's contract (ids index the table), and a planted bug in each part is rejected at its line
EMB_SHAPES = dict(P=2, R=3, V=11, C=37)
EMB_POLICY = dict(BR=1, BC=16)


@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
def test_embedding_rms_kernel_proves(symbolic: bool) -> None:
    from argus_inductor.kernels.rms_rounded import embedding_rmsnorm_kernel

    for pol in (EMB_POLICY, dict(BR=2, BC=32)):
        res = verify(embedding_rmsnorm_kernel, Policy.make(**pol), None if symbolic else EMB_SHAPES)
        assert res.ok and res.proved, res.text()


EMB_BUGS = [
    # the statistics of the row's own token, the normalized values read from the row's index instead
    ("x = load(E[tok, rc]).to(float32)", "x = load(E[rr, rc]).to(float32)",
     "assert_tag(tag_of(x, \"V\") == tok[:, None], \"each row normalizes"),
    # the copy of the embedding written at the token's row (a row written twice, another never)
    ("store(Out[0, rr, rc], x)", "store(Out[0, tok, rc], x)", "store(Out[0, tok, rc], x)"),
    # the norm written over the rows' plane (the second plane never written)
    ("store(Out[1, rr, rc]", "store(Out[0, rr, rc]", "store(Out[0, rr, rc], (x"),
    # the mean square skipping the row's first chunk
    ("for c0 in range(0, C, BC):", "for c0 in range(BC, C, BC):", "assert_tag((tag_of(ss, \"sum(C).lo\")"),
]


@pytest.mark.parametrize("old,new,assertion", EMB_BUGS, ids=[b[1] for b in EMB_BUGS])
def test_planted_embedding_rms_bug_is_rejected_at_its_line(old: str, new: str, assertion: str) -> None:
    from argus_inductor.kernels.rms_rounded import embedding_rmsnorm_kernel

    assert_planted_bug_rejected(embedding_rmsnorm_kernel, Policy.make(**EMB_POLICY), EMB_SHAPES, old, new, assertion,
                                "rms_rounded.py")
