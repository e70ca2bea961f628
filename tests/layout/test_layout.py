"""Layout algebra checked against brute-force enumeration of the maps."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from argus_inductor.layout import (
    Layout,
    blocked_product,
    coalesce,
    col_major,
    complement,
    composition,
    filter_layout,
    flatten,
    flatten_layout,
    idx2crd,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
    row_major,
    tiled_divide,
    unflatten,
    zipped_divide,
)

from ._strategies import (
    FEW,
    MANY,
    SOME,
    compact_layouts,
    images,
    injective_layouts,
    layouts,
    shapes,
)

# --------------------------------------------------------------------------------------
# basics
# --------------------------------------------------------------------------------------


def test_layout_basics():
    lay = Layout((4, (2, 3)), (2, (1, 8)))
    assert str(lay) == "(4,(2,3)):(2,(1,8))"
    assert lay.size() == 24 and lay.rank() == 2 and lay.depth() == 2
    assert lay.cosize() == lay(23) + 1 == 3 * 2 + 1 + 2 * 8 + 1
    # the three ways to give a coordinate agree
    assert lay(5) == lay((1, 1)) == lay(1, 1) == lay((1, (1, 0)))
    assert lay[1] == Layout((2, 3), (1, 8))
    assert lay[0:1] == Layout((4,), (2,))
    assert [m.size() for m in lay.modes()] == [4, 6]
    with pytest.raises(IndexError):
        lay[2]


def test_default_stride_is_column_major():
    assert Layout((4, 8)) == Layout((4, 8), (1, 4))
    assert col_major((2, (3, 4))) == Layout((2, (3, 4)), (1, (2, 6)))
    assert row_major((4, 8)) == Layout((4, 8), (8, 1))
    assert Layout(5) == Layout(5, 1)


def test_layout_validation():
    with pytest.raises(ValueError):
        Layout((4, 8), (1, 4, 2))
    with pytest.raises(ValueError):
        Layout((4, 0))
    with pytest.raises(ValueError):
        Layout(4, -1)


def test_make_layout_concatenates():
    a, b = Layout(4, 2), Layout((2, 3), (1, 8))
    c = make_layout(a, b)
    assert c == Layout((4, (2, 3)), (2, (1, 8)))
    for i in range(4):
        for j in range(6):
            assert c(i, j) == a(i) + b(j)


# --------------------------------------------------------------------------------------
# coalesce / filter / flatten
# --------------------------------------------------------------------------------------


@settings(max_examples=MANY, deadline=None)
@given(layouts())
def test_coalesce_preserves_function(lay):
    c = coalesce(lay)
    assert c.size() == lay.size()
    assert images(c) == images(lay)
    assert c.depth() <= 1
    flat = list(zip(flatten(c.shape), flatten(c.stride)))
    assert all(s > 1 for s, _ in flat) or c == Layout(1, 0)
    # nothing left to merge
    assert all(s0 * d0 != d1 for (s0, d0), (_, d1) in itertools.pairwise(flat))
    assert images(flatten_layout(lay)) == images(lay)


@settings(max_examples=SOME, deadline=None)
@given(layouts())
def test_coalesce_by_mode_keeps_rank(lay):
    profile = tuple(1 for _ in range(lay.rank())) if lay.rank() > 1 else None
    if profile is None:
        return
    c = coalesce(lay, profile)
    assert c.rank() == lay.rank()
    assert all(c[i].size() == lay[i].size() for i in range(lay.rank()))
    assert images(c) == images(lay)


@settings(max_examples=SOME, deadline=None)
@given(layouts())
def test_filter_keeps_image(lay):
    f = filter_layout(lay)
    assert set(images(f)) == set(images(lay))
    assert 0 not in flatten(f.stride) or f == Layout(1, 0)


def test_coalesce_examples():
    assert coalesce(Layout((2, (1, 6)), (1, (6, 2)))) == Layout(12, 1)
    assert coalesce(Layout((4, 1, 2), (1, 7, 4))) == Layout(8, 1)
    assert coalesce(Layout((4, 2), (2, 1))) == Layout((4, 2), (2, 1))
    assert coalesce(Layout((1, 1), (3, 5))) == Layout(1, 0)


# --------------------------------------------------------------------------------------
# composition
# --------------------------------------------------------------------------------------


@st.composite
def fitting_layouts(draw, bound: int, pow2: bool):
    """Layouts whose image lies in [0, bound)."""
    shp = draw(shapes(max_leaves=3, max_leaf=8 if pow2 else 6, max_size=4 * bound, pow2=pow2))
    cands = [0] + ([2**k for k in range(9)] if pow2 else list(range(1, bound)))
    strides, used = [], 0
    for s in flatten(shp):
        ok = [d for d in cands if (s - 1) * d <= bound - 1 - used]
        d = draw(st.sampled_from(ok))
        used += (s - 1) * d
        strides.append(d)
    return Layout(shp, unflatten(strides, shp))


def _check_composition(a: Layout, b: Layout, r: Layout) -> None:
    assert r.size() == b.size()
    for i in range(b.size()):
        assert r(i) == a(b(i)), (a, b, r, i)
    if b.rank() > 1:  # shaped like b, mode by mode
        assert r.rank() == b.rank()
        assert all(r[i].size() == b[i].size() for i in range(b.rank()))


def _modewise(a: Layout, b: Layout, c: int) -> int:
    """CuTe's left-distributive value: each flat mode of b composed with a separately."""
    leaves = list(zip(flatten(b.shape), flatten(b.stride)))
    total = 0
    for s, d in leaves:
        total += a(d * (c % s))
        c //= s
    return total


