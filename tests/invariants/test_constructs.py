"""Constructs beyond the planted-bug suite: argmax, static_range, nested loops with a carried integer
offset, an `if` on the loop counter, transpose, reshape, per-block partial results. Each correct kernel
is proven at concrete shapes and symbolically; each mutant is rejected at the expected line."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy
from argus_inductor.invariants import verify_source

SOURCE = '''\
from argus_inductor.dsl import *


@kernel
def row_argmax(X: Tensor("R", "C"), Out: Tensor("R", dtype=int32), BR: constexpr = 4, BC: constexpr = 128):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    rc = arange(BC)
    x = load(X[rr, rc], other=-inf)
    store(Out[rr], argmax(x, 1))


@kernel
def unrolled_sum(X: Tensor("R", "C"), Out: Tensor("R"), BR: constexpr = 4, BC: constexpr = 32):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    acc = zeros((BR,), float32)
    for i in static_range(4):
        acc = acc + sum(load(X[rr, i * BC + arange(BC)]), 1)
    store(Out[rr], acc)


@kernel
def row_block_gemm(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"),
                   BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32):
    (pm,) = tile_grid(cdiv(M, BM))
    rm = pm * BM + arange(BM)
    for n0 in range(0, N, BN):
        rn = n0 + arange(BN)
        acc = zeros((BM, BN), float32)
        kk = 0
        for k in range(0, K, BK):
            rk = kk + arange(BK)
            acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
            kk = kk + BK
        store(C[rm, rn], acc)


@kernel
def first_tile_special(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"),
                       BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        if k == 0:
            acc = mma(load(A[rm, rk]), load(B[rk, rn]))
        else:
            acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    store(C[rm, rn], acc)


@kernel
def transpose(X: Tensor("M", "N"), Y: Tensor("N", "M"), BM: constexpr = 32, BN: constexpr = 32):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    x = load(X[rm, rn])
    store(Y[rn, rm], trans(x))


@kernel
def flat_copy(X: Tensor("R", "C"), Y: Tensor("R", "C"), BR: constexpr = 4, BC: constexpr = 32):
    pr, pc = tile_grid(cdiv(R, BR), cdiv(C, BC))
    rr = pr * BR + arange(BR)
    rc = pc * BC + arange(BC)
    x = reshape(load(X[rr, rc]), (BR, 1, BC))
    store(Y[rr, rc], reshape(x * 2.0, (BR, BC)))


@kernel
def block_sums(X: Tensor("R", "C"), Out: Tensor("P"), BR: constexpr = 4, BC: constexpr = 256):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    x = load(X[rr, arange(BC)])
    store(Out[pr], sum(sum(x, 1), 0))
'''

SHAPES = dict(R=13, C=100, M=70, N=45, K=53, P=4)
PRECONDITIONS = ["C <= 128", "P == (R + 3) // 4"]


def line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


@pytest.mark.parametrize("policy", [Policy(), Policy.make(persistent=True, grid_order="grouped", num_warps=8)])
@pytest.mark.parametrize("shapes", [SHAPES, None], ids=["specialized", "symbolic"])
def test_constructs_are_proven(shapes, policy):
    results = verify_source(SOURCE, "constructs.py", policy, shapes, assumptions=PRECONDITIONS)
    assert len(results) == 7
    for r in results:
        assert r.ok and r.proved, r.text()


MUTANTS = [
    ("row_block_gemm", "kk = kk + BK", "kk = kk + BK - 1", "reduction-once"),
    ("first_tile_special", "acc = mma(load(A[rm, rk]), load(B[rk, rn]))\n",
     "acc = mma(load(A[rm, rk + 1]), load(B[rk, rn]))\n", "mma-agreement"),
    ("first_tile_special", "if k == 0:", "if k == 32:", "loop-summary"),
    ("unrolled_sum", "static_range(4)", "static_range(3)", "reduction-complete"),
    ("transpose", "store(Y[rn, rm], trans(x))", "store(Y[rm, rn], x)", "store-coordinates"),
    ("row_argmax", "BC: constexpr = 128", "BC: constexpr = 64", "reduction-complete"),
    ("block_sums", "store(Out[pr], sum(sum(x, 1), 0))", "store(Out[pr // 2], sum(sum(x, 1), 0))", "write-once"),
]


@pytest.mark.parametrize("kernel,old,new,kind", MUTANTS, ids=[f"{k}: {n.strip()}" for k, _, n, _ in MUTANTS])
def test_construct_mutants_are_rejected(kernel, old, new, kind):
    assert old in SOURCE
    bad = SOURCE.replace(old, new, 1)
    (r,) = verify_source(bad, "constructs.py", None, SHAPES, kernels=[kernel])
    assert not r.ok and kind in {v.kind for v in r.violations}, r.text()
