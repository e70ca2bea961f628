"""The norm prologue (NORM=1: an RMSNorm fused in front of decode's gemv_cat and gemm_gate_up) proves at the shapes
a plan verifies it at, on both of gemm_gate_up's paths; the row's sum of squares is a reduction over K like the
products', so bugs planted in it are rejected: squares overwritten each K step instead of accumulated (the tensor-core
path: the loop summary shows the carried value dropping earlier iterations; the CUDA-core paths: the form is not
followed, so never proved), and a row's sum of squares put into the wrong lane (one row scaled by the other's, the
other by its zero fill, whose reduction over K covered nothing)."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.gemm import gemv_cat
from argus_inductor.kernels.gemm_residual import gemm_gate_up

from .planted import assert_flags_one_of, lines_with

CAT = dict(K=40, N0=20, N1=7, N2=33, NC=60, KW=40)
LLAMA = dict(K=4096, N0=4096, N1=1024, N2=1024, NC=6144, KW=4096)  # the rows (M) stay symbolic
GATE_UP = dict(M=3, N=20, K=40, KW=40)
ROWS = Policy.make(BM=2, BN=4, BK=16, GEMV=1, NORM=1, ACT=3)
TILE = Policy.make(BM=16, BN=16, BK=16, GEMV=0, NORM=1, ACT=3)


def _planted(kernel, old: str, new: str):
    src = kernel.ir.source
    assert old in src
    text = "from argus_inductor.dsl import *\n" + src.replace(old, new)
    return text, kernels_from_source(text)[kernel.name]


def test_norm_prologue_proves():
    for shapes, pol in ((CAT, Policy.make(BN=16, BK=16, NORM=1)), (LLAMA, Policy.make(BN=1, BK=1024, NORM=1))):
        res = verify(gemv_cat, pol, shapes)
        assert res.proved, res.text()
    for pol in (ROWS, TILE):
        for shapes in ({}, GATE_UP):
            res = verify(gemm_gate_up, pol, shapes)
            assert res.proved, res.text()


def test_squares_overwritten_on_the_tensor_core_path_is_rejected():
    text, bad = _planted(gemm_gate_up, "squares = squares + sum(af * af, 1)", "squares = sum(af * af, 1)")
    res = verify(bad, TILE, GATE_UP)
    assert not res.ok and "loop-summary" in {v.kind for v in res.violations}, res.text()
    assert "program" in res.text() and "covers K" in res.text(), res.text()
    assert_flags_one_of(res, lines_with(text, "for k in range(0, K, BK):") | lines_with(text, "squares = sum("))


@pytest.mark.parametrize("kernel,old,new,policy,shapes", [
    (gemv_cat, "squares = squares + a * a", "squares = a * a", Policy.make(BN=16, BK=16, NORM=1), CAT),
    (gemm_gate_up, "part_s = part_s + a * a", "part_s = a * a", ROWS, GATE_UP),
], ids=["gemv_cat", "gemm_gate_up rows"])
def test_squares_overwritten_on_a_cuda_core_path_is_never_proved(kernel, old, new, policy, shapes):
    _, bad = _planted(kernel, old, new)
    res = verify(bad, policy, shapes)
    assert not res.proved and any("accumulated element-wise" in u for u in res.undecided), res.text()


def test_squares_in_the_wrong_lane_is_rejected():
    text, bad = _planted(gemm_gate_up, "squares = where(arange(BM) == r,", "squares = where(arange(BM) == 0,")
    res = verify(bad, ROWS, GATE_UP)
    assert not res.ok, res.text()
    kinds = {v.kind: v for v in res.violations}
    # row 0 scaled by row 1's sum (its element's M tag is 1), row 1 by a zero fill that summed nothing
    assert "store-coordinates" in kinds and "M tag is 1" in kinds["store-coordinates"].message, res.text()
    assert "reduction-complete" in kinds and "covered nothing" in kinds["reduction-complete"].message, res.text()
    assert all(v.executions or v.values for v in res.violations), res.text()
