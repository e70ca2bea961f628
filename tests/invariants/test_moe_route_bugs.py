"""The fused MoE routing kernel (kernels.moe.moe_route) is proven for every shape: each slot of sorted_ids and each
block of block_expert written exactly once. Two planted indexing bugs and two in its loop over chunks of pairs are
rejected with a counterexample."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.moe import moe_route

POLICY = Policy.make(BM=16, BN=16, BE=16, BS=64, BB=4)
SRC = "from argus_inductor.dsl import *\n" + moe_route.ir.source


def test_moe_route_is_proven_for_every_shape():
    res = verify(moe_route, POLICY, None)
    assert res.ok and res.mode == "symbolic", res.text()


@pytest.mark.parametrize("old,new,kind", [
    ("rs = ps * BS + arange(BS)", "rs = ps * BB + arange(BS)", "write-once"),   # slot tiles overlap
    ("rb = ps * BB + arange(BB)", "rb = ps * BS + arange(BB)", "write-all"),    # blocks skipped
])
def test_planted_indexing_bug_is_rejected(old, new, kind):
    assert old in SRC
    bad = kernels_from_source(SRC.replace(old, new))["moe_route"]
    res = verify(bad, POLICY, dict(N=16, S=16 * 9, NB=9))
    assert not res.ok
    assert kind in {v.kind for v in res.violations}, res.text()
    # the counterexample names the element: a thread writing a slot twice, or the block nobody writes
    assert ("thread" in res.text()) if kind == "write-once" else ("never written" in res.text())


@pytest.mark.parametrize("old,new,kind", [
    # a chunk's pairs counted twice into the experts' totals
    ("counts = counts + sum(onehot.to(int32), 0)",
     "counts = counts + sum(onehot.to(int32), 0) + sum(onehot.to(int32), 0)", "reduction-once"),
    # the earlier chunks' pairs forgotten: each chunk would rank its pairs from 0
    ("seen = seen + sum(hits, 0)", "seen = sum(hits, 0)", "loop-summary"),
])
def test_planted_chunk_loop_bug_is_rejected(old, new, kind):
    """The routing builds its pairs x experts table a chunk of pairs at a time; the checker follows the counts the
    chunks carry (N = 40 pairs: three chunks of 16, the last one ragged)."""
    assert old in SRC
    bad = kernels_from_source(SRC.replace(old, new))["moe_route"]
    res = verify(bad, POLICY, dict(N=40, S=16 * 9, NB=9))
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
    assert res.violations[0].executions or res.violations[0].values, res.text()
