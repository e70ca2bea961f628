"""Split-KV decode's two kernels (kernels.attention.attention_decode_part and attention_decode_merge) are proven for
every shape: each chunk's statistics reduce over all of its keys and are written once, and the merge reduces over
every chunk. Planted bugs in the chunk loop, the chunk index and the merge are rejected with a counterexample."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.attention import attention_decode_merge, attention_decode_part

PART = Policy.make(BG=16, BN=16, BD=16, HAS_MASK=1)
MERGE = Policy.make(BC=16, BD=16)
PART_SRC = "from argus_inductor.dsl import *\n" + attention_decode_part.ir.source
MERGE_SRC = "from argus_inductor.dsl import *\n" + attention_decode_merge.ir.source
SHAPES = dict(Z=1, H=8, HK=2, S=1, C=3, TS=40, D=16)


@pytest.mark.parametrize("k,pol", [(attention_decode_part, PART), (attention_decode_merge, MERGE)])
def test_split_decode_kernels_are_proven_for_every_shape(k, pol):
    res = verify(k, pol, None)
    assert res.ok and res.mode == "symbolic", res.text()


@pytest.mark.parametrize("old,new,kind", [
    # the chunk's last key block skipped
    ("for n0 in range(0, TS, BN):", "for n0 in range(0, TS - BN, BN):", "reduction-complete"),
    # every chunk's statistics written to chunk 0's slot
    ("store(Acc[z, hrow, c, rd]", "store(Acc[z, hrow, 0, rd]", "write-once"),
])
def test_planted_chunk_bug_is_rejected(old, new, kind):
    assert old in PART_SRC
    bad = kernels_from_source(PART_SRC.replace(old, new))["attention_decode_part"]
    res = verify(bad, PART, SHAPES)
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
    assert "program" in res.text() and "line" in res.text(), res.text()


@pytest.mark.parametrize("old,new,kind", [
    # the last chunk's max left out of the merge: the chunks are rescaled to a max that is not all of theirs
    ("m_c = load(Max[z, h, rc], mask=rc < C, other=-inf)", "m_c = load(Max[z, h, rc], mask=rc < C - 1, other=-inf)",
     "reduction-complete"),
    # the last chunk's accumulator left out, under the rescaling weights: a product has a term only where both
    # factors do (it proved while the weights' wider cover stood for the product's)
    ("acc = sum(w[:, None] * load(Acc[z, h, rc, rd], mask=(rc < C)[:, None], other=0.0), 0)",
     "acc = sum(w[:, None] * load(Acc[z, h, rc, rd], mask=(rc < C - 1)[:, None], other=0.0), 0)",
     "reduction-complete"),
    # the last chunk's denominator left out: the output divides sums over different chunks
    ("den = sum(w * load(Den[z, h, rc], mask=rc < C, other=0.0), 0)",
     "den = sum(w * load(Den[z, h, rc], mask=rc < C - 1, other=0.0), 0)", "reduction-range"),
])
def test_planted_merge_bug_is_rejected(old, new, kind):
    assert old in MERGE_SRC
    bad = kernels_from_source(MERGE_SRC.replace(old, new))["attention_decode_merge"]
    res = verify(bad, MERGE, dict(Z=1, H=8, S=1, C=3, D=16))
    assert not res.ok and kind in {v.kind for v in res.violations}, res.text()
