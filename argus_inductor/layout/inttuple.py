"""Nested integer tuples ("IntTuple") and the coordinate maps built on them.

An IntTuple is either a Python ``int`` or a (possibly empty) tuple of IntTuples.
Coordinates are colexicographic, as in CuTe: the *leftmost* mode varies fastest,
so for shape ``(M, N)`` the coordinate ``(m, n)`` has compact index ``m + M * n``.
"""

from __future__ import annotations

from collections.abc import Sequence

IntTuple = int | tuple["IntTuple", ...]

__all__ = [
    "IntTuple",
    "as_int_tuple",
    "ceil_div",
    "compatible",
    "congruent",
    "crd2idx",
    "depth",
    "flatten",
    "idx2crd",
    "is_int",
    "is_tuple",
    "prefix_product",
    "product",
    "rank",
    "shape_div",
    "size",
    "suffix_product",
    "unflatten",
    "weakly_congruent",
]


def is_int(x: object) -> bool:
    """True for a plain integer (``bool`` excluded)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_tuple(x: object) -> bool:
    """True for a tuple (an IntTuple node, possibly empty)."""
    return isinstance(x, tuple)


def as_int_tuple(x: object) -> IntTuple:
    """Normalize lists to tuples recursively and validate leaves are ints."""
    if is_int(x):
        return int(x)  # type: ignore[arg-type]
    if isinstance(x, (tuple, list)):
        return tuple(as_int_tuple(e) for e in x)
    raise TypeError(f"not an IntTuple: {x!r}")


def flatten(t: IntTuple) -> tuple[int, ...]:
    """Leaves of ``t`` in order, as a flat tuple (an int becomes a 1-tuple)."""
    if is_int(t):
        return (t,)  # type: ignore[return-value]
    out: list[int] = []
    for e in t:  # type: ignore[union-attr]
        out.extend(flatten(e))
    return tuple(out)


def unflatten(flat: Sequence[int], profile: IntTuple) -> IntTuple:
    """Inverse of :func:`flatten`: rebuild ``profile``'s nesting from leaves."""
    it = iter(flat)

    def build(p: IntTuple) -> IntTuple:
        if is_int(p):
            return next(it)
        return tuple(build(e) for e in p)  # type: ignore[union-attr]

    out = build(profile)
    if next(it, None) is not None:
        raise ValueError("too many leaves for profile")
    return out


def product(t: IntTuple) -> int:
    """Product of all leaves (1 for the empty tuple)."""
    p = 1
    for e in flatten(t):
        p *= e
    return p


def size(t: IntTuple) -> int:
    """Number of coordinates of shape ``t``; same as :func:`product`."""
    return product(t)


def rank(t: IntTuple) -> int:
    """Number of top-level modes (1 for an int)."""
    return len(t) if is_tuple(t) else 1  # type: ignore[arg-type]


def depth(t: IntTuple) -> int:
    """Nesting depth: 0 for an int, 1 for a flat tuple, ..."""
    if is_int(t):
        return 0
    return 1 + max((depth(e) for e in t), default=0)  # type: ignore[union-attr]


