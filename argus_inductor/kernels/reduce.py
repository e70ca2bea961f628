"""Reductions (sum, mean, max, min, argmax, argmin, prod) and softmax/log-softmax along any dims.

The host views the input as (outer, R, inner), where R is the run of reduced dims (made adjacent by a
permute + copy when they are not). Two kernel shapes cover every case: `*_rows` for inner == 1 (each
program takes BO rows and walks R in blocks of BR along contiguous memory) and `*_cols` for inner > 1
(each program takes one outer index and BI inner columns and walks R in blocks of BR rows).
"""
from __future__ import annotations

import builtins
import math
from collections.abc import Sequence

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    abs,
    arange,
    assert_tag,
    cdiv,
    constexpr,
    exp,
    float32,
    full,
    inf,
    int32,
    int64,
    load,
    log,
    max,
    maximum,
    min,
    minimum,
    prod,
    store,
    sum,
    tag_of,
    tile_grid,
    where,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .launch import TARGETS, check_target, pow2, resolve_target  # noqa: F401  (normalize imports them from here)

# the float reductions' KIND codes and the index reductions'
FLOAT_KINDS = {"sum": 0, "mean": 1, "amax": 2, "max": 2, "amin": 3, "min": 3, "prod": 4}
ARG_KINDS = {"argmax": 0, "argmin": 1}
KINDS = tuple(FLOAT_KINDS) + tuple(ARG_KINDS)


@kernel
def reduce_rows(X: Tensor("O", "R"), Y: Tensor("O"), scale: float, BO: constexpr = 4, BR: constexpr = 64,
                KIND: constexpr = 0):
    """Y[o] = reduce over r of X[o, r]: KIND 0 sum, 1 sum * scale (the mean for scale = 1 / R), 2 max,
    3 min (as -max(-X)), 4 prod, 5 sum of squares, 6 sum of absolute values (the 2- and 1-norm's sums);
    fp32 accumulation."""
    (po,) = tile_grid(cdiv(O, BO))
    ro = po * BO + arange(BO)
    acc = zeros((BO,), float32)
    if (KIND <= 1) | (KIND >= 5):
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            v = load(X[ro, rr]).to(float32)
            if KIND == 5:
                v = v * v
            if KIND == 6:
                v = abs(v)
            acc = acc + sum(v, 1)
        assert_tag((tag_of(acc, "sum(R).lo") <= 0) & (tag_of(acc, "sum(R).hi") >= R),
                   "each output sums all of its row")
        if KIND == 1:
            acc = acc * scale
    if KIND == 2:
        acc = full((BO,), -inf, float32)
        nans = zeros((BO,), float32)  # NaN once the row had one: torch's max propagates NaN, a GPU's max drops it
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            x = load(X[ro, rr], other=-inf).to(float32)
            acc = maximum(acc, max(x, 1))
            z = load(X[ro, rr], other=0.0).to(float32)  # the same elements (cached), 0 on padded lanes
            nans = nans + sum(where(z != z, z, 0.0), 1)
        assert_tag((tag_of(acc, "max(R).lo") <= 0) & (tag_of(acc, "max(R).hi") >= R),
                   "each output is the max over all of its row")
        acc = where(nans != nans, nans, acc)
    if KIND == 3:
        acc = full((BO,), -inf, float32)
        nans = zeros((BO,), float32)
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            x = 0.0 - load(X[ro, rr], other=inf).to(float32)
            acc = maximum(acc, max(x, 1))
            z = load(X[ro, rr], other=0.0).to(float32)  # the same elements (cached), 0 on padded lanes
            nans = nans + sum(where(z != z, z, 0.0), 1)
        assert_tag((tag_of(acc, "max(R).lo") <= 0) & (tag_of(acc, "max(R).hi") >= R),
                   "each output is the min over all of its row")
        acc = where(nans != nans, nans, 0.0 - acc)
    if KIND == 4:
        acc = full((BO,), 1.0, float32)
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            acc = acc * prod(load(X[ro, rr], other=1.0).to(float32), 1)
    store(Y[ro], acc)


