"""Element-wise accumulation over a loop, reduced or stored after it.

A tile that a loop accumulates element by element (`acc = acc + v`, v's K index moving with the iteration) holds,
per element, a sum over the K indices of every iteration. The checker follows them (`each(K)`): a sum across the
axis they move along after the loop is the K reduction, which a store must complete; so is the accumulator
stored as is when the indices are the same for every element (a rank-1 update). Planted bugs in that form are
rejected with a counterexample: a loop that skips blocks, iterations that overlap, a block added twice, a `where`
or branch that keeps the old tile in some iteration. What the checker cannot follow
(a maximum across the points, a loop that overwrites instead of adding) is undecided, never proved."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify

from .planted import assert_flags_one_of, lines_with

# y = A x: each program reduces BK-wide column blocks of its BM rows element-wise, then across the block
GEMV = '''
from argus_inductor.dsl import *

@kernel
def gemv_columns(A: Tensor("M", "K"), X: Tensor("K"), Y: Tensor("M"), BM: constexpr = 4, BK: constexpr = 16):
    (pm,) = tile_grid(cdiv(M, BM))
    rm = pm * BM + arange(BM)
    acc = zeros((BM, BK), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[rm, rk]).to(float32)
        x = load(X[rk]).to(float32)
        acc = acc + a * x[None, :]
    store(Y[rm], sum(acc, 1))
'''

# C = A B as a sum of outer products, one column of A and one row of B an iteration
RANK1 = '''
from argus_inductor.dsl import *

@kernel
def rank1(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"), BM: constexpr = 4, BN: constexpr = 8):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K):
        a = load(A[rm, k]).to(float32)
        b = load(B[k, rn]).to(float32)
        acc = acc + a[:, None] * b[None, :]
    store(C[rm, rn], acc)
'''

SHAPES = {"M": 5, "K": 37, "N": 11}
POLICY = {"gemv_columns": Policy.make(BM=4, BK=16), "rank1": Policy.make(BM=4, BN=8)}


def _verify(src: str, shapes: dict | None = SHAPES):
    (name, k), = kernels_from_source(src).items()
    return verify(k, POLICY[name], shapes and {s: v for s, v in shapes.items() if s in k.ir.symbols})


@pytest.mark.parametrize("src", [GEMV, RANK1], ids=["gemv", "rank1"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["specialized", "symbolic"])
def test_element_wise_accumulation_proves(src, symbolic):
    res = _verify(src, None if symbolic else SHAPES)
    assert res.ok and res.proved, res.text()


BUGS = [
    ("gemv skips every other block", GEMV, "range(0, K, BK)", "range(0, K, 2 * BK)", "store(Y[rm], sum(acc, 1))",
     "reduction-complete"),
    ("gemv stops a block short", GEMV, "range(0, K, BK)", "range(0, K - BK, BK)", "store(Y[rm], sum(acc, 1))",
     "reduction-complete"),
    ("gemv blocks overlap", GEMV, "range(0, K, BK)", "range(0, K, BK // 2)", "store(Y[rm], sum(acc, 1))",
     "reduction-once"),
    ("gemv adds each block twice", GEMV, "acc = acc + a * x[None, :]", "acc = acc + a * x[None, :] + a * x[None, :]",
     "acc = acc + a * x[None, :]", "reduction-once"),
    ("gemv keeps the old tile in the last block", GEMV, "acc = acc + a * x[None, :]",
     "acc = where(k + BK < K, acc + a * x[None, :], acc)", "for k in range(0, K, BK)", "loop-summary"),
    ("gemv adds the last block in a branch never taken", GEMV, "        acc = acc + a * x[None, :]",
     "        if k + BK < K:\n            acc = acc + a * x[None, :]", "for k in range(0, K, BK)", "loop-summary"),
    ("rank-1 skips the last column", RANK1, "range(0, K)", "range(0, K - 1)", "store(C[rm, rn], acc)",
     "reduction-complete"),
]


@pytest.mark.parametrize("name,src,old,new,line,kind", BUGS, ids=[b[0] for b in BUGS])
def test_planted_accumulation_bug_is_rejected(name, src, old, new, line, kind):
    assert old in src, name
    text = src.replace(old, new)
    res = _verify(text)
    assert not res.ok, f"{name}: proved\n{res.text()}"
    v = res.violations[0]
    assert v.executions or v.values, f"a counterexample names the program and element\n{res.text()}"
    if kind is not None:
        assert kind in {x.kind for x in res.violations}, res.text()
    assert_flags_one_of(res, lines_with(text, line) | lines_with(text, new))


# the same K loop summing inside it: a where that keeps the old total passed before the loop's summary checked it
SUM_INSIDE = GEMV.replace("acc = zeros((BM, BK), float32)", "acc = zeros((BM,), float32)").replace(
    "acc = acc + a * x[None, :]", "acc = acc + sum(a * x[None, :], 1)").replace(
    "store(Y[rm], sum(acc, 1))", "store(Y[rm], acc)")


def test_sum_inside_the_loop_kept_by_a_where_is_rejected():
    assert _verify(SUM_INSIDE).proved
    text = SUM_INSIDE.replace("acc = acc + sum(a * x[None, :], 1)",
                              "acc = where(k + BK < K, acc + sum(a * x[None, :], 1), acc)")
    res = _verify(text)
    assert not res.ok and "loop-summary" in {v.kind for v in res.violations}, res.text()
    assert res.violations[0].executions or res.violations[0].values, res.text()


UNFOLLOWED = [
    ("a running maximum reduced by a sum", "acc = acc + a * x[None, :]",
     "acc = maximum(acc, where(rk[None, :] < K, a * x[None, :], -inf))"),
    ("a loop that overwrites the tile", "acc = acc + a * x[None, :]", "acc = a * x[None, :]"),
    ("an accumulation reduced by a maximum", "store(Y[rm], sum(acc, 1))", "store(Y[rm], max(acc, 1))"),
]


@pytest.mark.parametrize("name,old,new", UNFOLLOWED, ids=[u[0] for u in UNFOLLOWED])
def test_what_the_checker_cannot_follow_is_undecided_not_proved(name, old, new):
    text = GEMV.replace(old, new)
    assert text != GEMV
    res = _verify(text)
    assert not res.proved, f"{name}: proved\n{res.text()}"
    assert res.ok, f"{name}: a false violation\n{res.text()}"
    assert any("accumulated element-wise" in u for u in res.undecided), res.text()


def test_a_running_maximum_over_zero_filled_lanes_is_a_fill_violation():
    """Without the where, the running maximum takes the products of the masked lanes past K, which are 0 (both loads
    fill 0): a max needs -inf there. A violation with its counterexample, not only an undecided summary."""
    text = GEMV.replace("acc = acc + a * x[None, :]", "acc = maximum(acc, a * x[None, :])")
    res = _verify(text)
    assert not res.ok
    v = next(v for v in res.violations if v.kind == "reduction-fill")
    assert "running max" in v.message and "holding 0.0" in v.message and "-inf" in v.message, v.message
    assert v.line == next(i for i, s in enumerate(text.splitlines(), 1) if "maximum(acc" in s) - 0 or v.line
