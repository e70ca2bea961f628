"""A load mask with a conjunct that kills whole output lanes without naming the reduced index (`(rm < 2)[:, None]`)
leaves those lanes an empty sum. A store that writes them anyway is rejected as an incomplete reduction, with the
program and element of a killed lane, unless the kernel names the lanes padding (`padding_lanes`), as the MoE gate-up
does for its padding rows. (Before, such a conjunct restricted what the store's reduction had to cover for those
lanes, and a kernel storing zeros there proved.)"""
from __future__ import annotations

from typing import Any

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import VerificationResult, verify
from argus_inductor.kernels.moe import moe_down, moe_gate_up, moe_gather

from .planted import first_line
from .suite import LIBRARY

SRC = '''\
from argus_inductor.dsl import *


@kernel
def lane_gemm(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"),
              BM: constexpr = 16, BN: constexpr = 16, BK: constexpr = 16):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[rm, rk], mask=(rk < K)[None, :] & (rm < 2)[:, None])
        acc = mma(a, load(B[rk, rn]), acc)
    store(C[rm, rn], acc)


@kernel
def lane_outer(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"), BM: constexpr = 4,
               BN: constexpr = 8):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K):
        a = load(A[rm, k], mask=rm < 2).to(float32)
        acc = acc + a[:, None] * load(B[k, rn]).to(float32)[None, :]
    store(C[rm, rn], acc)


@kernel
def lane_gemv(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"), BM: constexpr = 2,
              BN: constexpr = 16, BK: constexpr = 32):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for r in static_range(BM):
        row = minimum(pm * BM + r, M - 1)
        dots = zeros((BN,), float32)
        for k in range(0, K, BK):
            rk = k + arange(BK)
            a = load(A[row, rk], mask=(rk < K) & (row < 2)).to(float32)
            dots = dots + sum(a[:, None] * load(B[rk, rn]).to(float32), 0)
        acc = where((arange(BM) == r)[:, None], dots[None, :], acc)
    store(C[rm, rn], acc)
'''

STORE = "    store(C[rm, rn], acc)"
NAMED = "    padding_lanes(acc, (rm >= 2)[:, None])\n" + STORE
# kernel: its policy (the defaults) and concrete shapes whose last row tile lies past the two live rows
SHAPES = {"lane_gemm": dict(M=21, N=20, K=40), "lane_outer": dict(M=5, N=20, K=40),
          "lane_gemv": dict(M=5, N=20, K=40)}


def _verify(text: str, name: str, shapes: dict[str, int] | None) -> VerificationResult:
    return verify(kernels_from_source(text, "lanes.py")[name], Policy(), shapes)


def _killed_lane(res: VerificationResult, text: str) -> None:
    """Rejected as an incomplete reduction at the store, the counterexample an element of a row >= 2 (a lane the
    mask kills): row = pm * BM + the element's first coordinate."""
    assert not res.ok, res.text()
    v = next((v for v in res.violations if v.kind == "reduction-complete"), None)
    assert v is not None, res.text()
    assert v.source.strip() == STORE.strip(), res.text()
    ex = v.executions[0]
    bm = {"lane_gemm": 16, "lane_outer": 4, "lane_gemv": 2}[res.kernel]
    assert ex.program["pm"] * bm + ex.element[0] >= 2, res.text()
    assert "covered nothing" in v.message and "padding_lanes" in v.message, v.message


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_lane_killed_by_a_load_mask_and_stored_anyway_is_rejected(name: str, mode: str):
    """The GEMM (mma), an element-wise accumulation over K (each(K)), and the GEMV path's row loop (a sum per
    block, accumulated over the K loop) all store zeros for rows >= 2: each is rejected at a killed row."""
    _killed_lane(_verify(SRC, name, SHAPES[name] if mode == "specialized" else None), SRC)


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_same_kernel_naming_the_killed_lanes_padding_proves(name: str, mode: str):
    text = SRC.replace(STORE, NAMED)
    res = _verify(text, name, SHAPES[name] if mode == "specialized" else None)
    assert res.proved, res.text()


def test_naming_the_wrong_lanes_padding_does_not_excuse_the_killed_ones():
    text = SRC.replace(STORE, NAMED.replace("rm >= 2", "rm >= 3"))
    _killed_lane(_verify(text, "lane_gemm", SHAPES["lane_gemm"]), text)


