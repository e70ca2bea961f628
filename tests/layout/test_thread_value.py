"""Thread-value layouts against brute-force reimplementations of Triton's and the ISA's formulas."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_inductor.layout import (
    Layout,
    TVLayout,
    ampere_mma_warps,
    blocked,
    blocked_params,
    default_blocked,
    dot_accumulator,
    hopper_mma_config,
    mfma_accumulator,
    mfma_warps,
    mma_v2_accumulator,
    mma_v2_operand_a,
    wgmma_accumulator,
    wgmma_operand_a,
)

from ._strategies import FEW, SOME


def _all_pairs(tv: TVLayout):
    return itertools.product(range(tv.num_threads), range(tv.values_per_thread))


def assert_replicated_bijection(tv: TVLayout) -> None:
    """Every element is held exactly `replication` times; one replica is a bijection."""
    tv.check()
    coords = {(t, v): tv.coord(t, v) for t, v in _all_pairs(tv)}
    counts = Counter(coords.values())
    assert len(counts) == tv.tile_size
    assert set(counts.values()) == {tv.replication}
    primaries = [c for tv_pair, c in coords.items() if tv.is_primary(*tv_pair)]
    assert len(primaries) == len(set(primaries)) == tv.tile_size
    for c in itertools.islice(counts, 64):
        owners = tv.owners(c)
        assert len(owners) == tv.replication and owners == sorted(owners)
        assert all(tv.coord(t, v) == c for t, v in owners)
        assert tv.owner(c) == owners[0] and tv.is_primary(*owners[0])


# --------------------------------------------------------------------------------------
# blocked
# --------------------------------------------------------------------------------------


def triton_blocked_coord(shape, spt, tpw, wpc, order, thread, reg):
    """Triton's BlockedEncoding formula, written out independently of the layout algebra."""
    r = len(shape)
    ws = 1
    for x in tpw:
        ws *= x
    warp, lane = divmod(thread, ws)
    lane_id, warp_id, elem, rep = [0] * r, [0] * r, [0] * r, [0] * r
    for d in order:
        lane, lane_id[d] = divmod(lane, tpw[d])
        warp, warp_id[d] = divmod(warp, wpc[d])
        reg, elem[d] = divmod(reg, spt[d])
    foot = [spt[d] * tpw[d] * wpc[d] for d in range(r)]
    for d in order:
        reg, rep[d] = divmod(reg, max(1, shape[d] // foot[d]))
    return tuple(
        (elem[d] + spt[d] * lane_id[d] + spt[d] * tpw[d] * warp_id[d] + foot[d] * rep[d]) % shape[d] for d in range(r)
    )


def _split(draw, total: int, rank: int) -> list[int]:
    out, rem = [], total
    for _ in range(rank - 1):
        x = draw(st.sampled_from([p for p in (1, 2, 4, 8, 16, 32) if p <= rem]))
        out.append(x)
        rem //= x
    out.append(rem)
    return list(draw(st.permutations(out)))


@st.composite
def blocked_params_st(draw):
    rank = draw(st.integers(1, 3))
    max_log = {1: 9, 2: 5, 3: 3}[rank]
    shape = [2 ** draw(st.integers(0, max_log)) for _ in range(rank)]
    spt = [2 ** draw(st.integers(0, 2 if rank < 3 else 1)) for _ in range(rank)]
    tpw = _split(draw, 32, rank)
    wpc = _split(draw, draw(st.sampled_from([1, 2, 4, 8])), rank)
    order = list(draw(st.permutations(range(rank))))
    return shape, spt, tpw, wpc, order


@settings(max_examples=SOME, deadline=None)
@given(blocked_params_st())
def test_blocked_matches_triton_formula(params):
    shape, spt, tpw, wpc, order = params
    tv = blocked(shape, spt, tpw, wpc, order)
    nthreads = 32 * wpc[0] * (wpc[1] if len(wpc) > 1 else 1) * (wpc[2] if len(wpc) > 2 else 1)
    assert tv.num_threads == nthreads and tv.warp_size == 32
    reps = 1
    for d in range(len(shape)):
        reps *= max(1, shape[d] // (spt[d] * tpw[d] * wpc[d]))
    per_thread = reps
    for x in spt:
        per_thread *= x
    assert tv.values_per_thread == per_thread
    for t, v in _all_pairs(tv):
        assert tv.coord(t, v) == triton_blocked_coord(shape, spt, tpw, wpc, order, t, v)
    assert_replicated_bijection(tv)


def test_blocked_examples():
    # 1-D: 4 contiguous elements per thread, tile wraps twice around 128 threads x 4
    tv = blocked(1024, [4], [32], [4], [0])
    assert tv.values_per_thread == 8 and tv.replication == 1
    assert tv.coord(1, 0) == (4,) and tv.coord(0, 4) == (512,)
    assert tv.owner_warp_lane((517,)) == (0, 1, 5)
    # a tile smaller than the CTA footprint is replicated
    tv = blocked([16, 16], [1, 4], [8, 4], [4, 1], [1, 0])
    assert tv.replication == 2 and tv.owners((0, 0)) == [(0, 0), (64, 0)]
    # per-thread registers can be duplicates too when size_per_thread exceeds the tile
    tv = blocked(4, [8], [32], [1], [0])
    assert tv.replication == 64 and tv.owners(3)[:2] == [(0, 3), (0, 7)]
    with pytest.raises(ValueError):
        blocked([16, 16], [1, 3], [8, 4], [4, 1], [1, 0])


@pytest.mark.parametrize(
    "shape, nw, eb, expect",
    [
        ((64, 64), 4, 4, ([1, 4], [2, 16], [4, 1], [1, 0])),
        ((128, 64), 4, 2, ([1, 8], [4, 8], [4, 1], [1, 0])),
        ((32, 256), 8, 2, ([1, 8], [1, 32], [8, 1], [1, 0])),
        ((1024,), 4, 4, ([4], [32], [4], [0])),
        ((16,), 4, 4, ([1], [32], [4], [0])),
        ((64, 1), 1, 4, ([2, 1], [32, 1], [1, 1], [0, 1])),
    ],
)
def test_default_blocked(shape, nw, eb, expect):
    # expectations are what Triton 3.6's coalescing pass emits for 16-byte aligned, contiguous
    # row-major loads (cross-checked against real TTGIR; see test_triton_oracle.py)
    tv = default_blocked(shape, nw, 32, eb)
    assert tv.layout == blocked(shape, *expect).layout


def test_blocked_params_matches_triton_builder():
    assert blocked_params((64, 64), [1, 1], [1, 0], 4) == ((1, 32), (2, 2))
    assert blocked_params((64, 64), [1, 4], [1, 0], 4) == ((2, 16), (4, 1))
    assert blocked_params((8, 8, 8), [1, 1, 1], [2, 1, 0], 4) == ((1, 4, 8), (2, 2, 1))


# --------------------------------------------------------------------------------------
# NVIDIA MMA layouts vs the PTX ISA fragment formulas
# --------------------------------------------------------------------------------------


def wgmma_acc_ref(m, n, wm, wn, instr_n, t, v):
    """PTX wgmma D fragment: row = 16*warp + lane/4 + 8*i, col = 8*j + 2*(lane%4) + k."""
    warp, lane = divmod(t, 32)
    w_m, w_n = warp % wm, warp // wm
    j_per = instr_n // 8
    k, i, j, rest = v % 2, (v // 2) % 2, (v // 4) % j_per, v // (4 * j_per)
    reps_n = max(1, n // (instr_n * wn))
    rep_n, rep_m = rest % reps_n, rest // reps_n
    row = 16 * w_m + lane // 4 + 8 * i + 16 * wm * rep_m
    col = instr_n * w_n + 8 * j + 2 * (lane % 4) + k + instr_n * wn * rep_n
    return row % m, col % n


@pytest.mark.parametrize(
    "m, n, nw, wpc, instr_n",
    [
        (64, 64, 4, (4, 1), 64),
        (64, 8, 4, (4, 1), 8),
        (128, 128, 4, (4, 1), 128),
        (128, 256, 8, (8, 1), 256),
        (128, 128, 8, (4, 2), 64),
        (256, 64, 4, (4, 1), 32),
        (64, 96, 4, (4, 1), 96),
        (64, 192, 8, (4, 2), 96),
    ],
)
def test_wgmma_accumulator(m, n, nw, wpc, instr_n):
    tv = wgmma_accumulator(m, n, nw, wpc, instr_n)
    assert tv.num_threads == 32 * nw and tv.replication == 1
    assert tv.values_per_thread == m * n // (32 * nw)
    for t, v in _all_pairs(tv):
        assert tv.coord(t, v) == wgmma_acc_ref(m, n, *wpc, instr_n, t, v)
    assert_replicated_bijection(tv)


def test_wgmma_matches_cute_clayout():
    # CuTe's SM90 CLayout_64xN: ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)) over m + 64*n
    for n in (8, 16, 64, 256):
        tv = wgmma_accumulator(64, n, 4, (4, 1), n)
        cute = Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))
        if n > 8:  # for n == 8 the trailing size-1 mode is dropped; the function is the same
            assert tv.layout == cute
        assert all(tv.offset(t, v) == cute(t, v) for t, v in _all_pairs(tv))


def test_wgmma_accumulator_owner_example():
    tv = wgmma_accumulator(128, 128, 8)  # Triton default: warps (8, 1), instr N 128
    assert hopper_mma_config(128, 128, 8) == ((8, 1), 128)
    # element (i, j) -> warp i // 16, lane 4*(i % 8) + (j % 8) // 2
    for i, j in [(0, 0), (17, 9), (127, 127), (72, 33)]:
        w, lane, v = tv.owner_warp_lane((i, j))
        assert w == i // 16 and lane == 4 * (i % 8) + (j % 8) // 2
        assert v == (j % 2) + 2 * ((i % 16) // 8) + 4 * (j // 8)


def test_wgmma_operand_a():
    # CuTe ALayout_64x16 for 16-bit A in registers
    tv = wgmma_operand_a(64, 16)
    assert tv.layout == Layout(((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512)))
    tv = wgmma_operand_a(128, 64, 8, (4, 2))
    assert tv.replication == 2  # the two warpgroups along N hold the same A
    for t, v in _all_pairs(tv):
        warp, lane = divmod(t, 32)
        e, i, j, rest = v % 2, (v // 2) % 2, (v // 4) % 2, v // 8
        rep_k, rep_m = rest % 4, rest // 4
        row = 16 * (warp % 4) + lane // 4 + 8 * i + 64 * rep_m
        col = 16 * rep_k + 8 * j + 2 * (lane % 4) + e
        assert tv.coord(t, v) == (row, col)
    assert_replicated_bijection(tv)


def mma_v2_ref(m, n, wm, wn, t, v):
    """PTX mma.m16n8k16 C fragment: row = lane/4 + 8*(c>=2), col = 2*(lane%4) + (c&1)."""
    warp, lane = divmod(t, 32)
    w_m, w_n = warp // wn, warp % wn
    k, i, rest = v % 2, (v // 2) % 2, v // 4
    reps_n = max(1, n // (8 * wn))
    rep_n, rep_m = rest % reps_n, rest // reps_n
    row = 16 * w_m + lane // 4 + 8 * i + 16 * wm * rep_m
    col = 8 * w_n + 2 * (lane % 4) + k + 8 * wn * rep_n
    return row % m, col % n


@pytest.mark.parametrize(
    "m, n, nw, wpc",
    [(16, 8, 1, (1, 1)), (64, 64, 4, (2, 2)), (32, 64, 4, (1, 4)), (128, 32, 8, (4, 2)), (16, 16, 8, (2, 4))],
)
def test_mma_v2_accumulator(m, n, nw, wpc):
    tv = mma_v2_accumulator(m, n, nw, wpc)
    for t, v in _all_pairs(tv):
        assert tv.coord(t, v) == mma_v2_ref(m, n, *wpc, t, v)
    assert_replicated_bijection(tv)


def test_mma_v2_operand_a():
    tv = mma_v2_operand_a(32, 32, 4, (2, 2))
    assert tv.replication == 2
    for t, v in _all_pairs(tv):
        warp, lane = divmod(t, 32)
        e, i, j, rest = v % 2, (v // 2) % 2, (v // 4) % 2, v // 8
        rep_k, rep_m = rest % 2, rest // 2
        assert tv.coord(t, v) == (
            16 * (warp // 2) + lane // 4 + 8 * i + 32 * rep_m,
            16 * rep_k + 8 * j + 2 * (lane % 4) + e,
        )
    assert_replicated_bijection(tv)


def test_warp_heuristics():
    assert ampere_mma_warps(64, 64, 4) == (2, 2)
    assert ampere_mma_warps(128, 16, 8) == (8, 1)
    assert hopper_mma_config(64, 64, 8) == ((4, 2), 32)
    assert mfma_warps(128, 128, 4, 32) == (2, 2)
    assert mfma_warps(16, 64, 4, 16) == (1, 4)


# --------------------------------------------------------------------------------------
# AMD MFMA
# --------------------------------------------------------------------------------------


def mfma_ref(m, n, instr, wm, wn, transposed, t, v):
    """CDNA3 MFMA D fragment (wave64): 32x32: col l%32, row 8i + 4(l/32) + j; 16x16: col l%16, row 4(l/16) + j."""
    warp, lane = divmod(t, 64)
    w_m, w_n = warp // wn, warp % wn
    if instr == 32:
        j, i, rest = v % 4, (v // 4) % 4, v // 16
        a, b = 8 * i + 4 * (lane // 32) + j, lane % 32
    else:
        j, rest = v % 4, v // 4
        a, b = 4 * (lane // 16) + j, lane % 16
    r_in, c_in = (b, a) if transposed else (a, b)
    reps_n = max(1, n // (instr * wn))
    rep_n, rep_m = rest % reps_n, rest // reps_n
    row = instr * w_m + r_in + instr * wm * rep_m
    col = instr * w_n + c_in + instr * wn * rep_n
    return row % m, col % n


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(
    "m, n, nw, instr, wpc",
    [
        (32, 32, 1, 32, (1, 1)),
        (64, 64, 4, 32, (2, 2)),
        (128, 64, 4, 32, (4, 1)),
        (128, 128, 8, 32, (2, 4)),
        (16, 16, 1, 16, (1, 1)),
        (64, 32, 4, 16, (2, 2)),
        (16, 128, 4, 16, (1, 4)),
        (16, 16, 4, 32, (1, 1)),  # smaller than one instruction: replicated
    ],
)
def test_mfma_accumulator(m, n, nw, instr, wpc, transposed):
    if wpc[0] * wpc[1] != nw:
        nw = wpc[0] * wpc[1]
    tv = mfma_accumulator(m, n, nw, instr, wpc, transposed)
    assert tv.warp_size == 64
    for t, v in _all_pairs(tv):
        assert tv.coord(t, v) == mfma_ref(m, n, instr, *wpc, transposed, t, v)
    assert_replicated_bijection(tv)


def test_mfma_32x32_lane_formula():
    tv = mfma_accumulator(32, 32, 1, 32, (1, 1))
    assert tv.values_per_thread == 16
    for lane in range(64):
        rows = sorted(tv.coord(lane, v)[0] for v in range(16))
        assert rows == sorted(8 * i + 4 * (lane // 32) + j for i in range(4) for j in range(4))
        assert {tv.coord(lane, v)[1] for v in range(16)} == {lane % 32}


# --------------------------------------------------------------------------------------
# generic properties, dispatch, API behaviour
# --------------------------------------------------------------------------------------


@settings(max_examples=FEW, deadline=None)
@given(
    kind=st.sampled_from(["wgmma", "v2", "mfma32", "mfma16", "mfma32T"]),
    m=st.sampled_from([16, 32, 64, 128]),
    n=st.sampled_from([16, 32, 64]),
    nw=st.sampled_from([1, 2, 4, 8]),
)
def test_accumulators_are_replicated_bijections(kind, m, n, nw):
    if kind == "wgmma":
        if nw % 4 or m < 64:
            return
        tv = wgmma_accumulator(m, n, nw)
    elif kind == "v2":
        tv = mma_v2_accumulator(m, n, nw)
    else:
        tv = mfma_accumulator(m, n, nw, 16 if kind == "mfma16" else 32, transposed=kind.endswith("T"))
    assert_replicated_bijection(tv)


def test_dot_accumulator_dispatch():
    assert dot_accumulator(128, 128, 4, "sm90").name.startswith("wgmma")
    assert dot_accumulator(32, 64, 4, "sm90").name.startswith("mma_v2")  # M % 64 != 0
    assert dot_accumulator(64, 8, 4, "sm90").name.startswith("mma_v2")  # N % 16 != 0
    assert dot_accumulator(64, 64, 4, "sm80").name.startswith("mma_v2")
    tv = dot_accumulator(64, 64, 4, "gfx942")
    assert tv.name.startswith("mfma32T") and tv.warp_size == 64
    assert dot_accumulator(16, 64, 4, "gfx942").name.startswith("mfma16T")
    with pytest.raises(ValueError):
        dot_accumulator(64, 64, 4, "sm100")


def test_tv_api():
    tv = mma_v2_accumulator(16, 8, 1, (1, 1))
    assert tv.tile_index((3, 5)) == 3 + 16 * 5  # colexicographic tile index
    assert tv.tile_coord(83) == (3, 5)
    assert tv.warp_lane(70) == (2, 6) and tv.thread_of(2, 6) == 70
    assert tv.elements_of(0) == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert tv.lane_coords(0, 0)[:5] == [(0, 0), (0, 2), (0, 4), (0, 6), (1, 0)]
    assert "mma_v2" in str(tv)
    with pytest.raises(ValueError):
        tv.owner((16, 0))
    with pytest.raises(ValueError):
        tv.coord(32, 0)
    with pytest.raises(ValueError):  # a layout that misses elements fails check()
        TVLayout((4, 4), Layout((4, 2), (1, 4))).check()
