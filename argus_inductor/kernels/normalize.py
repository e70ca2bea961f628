"""Normalizations: layer norm, RMS norm, group/instance norm, batch norm and Lp normalization.

One family of "statistics over a segment, then normalize" kernels: the host views the input as
(outer, R, inner) with the statistics taken over R; `norm_rows` serves inner == 1 and `norm_cols`
inner > 1. Group (and instance) norm reads (N, G, C/G * HW) segments and finds each element's affine
channel from its index; batch norm applies per-channel statistics (running ones, or batch ones from
`row_moments` over a channel-major copy).
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
    assume,
    cdiv,
    constexpr,
    float32,
    load,
    rsqrt,
    sqrt,
    store,
    sum,
    tag_of,
    tile_grid,
    where,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .reduce import (
    SPLIT_MIN,
    check_input,
    check_target,
    cols_policy,
    normalize_dims,
    pick_kernel,
    pick_policy,
    pow2,
    resolve_target,
    rows_policy,
    split3,
    view3,
)

MODES = {"layer": 0, "rms": 1, "l2": 2, "l1": 3}


@kernel
def norm_rows(X: Tensor("O", "L"), W: Tensor("L"), B: Tensor("L"), Y: Tensor("O", "L"), eps: float,
              BO: constexpr = 4, BR: constexpr = 64, MODE: constexpr = 0, HAS_W: constexpr = 0,
              HAS_B: constexpr = 0):
    """Y[o, l] = (X[o, l] - mean) * inv [* W[l]] [+ B[l]] with the statistics of row o:
    MODE 0 layer norm (inv = rsqrt(var + eps), biased var), 1 RMS norm (mean 0, inv = rsqrt(mean(x^2) + eps)),
    2 L2 normalization (inv = 1 / max(||x||_2, eps)), 3 L1 normalization (inv = 1 / max(||x||_1, eps))."""
    (po,) = tile_grid(cdiv(O, BO))
    ro = po * BO + arange(BO)
    s = zeros((BO,), float32)
    for l0 in range(0, L, BR):
        rl = l0 + arange(BR)
        x = load(X[ro, rl]).to(float32)
        if MODE == 0:
            s = s + sum(x, 1)
        if MODE == 1 or MODE == 2:
            s = s + sum(x * x, 1)
        if MODE == 3:
            s = s + sum(abs(x), 1)
    assert_tag((tag_of(s, "sum(L).lo") <= 0) & (tag_of(s, "sum(L).hi") >= L),
               "each row's statistics count every element of the row")
    mean = zeros((BO,), float32)
    inv = zeros((BO,), float32)
    if MODE == 0:
        mean = s / L
        ss = zeros((BO,), float32)
        for l0 in range(0, L, BR):
            rl = l0 + arange(BR)
            d = where(rl[None, :] < L, load(X[ro, rl]).to(float32) - mean[:, None], 0.0)
            ss = ss + sum(d * d, 1)
        inv = rsqrt(ss / L + eps)
    if MODE == 1:
        inv = rsqrt(s / L + eps)
    if MODE == 2:
        nrm = sqrt(s)
        inv = 1.0 / where(nrm < eps, eps, nrm)  # max(norm, eps) keeping a NaN norm, as torch's clamp
    if MODE == 3:
        inv = 1.0 / where(s < eps, eps, s)
    for l0 in range(0, L, BR):
        rl = l0 + arange(BR)
        x = load(X[ro, rl]).to(float32)
        y = (x - mean[:, None]) * inv[:, None]
        if HAS_W == 1:
            w = load(W[rl]).to(float32)
            assert_tag(tag_of(w[None, :], "L") == tag_of(x, "L"), "the weight read belongs to the element's column")
            y = y * w[None, :]
        if HAS_B == 1:
            y = y + load(B[rl]).to(float32)[None, :]
        store(Y[ro, rl], y)


@kernel
def norm_cols(X: Tensor("O", "R", "I"), W: Tensor("R"), B: Tensor("R"), Y: Tensor("O", "R", "I"), eps: float,
              BR: constexpr = 16, BI: constexpr = 32, MODE: constexpr = 0, HAS_W: constexpr = 0,
              HAS_B: constexpr = 0):
    """Y[o, r, i] = (X[o, r, i] - mean) * inv [* W[r]] [+ B[r]] with the statistics over r of column (o, i);
    MODE as in norm_rows."""
    o, pi = tile_grid(O, cdiv(I, BI))
    ri = pi * BI + arange(BI)
    s = zeros((BI,), float32)
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        x = load(X[o, rr, ri]).to(float32)
        if MODE == 0:
            s = s + sum(x, 0)
        if MODE == 1 or MODE == 2:
            s = s + sum(x * x, 0)
        if MODE == 3:
            s = s + sum(abs(x), 0)
    assert_tag((tag_of(s, "sum(R).lo") <= 0) & (tag_of(s, "sum(R).hi") >= R),
               "each column's statistics count every element of the column")
    mean = zeros((BI,), float32)
    inv = zeros((BI,), float32)
    if MODE == 0:
        mean = s / R
        ss = zeros((BI,), float32)
        for r0 in range(0, R, BR):
            rr = r0 + arange(BR)
            d = where(rr[:, None] < R, load(X[o, rr, ri]).to(float32) - mean[None, :], 0.0)
            ss = ss + sum(d * d, 0)
        inv = rsqrt(ss / R + eps)
    if MODE == 1:
        inv = rsqrt(s / R + eps)
    if MODE == 2:
        nrm = sqrt(s)
        inv = 1.0 / where(nrm < eps, eps, nrm)  # max(norm, eps) keeping a NaN norm, as torch's clamp
    if MODE == 3:
        inv = 1.0 / where(s < eps, eps, s)
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        x = load(X[o, rr, ri]).to(float32)
        y = (x - mean[None, :]) * inv[None, :]
        if HAS_W == 1:
            w = load(W[rr]).to(float32)
            assert_tag(tag_of(w[:, None], "R") == tag_of(x, "R"), "the weight read belongs to the element's row")
            y = y * w[:, None]
        if HAS_B == 1:
            y = y + load(B[rr]).to(float32)[:, None]
        store(Y[o, rr, ri], y)


@kernel
def group_norm_kernel(X: Tensor("N", "G", "L"), W: Tensor("G", "CG"), B: Tensor("G", "CG"),
                      Y: Tensor("N", "G", "L"), eps: float, BL: constexpr = 64, HAS_W: constexpr = 0,
                      HAS_B: constexpr = 0):
    """Group norm of segment (n, g): its L = CG * HW elements (CG channels of HW positions) normalized by
    their mean and biased variance; element l belongs to channel g * CG + l // HW, whose affine weight is
    W[g, l // HW] (the (C,) weight viewed as (G, CG))."""
    n, g = tile_grid(N, G)
    assume(L % CG == 0)
    hw = L // CG
    s = 0.0
    for l0 in range(0, L, BL):
        rl = l0 + arange(BL)
        s = s + sum(load(X[n, g, rl]).to(float32), 0)
    assert_tag((tag_of(s, "sum(L).lo") <= 0) & (tag_of(s, "sum(L).hi") >= L),
               "the group's statistics count every element of the group")
    mean = s / L
    ss = 0.0
    for l0 in range(0, L, BL):
        rl = l0 + arange(BL)
        d = where(rl < L, load(X[n, g, rl]).to(float32) - mean, 0.0)
        ss = ss + sum(d * d, 0)
    rstd = rsqrt(ss / L + eps)
    for l0 in range(0, L, BL):
        rl = l0 + arange(BL)
        x = load(X[n, g, rl]).to(float32)
        y = (x - mean) * rstd
        if HAS_W == 1:
            w = load(W[g, rl // hw]).to(float32)
            assert_tag((tag_of(w, "G") == tag_of(x, "G")) & (tag_of(w, "CG") == tag_of(x, "L") // hw),
                       "the affine weight read belongs to the element's channel")
            y = y * w
        if HAS_B == 1:
            b = load(B[g, rl // hw]).to(float32)
            assert_tag((tag_of(b, "G") == tag_of(x, "G")) & (tag_of(b, "CG") == tag_of(x, "L") // hw),
                       "the affine bias read belongs to the element's channel")
            y = y + b
        store(Y[n, g, rl], y)


@kernel
def row_moments(X: Tensor("O", "L"), Mean: Tensor("O"), Var: Tensor("O"), BO: constexpr = 4,
                BR: constexpr = 64):
    """Mean[o] and biased Var[o] of row o (two passes, fp32)."""
    (po,) = tile_grid(cdiv(O, BO))
    ro = po * BO + arange(BO)
    s = zeros((BO,), float32)
    for l0 in range(0, L, BR):
        rl = l0 + arange(BR)
        s = s + sum(load(X[ro, rl]).to(float32), 1)
    assert_tag((tag_of(s, "sum(L).lo") <= 0) & (tag_of(s, "sum(L).hi") >= L),
               "each row's mean counts every element of the row")
    mean = s / L
    ss = zeros((BO,), float32)
    for l0 in range(0, L, BR):
        rl = l0 + arange(BR)
        d = where(rl[None, :] < L, load(X[ro, rl]).to(float32) - mean[:, None], 0.0)
        ss = ss + sum(d * d, 1)
    store(Mean[ro], mean)
    store(Var[ro], ss / L)


@kernel
def channel_norm(X: Tensor("N", "C", "HW"), Mean: Tensor("C"), Var: Tensor("C"), W: Tensor("C"), B: Tensor("C"),
                 Y: Tensor("N", "C", "HW"), eps: float, BC: constexpr = 4, BH: constexpr = 64,
                 HAS_W: constexpr = 0, HAS_B: constexpr = 0):
    """Y[n, c, h] = (X[n, c, h] - Mean[c]) * rsqrt(Var[c] + eps) [* W[c]] [+ B[c]] (batch norm's apply)."""
    n, pc, ph = tile_grid(N, cdiv(C, BC), cdiv(HW, BH))
    rc = pc * BC + arange(BC)
    rh = ph * BH + arange(BH)
    x = load(X[n, rc, rh]).to(float32)
    mean = load(Mean[rc]).to(float32)
    assert_tag(tag_of(mean[:, None], "C") == tag_of(x, "C"), "the statistics read belong to the element's channel")
    y = (x - mean[:, None]) * rsqrt(load(Var[rc]).to(float32) + eps)[:, None]
    if HAS_W == 1:
        w = load(W[rc]).to(float32)
        assert_tag(tag_of(w[:, None], "C") == tag_of(x, "C"), "the affine weight read belongs to the element's channel")
        y = y * w[:, None]
    if HAS_B == 1:
        y = y + load(B[rc]).to(float32)[:, None]
    store(Y[n, rc, rh], y)


KERNELS: tuple[Kernel, ...] = (norm_rows, norm_cols, group_norm_kernel, row_moments, channel_norm)


# ---- host side ---------------------------------------------------------------------------------------
def _affine(t: torch.Tensor | None, shape: tuple[int, ...], what: str, like: torch.Tensor) -> torch.Tensor:
    """The affine parameter viewed as `shape`, or a zero-size stand-in (never read) when absent."""
    if t is None:
        return like.new_zeros(1).expand(*shape)
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise ValueError(f"{what} must be a floating-point tensor")
    if t.numel() != math.prod(shape):
        raise ValueError(f"{what} has {t.numel()} elements, expected {math.prod(shape)}")
    if t.device != like.device:
        raise ValueError(f"{what} is on {t.device} but the input is on {like.device}")
    return t.reshape(*shape)


def _flags(weight: torch.Tensor | None, bias: torch.Tensor | None) -> dict[str, int]:
    return {"HAS_W": int(weight is not None), "HAS_B": int(bias is not None)}


def _check_eps(eps: float) -> None:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")


def _segment_policies(shape: Sequence[int], dims: tuple[int, ...], target: str) -> dict[str, Policy]:
    o, r, i, _ = split3(shape, dims)
    if i == 1:
        return {"norm_rows": rows_policy(o, r, target)}
    return {"norm_cols": cols_policy(r, i, target)}


def _segment_norm(x: torch.Tensor, dims: tuple[int, ...], mode: str, weight: torch.Tensor | None,
                  bias: torch.Tensor | None, eps: float, policies: dict[str, Policy] | None,
                  kernels: dict[str, Kernel] | None, target: str | None) -> torch.Tensor:
    """Normalize x over `dims` (statistics over the reduced run R of the (outer, R, inner) view)."""
    _check_eps(eps)
    target = resolve_target(x, target)
    o, r, i, adjacent = split3(x.shape, dims)
    seg = tuple(x.shape[d] for d in dims) if x.dim() else (1,)
    w = _affine(weight, (r,), "weight", x)
    b = _affine(bias, (r,), "bias", x)
    if weight is not None and tuple(weight.shape) not in (seg, (r,)):
        raise ValueError(f"weight has shape {tuple(weight.shape)}, expected {seg}")
    if bias is not None and tuple(bias.shape) not in (seg, (r,)):
        raise ValueError(f"bias has shape {tuple(bias.shape)}, expected {seg}")
    perm = None if adjacent or x.dim() == 0 else [d for d in range(x.dim()) if d not in dims] + list(dims)
    out_shape = x.shape if perm is None else [x.shape[d] for d in perm]
    parts = _row_parts(o, r, target) if i == 1 and mode in ("layer", "rms") and x.numel() else 1
    if parts > 1:
        y = _split_row_norm(view3(x, dims).reshape(o, r), parts, mode, eps, target,
                            affine=(w if weight is not None else None, b if bias is not None else None)
                            ).view(out_shape)
    else:
        y = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    if parts == 1 and x.numel():
        templates = _segment_policies(x.shape, dims, target)
        name = next(iter(templates))
        pol = pick_policy(name, templates[name], policies).with_consts(MODE=MODES[mode], **_flags(weight, bias))
        x3 = view3(x, dims)
        if i == 1:
            pick_kernel(name, norm_rows, kernels)(x3.reshape(o, r), w, b, y.view(o, r), float(eps), policy=pol,
                                                  target=target)
        else:
            pick_kernel(name, norm_cols, kernels)(x3, w, b, y.view(o, r, i), float(eps), policy=pol, target=target)
    if perm is not None:
        inverse = [perm.index(d) for d in range(x.dim())]
        y = y.permute(*inverse).contiguous()
    return y


SPLIT_ROW_MIN = 1 << 16  # a normalized row at least this long, in fewer rows than about a wave, is split


def _row_parts(rows: int, length: int, target: str) -> int:
    """Parts to split each of `rows` rows of `length` into when so few rows would leave most SMs idle (one program
    a row): the smallest divisor of `length` that makes about 4 programs an SM (or the largest that keeps parts of
    at least 2048 elements); 1 where the rows are many or short. The interpreter splits at test sizes."""
    programs, floor, min_len = (16, 16, 64) if target == "interpret" else (4 * 132, 2048, SPLIT_ROW_MIN)
    if rows * 4 >= programs or length < min_len:
        return 1
    best = 1
    for p in range(2, length // floor + 1):
        if length % p == 0:
            best = p
            if rows * p >= programs:
                break
    return best


def _split_row_norm(x2: torch.Tensor, parts: int, mode: str, eps: float, target: str,
                    view: Sequence[int] | None = None, affine: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """Layer or RMS norm of the rows of x2 (O, L) with each row's statistics gathered over `parts` sub-rows, so
    O * parts programs read x instead of O. Layer: the mean and biased variance of each sub-row (row_moments),
    then of the row: the mean of the means, and the variance as the mean of the sub-rows' variances plus the
    variance of their means (exact for equal parts). RMS: the sum of squares of each sub-row (reduce_rows KIND 5),
    then their mean over the row. One elementwise pass applies them in float32, over x2 viewed as `view` (rows
    first) with each row's statistics broadcast, times `affine[0]` and plus `affine[1]` when given (each shaped to
    broadcast over that view)."""
    from . import pointwise as pw
    from .reduce import reduce_rows

    o, r = x2.shape
    sub = x2.reshape(o * parts, r // parts)
    f32 = dict(dtype=torch.float32, device=x2.device)
    shape = tuple(view or (o, r))
    stat_shape = _row_stat_shape(shape, o)
    if mode == "layer":
        mean_j, var_j = torch.empty(o * parts, **f32), torch.empty(o * parts, **f32)
        row_moments(sub, mean_j, var_j, policy=rows_policy(o * parts, r // parts, target), target=target)
        mean, between, within = torch.empty(o, **f32), torch.empty(o, **f32), torch.empty(o, **f32)
        row_moments(mean_j.view(o, parts), mean, between, policy=rows_policy(o, parts, target), target=target)
        reduce_rows(var_j.view(o, parts), within, 1.0 / parts,
                    policy=rows_policy(o, parts, target).with_consts(KIND=1), target=target)
        stats = [mean, between, within]
        steps = [pw.Step("sub", (("in", 0), ("in", 1))), pw.Step("add", (("in", 2), ("in", 3))),
                 pw.Step("add", (("step", 1), ("const", float(eps)))), pw.Step("rsqrt", (("step", 2),)),
                 pw.Step("mul", (("step", 0), ("step", 3)))]
    else:
        ss_j, ms = torch.empty(o * parts, **f32), torch.empty(o, **f32)
        reduce_rows(sub, ss_j, 1.0, policy=rows_policy(o * parts, r // parts, target).with_consts(KIND=5),
                    target=target)
        reduce_rows(ss_j.view(o, parts), ms, 1.0 / r, policy=rows_policy(o, parts, target).with_consts(KIND=1),
                    target=target)
        stats = [ms]
        steps = [pw.Step("add", (("in", 1), ("const", float(eps)))), pw.Step("rsqrt", (("step", 0),)),
                 pw.Step("mul", (("in", 0), ("step", 1)))]
    inputs = [x2.view(shape), *(t.view(stat_shape) for t in stats)]
    for op, t in zip(("mul", "add"), affine):
        if t is not None:
            inputs.append(t)
            steps.append(pw.Step(op, (("step", len(steps) - 1), ("in", len(inputs) - 1))))
    return pw.pointwise(pw.Chain(tuple(steps)), inputs, target=target, out_dtype=x2.dtype)


def _row_stat_shape(shape: Sequence[int], rows: int) -> tuple[int, ...]:
    """The shape a per-row statistic takes to broadcast over `shape`, whose leading dims make up the rows."""
    lead, k = 1, 0
    while lead < rows:
        lead *= shape[k]
        k += 1
    if lead != rows:
        raise ValueError(f"the leading dims of {tuple(shape)} do not make {rows} rows")
    return tuple(shape[:k]) + (1,) * (len(shape) - k)


def _trailing_dims(x_shape: Sequence[int], normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not ns or any(isinstance(n, bool) or not isinstance(n, int) for n in ns):
        raise ValueError(f"normalized_shape must be an int or a non-empty tuple of ints, got {normalized_shape!r}")
    if len(ns) > len(x_shape) or tuple(x_shape[len(x_shape) - len(ns):]) != ns:
        raise ValueError(f"normalized_shape {ns} does not match the trailing dims of an input of shape "
                         f"{tuple(x_shape)}")
    return tuple(range(len(x_shape) - len(ns), len(x_shape)))


def layer_norm_policies(shape: Sequence[int], normalized_shape: int | Sequence[int],
                        target: str) -> dict[str, Policy]:
    """Template policies of the kernel `layer_norm` launches, by kernel name."""
    return _segment_policies(shape, _trailing_dims(shape, normalized_shape), target)


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, policies: dict[str, Policy] | None = None,
               kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """F.layer_norm: normalize over the trailing dims `normalized_shape` (biased variance), then affine."""
    check_input(x, "layer_norm")
    dims = _trailing_dims(x.shape, normalized_shape)
    return _segment_norm(x, dims, "layer", weight, bias, eps, policies, kernels, target)


def rms_norm_policies(shape: Sequence[int], dim: int | tuple[int, ...], target: str) -> dict[str, Policy]:
    """Template policies of the kernel `rms_norm` launches, by kernel name."""
    return _segment_policies(shape, normalize_dims(dim, len(shape)), target)


def rms_norm(x: torch.Tensor, dim: int | tuple[int, ...], weight: torch.Tensor | None = None, eps: float = 1e-6,
             *, policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
             target: str | None = None) -> torch.Tensor:
    """x * rsqrt(mean(x^2 over dim) + eps) * weight; weight has the shape of the normalized dims."""
    check_input(x, "rms_norm")
    if dim is None:
        raise ValueError("rms_norm needs the dim(s) to normalize over")
    dims = normalize_dims(dim, x.dim())
    return _segment_norm(x, dims, "rms", weight, None, eps, policies, kernels, target)


def lp_normalize_policies(shape: Sequence[int], dim: int | tuple[int, ...] | None,
                          target: str) -> dict[str, Policy]:
    """Template policies of the kernel `lp_normalize` launches, by kernel name."""
    return _segment_policies(shape, normalize_dims(dim, len(shape)), target)


def lp_normalize(x: torch.Tensor, p: float, dim: int | tuple[int, ...] | None, eps: float = 0.0, *,
                 policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                 target: str | None = None) -> torch.Tensor:
    """x / max(||x||_p over dim, eps) for p = 1 or 2 (eps = 0: x / ||x||_p); dim=None: the whole tensor
    (p = 2 is then the Frobenius normalization)."""
    check_input(x, "lp_normalize")
    if p not in (1, 2):
        raise ValueError(f"lp_normalize supports p = 1 or 2, got {p!r}")
    dims = normalize_dims(dim, x.dim())
    if len(dims) == x.dim() and x.numel() > WHOLE_TENSOR_SPLIT:
        return _whole_tensor_lp(x, p, eps, target)
    return _segment_norm(x, dims, "l1" if p == 1 else "l2", None, None, eps, policies, kernels, target)


WHOLE_TENSOR_SPLIT = SPLIT_MIN  # elements above which a whole-tensor norm is not left to one program (as reduce)


def _whole_tensor_lp(x: torch.Tensor, p: float, eps: float, target: str | None) -> torch.Tensor:
    """x / max(||x||_p, eps) over the whole tensor with the grid-wide kernels: the two-pass sum of |x|^p
    (reduce.sum_of_powers: x read once, the power taken in registers), then one elementwise pass for the root, the
    clamp and the division. A single program holding the whole tensor's statistics would leave all but one SM
    idle; an |x|^p tensor in memory would cost a write and a read of x's size."""
    from . import pointwise as pw
    from .reduce import sum_of_powers

    total = sum_of_powers(x, int(p), target=target).reshape([1] * x.dim())
    norm: tuple[pw.Step, ...] = (pw.Step("sqrt", (("in", 1),)),) if p == 2 else ()
    root = ("step", 0) if norm else ("in", 1)
    divide = pw.Chain(norm + (pw.Step("clamp_min", (root, ("const", float(eps)))),
                              pw.Step("div", (("in", 0), ("step", len(norm))))))
    return pw.pointwise(divide, [x, total], target=target)


def _channels(x: torch.Tensor, op: str, min_dim: int = 2) -> tuple[int, int, int]:
    check_input(x, op)
    if x.dim() < min_dim:
        raise ValueError(f"{op} expects an input of shape (N, C, ...) with at least {min_dim} dims, got "
                         f"{tuple(x.shape)}")
    n, c = x.shape[0], x.shape[1]
    return n, c, math.prod(x.shape[2:])


def _group_policy(length: int, target: str) -> Policy:
    check_target(target)
    if target == "interpret":
        return Policy.make(BL=builtins.min(pow2(length), 32))
    bl = builtins.min(pow2(length), 2048)
    return Policy.make(BL=bl, num_warps=8 if bl >= 1024 else 4)


def group_norm_policies(shape: Sequence[int], num_groups: int, target: str) -> dict[str, Policy]:
    """Template policies of the kernel `group_norm` launches, by kernel name."""
    c = shape[1] if len(shape) > 1 else 1
    length = (c // builtins.max(num_groups, 1)) * math.prod(shape[2:])
    return {"group_norm_kernel": _group_policy(length, target)}


def group_norm(x: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, policies: dict[str, Policy] | None = None,
               kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """F.group_norm: x (N, C, *) normalized over each group of C / num_groups channels, then per-channel affine."""
    n, c, hw = _channels(x, "group_norm")
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ValueError(f"num_groups must be a positive int, got {num_groups!r}")
    if c % num_groups:
        raise ValueError(f"num_groups ({num_groups}) must divide the channels ({c})")
    _check_eps(eps)
    target = resolve_target(x, target)
    g, cg = num_groups, c // num_groups
    w = _affine(weight, (g, cg), "weight", x)
    b = _affine(bias, (g, cg), "bias", x)
    parts = _row_parts(n * g, cg * hw, target) if x.numel() else 1
    if parts > 1:  # few (image, group) segments, each long: statistics over sub-rows, as layer norm's
        affine = (w.view(g, cg, 1) if weight is not None else None, b.view(g, cg, 1) if bias is not None else None)
        return _split_row_norm(x.reshape(n * g, cg * hw), parts, "layer", eps, target, view=(n, g, cg, hw),
                               affine=affine).view(x.shape)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        name = "group_norm_kernel"
        pol = pick_policy(name, group_norm_policies(x.shape, g, target)[name], policies)
        pick_kernel(name, group_norm_kernel, kernels)(x.reshape(n, g, cg * hw), w, b, y.view(n, g, cg * hw),
                                                      float(eps), policy=pol.with_consts(**_flags(weight, bias)),
                                                      target=target)
    return y


def instance_norm_policies(shape: Sequence[int], target: str) -> dict[str, Policy]:
    """Template policies of the kernel `instance_norm` launches, by kernel name."""
    return group_norm_policies(shape, shape[1] if len(shape) > 1 else 1, target)


def instance_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  eps: float = 1e-5, *, policies: dict[str, Policy] | None = None,
                  kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """F.instance_norm without running statistics: each (n, c) plane normalized over its positions."""
    _, c, _ = _channels(x, "instance_norm", min_dim=3)
    return group_norm(x, c, weight, bias, eps, policies=policies, kernels=kernels, target=target)


def _channel_policy(c: int, hw: int, target: str) -> Policy:
    check_target(target)
    if target == "interpret":
        return Policy.make(BC=builtins.min(pow2(c), 4), BH=builtins.min(pow2(hw), 32))
    bh = builtins.min(pow2(hw), 1024)
    return Policy.make(BC=builtins.max(1, builtins.min(pow2(c), 2048 // bh)), BH=bh, num_warps=4)


def batch_norm_policies(shape: Sequence[int], training: bool, target: str) -> dict[str, Policy]:
    """Template policies of the kernels `batch_norm` launches, by kernel name."""
    c = shape[1] if len(shape) > 1 else 1
    hw = math.prod(shape[2:])
    out = {"channel_norm": _channel_policy(c, hw, target)}
    if training:
        out["row_moments"] = rows_policy(c, shape[0] * hw, target)
    return out


def batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               eps: float = 1e-5, *, policies: dict[str, Policy] | None = None,
               kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """F.batch_norm on x (N, C, *). training=False normalizes with the running statistics; training=True with
    the batch's (mean and biased variance over all dims but 1). The running statistics are never updated."""
    n, c, hw = _channels(x, "batch_norm")
    _check_eps(eps)
    target = resolve_target(x, target)
    w = _affine(weight, (c,), "weight", x)
    b = _affine(bias, (c,), "bias", x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    templates = batch_norm_policies(x.shape, training, target)
    if training:
        if n * hw == 0:
            raise ValueError("batch_norm in training mode needs at least one value per channel")
        mean = torch.empty(c, dtype=torch.float32, device=x.device)
        var = torch.empty(c, dtype=torch.float32, device=x.device)
        rows = x.reshape(n, c, hw).transpose(0, 1).reshape(c, n * hw)
        pick_kernel("row_moments", row_moments, kernels)(
            rows, mean, var, policy=pick_policy("row_moments", templates["row_moments"], policies), target=target)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm with training=False needs running_mean and running_var")
        mean = _affine(running_mean, (c,), "running_mean", x)
        var = _affine(running_var, (c,), "running_var", x)
    if x.numel():
        pol = pick_policy("channel_norm", templates["channel_norm"], policies).with_consts(**_flags(weight, bias))
        pick_kernel("channel_norm", channel_norm, kernels)(x.reshape(n, c, hw), mean, var, w, b, y.view(n, c, hw),
                                                           float(eps), policy=pol, target=target)
    return y
