"""Hypothesis strategies and brute-force helpers shared by the layout tests."""

from __future__ import annotations

from hypothesis import strategies as st

from argus_inductor.layout import Layout, flatten, product, unflatten

# Hypothesis budgets: the whole tests/layout suite should stay well under 30 s.
FEW = 30
SOME = 50
MANY = 100

MAX_SIZE = 256  # keep brute-force enumeration cheap


def _nest(draw, leaves: list[int]):
    """Randomly group a flat list of leaves into a nested tuple (depth <= 3)."""
    if len(leaves) == 1 and draw(st.booleans()):
        return leaves[0]
    groups = []
    i = 0
    while i < len(leaves):
        k = draw(st.integers(1, len(leaves) - i))
        chunk = leaves[i : i + k]
        i += k
        if len(chunk) == 1 and draw(st.booleans()):
            groups.append(chunk[0])
        else:
            groups.append(tuple(chunk) if draw(st.booleans()) or len(chunk) == 1 else (chunk[0], tuple(chunk[1:])))
    return tuple(groups)


@st.composite
def shapes(draw, max_leaves: int = 4, max_leaf: int = 6, max_size: int = MAX_SIZE, pow2: bool = False):
    """Nested shapes with positive leaves and a bounded total size."""
    n = draw(st.integers(1, max_leaves))
    leaves: list[int] = []
    total = 1
    for _ in range(n):
        if pow2:
            leaf = 2 ** draw(st.integers(0, max(0, max_leaf.bit_length() - 1)))
        else:
            leaf = draw(st.integers(1, max_leaf))
        if total * leaf > max_size:
            break
        leaves.append(leaf)
        total *= leaf
    if not leaves:
        leaves = [1]
    return _nest(draw, leaves)


@st.composite
def layouts(draw, max_leaves: int = 4, max_leaf: int = 6, max_stride: int = 24, pow2: bool = False):
    """Arbitrary layouts (possibly non-injective, with zero strides)."""
    shp = draw(shapes(max_leaves=max_leaves, max_leaf=max_leaf, pow2=pow2))
    n = len(flatten(shp))
    if pow2:
        strides = [draw(st.sampled_from([0] + [2**k for k in range(6)])) for _ in range(n)]
    else:
        strides = [draw(st.integers(0, max_stride)) for _ in range(n)]
    return Layout(shp, unflatten(strides, shp))


@st.composite
def injective_layouts(draw, max_leaves: int = 4, max_leaf: int = 6, gaps: bool = True, pow2: bool = False):
    """Layouts satisfying complement's conditions: modes sorted by stride never interleave.

    Built as a permutation of modes laid out in increasing-stride order, with optional
    multiplicative gaps between consecutive modes.
    """
    shp = draw(shapes(max_leaves=max_leaves, max_leaf=max_leaf, pow2=pow2))
    sizes = list(flatten(shp))
    n = len(sizes)
    perm = draw(st.permutations(range(n)))
    strides = [0] * n
    cur = 1
    for idx in perm:
        gap = draw(st.sampled_from([1, 1, 2, 3] if not pow2 else [1, 1, 2, 4])) if gaps else 1
        if sizes[idx] == 1:
            strides[idx] = draw(st.integers(0, 4))
            continue
        cur *= gap
        strides[idx] = cur
        cur *= sizes[idx]
    return Layout(shp, unflatten(strides, shp))


def compact_permuted(draw, shp) -> Layout:
    """A bijective layout onto [0, size): modes of ``shp`` stacked in a random order."""
    sizes = list(flatten(shp))
    perm = draw(st.permutations(range(len(sizes))))
    strides = [0] * len(sizes)
    cur = 1
    for idx in perm:
        strides[idx] = cur
        cur *= sizes[idx]
    return Layout(shp, unflatten(strides, shp))


@st.composite
def compact_layouts(draw, max_leaves: int = 4, max_leaf: int = 6):
    """Bijective layouts onto ``[0, size)``."""
    return compact_permuted(draw, draw(shapes(max_leaves=max_leaves, max_leaf=max_leaf)))


def images(layout) -> list[int]:
    """Image of a layout over its whole domain, in domain order (checked against L(i))."""
    out = layout.offsets()
    n = len(out)
    for i in range(0, n, max(1, n // 16)):  # spot-check against the coordinate map
        assert out[i] == layout(i)
    return out


def total_size(shape) -> int:
    return product(shape)
