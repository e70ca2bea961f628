"""What a host guarantees about an index tensor, stated as a quantified fact the checker uses (issue 42): a
variable-length batch over non-decreasing cu_seqlens, a scatter through a permutation. Without the fact each is a
false alarm (a row written twice); with it, proved; a fact the kernel contradicts still leaves the bug found."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify

VARLEN = '''from argus_inductor.dsl import *


@kernel
def varlen_scale(X: Tensor("L", "C"), cu_seqlens: Tensor("B1", dtype=int32), Y: Tensor("L", "C"), max_seqlen: int,
                 BS: constexpr = 16, BC: constexpr = 32):
    b, ps, pc = tile_grid(B1 - 1, cdiv(max_seqlen, BS), cdiv(C, BC))
    ASSUME
    start = load(cu_seqlens[b])
    end = load(cu_seqlens[b + 1])
    rows = start + ps * BS + arange(BS)
    rc = pc * BC + arange(BC)
    x = load(X[rows, rc], mask=(rows < end)[:, None])
    store(Y[rows, rc], x * 2.0, mask=(rows < end)[:, None])
'''

SCATTER = '''from argus_inductor.dsl import *


@kernel
def scatter_rows(X: Tensor("N", "C"), perm: Tensor("N", dtype=int32), Y: Tensor("P", "C"),
                 BN: constexpr = 16, BC: constexpr = 32):
    pn, pc = tile_grid(cdiv(N, BN), cdiv(C, BC))
    ASSUME
    rn = pn * BN + arange(BN)
    rc = pc * BC + arange(BC)
    dest = load(perm[rn])
    store(Y[dest, rc], load(X[rn, rc]), mask=(rn < N)[:, None])
'''

POL = Policy.make(BS=16, BC=32)
SHAPES = dict(L=100, C=40, B1=5)


def _varlen(assume: str = "pass"):
    return kernels_from_source(VARLEN.replace("ASSUME", assume), "varlen.py")["varlen_scale"]


def test_varlen_rows_are_a_false_alarm_without_the_fact():
    res = verify(_varlen(), POL, SHAPES)
    assert not res.ok and "write-once" in {v.kind for v in res.violations}, res.text()


@pytest.mark.parametrize("fact", ["nondecreasing(cu_seqlens)", "implies(i <= j, cu_seqlens[i] <= cu_seqlens[j])"])
def test_varlen_rows_prove_with_the_hosts_fact(fact):
    """Stated from outside (verify's assumptions, the CLI's --assume) or inside the kernel (assume("...")): either
    way two programs of different sequences can no longer write one row."""
    res = verify(_varlen(), POL, SHAPES, assumptions=[fact])
    assert res.ok and res.proved, res.text()
    res = verify(_varlen(f'assume("{fact}")'), POL, SHAPES)
    assert res.ok and res.proved, res.text()
    sym = verify(_varlen(f'assume("{fact}")'), POL, None)
    assert sym.ok and sym.proved, sym.text()


def test_a_real_overlap_is_still_found_under_the_fact():
    """With the fact, a kernel whose rows run one past the sequence's end writes the next sequence's first row."""
    bad = VARLEN.replace("ASSUME", 'assume("nondecreasing(cu_seqlens)")').replace("(rows < end)", "(rows <= end)")
    res = verify(kernels_from_source(bad, "varlen.py")["varlen_scale"], POL, SHAPES)
    assert not res.ok and "write-once" in {v.kind for v in res.violations}, res.text()


def test_scatter_through_a_permutation():
    k = kernels_from_source(SCATTER.replace("ASSUME", "pass"), "scatter.py")["scatter_rows"]
    pol, shapes = Policy.make(BN=16, BC=32), dict(N=45, C=40, P=45)
    res = verify(k, pol, shapes)
    assert not res.ok and "write-once" in {v.kind for v in res.violations}, res.text()
    res = verify(k, pol, shapes, assumptions=["permutation(perm)"])
    assert res.proved, res.text()
    k2 = kernels_from_source(SCATTER.replace("ASSUME", 'assume("permutation(perm)")'), "scatter.py")["scatter_rows"]
    assert verify(k2, pol, shapes).proved


def test_an_unreadable_fact_is_an_error_naming_it():
    res = verify(_varlen('assume("nondecreasing(X)")'), POL, SHAPES)
    assert not res.ok and any("one-dimensional integer tensor" in e and "assume(" in e for e in res.errors), res.text()
    with pytest.raises(ValueError, match="not an element of an integer tensor"):
        verify(_varlen(), POL, SHAPES, assumptions=["Q[i] <= 3"])