@kernel
def reduce_cols(X: Tensor("O", "R", "I"), Y: Tensor("O", "I"), scale: float, BR: constexpr = 16,
                BI: constexpr = 32, KIND: constexpr = 0):
    """Y[o, i] = reduce over r of X[o, r, i]: KIND 0 sum, 1 sum * scale, 2 max, 3 min, 4 prod;
    fp32 accumulation."""
    o, pi = tile_grid(O, cdiv(I, BI))
    ri = pi * BI + arange(BI)
    acc = zeros((BI,), float32)
    if KIND <= 1:
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            acc = acc + sum(load(X[o, rr, ri]).to(float32), 0)
        assert_tag((tag_of(acc, "sum(R).lo") <= 0) & (tag_of(acc, "sum(R).hi") >= R),
                   "each output sums all of its column")
        if KIND == 1:
            acc = acc * scale
    if KIND == 2:
        acc = full((BI,), -inf, float32)
        nans = zeros((BI,), float32)  # NaN once the column had one (torch's max propagates NaN)
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            x = load(X[o, rr, ri], other=-inf).to(float32)
            acc = maximum(acc, max(x, 0))
            z = load(X[o, rr, ri], other=0.0).to(float32)  # the same elements (cached), 0 on padded lanes
            nans = nans + sum(where(z != z, z, 0.0), 0)
        assert_tag((tag_of(acc, "max(R).lo") <= 0) & (tag_of(acc, "max(R).hi") >= R),
                   "each output is the max over all of its column")
        acc = where(nans != nans, nans, acc)
    if KIND == 3:
        acc = full((BI,), -inf, float32)
        nans = zeros((BI,), float32)
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            x = 0.0 - load(X[o, rr, ri], other=inf).to(float32)
            acc = maximum(acc, max(x, 0))
            z = load(X[o, rr, ri], other=0.0).to(float32)  # the same elements (cached), 0 on padded lanes
            nans = nans + sum(where(z != z, z, 0.0), 0)
        assert_tag((tag_of(acc, "max(R).lo") <= 0) & (tag_of(acc, "max(R).hi") >= R),
                   "each output is the min over all of its column")
        acc = where(nans != nans, nans, 0.0 - acc)
    if KIND == 4:
        acc = full((BI,), 1.0, float32)
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            acc = acc * prod(load(X[o, rr, ri], other=1.0).to(float32), 0)
    store(Y[o, ri], acc)


@kernel
def argreduce_rows(X: Tensor("O", "R"), Y: Tensor("O", dtype=int64), BO: constexpr = 4, BR: constexpr = 64,
                   KIND: constexpr = 0):
    """Y[o] = the first r where X[o, r] is largest (KIND 0) or smallest (KIND 1; found as the largest of -X); the
    first NaN's r where the row has one (torch treats NaN as both the largest and the smallest)."""
    (po,) = tile_grid(cdiv(O, BO))
    ro = po * BO + arange(BO)
    best = full((BO,), -inf, float32)
    idx = zeros((BO,), int32)
    nan_at = zeros((BO,), int32) + R  # the first NaN's r, R while none
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        if KIND == 1:
            x = 0.0 - load(X[ro, rr], other=inf).to(float32)
        else:
            x = load(X[ro, rr], other=-inf).to(float32)
        bv = max(x, 1)
        first = min(where(x == bv[:, None], rr[None, :], R), 1)
        idx = where(bv > best, first, idx)
        best = maximum(best, bv)
        nan_at = minimum(nan_at, min(where(x != x, rr[None, :], R), 1))
    assert_tag((tag_of(best, "max(R).lo") <= 0) & (tag_of(best, "max(R).hi") >= R),
               "each index is chosen among all of its row")
    store(Y[ro], where(nan_at < R, nan_at, idx).to(int64))


