"""Swizzles (bijective involutions) and shared-memory bank-conflict counting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_inductor.layout import (
    ComposedLayout,
    Layout,
    Swizzle,
    bank_conflicts,
    bank_of,
    is_conflict_free,
    min_wavefronts,
    row_major,
    swizzled,
    wgmma_accumulator,
)

from ._strategies import MANY


@st.composite
def swizzles(draw):
    bits = draw(st.integers(0, 4))
    base = draw(st.integers(0, 3))
    mag = draw(st.integers(bits, bits + 2))
    shift = mag if draw(st.booleans()) else -mag
    return Swizzle(bits, base, shift)


@settings(max_examples=MANY, deadline=None)
@given(swizzles(), st.integers(1, 2))
def test_swizzle_is_a_blockwise_bijection_and_involution(sw, blocks):
    n = sw.period() * blocks
    image = [sw(x) for x in range(n)]
    assert sorted(image) == list(range(n))
    assert all(sw(y) == x for x, y in enumerate(image))
    assert all(y // sw.period() == x // sw.period() for x, y in enumerate(image))
    assert sw.inverse() is sw
    # bits outside the destination range are untouched
    assert all((x ^ y) & ~sw.zzz_mask == 0 for x, y in enumerate(image))


def test_swizzle_bits():
    sw = Swizzle(3, 4, 3)  # CuTe's 128B swizzle in byte units
    assert sw.yyy_mask == 0b111 << 7 and sw.zzz_mask == 0b111 << 4
    assert sw(0x80) == 0x90 and sw(0x90) == 0x80
    assert sw(0x3F0) == 0x3F0 ^ 0x70
    assert Swizzle(2, 0, -3)(0b00011) == 0b11011  # negative shift moves bits up
    assert Swizzle(0, 3, 0).is_identity() and Swizzle(0, 3, 0)(12345) == 12345
    assert str(sw) == "Sw<3,4,3>"
    with pytest.raises(ValueError):
        Swizzle(3, 0, 2)  # overlapping ranges


def test_composed_layout():
    inner = row_major((8, 8))
    cl = swizzled(inner, Swizzle(3, 0, 3))
    assert isinstance(cl, ComposedLayout) and cl.size() == 64 and cl.shape == (8, 8)
    assert cl(3, 5) == (3 * 8 + 5) ^ 3
    assert sorted(cl.offsets()) == list(range(64)) and cl.cosize() == 64
    sub = cl.compose((Layout(4, 2), None))  # every other row
    assert sub(1, 5) == cl(2, 5)
    assert "Sw<3,0,3>" in str(cl)


def test_bank_of():
    assert bank_of(0) == 0 and bank_of(4) == 1 and bank_of(128) == 0 and bank_of(131) == 0
    assert bank_of(16, bank_bytes=8, banks=16) == 2


def test_column_access_of_row_major_fp32_tile_is_32_way():
    smem = row_major((32, 32))
    col = [smem(lane, 7) for lane in range(32)]
    row = [smem(7, lane) for lane in range(32)]
    assert bank_conflicts(col, elem_bytes=4) == 32
    assert bank_conflicts(row, elem_bytes=4) == 1
    # XOR the row index into the bank bits: both accesses become conflict-free
    sw = swizzled(smem, Swizzle(5, 0, 5))
    assert bank_conflicts([sw(lane, 7) for lane in range(32)], elem_bytes=4) == 1
    assert bank_conflicts([sw(7, lane) for lane in range(32)], elem_bytes=4) == 1
    # padding works too: row stride 33
    padded = Layout((32, 32), (33, 1))
    assert bank_conflicts([padded(lane, 7) for lane in range(32)], elem_bytes=4) == 1


def test_fp16_column_access_needs_swizzle_with_base():
    smem = row_major((32, 64))  # fp16: 128 B rows, two elements per 4-byte word
    assert bank_conflicts([smem(lane, 10) for lane in range(32)], elem_bytes=2) == 32
    sw = swizzled(smem, Swizzle(5, 1, 5))  # word bits = element bits >> 1
    assert bank_conflicts([sw(lane, 10) for lane in range(32)], elem_bytes=2) == 1


def test_broadcast_inactive_and_vector_accesses():
    assert bank_conflicts([0] * 32, elem_bytes=4) == 1  # same word: broadcast
    assert bank_conflicts([None] * 32, elem_bytes=4) == 0
    assert bank_conflicts([0, 32, None, None], elem_bytes=4) == 2
    # 16-byte vectors over 32 consecutive lanes: 512 B -> at least 4 wavefronts, and exactly 4
    offs = [4 * lane for lane in range(32)]
    assert bank_conflicts(offs, elem_bytes=4, vec=4) == 4 == min_wavefronts(offs, elem_bytes=4, vec=4)
    assert is_conflict_free(offs, elem_bytes=4, vec=4)
    # sub-word elements: 32 lanes of consecutive bytes share 8 words
    assert bank_conflicts(list(range(32)), elem_bytes=1) == 1


def test_wgmma_accumulator_store_to_smem():
    # storing a Hopper accumulator (pairs of fp32 per lane) into a 64x64 row-major fp32 tile:
    # each warp access covers 8 rows x 8 columns -> 8-way conflict; a Swizzle<3,3,3> fixes it
    tv = wgmma_accumulator(64, 64)
    smem = row_major((64, 64))
    sw = swizzled(smem, Swizzle(3, 3, 3))
    for warp in range(tv.num_warps):
        for value in range(0, tv.values_per_thread, 2):  # values (v, v+1) are adjacent columns
            coords = tv.lane_coords(warp, value)
            plain = [smem(c) for c in coords]
            swz = [sw(c) for c in coords]
            assert bank_conflicts(plain, 4, vec=2) == 8
            assert bank_conflicts(swz, 4, vec=2) == 2 == min_wavefronts(swz, 4, vec=2)
            assert is_conflict_free(swz, 4, vec=2)
