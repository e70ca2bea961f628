"""Nested int tuples: structure helpers and the colexicographic coordinate maps."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus_inductor.layout import (
    compatible,
    congruent,
    crd2idx,
    depth,
    flatten,
    idx2crd,
    prefix_product,
    product,
    rank,
    shape_div,
    size,
    suffix_product,
    unflatten,
    weakly_congruent,
)

from ._strategies import MANY, SOME, shapes


def test_structure_helpers():
    t = (2, (3, 4), ((5,),))
    assert flatten(t) == (2, 3, 4, 5)
    assert flatten(7) == (7,)
    assert product(t) == size(t) == 120
    assert product(()) == 1
    assert rank(t) == 3 and rank(5) == 1
    assert depth(5) == 0 and depth((1, 2)) == 1 and depth(t) == 3
    assert unflatten(flatten(t), t) == t
    with pytest.raises(ValueError):
        unflatten((1, 2, 3, 4, 5), t)


def test_prefix_and_suffix_products():
    assert prefix_product((2, (3, 4), 5)) == (1, (2, 6), 24)
    assert prefix_product(7) == 1
    assert suffix_product((2, (3, 4), 5)) == (60, (20, 5), 1)


def test_shape_div():
    assert shape_div(12, 4) == 3
    assert shape_div(4, 12) == 1
    assert shape_div((6, 4, 3), 12) == (1, 2, 3)
    assert shape_div((6, 4), (3, 2)) == (2, 2)
    with pytest.raises(ValueError):
        shape_div(6, 4)


def test_congruence():
    assert congruent((1, (2, 3)), (4, (5, 6)))
    assert not congruent((1, (2, 3)), (4, 5))
    assert weakly_congruent((1, 2), ((3, 4), 5))
    assert not weakly_congruent(((3, 4), 5), (1, 2))
    assert compatible(6, (2, 3)) and compatible((6, 4), ((2, 3), 4))
    assert not compatible((2, 3), 6)


def test_colexicographic_convention():
    # leftmost mode fastest: (m, n) in shape (M, N) -> m + M*n
    assert crd2idx((1, 2), (4, 8)) == 1 + 4 * 2
    assert idx2crd(9, (4, 8)) == (1, 2)
    assert crd2idx((1, (2, 1)), (4, (3, 2))) == 1 + 4 * 2 + 12 * 1
    # an int coordinate for a tuple mode is split colexicographically
    assert crd2idx((1, 5), (4, (3, 2))) == crd2idx((1, (2, 1)), (4, (3, 2)))
    # the last mode absorbs any remainder (CuTe's extension rule)
    assert crd2idx(20, (4, 3)) == 20


@settings(max_examples=MANY, deadline=None)
@given(shapes())
def test_idx2crd_crd2idx_are_inverse_bijections(shape):
    n = size(shape)
    crds = [idx2crd(i, shape) for i in range(n)]
    assert all(congruent(c, shape) for c in crds)
    assert len(set(crds)) == n
    for i, c in enumerate(crds):
        assert all(0 <= x < s for x, s in zip(flatten(c), flatten(shape)))
        assert crd2idx(c, shape) == i
        assert crd2idx(i, shape) == i


@settings(max_examples=SOME, deadline=None)
@given(shapes(max_size=120))
def test_colex_order_matches_itertools(shape):
    # enumerate flat coordinates with the *first* leaf fastest and compare
    leaves = flatten(shape)
    flat_coords = [tuple(reversed(c)) for c in itertools.product(*(range(s) for s in reversed(leaves)))]
    for i, fc in enumerate(flat_coords):
        assert flatten(idx2crd(i, shape)) == fc


@settings(max_examples=SOME, deadline=None)
@given(shapes(), st.data())
def test_crd2idx_with_strides_is_linear(shape, data):
    leaves = flatten(shape)
    strides = unflatten([data.draw(st.integers(0, 50)) for _ in leaves], shape)
    for i in range(size(shape)):
        c = idx2crd(i, shape)
        expect = sum(x * d for x, d in zip(flatten(c), flatten(strides)))
        assert crd2idx(c, shape, strides) == expect
        assert crd2idx(i, shape, strides) == expect