@kernel
def argreduce_cols(X: Tensor("O", "R", "I"), Y: Tensor("O", "I", dtype=int64), BR: constexpr = 16,
                   BI: constexpr = 32, KIND: constexpr = 0):
    """Y[o, i] = the first r where X[o, r, i] is largest (KIND 0) or smallest (KIND 1); the first NaN's r where the
    column has one (as torch)."""
    o, pi = tile_grid(O, cdiv(I, BI))
    ri = pi * BI + arange(BI)
    best = full((BI,), -inf, float32)
    idx = zeros((BI,), int32)
    nan_at = zeros((BI,), int32) + R  # the first NaN's r, R while none
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        if KIND == 1:
            x = 0.0 - load(X[o, rr, ri], other=inf).to(float32)
        else:
            x = load(X[o, rr, ri], other=-inf).to(float32)
        bv = max(x, 0)
        first = min(where(x == bv[None, :], rr[:, None], R), 0)
        idx = where(bv > best, first, idx)
        best = maximum(best, bv)
        nan_at = minimum(nan_at, min(where(x != x, rr[:, None], R), 0))
    assert_tag((tag_of(best, "max(R).lo") <= 0) & (tag_of(best, "max(R).hi") >= R),
               "each index is chosen among all of its column")
    store(Y[o, ri], where(nan_at < R, nan_at, idx).to(int64))


@kernel
def softmax_rows(X: Tensor("O", "R"), Y: Tensor("O", "R"), BO: constexpr = 4, BR: constexpr = 64,
                 LOG: constexpr = 0):
    """Y[o, :] = softmax (LOG 0) or log_softmax (LOG 1) of X[o, :], online over blocks of R."""
    (po,) = tile_grid(cdiv(O, BO))
    ro = po * BO + arange(BO)
    m = full((BO,), -inf, float32)
    l = zeros((BO,), float32)
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        x = load(X[ro, rr], other=-inf).to(float32)
        m_new = maximum(m, max(x, 1))
        l = l * exp(m - m_new) + sum(exp(x - m_new[:, None]), 1)
        m = m_new
    assert_tag((tag_of(l, "sum(R).lo") <= 0) & (tag_of(l, "sum(R).hi") >= R),
               "each row's normaliser sums all of the row")
    assert_tag((tag_of(m, "max(R).lo") <= 0) & (tag_of(m, "max(R).hi") >= R), "each row's max covers all of the row")
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        x = load(X[ro, rr], other=-inf).to(float32)
        if LOG == 1:
            store(Y[ro, rr], x - m[:, None] - log(l)[:, None])
        else:
            store(Y[ro, rr], exp(x - m[:, None]) / l[:, None])


@kernel
def softmax_cols(X: Tensor("O", "R", "I"), Y: Tensor("O", "R", "I"), BR: constexpr = 16, BI: constexpr = 32,
                 LOG: constexpr = 0):
    """Y[o, :, i] = softmax (LOG 0) or log_softmax (LOG 1) of X[o, :, i], online over blocks of R."""
    o, pi = tile_grid(O, cdiv(I, BI))
    ri = pi * BI + arange(BI)
    m = full((BI,), -inf, float32)
    l = zeros((BI,), float32)
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        x = load(X[o, rr, ri], other=-inf).to(float32)
        m_new = maximum(m, max(x, 0))
        l = l * exp(m - m_new) + sum(exp(x - m_new[None, :]), 0)
        m = m_new
    assert_tag((tag_of(l, "sum(R).lo") <= 0) & (tag_of(l, "sum(R).hi") >= R),
               "each column's normaliser sums all of the column")
    assert_tag((tag_of(m, "max(R).lo") <= 0) & (tag_of(m, "max(R).hi") >= R),
               "each column's max covers all of the column")
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        x = load(X[o, rr, ri], other=-inf).to(float32)
        if LOG == 1:
            store(Y[o, rr, ri], x - m[None, :] - log(l)[None, :])
        else:
            store(Y[o, rr, ri], exp(x - m[None, :]) / l[None, :])


@kernel
def sum_partials_kernel(Partial: Tensor("S"), Out: Tensor("O"), scale: float, BLOCK: constexpr = 1024):
    """Out[0] = scale * sum(Partial), in order, by one program: the second stage of a sum done in partials (the
    losses', an elementwise chain summed where it is computed)."""
    (z,) = tile_grid(O)
    total = zeros((1,), float32)
    for i0 in range(0, S, BLOCK):
        ri = i0 + arange(BLOCK)
        total = total + sum(load(Partial[ri]), 0)
    store(Out[z + arange(1)], total * scale)