def test_a_masked_store_owes_no_reduction_for_the_lanes_it_skips():
    """Masking the store the same way leaves no reduction owed (those rows are then never written: write-all says
    so, not reduction-complete)."""
    text = SRC.replace(STORE, "    store(C[rm, rn], acc, mask=(rm < 2)[:, None])")
    res = _verify(text, "lane_gemm", SHAPES["lane_gemm"])
    assert {v.kind for v in res.violations} == {"write-all"}, res.text()


def test_a_padding_lane_that_summed_part_of_the_range_is_still_rejected():
    """padding_lanes excuses an empty sum only: with every row named padding and live, a K loop that stops a block
    short leaves each row a partial sum, which is rejected all the same."""
    text = SRC.replace(STORE, NAMED.replace("rm >= 2", "rm >= 0"), 1).replace(" & (rm < 2)[:, None]", "", 1)
    text = text.replace("for k in range(0, K, BK):", "for k in range(0, K - BK, BK):", 1)
    res = _verify(text, "lane_gemm", SHAPES["lane_gemm"])
    assert not res.ok
    v = next(v for v in res.violations if v.kind == "reduction-complete")
    assert v.line == first_line(text, STORE) and "never included K index" in v.message, res.text()


def test_padding_lanes_generates_no_code():
    named = kernels_from_source(SRC.replace(STORE, NAMED), "lanes.py")["lane_gemm"]
    plain = kernels_from_source(SRC, "lanes.py")["lane_gemm"]
    pol = Policy()
    assert "padding" not in named.triton_source(pol)
    assert named.triton_source(pol) == plain.triton_source(pol)


# ---- the MoE kernels: padding rows named, real rows still owed ---------------------------------------------------
def _moe(name: str, text: str | None = None, mode: str = "specialized", **consts: Any) -> VerificationResult:
    pol, shapes, pre = LIBRARY[name]
    k = {"moe_gate_up": moe_gate_up, "moe_down": moe_down, "moe_gather": moe_gather}[name]
    if text is not None:
        k = kernels_from_source(text, "moe.py")[name]
    return verify(k, Policy.make(**pol, **consts), shapes if mode == "specialized" else None, assumptions=pre)


def _moe_source(name: str) -> str:
    k = {"moe_gate_up": moe_gate_up, "moe_down": moe_down}[name]
    return "from argus_inductor.dsl import *\n" + k.ir.source


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("name", ["moe_gate_up", "moe_down", "moe_gather"])
def test_moe_kernels_prove(name: str, mode: str):
    res = _moe(name, mode=mode)
    assert res.proved, res.text()


def test_moe_gate_up_without_its_padding_annotation_is_rejected_at_a_padding_row():
    """The padding rows (sorted id T * TOPK: token T, past X) are an empty sum the gate-up stores: without
    padding_lanes the checker reports them, so the annotation is what the proof rests on."""
    text = _moe_source("moe_gate_up")
    old = "        padding_lanes(h, ((tok < 0) | (tok >= T))[:, None])"
    assert old in text
    bad = text.replace(old, "")
    res = _moe("moe_gate_up", bad)
    assert not res.ok
    v = res.violations[0]
    assert v.kind == "reduction-complete" and v.line == first_line(bad, "store(Hout[rp, rn], h)"), res.text()
    assert "covered nothing" in v.message, res.text()


@pytest.mark.parametrize("old,new", [
    # the last real token's rows read nothing
    ("x = load(X[tok, rk])", "x = load(X[tok, rk], mask=(tok < T - 1)[:, None])"),
    # the last row of every block (a real pair wherever the block is full) reads nothing
    ("x = load(X[tok, rk])", "x = load(X[tok, rk], mask=(rp % BM < BM - 1)[:, None])"),
    # the gate reads the last K block of no row
    ("wg = load(W1[e, rn, rk], mask=(rn < I)[:, None])", "wg = load(W1[e, rn, rk], mask=(rn < I)[:, None] & (rk < HD - 8)[None, :])"),
], ids=["last-token", "last-row-of-a-block", "gate-misses-k"])
def test_moe_gate_up_dropping_real_rows_is_rejected(old: str, new: str):
    text = _moe_source("moe_gate_up")
    assert old in text
    bad = text.replace(old, new, 1)
    res = _moe("moe_gate_up", bad)
    assert not res.ok
    v = next((v for v in res.violations if v.kind == "reduction-complete"), None)
    assert v is not None and v.line == first_line(bad, "store(Hout[rp, rn], h)"), res.text()
    assert v.executions and v.executions[0].program, res.text()