def ceil_div(a: int, b: int) -> int:
    """Ceiling of ``a / b`` for positive ``b``."""
    return -(-a // b)


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """CuTe's ``shape_div``: divide shape ``a`` by ``b``, consuming ``b`` mode by mode.

    For ints, one of ``a`` and ``b`` must divide the other; the result is ``a // b``
    if ``b`` divides ``a`` and 1 otherwise. Raises ValueError if neither divides.
    """
    if is_tuple(a):
        if is_tuple(b):
            if len(a) != len(b):  # type: ignore[arg-type]
                raise ValueError(f"shape_div rank mismatch: {a} / {b}")
            return tuple(shape_div(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
        out = []
        rest: int = b  # type: ignore[assignment]
        for x in a:  # type: ignore[union-attr]
            out.append(shape_div(x, rest))
            rest = shape_div(rest, product(x))  # type: ignore[assignment]
        return tuple(out)
    if is_tuple(b):
        return shape_div(a, product(b))
    a_i: int = a  # type: ignore[assignment]
    b_i: int = b  # type: ignore[assignment]
    if b_i == 0:
        raise ValueError("shape_div by zero")
    if a_i % b_i == 0:
        return a_i // b_i
    if b_i % a_i == 0:
        return 1
    raise ValueError(f"shape_div: neither of {a_i} and {b_i} divides the other")


def prefix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive colexicographic prefix products, with ``t``'s nesting.

    ``prefix_product((2, (3, 4)))`` is ``(1, (2, 6))``: the compact column-major strides.
    """
    if is_int(t):
        return init
    out = []
    acc = init
    for e in t:  # type: ignore[union-attr]
        out.append(prefix_product(e, acc))
        acc *= product(e)
    return tuple(out)


def suffix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive suffix products (compact row-major strides), with ``t``'s nesting."""
    if is_int(t):
        return init
    out: list[IntTuple] = []
    acc = init
    for e in reversed(t):  # type: ignore[arg-type]
        out.append(suffix_product(e, acc))
        acc *= product(e)
    return tuple(reversed(out))


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """True when ``a`` and ``b`` have the same nesting profile."""
    if is_int(a) and is_int(b):
        return True
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    return False


def weakly_congruent(a: IntTuple, b: IntTuple) -> bool:
    """True when ``b``'s profile refines ``a``'s (an int in ``a`` matches anything)."""
    if is_int(a):
        return True
    if is_int(b):
        return False
    return len(a) == len(b) and all(weakly_congruent(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]


def compatible(a: IntTuple, b: IntTuple) -> bool:
    """CuTe compatibility: coordinates of shape ``a`` can index shape ``b``."""
    if is_int(a):
        return a == size(b)
    if is_int(b):
        return False
    return len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """Map a (possibly nested, possibly partially linearized) coordinate to an index.

    ``stride`` defaults to compact column-major (:func:`prefix_product`). An ``int``
    coordinate for a tuple mode is split colexicographically over that mode's
    sub-modes; the last sub-mode absorbs any remainder (CuTe's extension rule).
    """
    if stride is None:
        stride = prefix_product(shape)
    if is_tuple(crd):
        if not is_tuple(shape) or not is_tuple(stride):
            raise ValueError(f"coordinate {crd} is deeper than shape {shape}")
        if not (len(crd) == len(shape) == len(stride)):  # type: ignore[arg-type]
            raise ValueError(f"coordinate {crd} does not match shape {shape}")
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride))  # type: ignore[arg-type]
    c: int = crd  # type: ignore[assignment]
    if is_int(shape):
        if not is_int(stride):
            raise ValueError(f"stride {stride} not congruent with shape {shape}")
        return c * stride  # type: ignore[operator]
    if not is_tuple(stride) or len(stride) != len(shape):  # type: ignore[arg-type]
        raise ValueError(f"stride {stride} not congruent with shape {shape}")
    if len(shape) == 0:  # type: ignore[arg-type]
        return 0
    total = 0
    n = len(shape)  # type: ignore[arg-type]
    for i, (s, d) in enumerate(zip(shape, stride)):  # type: ignore[arg-type]
        if i == n - 1:
            total += crd2idx(c, s, d)
        else:
            sz = product(s)
            total += crd2idx(c % sz, s, d)
            c //= sz
    return total


def idx2crd(idx: int, shape: IntTuple, stride: IntTuple | None = None) -> IntTuple:
    """Inverse of :func:`crd2idx` for compact strides: index -> coordinate congruent with ``shape``.

    With the default (compact column-major) stride this is the colexicographic
    decomposition; for ``idx`` in ``[0, size(shape))`` it is the exact inverse.
    """
    if stride is None:
        stride = prefix_product(shape)
    if is_tuple(shape):
        if not is_tuple(stride) or len(stride) != len(shape):  # type: ignore[arg-type]
            raise ValueError(f"stride {stride} not congruent with shape {shape}")
        return tuple(idx2crd(idx, s, d) for s, d in zip(shape, stride))  # type: ignore[arg-type]
    if not is_int(stride):
        raise ValueError(f"stride {stride} not congruent with shape {shape}")
    if stride == 0:
        return 0
    return (idx // stride) % shape  # type: ignore[operator]