@settings(max_examples=MANY, deadline=None)
@given(st.data())
def test_composition_pow2(data):
    # with power-of-two shapes and strides the divisibility conditions always hold; the
    # only possible rejection is b's modes carrying into each other inside a's modes
    a = data.draw(layouts(pow2=True, max_leaf=8))
    b = data.draw(fitting_layouts(a.size(), pow2=True))
    try:
        r = composition(a, b)
    except ValueError as e:
        assert "carry" in str(e)
        assert any(_modewise(a, b, c) != a(b(c)) for c in range(b.size()))
        event("rejected: modes carry")
        return
    _check_composition(a, b, r)


@settings(max_examples=SOME, deadline=None)
@given(st.data())
def test_composition_pow2_injective_tiler_always_defined(data):
    a = data.draw(layouts(pow2=True, max_leaf=8))
    b = data.draw(injective_layouts(pow2=True).filter(lambda x: x.cosize() <= a.size()))
    _check_composition(a, b, composition(a, b))


@settings(max_examples=MANY, deadline=None)
@given(st.data())
def test_composition_general(data):
    a = data.draw(layouts())
    b = data.draw(fitting_layouts(a.size(), pow2=False))
    try:
        r = composition(a, b)
    except ValueError:
        event("composition rejected (divisibility)")
        return
    event("composition defined")
    _check_composition(a, b, r)


@settings(max_examples=SOME, deadline=None)
@given(layouts())
def test_composition_with_own_domain_and_inverse(a):
    # a o (compact col-major layout of a's shape) is a itself; a o right_inverse(a) is the identity
    r = composition(a, Layout(a.shape))
    _check_composition(a, Layout(a.shape), r)
    ri = right_inverse(a)
    idn = composition(a, ri)
    assert [idn(i) for i in range(ri.size())] == list(range(ri.size()))


def test_composition_of_compact_layouts_can_be_undefined():
    # CuTe's conditions are not always met by compact operands: row-major (2,3) o itself
    a = Layout((2, 3), (3, 1))
    with pytest.raises(ValueError, match="divisibility"):
        composition(a, a)


def test_composition_examples_and_errors():
    a = Layout((6, 2), (8, 2))
    r = composition(a, Layout((4, 3), (3, 1)))
    assert r == Layout(((2, 2), 3), ((24, 2), 8))
    _check_composition(a, Layout((4, 3), (3, 1)), r)
    a = Layout((4, 6), (1, 8))
    assert composition(a, 8) == Layout((4, 2), (1, 8))
    assert composition(a, Layout(3, 0)) == Layout(3, 0)
    with pytest.raises(ValueError, match="shape divisibility"):
        composition(a, 6)  # would need 4 then 1.5 elements of the next mode
    with pytest.raises(ValueError, match="stride divisibility"):
        composition(a, Layout(2, 3))  # stride 3 straddles the size-4 mode
    with pytest.raises(ValueError, match="carry"):
        composition(Layout((2, 2), (0, 1)), Layout((2, 2), (1, 1)))  # 1 + 1 carries into mode 1
    # a single (unbounded) mode never carries: non-injective tilers are fine there
    assert composition(Layout(5, 3), Layout((2, 2), (1, 1))) == Layout((2, 2), (3, 3))


