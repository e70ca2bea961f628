"""The CUDA-core path of the GEMM kernels (GEMV=1: each row of the tile multiplied into B's tile, the products
accumulated element-wise over K and summed after the loop) proves for every shape, at one row a program and at two;
bugs planted in it are rejected at their line with a concrete program and element: a row index read without the
clamp (a scalar index is not masked, so the second row of the last tile reads past M), and a K step that skips every
other block (the sum then misses half of K), a row loop that stops one row short (the last row is stored as its zero
fill: a where that puts each row's sum into its lane hands the other lanes nothing). Partial sums overwritten instead
of accumulated are not proved."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.gemm import gemm_epilogue
from argus_inductor.kernels.gemm_residual import gemm_gate_up, gemm_residual

from .planted import assert_flags_one_of, lines_with

SHAPES = {"M": 3, "N": 45, "K": 70, "NB": 45}  # odd M: with BM=2 the last tile's second row is past M


@pytest.mark.parametrize("kernel", [gemm_epilogue, gemm_residual, gemm_gate_up], ids=lambda k: k.name)
@pytest.mark.parametrize("bm", [1, 2])
def test_gemv_path_proves_symbolically_and_at_odd_shapes(kernel, bm):
    pol = Policy.make(BM=bm, BN=16, BK=32, GEMV=1)
    for shapes in ({}, {k: v for k, v in SHAPES.items() if kernel is not gemm_gate_up or k != "NB"}):
        res = verify(kernel, pol, shapes)
        assert res.proved, res.text()


@pytest.mark.parametrize("kernel", [gemm_epilogue, gemm_residual, gemm_gate_up], ids=lambda k: k.name)
def test_static_k_steps_prove_where_they_cover_k_and_not_one_short(kernel):
    """KSTEPS (the K loop as static steps, read by the checker as a loop): proved at a shape where KSTEPS * BK
    covers K, also with a step to spare; one step short, the stored sum misses the last K block (a concrete element
    and the K index it never included); with K symbolic, never proved (nothing bounds K)."""
    shapes = {k: v for k, v in SHAPES.items() if kernel is not gemm_gate_up or k != "NB"}  # K = 70, BK = 32
    for steps in (3, 4):
        res = verify(kernel, Policy.make(BM=1, BN=16, BK=32, GEMV=1, KSTEPS=steps), shapes)
        assert res.proved, res.text()
    res = verify(kernel, Policy.make(BM=1, BN=16, BK=32, GEMV=1, KSTEPS=2), shapes)
    assert not res.ok
    v = res.violations[0]
    assert v.kind == "reduction-complete" and "never included K index 64" in v.message, res.text()
    assert v.executions or v.values, res.text()
    assert not verify(kernel, Policy.make(BM=1, BN=16, BK=32, GEMV=1, KSTEPS=3)).proved


def test_gemv_cat_static_k_steps_prove_where_they_cover_k_and_not_one_short():
    """gemv_cat's three K loops as KSTEPS static steps: proved where the steps cover K; one short, a segment's
    stored sum misses the last K block."""
    from argus_inductor.kernels.gemm import gemv_cat

    shapes = {"M": 2, "K": 70, "N0": 20, "N1": 7, "N2": 33, "NC": 60}
    assert verify(gemv_cat, Policy.make(BN=4, BK=32, KSTEPS=3), shapes).proved
    res = verify(gemv_cat, Policy.make(BN=4, BK=32, KSTEPS=2), shapes)
    assert not res.ok and res.violations[0].kind == "reduction-complete", res.text()
    assert "never included K index 64" in res.violations[0].message, res.text()


BUGS = [
    ("unclamped row index", "row = minimum(pm * BM + r, M - 1)", "row = pm * BM + r", "bounds"),
    ("every other K block", "for k in unrollable_range(0, K, BK, KSTEPS):\n                rk = k + arange(BK)\n"
     "                part =", "for k in unrollable_range(0, K, 2 * BK, KSTEPS):\n                rk = k + arange(BK)\n"
     "                part =", None),
    ("the row loop stops one row short", "for r in static_range(BM):", "for r in static_range(BM - 1):", "row"),
    ("the partial sums overwritten, not accumulated",
     "part = part + load(A[row, rk])", "part = load(A[row, rk])", "undecided"),
]


@pytest.mark.parametrize("name,old,new,kind", BUGS, ids=[b[0] for b in BUGS])
def test_planted_gemv_bug_is_rejected_at_its_line(name, old, new, kind):
    src = gemm_epilogue.ir.source
    assert old in src, name
    text = "from argus_inductor.dsl import *\n" + src.replace(old, new)
    k = kernels_from_source(text)["gemm_epilogue"]
    res = verify(k, Policy.make(BM=2, BN=16, BK=32, GEMV=1), SHAPES)
    if kind == "undecided":  # a form the checker does not follow: never proved, and said why
        assert not res.proved and any("accumulated element-wise" in u for u in res.undecided), res.text()
        return
    assert not res.ok, name
    v = res.violations[0]
    assert v.executions or v.values, f"a counterexample names the program and element\n{res.text()}"
    if kind == "bounds":
        assert v.kind in ("out-of-bounds", "bounds"), res.text()
        assert_flags_one_of(res, lines_with(text, "load(A[row, rk])"))
    elif kind == "row":  # the tile's last row keeps its zero fill: its reduction over K covered nothing
        assert v.kind == "reduction-complete" and "covered nothing" in v.message, res.text()
        assert_flags_one_of(res, lines_with(text, "store(C[rm, rn], acc)"))
    else:  # the sum misses K blocks: a coverage violation where the result is stored
        assert_flags_one_of(res, lines_with(text, "store(C[rm, rn], acc)") | lines_with(text, "range(0, K, 2 * BK, KSTEPS)"))
