"""CuTe-style layouts: a ``Layout`` is a pair (shape, stride) of congruent IntTuples.

A layout is a function from coordinates to offsets: a coordinate (nested, flat or a
single linear index, decomposed colexicographically) is dotted with the stride.
The algebra (coalesce, composition, complement, inverses, divides and products)
follows CuTe's definitions; operations whose divisibility conditions fail raise
``ValueError`` instead of silently producing a wrong layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .inttuple import (
    IntTuple,
    as_int_tuple,
    ceil_div,
    congruent,
    crd2idx,
    depth,
    flatten,
    is_int,
    is_tuple,
    prefix_product,
    product,
    rank,
    suffix_product,
)

__all__ = [
    "Layout",
    "Tiler",
    "blocked_product",
    "coalesce",
    "col_major",
    "complement",
    "composition",
    "filter_layout",
    "flatten_layout",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "make_layout",
    "raked_product",
    "right_inverse",
    "row_major",
    "tiled_divide",
    "zipped_divide",
]


def _fmt(t: IntTuple) -> str:
    if is_int(t):
        return str(t)
    return "(" + ",".join(_fmt(e) for e in t) + ")"  # type: ignore[union-attr]


@dataclass(frozen=True, init=False)
class Layout:
    """A map from coordinates of ``shape`` to offsets ``sum(coord_i * stride_i)``.

    ``stride`` defaults to the compact column-major (colexicographic) strides.
    """

    shape: IntTuple
    stride: IntTuple

    def __init__(self, shape: IntTuple, stride: IntTuple | None = None) -> None:
        shp = as_int_tuple(shape)
        std = prefix_product(shp) if stride is None else as_int_tuple(stride)
        if not congruent(shp, std):
            raise ValueError(f"stride {_fmt(std)} is not congruent with shape {_fmt(shp)}")
        if any(s < 1 for s in flatten(shp)):
            raise ValueError(f"shape entries must be >= 1: {_fmt(shp)}")
        if any(d < 0 for d in flatten(std)):
            raise ValueError(f"strides must be >= 0: {_fmt(std)}")
        object.__setattr__(self, "shape", shp)
        object.__setattr__(self, "stride", std)

    # -- evaluation -------------------------------------------------------------------
    def __call__(self, *crd: IntTuple) -> int:
        """Offset of a coordinate: ``L(i)`` (linear index), ``L(i, j)`` or ``L((i, (j, k)))``."""
        if not crd:
            raise TypeError("Layout() needs a coordinate")
        c = as_int_tuple(crd[0] if len(crd) == 1 else tuple(crd))
        return crd2idx(c, self.shape, self.stride)

    def offsets(self) -> list[int]:
        """``[L(0), L(1), ..., L(size-1)]``, computed mode by mode in O(size)."""
        out = [0]
        for s, d in zip(flatten(self.shape), flatten(self.stride)):
            out = [o + i * d for i in range(s) for o in out]
        return out

    # -- queries ------------------------------------------------------------------------
    def size(self) -> int:
        """Size of the domain."""
        return product(self.shape)

    def cosize(self) -> int:
        """Size of the codomain: ``L(size - 1) + 1`` (strides are non-negative)."""
        return self(self.size() - 1) + 1

    def rank(self) -> int:
        """Number of top-level modes."""
        return rank(self.shape)

    def depth(self) -> int:
        """Nesting depth of the shape."""
        return depth(self.shape)

    def __getitem__(self, i: int | slice) -> Layout:
        """Top-level mode ``i`` (or a slice of modes) as a layout."""
        if is_int(self.shape):
            if isinstance(i, slice):
                return make_layout(*[self][i])
            if i in (0, -1):
                return self
            raise IndexError(f"mode {i} out of range for rank-1 layout {self}")
        shp: tuple = self.shape  # type: ignore[assignment]
        std: tuple = self.stride  # type: ignore[assignment]
        if isinstance(i, slice):
            return Layout(shp[i], std[i])
        if not -len(shp) <= i < len(shp):
            raise IndexError(f"mode {i} out of range for {self}")
        return Layout(shp[i], std[i])

    def modes(self) -> list[Layout]:
        """All top-level modes."""
        return [self[i] for i in range(self.rank())]

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self})"


Tiler = Layout | int | tuple
"""A tiler: a layout, an int ``n`` (meaning ``n:1``) or a tuple of tilers (by-mode; ``None`` keeps a mode)."""


def _as_layout(t: Layout | int) -> Layout:
    if isinstance(t, Layout):
        return t
    if is_int(t):
        return Layout(t, 1)
    raise TypeError(f"cannot use {t!r} as a layout")


def make_layout(*layouts: Layout) -> Layout:
    """Concatenate layouts as the modes of a new layout: ``(L0, L1, ...)``."""
    return Layout(tuple(lo.shape for lo in layouts), tuple(lo.stride for lo in layouts))


def row_major(shape: IntTuple) -> Layout:
    """Compact layout whose *last* mode is contiguous (C order)."""
    shp = as_int_tuple(shape)
    return Layout(shp, suffix_product(shp))


def col_major(shape: IntTuple) -> Layout:
    """Compact layout whose *first* mode is contiguous (CuTe's default)."""
    return Layout(shape)


def flatten_layout(layout: Layout) -> Layout:
    """Same function with a flat (depth <= 1) shape."""
    if is_int(layout.shape):
        return layout
    return Layout(flatten(layout.shape), flatten(layout.stride))


def _from_modes(modes: list[tuple[int, int]]) -> Layout:
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Simplify to the fewest modes with the same function on ``[0, size)``.

    Size-1 modes are dropped and adjacent modes ``(s0:d0, s1:d1)`` with ``d1 == s0*d0``
    are merged. With a tuple ``profile``, coalesces each top-level mode separately
    (modes beyond the profile are kept), preserving the top-level rank.
    """
    if profile is not None and is_tuple(profile):
        out = []
        for i in range(layout.rank()):
            mode = layout[i]
            out.append(coalesce(mode, profile[i]) if i < len(profile) else mode)  # type: ignore[arg-type]
        return make_layout(*out)
    merged: list[tuple[int, int]] = []
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        if s == 1:
            continue
        if merged and merged[-1][0] * merged[-1][1] == d:
            merged[-1] = (merged[-1][0] * s, merged[-1][1])
        else:
            merged.append((s, d))
    return _from_modes(merged)


def filter_layout(layout: Layout) -> Layout:
    """CuTe's ``filter``: drop stride-0 (broadcast) and size-1 modes, then coalesce."""
    modes = [(s, d) for s, d in zip(flatten(layout.shape), flatten(layout.stride)) if d != 0 and s != 1]
    return coalesce(_from_modes(modes))


def _compose_leaf(
    a: Layout, shapes: tuple[int, ...], strides: tuple[int, ...], s: int, d: int, usage: list[int]
) -> Layout:
    """``a o (s:d)`` for one integral mode of the right operand.

    ``shapes``/``strides`` are the modes of ``coalesce(a)`` (its mixed-radix digits; the
    last one is unbounded). Adds to ``usage[k]`` the largest value this mode puts in
    digit ``k``. Raises ValueError when CuTe's divisibility conditions fail.
    """
    if d == 0 or s == 1:
        return Layout(s, 0) if s != 1 else Layout(1, 0)
    out: list[tuple[int, int]] = []
    rest_shape, rest_stride = s, d
    for k, (si, di) in enumerate(zip(shapes[:-1], strides[:-1])):
        if rest_shape == 1:
            break
        if rest_stride % si == 0:  # this digit is stepped over entirely
            rest_stride //= si
            continue
        if si % rest_stride != 0:
            raise ValueError(
                f"composition {a} o {s}:{d}: stride divisibility fails (mode size {si}, stride {rest_stride})"
            )
        avail = si // rest_stride
        take = min(avail, rest_shape)
        if rest_shape % take != 0:
            raise ValueError(
                f"composition {a} o {s}:{d}: shape divisibility fails ({take} does not divide {rest_shape})"
            )
        out.append((take, rest_stride * di))
        usage[k] += rest_stride * (take - 1)
        rest_stride = 1
        rest_shape //= take
    if rest_shape > 1:
        out.append((rest_shape, rest_stride * strides[-1]))
    return coalesce(_from_modes(out))


def _rebuild(parts: list[Layout], profile: IntTuple) -> Layout:
    it = iter(parts)

    def build(p: IntTuple) -> Layout:
        if is_int(p):
            return next(it)
        return make_layout(*(build(e) for e in p))  # type: ignore[union-attr]

    return build(profile)


def _by_mode(a: Layout, tiler: tuple, op: Callable[[Layout, Any], Layout]) -> Layout:
    """Apply ``op`` to each mode of ``a`` with the matching tiler entry (``None`` keeps the mode)."""
    if len(tiler) > a.rank():
        raise ValueError(f"tiler {tiler} has more modes than layout {a}")
    return make_layout(*(a[i] if i >= len(tiler) or tiler[i] is None else op(a[i], tiler[i])
                         for i in range(a.rank())))


def composition(a: Layout, b: Tiler) -> Layout:
    """Functional composition ``R = A o B`` with ``R(c) == A(B(c))``, shaped like ``B``.

    ``b`` may be a Layout, an int ``n`` (``n:1``), or a tuple tiler applied by-mode
    (``None`` keeps that mode of ``a``). Requires CuTe's divisibility conditions:
    each mode's stride must divide / be divided by ``a``'s (coalesced) mode sizes, and
    the mode sizes taken must divide the requested shape; otherwise ValueError.
    The result is CuTe's mode-wise composition; a ValueError is also raised when ``b``'s
    modes carry into each other in ``a``'s coordinates (e.g. ``(2,2):(0,1) o (2,2):(1,1)``),
    where CuTe's mode-wise result would differ from ``a(b(c))``. The identity
    ``R(c) == a(b(c))`` is exact for ``b``'s image inside ``[0, size(a))``.
    """
    if isinstance(b, tuple):
        return _by_mode(a, b, composition)
    bl = _as_layout(b)
    ca = coalesce(a)
    shapes, strides = flatten(ca.shape), flatten(ca.stride)
    usage = [0] * len(shapes)
    parts = [_compose_leaf(a, shapes, strides, s, d, usage) for s, d in zip(flatten(bl.shape), flatten(bl.stride))]
    for k in range(len(shapes) - 1):
        if usage[k] >= shapes[k]:
            raise ValueError(
                f"composition {a} o {bl}: the modes of the right operand overlap in mode {k} of "
                f"{ca} (their offsets carry), so no layout equals the functional composition"
            )
    return _rebuild(parts, bl.shape)


def complement(a: Layout, cotarget: int | None = None) -> Layout:
    """The layout of offsets in ``[0, cotarget)`` that ``a`` does not reach, in order.

    ``make_layout(a, complement(a, M))`` is a bijection onto ``[0, M)`` when ``a`` is
    injective and ``M`` is a multiple of ``cosize(a)`` (rounded as CuTe does).
    ``cotarget`` defaults to ``cosize(a)``. Raises ValueError if ``a``'s sorted modes
    overlap or interleave (stride not a multiple of the previous mode's extent).
    """
    if cotarget is None:
        cotarget = a.cosize()
    f = filter_layout(a)
    modes = sorted(
        ((s, d) for s, d in zip(flatten(f.shape), flatten(f.stride)) if s != 1 and d != 0),
        key=lambda m: (m[1], m[0]),
    )
    out: list[tuple[int, int]] = []
    cur = 1
    for s, d in modes:
        if d % cur != 0:
            raise ValueError(f"complement of {a}: stride {d} is not a multiple of extent {cur}")
        out.append((d // cur, cur))
        cur = s * d
    out.append((ceil_div(cotarget, cur), cur))
    return coalesce(_from_modes(out))


def right_inverse(a: Layout) -> Layout:
    """A layout ``R`` with ``a(R(i)) == i`` for ``i`` in ``[0, size(R))``.

    ``R`` covers the longest contiguous prefix ``[0, n)`` of ``a``'s image that the
    stride chain reaches; for a compact (bijective) layout ``size(R) == size(a)``.
    """
    shapes = flatten(a.shape)
    strides = flatten(a.stride)
    dstrides = flatten(prefix_product(a.shape))
    modes = sorted((d, s, p) for s, d, p in zip(shapes, strides, dstrides) if s != 1 and d != 0)
    out: list[tuple[int, int]] = []
    cur = 1
    for d, s, p in modes:
        if d != cur:
            break
        out.append((s, p))
        cur = s * d
    return coalesce(_from_modes(out))


def left_inverse(a: Layout) -> Layout:
    """A layout ``L`` with ``L(a(i)) == i`` for ``i`` in ``[0, size(a))`` (``a`` injective)."""
    return right_inverse(make_layout(a, complement(a)))


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """``a o (B, complement(B, size(a)))``: mode 0 is the tile, mode 1 indexes tiles.

    With a tuple tiler the divide is applied to each mode of ``a`` (by-mode).
    """
    if isinstance(tiler, tuple):
        return _by_mode(a, tiler, logical_divide)
    b = _as_layout(tiler)
    return composition(a, make_layout(b, complement(b, a.size())))


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """Like :func:`logical_divide` but gathered as ``((tile modes...), (rest modes...))``."""
    if not isinstance(tiler, tuple):
        return logical_divide(a, tiler)
    d = logical_divide(a, tiler)
    tiles, rests = [], []
    for i in range(a.rank()):
        ti = tiler[i] if i < len(tiler) else None
        if ti is None:
            rests.append(d[i])
        else:
            tiles.append(d[i][0])
            rests.append(d[i][1])
    return make_layout(make_layout(*tiles), make_layout(*rests))


def tiled_divide(a: Layout, tiler: Tiler) -> Layout:
    """``((tile modes...), rest0, rest1, ...)``."""
    z = zipped_divide(a, tiler)
    rest = z[1]
    return make_layout(z[0], *(rest.modes() if is_tuple(rest.shape) else [rest]))


def logical_product(a: Layout, b: Tiler) -> Layout:
    """``(A, complement(A, size(A)*cosize(B)) o B)``: ``a`` repeated as laid out by ``b``.

    With a tuple ``b`` the product is applied to each mode of ``a`` (by-mode).
    """
    if isinstance(b, tuple):
        return _by_mode(a, b, logical_product)
    bl = _as_layout(b)
    return make_layout(a, composition(complement(a, a.size() * bl.cosize()), bl))


def _append_rank(layout: Layout, r: int) -> Layout:
    modes = layout.modes()
    while len(modes) < r:
        modes.append(Layout(1, 0))
    return make_layout(*modes)


def blocked_product(a: Layout, b: Layout) -> Layout:
    """Rank-preserving product: mode ``i`` is ``(a_i, b_i')`` (``a`` is the inner block)."""
    r = max(a.rank(), b.rank())
    p = logical_product(_append_rank(a, r), _append_rank(b, r))
    return make_layout(*(make_layout(p[0][i], p[1][i]) for i in range(r)))


def raked_product(a: Layout, b: Layout) -> Layout:
    """Rank-preserving product: mode ``i`` is ``(b_i', a_i)`` (``a`` is raked across ``b``)."""
    r = max(a.rank(), b.rank())
    p = logical_product(_append_rank(a, r), _append_rank(b, r))
    return make_layout(*(make_layout(p[1][i], p[0][i]) for i in range(r)))
