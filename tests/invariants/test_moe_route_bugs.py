"""The fused MoE routing kernel (kernels.moe.moe_route) is proven for every shape: each slot of sorted_ids and each
block of block_expert written exactly once. Two planted indexing bugs and two in its loop over chunks of pairs are
rejected with a counterexample."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.moe import moe_count, moe_place, moe_route

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


COUNTED = Policy.make(BM=16, BN=16, BE=16, BC=8, BS=4)  # four programs a block
PLACE_SRC = "from argus_inductor.dsl import *\n" + moe_place.ir.source
COUNT_SRC = "from argus_inductor.dsl import *\n" + moe_count.ir.source


def test_counted_routing_kernels_are_proven_for_every_shape():
    """The two launches of a large routing: moe_count writes each chunk's counts once, moe_place each slot and each
    block's expert once, for every N, C, S and NB (its chunk loop's bounds are sums over a loaded table)."""
    for k, pol in ((moe_count, Policy.make(BN=16, BE=16)), (moe_place, COUNTED)):
        res = verify(k, pol, None)
        assert res.ok and res.mode == "symbolic", res.text()


@pytest.mark.parametrize("old,new,kind", [
    ("store(sorted_ids[pb * BM + pj * BS + rs]", "store(sorted_ids[pb * BM + pj * BS + rs // 2]",
     "write-once"),  # two slots, one pair
    ("rb = pb + arange(1)", "rb = pb * 2 + arange(1)", "write-all"),  # every other block's expert never written
    # each of a block's programs fills the block's first BS slots: the same slots written BM / BS times
    ("store(sorted_ids[pb * BM + pj * BS + rs]", "store(sorted_ids[pb * BM + rs]", "write-once"),
    # every program of a block writes the block's expert, not only its first
    (", mask=(arange(1) + pj) == 0)", ")", "write-once"),
    # the earlier chunks' pairs of the block's expert forgotten: each chunk would rank its pairs from 0
    ("seen = seen + sum(hits, 0)", "seen = sum(hits, 0)", "loop-summary"),
])
def test_planted_counted_placement_bug_is_rejected(old, new, kind):
    assert old in PLACE_SRC
    bad = kernels_from_source(PLACE_SRC.replace(old, new))["moe_place"]
    res = verify(bad, COUNTED, dict(N=40, S=16 * 9, NB=9, C=3, BEC=16))
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
    assert ("thread" in res.text()) if kind == "write-once" else res.violations[0].executions or \
        res.violations[0].values or "never written" in res.text(), res.text()


@pytest.mark.parametrize("old,new,kind", [
    ("store(chunk_counts[pc, re]", "store(chunk_counts[pc // 2, re]", "write-once"),  # two chunks, one row
    ("rn = pc * BN + arange(BN)", "rn = pc * BN + arange(BN) // 2", "reduction-once"),  # a pair counted twice
])
def test_planted_chunk_count_bug_is_rejected(old, new, kind):
    assert old in COUNT_SRC
    bad = kernels_from_source(COUNT_SRC.replace(old, new))["moe_count"]
    res = verify(bad, Policy.make(BN=16, BE=16), dict(N=40, C=3, BEC=16))
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