def test_composition_by_mode_tiler():
    a = Layout((8, 6), (6, 1))
    r = composition(a, (Layout(4, 2), None))
    assert r[1] == a[1]
    for i in range(4):
        for j in range(6):
            assert r(i, j) == a(2 * i, j)
    r2 = composition(a, (2, 3))
    assert r2 == Layout((2, 3), (6, 1))


# --------------------------------------------------------------------------------------
# complement / inverses
# --------------------------------------------------------------------------------------


def _extent(a: Layout) -> int:
    return max([s * d for s, d in zip(flatten(a.shape), flatten(a.stride)) if s > 1 and d > 0], default=1)


@settings(max_examples=MANY, deadline=None)
@given(injective_layouts(), st.integers(1, 3))
def test_complement_covers_exactly_once(a, k):
    m = _extent(a) * k
    c = complement(a, m)
    img_a, img_c = images(a), images(c)
    assert len(set(img_a)) == len(img_a)  # a is injective
    assert set(img_a) & set(img_c) == {0}
    assert img_c == sorted(img_c)  # the complement is ordered
    r = make_layout(a, c)
    assert r.size() == m
    assert Counter(images(r)) == Counter(range(m))


@settings(max_examples=SOME, deadline=None)
@given(injective_layouts())
def test_complement_default_cotarget(a):
    c = complement(a)
    r = make_layout(a, c)
    assert sorted(images(r)) == list(range(r.size()))
    assert r.size() >= a.cosize() or a.size() == 1


def test_complement_examples_and_errors():
    assert complement(Layout(4, 1), 24) == Layout(6, 4)
    assert complement(Layout(6, 4), 24) == Layout(4, 1)
    assert complement(Layout((2, 2), (1, 6)), 24) == Layout((3, 2), (2, 12))
    assert complement(Layout((4, 6), (1, 4))) == Layout(1, 0)
    with pytest.raises(ValueError):
        complement(Layout((2, 2), (1, 1)))  # not injective
    with pytest.raises(ValueError):
        complement(Layout((2, 3), (3, 2)))  # modes interleave


@settings(max_examples=MANY, deadline=None)
@given(compact_layouts())
def test_right_inverse_of_compact_layout(a):
    r = right_inverse(a)
    assert r.size() == a.size()
    assert [a(r(i)) for i in range(a.size())] == list(range(a.size()))
    assert [r(a(i)) for i in range(a.size())] == list(range(a.size()))


@settings(max_examples=SOME, deadline=None)
@given(layouts())
def test_right_inverse_general(a):
    r = right_inverse(a)
    n = r.size()
    assert [a(r(i)) for i in range(n)] == list(range(n))
    # it covers the longest prefix [0, n) of a's image that a's stride chain reaches
    assert set(range(n)) <= set(images(a))


@settings(max_examples=SOME, deadline=None)
@given(injective_layouts())
def test_left_inverse(a):
    li = left_inverse(a)
    assert [li(a(i)) for i in range(a.size())] == list(range(a.size()))


# --------------------------------------------------------------------------------------
# divides
# --------------------------------------------------------------------------------------


def _divide_def(a: Layout, b: Layout):
    """Brute-force definition: (b, complement(b, size(a))) enumerated, then a applied."""
    c = complement(b, a.size())
    return c, lambda t, r: a(b(t) + c(r))


@settings(max_examples=MANY, deadline=None)
@given(st.data())
def test_logical_divide_matches_definition(data):
    a = data.draw(layouts(pow2=True, max_leaf=8))
    b = data.draw(injective_layouts(pow2=True))
    if _extent(b) > a.size() or a.size() % _extent(b):
        b = Layout(1, 0)
    d = logical_divide(a, b)
    c, ref = _divide_def(a, b)
    assert d.rank() == 2 and d[0].size() == b.size() and d[1].size() == c.size()
    for t in range(b.size()):
        for r in range(c.size()):
            assert d(t, r) == ref(t, r)
    # tile and rest enumerate each element of a's domain exactly once
    idx = [b(t) + c(r) for t in range(b.size()) for r in range(c.size())]
    assert sorted(idx) == list(range(a.size()))


def test_logical_divide_examples():
    assert logical_divide(Layout((4, 2, 3), (2, 1, 8)), Layout(4, 2)) == Layout(((2, 2), (2, 3)), ((4, 1), (2, 8)))
    a = Layout((9, (4, 8)), (59, (13, 1)))
    d = logical_divide(a, (Layout(3, 3), Layout((2, 4), (1, 8))))
    assert d == Layout(((3, 3), ((2, 4), (2, 2))), ((177, 59), ((13, 2), (26, 1))))


