"""gemv_cat (decode's q, k and v projections in one launch) is proven at the shapes a plan verifies it at: each
column of C written once, by the program of its segment, with its K reduction complete. Planted bugs in how a
program finds its segment and where it writes are rejected with a counterexample."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.gemm import gemv_cat

SRC = "from argus_inductor.dsl import *\n" + gemv_cat.ir.source
LLAMA = dict(K=4096, N0=4096, N1=1024, N2=1024, NC=6144)  # the rows (M) stay symbolic
RAGGED = dict(K=40, N0=20, N1=7, N2=33, NC=60)


@pytest.mark.parametrize("shapes,policy", [(LLAMA, Policy.make(BN=8, BK=1024)), (RAGGED, Policy.make(BN=16, BK=16))])
def test_gemv_cat_is_proven(shapes, policy):
    res = verify(gemv_cat, policy, shapes)
    assert res.ok, res.text()


@pytest.mark.parametrize("old,new,kind", [
    # the third segment written at twice the first's width: the columns after the second segment never written
    ("store(C[pm, s1 * N0 + s2 * N1 + rn]", "store(C[pm, s1 * N0 + s2 * N0 + rn]", "write-all"),
    # the second segment's programs counted from the first tile: they write past their segment
    ("rn = (pn - s1 * t0 - s2 * t1) * BN", "rn = (pn - s1 * t0 - s2 * t0) * BN", "write-all"),
    # the third segment written at the first's offset: the first segment's columns written twice
    ("store(C[pm, s1 * N0 + s2 * N1 + rn]", "store(C[pm, s1 * N0 - s2 * N0 + rn]", "write-once"),
    # the third segment masked to the second's width: its columns past N1 never written
    ("in2 = (rn < N2) & (s2 == 1)", "in2 = (rn < N1) & (s2 == 1)", "write-all"),
])
def test_planted_segment_bug_is_rejected(old, new, kind):
    assert old in SRC
    bad = kernels_from_source(SRC.replace(old, new))["gemv_cat"]
    res = verify(bad, Policy.make(BN=16, BK=16), RAGGED)
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
    assert "program" in res.text() and "line" in res.text(), res.text()