KERNELS: tuple[Kernel, ...] = (reduce_rows, reduce_cols, argreduce_rows, argreduce_cols, softmax_rows,
                               softmax_cols)


# ---- host side ---------------------------------------------------------------------------------------
SPLIT_MIN = 1 << 16        # dim=None over more elements than this: two passes (partials, then their total)


def normalize_dims(dim: int | Sequence[int] | None, ndim: int, what: str = "dim") -> tuple[int, ...]:
    """The sorted, non-negative dims named by `dim` (every dim for None); ValueError for a bad one."""
    rank = builtins.max(ndim, 1)
    if dim is None:
        return tuple(range(rank))
    if isinstance(dim, int):
        dims: tuple = (dim,)
    elif isinstance(dim, (tuple, list)):
        dims = tuple(dim)
    else:
        raise ValueError(f"{what} must be an int, a tuple of ints or None, got {dim!r}")
    if not dims:
        return tuple(range(rank))
    out: list[int] = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise ValueError(f"{what} must be an int or a tuple of ints, got {dim!r}")
        if not -rank <= d < rank:
            raise ValueError(f"{what} {d} is out of range for a tensor of {ndim} dimension(s) "
                             f"(expected in [{-rank}, {rank - 1}])")
        d %= rank
        if d in out:
            raise ValueError(f"{what} {d} appears twice in {dim!r}")
        out.append(d)
    return tuple(sorted(out))


