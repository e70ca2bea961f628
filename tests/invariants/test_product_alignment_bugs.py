"""A product that is then summed (the split-KV merge's `sum(w * Acc)`, a GEMV's `sum(a[:, None] * b, 0)`, an outer
product accumulated over a loop) has a term at an index only where both factors are at it. Factors that read the
reduced dimension at different indices (w at chunk c times Acc at chunk c + 1: an off-by-one between the factors)
are misaligned: rejected with the two indices the factors are at. Before, the product kept both factors' tags and the
sum read the first factor's alone, so the merge with its accumulator shifted a chunk, or a GEMV whose second factor
read B one row down, proved."""
from __future__ import annotations

import re

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import VerificationResult, verify
from argus_inductor.kernels.attention import attention_decode_merge

from .planted import first_line
from .test_product_cover_bugs import SRC as GEMV_ONLY  # the GEMV kernel whose factors are planted

MERGE_SRC = "from argus_inductor.dsl import *\n" + attention_decode_merge.ir.source
MERGE = Policy.make(BC=16, BD=16)
MERGE_SHAPES = dict(Z=1, H=8, S=1, C=3, D=16)
ACC = "acc = sum(w[:, None] * load(Acc[z, h, rc, rd], mask=(rc < C)[:, None], other=0.0), 0)"
DEN = "den = sum(w * load(Den[z, h, rc], mask=rc < C, other=0.0), 0)"

GEMV_SRC = GEMV_ONLY + '''

@kernel
def outer(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"), BM: constexpr = 4, BN: constexpr = 8):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K):
        a = load(A[rm, k], mask=rm < M).to(float32)
        acc = acc + a[:, None] * load(B[k, rn], mask=rn < N).to(float32)[None, :]
    store(C[rm, rn], acc, mask=(rm < M)[:, None] & (rn < N)[None, :])
'''
GEMV = Policy.make(BN=16, BK=16)
GEMV_SHAPES = {"gemv": dict(M=2, K=40, N=32), "outer": dict(M=5, K=40, N=20)}
B_LOAD = "b = load(B[rk, rn], mask=(rk < K)[:, None], other=0.0)"
A_LOAD = "a = load(A[pm, rk], mask=rk < K, other=0.0)"
OUTER_B = "load(B[k, rn], mask=rn < N)"

# "<dim> index <a> (line <la>) times <dim> index <b> (line <lb>)": the two indices a misaligned term's factors are at
PAIR = re.compile(r"(\w+) index (-?\d+) \(line (\d+)\) times \1 index (-?\d+) \(line (\d+)\)")


def _misaligned(res: VerificationResult, dim: str, mutated: int) -> tuple[int, int]:
    """Rejected as a product of misaligned factors: the message names dim's two indices and the mutated line among
    the factors' lines. Returns (the first factor's index, the second's)."""
    assert not res.ok, res.text()
    v = next((v for v in res.violations if v.kind == "product-agreement"), None)
    assert v is not None, res.text()
    m = PAIR.search(v.message)
    assert m is not None and m.group(1) == dim, v.message
    assert mutated in {int(m.group(3)), int(m.group(5))}, v.message
    assert v.executions and v.executions[0].program is not None, res.text()
    return int(m.group(2)), int(m.group(4))


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("old,new", [
    # the accumulator read one chunk past the weight (masked in bounds): w[c] * Acc[c + 1]
    (ACC, "acc = sum(w[:, None] * load(Acc[z, h, rc + 1, rd], mask=(rc + 1 < C)[:, None], other=0.0), 0)"),
    # the same, clamped to the last chunk instead of masked: every chunk is still read, but at the wrong weight
    (ACC, "acc = sum(w[:, None] * load(Acc[z, h, minimum(rc + 1, C - 1), rd], mask=(rc < C)[:, None], other=0.0), 0)"),
    # the denominator read one chunk past the weight
    (DEN, "den = sum(w * load(Den[z, h, rc + 1], mask=rc + 1 < C, other=0.0), 0)"),
], ids=["acc-masked", "acc-clamped", "den-masked"])
def test_merge_with_a_factor_shifted_one_chunk_is_rejected(old: str, new: str, mode: str):
    assert old in MERGE_SRC
    bad = MERGE_SRC.replace(old, new)
    res = verify(kernels_from_source(bad)["attention_decode_merge"], MERGE, MERGE_SHAPES if mode == "specialized"
                 else None)
    w, shifted = _misaligned(res, "C", first_line(bad, new))
    assert shifted == w + 1, res.text()  # the weight's chunk times the next chunk's statistics


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("old,new,step", [
    # the weight read one row down (masked in bounds): A[pm, k] * B[k + 1, n]
    (B_LOAD, "b = load(B[rk + 1, rn], mask=(rk + 1 < K)[:, None], other=0.0)", 1),
    # the same, clamped to K's last row
    (B_LOAD, "b = load(B[minimum(rk + 1, K - 1), rn], mask=(rk < K)[:, None], other=0.0)", 1),
    # the first factor shifted instead (before, only this order was caught, by chance: its cover was the one read)
    (A_LOAD, "a = load(A[pm, rk + 1], mask=rk + 1 < K, other=0.0)", -1),
], ids=["b-masked", "b-clamped", "a-masked"])
def test_gemv_with_factors_one_row_apart_is_rejected(old: str, new: str, step: int, mode: str):
    assert old in GEMV_SRC
    bad = GEMV_SRC.replace(old, new)
    res = verify(kernels_from_source(bad)["gemv"], GEMV, GEMV_SHAPES["gemv"] if mode == "specialized" else None)
    a, b = _misaligned(res, "K", first_line(bad, new))
    assert b == a + step, res.text()


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
def test_outer_product_accumulation_with_factors_one_row_apart_is_rejected(mode: str):
    """acc += A[:, k] * B[k + 1, :] over a loop: the accumulation's term is misaligned (before, the product's two
    alternatives made the loop mark K unfollowed, which a store does not owe, and the kernel proved)."""
    new = "load(B[k + 1, rn], mask=(rn < N) & (k + 1 < K))"
    bad = GEMV_SRC.replace(OUTER_B, new)
    res = verify(kernels_from_source(bad)["outer"], Policy(), GEMV_SHAPES["outer"] if mode == "specialized" else None)
    a, b = _misaligned(res, "K", first_line(bad, new))
    assert b == a + 1, res.text()


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("name", ["gemv", "outer"])
def test_aligned_products_prove(name: str, mode: str):
    res = verify(kernels_from_source(GEMV_SRC)[name], GEMV if name == "gemv" else Policy(),
                 GEMV_SHAPES[name] if mode == "specialized" else None)
    assert res.proved, res.text()


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
def test_the_merge_proves(mode: str):
    res = verify(attention_decode_merge, MERGE, MERGE_SHAPES if mode == "specialized" else None)
    assert res.proved, res.text()
