"""gemv_cat (decode's q, k and v projections in one launch) is proven at the shapes a plan verifies it at: each
column of C written once, by the program of its segment, with its K reduction complete. Planted bugs in how a
program finds its segment, which branch it takes, where it writes and how far its segment's K loop runs are
rejected with a counterexample."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.gemm import gemv_cat

from .planted import assert_flags_one_of, lines_with

SRC = "from argus_inductor.dsl import *\n" + gemv_cat.ir.source
LLAMA = dict(K=4096, N0=4096, N1=1024, N2=1024, NC=6144)  # the rows (M) stay symbolic
RAGGED = dict(K=40, N0=20, N1=7, N2=33, NC=60)


@pytest.mark.parametrize("shapes,policy", [(LLAMA, Policy.make(BN=8, BK=1024)), (RAGGED, Policy.make(BN=16, BK=16))])
def test_gemv_cat_is_proven(shapes, policy):
    res = verify(gemv_cat, policy, shapes)
    assert res.ok, res.text()


@pytest.mark.parametrize("old,new,kind", [
    # the third segment written at twice the first's width: the columns after the second segment never written
    ("store(C[pm, N0 + N1 + rn]", "store(C[pm, N0 + N0 + rn]", "write-all"),
    # the second segment's programs counted from the first tile: they write past their segment
    ("rn = (pn - s1 * t0 - s2 * t1) * BN", "rn = (pn - s1 * t0 - s2 * t0) * BN", "write-all"),
    # the third segment written at the first's offset: the first segment's columns written twice
    ("store(C[pm, N0 + N1 + rn]", "store(C[pm, rn]", "write-once"),
    # the third segment masked to the second's width: its columns past N1 never written
    ("store(C[pm, N0 + N1 + rn], sum(part2, 0), mask=rn < N2)", "store(C[pm, N0 + N1 + rn], sum(part2, 0), mask=rn < N1)",
     "write-all"),
    # the third segment's branch taken by the second segment's programs too: the second's columns written twice
    ("if s2 == 1:", "if s1 == 1:", "write-once"),
    # the third segment's loop starts one block in: its sums miss K's first block
    ("for k in unrollable_range(0, K, BK, KSTEPS):\n            rk = k + arange(BK)\n            part2",
     "for k in unrollable_range(BK, K, BK, KSTEPS):\n            rk = k + arange(BK)\n            part2",
     "reduction-complete"),
])
def test_planted_segment_bug_is_rejected(old, new, kind):
    assert old in SRC
    bad = kernels_from_source(SRC.replace(old, new))["gemv_cat"]
    res = verify(bad, Policy.make(BN=16, BK=16), RAGGED)
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
    assert "program" in res.text() and "line" in res.text(), res.text()


# The same three segments with loops whose trip count the program's segment sets (K times 0 or 1) instead of
# branches. The checker used to exempt an element-wise accumulation whose cover's bounds named the program from the
# completeness check (as it must for a split-K partial or a convolution's moving window, whose covers START at a
# program's or element's offset): a loop that skipped its segment's first block, or ran for the wrong segment's
# programs, proved. Now only a cover whose start (or count) moves is exempt.
BOUNDED = '''from argus_inductor.dsl import *

@kernel
def gemv_cat(A: Tensor("M", "K"), B0: Tensor("K", "N0"), B1: Tensor("K", "N1"), B2: Tensor("K", "N2"),
             C: Tensor("M", "NC"), BN: constexpr = 32, BK: constexpr = 256):
    t0 = cdiv(N0, BN)
    t1 = cdiv(N1, BN)
    pm, pn = tile_grid(M, t0 + t1 + cdiv(N2, BN))
    assume(NC == N0 + N1 + N2)
    s1 = (pn >= t0).to(int32)
    s2 = (pn >= t0 + t1).to(int32)
    rn = (pn - s1 * t0 - s2 * t1) * BN + arange(BN)
    part0 = zeros((BK, BN), float32)
    for k in range(0, K * (1 - s1), BK):
        rk = k + arange(BK)
        part0 = part0 + load(A[pm, rk]).to(float32)[:, None] * load(B0[rk, rn]).to(float32)
    part1 = zeros((BK, BN), float32)
    for k in range(0, K * (s1 - s2), BK):
        rk = k + arange(BK)
        part1 = part1 + load(A[pm, rk]).to(float32)[:, None] * load(B1[rk, rn]).to(float32)
    part2 = zeros((BK, BN), float32)
    for k in range(0, K * s2, BK):
        rk = k + arange(BK)
        part2 = part2 + load(A[pm, rk]).to(float32)[:, None] * load(B2[rk, rn]).to(float32)
    store(C[pm, rn], sum(part0, 0), mask=(rn < N0) & (s1 == 0))
    store(C[pm, N0 + rn], sum(part1, 0), mask=(rn < N1) & (s1 == 1) & (s2 == 0))
    store(C[pm, N0 + N1 + rn], sum(part2, 0), mask=(rn < N2) & (s2 == 1))
'''


def test_loops_bounded_by_the_segment_prove():
    res = verify(kernels_from_source(BOUNDED)["gemv_cat"], Policy.make(BN=16, BK=16), RAGGED)
    assert res.proved, res.text()


@pytest.mark.parametrize("old,new", [
    ("for k in range(0, K * s2, BK):", "for k in range(BK, K * s2, BK):"),  # the first block skipped
    ("for k in range(0, K * s2, BK):", "for k in range(0, K * s2 - BK, BK):"),  # the last block skipped
    ("for k in range(0, K * (s1 - s2), BK):", "for k in range(0, K * (1 - s1), BK):"),  # the wrong segment's trips
])
def test_a_segment_bounded_loop_that_misses_k_is_rejected(old, new):
    bad = kernels_from_source(BOUNDED.replace(old, new))["gemv_cat"]
    res = verify(bad, Policy.make(BN=16, BK=16), RAGGED)
    assert not res.ok and {v.kind for v in res.violations} == {"reduction-complete"}, res.text()
    assert all(v.executions or v.values for v in res.violations), res.text()
    assert_flags_one_of(res, lines_with(BOUNDED.replace(old, new), new) | lines_with(BOUNDED, "store(C[pm,"))