def split3(shape: Sequence[int], dims: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """(outer, R, inner, adjacent): the sizes of the (outer, reduced, inner) view; when the reduced dims
    are not adjacent, the kept dims move in front (outer) and inner is 1."""
    shape = tuple(shape) or (1,)
    adjacent = dims == tuple(range(dims[0], dims[-1] + 1))
    if adjacent:
        return (math.prod(shape[:dims[0]]), math.prod(shape[dims[0]:dims[-1] + 1]),
                math.prod(shape[dims[-1] + 1:]), True)
    kept = [d for d in range(len(shape)) if d not in dims]
    return math.prod(shape[d] for d in kept), math.prod(shape[d] for d in dims), 1, False


def view3(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """x as an (outer, R, inner) tensor (a view where strides allow, else a copy)."""
    o, r, i, adjacent = split3(x.shape, dims)
    if x.dim() == 0:
        return x.reshape(1, 1, 1)
    if not adjacent:
        kept = [d for d in range(x.dim()) if d not in dims]
        x = x.permute(*kept, *dims)
    return x.reshape(o, r, i)


def rows_policy(o: int, r: int, target: str) -> Policy:
    """Tiles of a (BO rows x BR) kernel that walks rows of length r."""
    check_target(target)
    if target == "interpret":
        br = builtins.min(pow2(r), 32)
        return Policy.make(BO=builtins.min(pow2(o), 4), BR=br)
    br = builtins.min(pow2(r), 2048)
    bo = builtins.max(1, builtins.min(pow2(o), 4096 // br))
    return Policy.make(BO=bo, BR=br, num_warps=8 if br >= 1024 else 4)


def cols_policy(r: int, i: int, target: str) -> Policy:
    """Tiles of a (BR x BI) kernel that walks R with BI inner columns side by side."""
    check_target(target)
    if target == "interpret":
        return Policy.make(BR=builtins.min(pow2(r), 8), BI=builtins.min(pow2(i), 16))
    bi = builtins.min(pow2(i), 128)
    br = builtins.max(1, builtins.min(pow2(r), 4096 // bi))
    return Policy.make(BR=br, BI=bi, num_warps=4)


def pick_kernel(name: str, default: Kernel, kernels: dict[str, Kernel] | None) -> Kernel:
    """The kernel the caller substitutes for library kernel `name`, else the library's."""
    return (kernels or {}).get(name, default)


def pick_policy(name: str, template: Policy, policies: dict[str, Policy] | None) -> Policy:
    return (policies or {}).get(name, template)


def check_input(x: torch.Tensor, op: str) -> None:
    """ValueError unless x is a floating-point tensor."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{op} expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{op} supports floating-point tensors, got {x.dtype}")


def _plan(shape: Sequence[int], dim: int | Sequence[int] | None, kind: str) -> tuple[tuple[int, ...], bool]:
    """(reduced dims, split): whether a dim=None reduction runs as partials + total."""
    dims = normalize_dims(dim, len(shape))
    o, r, i, _ = split3(shape, dims)
    split = dim is None and kind in FLOAT_KINDS and kind != "prod" and o * i == 1 and r > SPLIT_MIN
    return dims, split


def _split_rows(n: int, target: str) -> int:
    """Rows of the partial pass of a whole-tensor reduction of n elements."""
    return builtins.min(1024 if target != "interpret" else 8, builtins.max(1, n // 4096))


def reduce_policies(shape: Sequence[int], dim: int | Sequence[int] | None, kind: str,
                    target: str) -> dict[str, Policy]:
    """Template policies of the kernels `reduce` launches for this shape, by kernel name."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    dims, split = _plan(shape, dim, kind)
    o, r, i, _ = split3(shape, dims)
    arg = kind in ARG_KINDS
    if split:
        p = _split_rows(r, target)
        return {"reduce_rows": rows_policy(p, r // p, target)}
    if i == 1:
        return {("argreduce_rows" if arg else "reduce_rows"): rows_policy(o, r, target)}
    return {("argreduce_cols" if arg else "reduce_cols"): cols_policy(r, i, target)}


def _out_shape(shape: Sequence[int], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if d in dims else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in dims)


def reduce(x: torch.Tensor, dim: int | tuple[int, ...] | None, kind: str, keepdim: bool = False, *,
           policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
           target: str | None = None) -> torch.Tensor:
    """torch.<kind>(x, dim, keepdim) for kind in KINDS; "max"/"min" give the values only; argmax/argmin give
    int64 indices (first occurrence; dim=None indexes the flattened tensor). fp32 accumulation.

    NaN propagates as in torch: max/min of a slice with a NaN is NaN, argmax/argmin give the first NaN's index.
    """
    check_input(x, "reduce")
    if kind not in KINDS:
        extra = " (prod needs the DSL's prod builtin, not available yet)" if kind == "prod" else ""
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}{extra}")
    if kind in ARG_KINDS and dim is not None and not isinstance(dim, int):
        raise ValueError(f"{kind} takes one dim (an int) or None, got {dim!r}")
    target = resolve_target(x, target)
    dims, split = _plan(x.shape, dim, kind)
    o, r, i, _ = split3(x.shape, dims)
    arg = kind in ARG_KINDS
    if r == 0 and kind not in ("sum", "mean"):
        raise ValueError(f"{kind} of an empty dimension is not defined")
    if arg and dim is None:
        out_shape: tuple[int, ...] = (1,) * x.dim() if keepdim else ()
    else:
        out_shape = _out_shape(x.shape, dims, keepdim)
    templates = reduce_policies(x.shape, dim, kind, target)
    name = next(iter(templates))
    pol = pick_policy(name, templates[name], policies)
    if arg:
        code = ARG_KINDS[kind]
        y = torch.empty(o * i, dtype=torch.int64, device=x.device)
    else:
        code = FLOAT_KINDS[kind]
        y = torch.empty(o * i, dtype=x.dtype, device=x.device)
    scale = 1.0 / r if r else math.nan
    if split:
        _whole_tensor(x.reshape(-1), y, 0 if code == 1 else code, code, scale, pol,
                      pick_kernel("reduce_rows", reduce_rows, kernels), target)
        return y.reshape(out_shape)
    x3 = view3(x, dims)
    if i == 1:
        k = pick_kernel(name, argreduce_rows if arg else reduce_rows, kernels)
        args = (x3.reshape(o, r), y) if arg else (x3.reshape(o, r), y, scale)
    else:
        k = pick_kernel(name, argreduce_cols if arg else reduce_cols, kernels)
        args = (x3, y.view(o, i)) if arg else (x3, y.view(o, i), scale)
    if o * i:
        k(*args, policy=pol.with_consts(KIND=code), target=target)
    return y.reshape(out_shape)


def _whole_tensor(flat: torch.Tensor, y: torch.Tensor, first: int, last: int, scale: float, pol: Policy,
                  k: Kernel, target: str) -> None:
    """y[0] = the reduction of the 1-D `flat` in two passes: reduce_rows KIND `first` over p rows of partials (and
    one over the tail that does not fill a row), then KIND `last` over the partials (with `scale`)."""
    r = flat.numel()
    p = _split_rows(r, target)
    body = (r // p) * p
    part = torch.empty(p + 1, dtype=torch.float32, device=flat.device)
    k(flat[:body].view(p, r // p), part[:p], 1.0, policy=pol.with_consts(KIND=first), target=target)
    tail = flat[body:] if body < r else flat[:1]  # an empty tail repeats x[0]: harmless for max/min only
    if body == r and first in (0, 1, 5, 6):
        part[p:].zero_()
    else:
        k(tail.view(1, -1), part[p:], 1.0, policy=rows_policy(1, tail.numel(), target).with_consts(KIND=first),
          target=target)
    k(part.view(1, -1), y, scale, policy=rows_policy(1, p + 1, target).with_consts(KIND=last), target=target)


def sum_of_powers(x: torch.Tensor, p: int, *, policies: dict[str, Policy] | None = None,
                  kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """sum(|x|^p) over the whole tensor for p = 1 or 2, as a float32 tensor of shape (): each partial reads x once
    and squares or takes |x| in registers (no |x|^p tensor in memory), then the partials are summed."""
    check_input(x, "sum_of_powers")
    if p not in (1, 2):
        raise ValueError(f"sum_of_powers supports p = 1 or 2, got {p!r}")
    target = resolve_target(x, target)
    y = torch.empty(1, dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        return y.zero_().reshape(())
    flat = x.reshape(-1)
    templates = reduce_policies((flat.numel(),), None, "sum", target)
    name = next(iter(templates))
    pol = pick_policy(name, templates[name], policies)
    kind = 5 if p == 2 else 6
    k = pick_kernel("reduce_rows", reduce_rows, kernels)
    if _plan(flat.shape, None, "sum")[1]:
        _whole_tensor(flat, y, kind, 0, 1.0, pol, k, target)
    else:
        k(flat.view(1, -1), y, 1.0, policy=pol.with_consts(KIND=kind), target=target)
    return y.reshape(())


def softmax_policies(shape: Sequence[int], dim: int, target: str) -> dict[str, Policy]:
    """Template policies of the kernel `softmax` launches for this shape, by kernel name."""
    dims = normalize_dims(dim, len(shape))
    o, r, i, _ = split3(shape, dims)
    if i == 1:
        return {"softmax_rows": rows_policy(o, r, target)}
    return {"softmax_cols": cols_policy(r, i, target)}


def softmax(x: torch.Tensor, dim: int, log: bool = False, *, policies: dict[str, Policy] | None = None,
            kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """torch.softmax(x, dim) (or log_softmax with log=True): numerically stable, online over blocks of the dim."""
    check_input(x, "softmax")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ValueError(f"softmax takes one dim (an int), got {dim!r}")
    target = resolve_target(x, target)
    dims = normalize_dims(dim, x.dim())
    o, r, i, _ = split3(x.shape, dims)
    templates = softmax_policies(x.shape, dim, target)
    name = next(iter(templates))
    pol = pick_policy(name, templates[name], policies).with_consts(LOG=int(bool(log)))
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    x3 = view3(x, dims)
    if i == 1:
        pick_kernel(name, softmax_rows, kernels)(x3.reshape(o, r), y.view(o, r), policy=pol, target=target)
    else:
        pick_kernel(name, softmax_cols, kernels)(x3, y.view(o, r, i), policy=pol, target=target)
    return y
