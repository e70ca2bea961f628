"""The router's fused top-k kernel proves at odd shapes and over symbolic ones, and planted bugs are rejected at
their line: the experts stored over the weights (written twice, the expert columns never), the column mask dropped
where K < BK (a weight lane lands on the first expert column), and a softmax that skips a token's first expert."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy
from argus_inductor.invariants import verify
from argus_inductor.kernels.router import router_topk_rows

from .planted import assert_planted_bug_rejected

POLICIES = [dict(BT=4, BE=8, K=2, BK=2, RENORM=1), dict(BT=4, BE=64, K=3, BK=4, RENORM=0),
            dict(BT=16, BE=8, K=1, BK=2, RENORM=1)]
SHAPES = dict(T=13, E=7, K2=4)


def _shapes(pol: dict) -> dict:
    return {**SHAPES, "E": min(pol["BE"], 37), "K2": 2 * pol["K"]}


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: f"BE{p['BE']}-K{p['K']}-R{p['RENORM']}")
@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
def test_router_kernel_proves(pol: dict, symbolic: bool) -> None:
    res = verify(router_topk_rows, Policy.make(**pol), None if symbolic else _shapes(pol))
    assert res.ok and res.proved, res.text()


BUGS = [
    (dict(BT=4, BE=8, K=2, BK=2, RENORM=1), "store(Y[rt, K + rk], ids, mask=(rk < K)[None, :])",
     "store(Y[rt, rk], ids, mask=(rk < K)[None, :])", "store(Y[rt, rk], vals"),
    (dict(BT=4, BE=64, K=3, BK=4, RENORM=0), "store(Y[rt, rk], vals, mask=(rk < K)[None, :])",
     "store(Y[rt, rk], vals)", "store(Y[rt, K + rk], ids"),
    (dict(BT=4, BE=8, K=2, BK=2, RENORM=1), "x = load(X[rt, re], other=-inf).to(float32)",
     "x = load(X[rt, re + 1], other=-inf).to(float32)", "assert_tag((tag_of(den, \"sum(E).lo\")"),
]


@pytest.mark.parametrize("pol,old,new,assertion", BUGS, ids=[b[2] for b in BUGS])
def test_planted_router_bug_is_rejected_at_its_line(pol: dict, old: str, new: str, assertion: str) -> None:
    assert_planted_bug_rejected(router_topk_rows, Policy.make(**pol), _shapes(pol), old, new, assertion, "router.py")
