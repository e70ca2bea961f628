"""A running MAX in a K loop (`acc = maximum(acc, max(a, 1))`) whose load mask has a lane conjunct that moves with
the loop (`(rm < 2 + k)[:, None]`, `(rm >= k)[:, None]`) leaves the lanes that mask killed in some iterations a max
over part of the row only: with `other=-inf` they miss the columns of those iterations. A store of the running max is
rejected as an incomplete reduction, the counterexample a lane the mask killed in the iteration of the missing K
index. (Before, `maximum` unioned the covers (`maxof`) of its operands without the term's `live`, and the loop's
summary dropped the moving conjunct: the row max proved complete.) The same kernel with a static lane mask
`(rm < M)` still proves."""
from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import VerificationResult, verify

SRC = '''\
from argus_inductor.dsl import *


@kernel
def moving_rowmax(A: Tensor("M", "K"), C: Tensor("M"), BM: constexpr = 4, BK: constexpr = 16):
    (pm,) = tile_grid(cdiv(M, BM))
    rm = pm * BM + arange(BM)
    acc = full((BM,), float("-inf"), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[rm, rk], mask=(rk < K)[None, :] & (rm < M)[:, None], other=float("-inf")).to(float32)
        acc = maximum(acc, max(a, 1))
    store(C[rm], acc)
'''

A_ROW = 'a = load(A[rm, rk], mask=(rk < K)[None, :] & (rm < M)[:, None], other=float("-inf")).to(float32)'
STORE = "store(C[rm], acc)"
NAME = "moving_rowmax"
SHAPES = dict(M=9, K=40)  # several K iterations, a partial last block, lanes past the first tile
BM, BK = 4, 16

Live = Callable[[int, int, dict[str, int]], bool]  # (row, k, shapes): whether the planted mask keeps the row at k

PLANTED: dict[str, tuple[str, Live]] = {
    "rowmax-rows-grow": (A_ROW.replace("(rm < M)", "(rm < 2 + k)"), lambda r, k, s: r < 2 + k),
    "rowmax-rows-from-k": (A_ROW.replace("(rm < M)", "(rm >= k)"), lambda r, k, s: r >= k),
}


def _verify(text: str, shapes: dict[str, int] | None) -> VerificationResult:
    return verify(kernels_from_source(text, "moving_max.py")[NAME], Policy(), shapes)


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_lane_mask_moving_with_the_loop_leaves_a_partial_running_max_and_is_rejected(case: str, mode: str):
    """Rejected at the store as an incomplete reduction; the counterexample's row is one the planted mask kills in
    the iteration that holds the missing K index (checked against the mask, at the counterexample's shapes)."""
    new, keeps = PLANTED[case]
    assert A_ROW in SRC
    res = _verify(SRC.replace(A_ROW, new, 1), SHAPES if mode == "specialized" else None)
    assert not res.ok, res.text()
    v = next((v for v in res.violations if v.kind == "reduction-complete"), None)
    assert v is not None, res.text()
    assert v.source.strip() == STORE, res.text()
    m = re.search(r"K index (-?\d+)", v.message)
    assert m is not None, v.message
    x = int(m.group(1))
    ex = v.executions[0]
    shapes = {**SHAPES, **v.shapes} if mode == "specialized" else dict(v.shapes)
    lane = ex.program["pm"] * BM + ex.element[0]
    k = x - x % BK
    assert 0 <= x < shapes.get("K", x + 1), res.text()
    assert not keeps(lane, k, shapes), f"row {lane} is live at k={k} (K index {x})\n{res.text()}"


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
def test_the_row_max_with_a_static_lane_mask_proves(mode: str):
    res = _verify(SRC, SHAPES if mode == "specialized" else None)
    assert res.proved, res.text()


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
def test_a_mask_that_moves_but_keeps_every_stored_row_still_proves(mode: str):
    """`(rm < M + k)` names k but holds for every stored row in every iteration: every row max is complete."""
    res = _verify(SRC.replace(A_ROW, A_ROW.replace("(rm < M)", "(rm < M + k)"), 1),
                  SHAPES if mode == "specialized" else None)
    assert res.proved, res.text()
