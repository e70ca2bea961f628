"""tf32_split (the operand split of three-pass tf32 GEMMs) proves for every shape, and bugs planted in its stores
are rejected with the counterexample's line: a slot store that leaves the ragged edge unmasked writes into the
next slot, and a slot offset that is off by one column writes twice and misses a column."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.gemm import tf32_split

from .planted import assert_flags_one_of, lines_with

SHAPES = {"Bt": 2, "R": 37, "C": 53, "C3": 159}  # C not a multiple of the 128-wide column tile


@pytest.mark.parametrize("lo", [0, 1, 2])
def test_split_proves_symbolically_and_at_odd_shapes(lo):
    pol = Policy.make(BR=32, BC=128, LO=lo)
    for shapes in ({}, SHAPES):
        res = verify(tf32_split, pol, shapes)
        assert res.ok, res.text()


BUGS = [
    ("unmasked ragged edge", "store(Y[b, rr, LO * C + rc], lo, mask=inside)", "store(Y[b, rr, LO * C + rc], lo)"),
    ("slot offset off by one", "store(Y[b, rr, ((LO + 1) % 3) * C + rc], hi, mask=inside)",
     "store(Y[b, rr, ((LO + 1) % 3) * C + rc + 1], hi, mask=inside)"),
]


@pytest.mark.parametrize("name,old,new", BUGS, ids=[b[0] for b in BUGS])
def test_planted_store_bug_is_rejected_at_its_line(name, old, new):
    src = tf32_split.ir.source
    assert old in src
    bad = src.replace(old, new)
    k = kernels_from_source("from argus_inductor.dsl import *\n" + bad)["tf32_split"]
    res = verify(k, Policy.make(BR=32, BC=128, LO=1), SHAPES)
    assert not res.ok, name
    v = res.violations[0]
    assert v.kind in ("write-once", "write-all", "bounds"), res.text()
    assert v.executions or v.values, "a counterexample names the program and element"
    text = "from argus_inductor.dsl import *\n" + bad
    (line,) = lines_with(text, new)
    if v.kind == "write-all":  # an element no store reaches is reported at Y's first store
        assert_flags_one_of(res, lines_with(text, "store(Y"))
    elif f"store at line {line}" not in v.message:  # a double write names both stores
        assert_flags_one_of(res, {line})