@settings(max_examples=SOME, deadline=None)
@given(st.data())
def test_by_mode_divides(data):
    shp = (data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8)))
    a = Layout(shp, (1, shp[0])) if data.draw(st.booleans()) else Layout(shp, (shp[1], 1))
    tiles = []
    for i in range(2):
        n = a[i].size()
        divs = [t for t in range(1, n + 1) if n % t == 0]
        tiles.append(Layout(data.draw(st.sampled_from(divs)), 1))
    d = logical_divide(a, tuple(tiles))
    z = zipped_divide(a, tuple(tiles))
    td = tiled_divide(a, tuple(tiles))
    (t0, t1) = (t.size() for t in tiles)
    r0, r1 = a[0].size() // t0, a[1].size() // t1
    for i0, j0, i1, j1 in itertools.product(range(t0), range(r0), range(t1), range(r1)):
        expect = a(i0 + t0 * j0, i1 + t1 * j1)
        assert d((i0, j0), (i1, j1)) == expect
        assert z((i0, i1), (j0, j1)) == expect
        assert td((i0, i1), j0, j1) == expect


# --------------------------------------------------------------------------------------
# products
# --------------------------------------------------------------------------------------


def _check_product(a: Layout, b: Layout, p: Layout) -> None:
    comp = complement(a, a.size() * b.cosize())
    assert p.rank() == 2 and p[0] == a and p[1].size() == b.size()
    for i in range(a.size()):
        for j in range(b.size()):
            assert p(i, j) == a(i) + comp(b(j))


@settings(max_examples=SOME, deadline=None)
@given(injective_layouts(max_leaves=3), layouts(max_leaves=2, max_leaf=4, max_stride=6))
def test_logical_product_matches_definition(a, b):
    try:
        p = logical_product(a, b)
    except ValueError:
        event("product undefined (complement o b fails CuTe's conditions)")
        return
    _check_product(a, b, p)


@settings(max_examples=SOME, deadline=None)
@given(injective_layouts(max_leaves=3, pow2=True), injective_layouts(max_leaves=2, pow2=True))
def test_logical_product_pow2_always_defined(a, b):
    _check_product(a, b, logical_product(a, b))


@settings(max_examples=SOME, deadline=None)
@given(compact_layouts(max_leaves=3), compact_layouts(max_leaves=2))
def test_logical_product_of_compact_layouts_is_compact(a, b):
    p = logical_product(a, b)
    assert sorted(images(p)) == list(range(a.size() * b.size()))


def test_product_examples():
    assert logical_product(Layout((2, 2), (4, 1)), Layout(6, 1)) == Layout(((2, 2), (2, 3)), ((4, 1), (2, 8)))
    a, b = Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3))
    assert blocked_product(a, b) == Layout(((2, 3), (5, 4)), ((5, 10), (1, 30)))
    assert raked_product(a, b) == Layout(((3, 2), (4, 5)), ((10, 5), (30, 1)))


@settings(max_examples=FEW, deadline=None)
@given(st.data())
def test_blocked_and_raked_products(data):
    def rank2(d):
        shp = (d.draw(st.integers(1, 4)), d.draw(st.integers(1, 4)))
        return Layout(shp, (1, shp[0])) if d.draw(st.booleans()) else Layout(shp, (shp[1], 1))

    a, b = rank2(data), rank2(data)
    lp = logical_product(a, b)
    bp, rp = blocked_product(a, b), raked_product(a, b)
    for m in range(2):
        assert bp[m].size() == rp[m].size() == a[m].size() * b[m].size()
    for a0, a1, b0, b1 in itertools.product(*(range(n) for n in (a[0].size(), a[1].size(), b[0].size(), b[1].size()))):
        expect = lp((a0, a1), (b0, b1))
        assert bp((a0, b0), (a1, b1)) == expect
        assert rp((b0, a0), (b1, a1)) == expect
    n = a.size() * b.size()
    assert sorted(images(bp)) == sorted(images(rp)) == list(range(n))


def test_idx2crd_of_tile_layout_roundtrip():
    # a TV-style use: 2-D tile index convention is colexicographic
    tile = (8, 16)
    for idx in range(8 * 16):
        r, c = idx2crd(idx, tile)
        assert idx == r + 8 * c
