"""An element-wise product summed over K (a GEMV's `sum(a[:, None] * b, 0)`, the split-KV merge's rescaled sums)
has a term at index k only where both factors do: a factor whose mask drops an index drops it from the sum, even
when the other factor covers it. Before, the product took the first factor's condition for the shared index, so
a kernel whose second factor skipped K's last index proved."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify

SRC = '''from argus_inductor.dsl import *


@kernel
def gemv(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"), BN: constexpr = 16, BK: constexpr = 16):
    pm, pn = tile_grid(M, cdiv(N, BN))
    rn = pn * BN + arange(BN)
    dots = zeros((BN,), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[pm, rk], mask=rk < K, other=0.0).to(float32)
        b = load(B[rk, rn], mask=(rk < K)[:, None], other=0.0).to(float32)
        dots = dots + sum(a[:, None] * b, 0)
    store(C[pm, rn], dots)
'''
SHAPES = dict(M=2, K=40, N=32)


@pytest.mark.parametrize("factor", ["a", "b"])
def test_a_factor_that_drops_an_index_drops_it_from_the_sum(factor):
    good = kernels_from_source(SRC)["gemv"]
    assert verify(good, Policy.make(BN=16, BK=16), SHAPES).ok
    old = "mask=rk < K," if factor == "a" else "mask=(rk < K)[:, None],"
    new = "mask=rk < K - 1," if factor == "a" else "mask=(rk < K - 1)[:, None],"
    bad = kernels_from_source(SRC.replace(old, new))["gemv"]
    res = verify(bad, Policy.make(BN=16, BK=16), SHAPES)
    assert not res.ok and "reduction-complete" in {v.kind for v in res.violations}, res.text()
    assert "K index 39" in res.text(), res.text()


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
def test_factors_live_on_disjoint_lanes_cover_nothing(mode):
    """a is live where rk < K, b where rk >= K: every product is zero, so the sum covers no K index. Before, at
    concrete shapes the conjunction of the factors' conditions simplified to False, and a cover condition that is
    False was dropped as if it said nothing about the index, so the sum claimed all of K and the kernel proved."""
    bad = kernels_from_source(SRC.replace("mask=(rk < K)[:, None],", "mask=(rk >= K)[:, None],"))["gemv"]
    res = verify(bad, Policy.make(BN=16, BK=16), SHAPES if mode == "specialized" else None)
    assert not res.ok and "reduction-complete" in {v.kind for v in res.violations}, res.text()
    assert "K index 0 " in res.text(), res.text()
