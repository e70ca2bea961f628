"""Max, average and adaptive average pooling over 1, 2 or 3 spatial dimensions.

One code path serves every rank: the input is viewed as (N*C, D, H, W) with size-1 dimensions
standing in for the missing spatial ones. A program owns a block of channels at one (od, oh) output
row and a block of output columns; it walks the window taps (unrolled, the window is a compile-time
shape) with masked loads, so the padding is never materialised. Adaptive pooling has windows that
vary per output, so it runs one output position per program and loops over its window.
"""
from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    cdiv,
    constexpr,
    float32,
    full,
    inf,
    load,
    maximum,
    minimum,
    static_range,
    store,
    sum,
    tag,
    tag_of,
    tile_grid,
    where,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .launch import pow2_between
from .launch import resolve_target as _target

__all__ = [
    "KERNELS", "max_pool", "avg_pool", "adaptive_avg_pool", "max_pool_policies", "avg_pool_policies",
    "adaptive_avg_pool_policies", "max_pool_kernel", "avg_pool_kernel", "adaptive_avg_pool_kernel",
]


@kernel
def max_pool_kernel(X: Tensor("NC", "D", "H", "W"), Y: Tensor("NC", "OD", "OH", "OW"),
                    BC: constexpr = 16, BW: constexpr = 32,
                    KD: constexpr = 1, KH: constexpr = 1, KW: constexpr = 1,
                    SD: constexpr = 1, SH: constexpr = 1, SW: constexpr = 1,
                    PD: constexpr = 0, PH: constexpr = 0, PW: constexpr = 0,
                    DD: constexpr = 1, DH: constexpr = 1, DW: constexpr = 1):
    """Y[c, od, oh, ow] = max over the dilated window taps of X (padding reads as -inf)."""
    pc, pdh, pw = tile_grid(cdiv(NC, BC), OD * OH, cdiv(OW, BW))
    od = pdh // OH
    oh = pdh % OH
    rc = pc * BC + arange(BC)
    rw = pw * BW + arange(BW)
    acc = full((BC, BW), -inf, float32)
    for kd in static_range(KD):
        idd = od * SD - PD + kd * DD
        for kh in static_range(KH):
            ih = oh * SH - PH + kh * DH
            inside = (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H)
            for kw in static_range(KW):
                iw = rw * SW - PW + kw * DW
                v = load(X[rc, idd, ih, iw], mask=inside, other=-inf).to(float32)
                tag(v, OD=od, OH=oh, OW=rw[None, :])
                assert_tag((tag_of(v, "D") >= tag_of(v, "OD") * SD - PD)
                           & (tag_of(v, "D") <= tag_of(v, "OD") * SD - PD + (KD - 1) * DD)
                           & ((tag_of(v, "D") - tag_of(v, "OD") * SD + PD) % DD == 0),
                           "the depth read lies on the output's own window")
                assert_tag((tag_of(v, "H") >= tag_of(v, "OH") * SH - PH)
                           & (tag_of(v, "H") <= tag_of(v, "OH") * SH - PH + (KH - 1) * DH)
                           & ((tag_of(v, "H") - tag_of(v, "OH") * SH + PH) % DH == 0),
                           "the row read lies on the output's own window")
                assert_tag((tag_of(v, "W") >= tag_of(v, "OW") * SW - PW)
                           & (tag_of(v, "W") <= tag_of(v, "OW") * SW - PW + (KW - 1) * DW)
                           & ((tag_of(v, "W") - tag_of(v, "OW") * SW + PW) % DW == 0),
                           "the column read lies on the output's own window")
                acc = where((v > acc) | (v != v), v, acc)  # max keeping NaN, as torch's max pooling
    store(Y[rc, od, oh, rw], acc)


@kernel
def avg_pool_kernel(X: Tensor("NC", "D", "H", "W"), Y: Tensor("NC", "OD", "OH", "OW"), divisor: int,
                    BC: constexpr = 16, BW: constexpr = 32,
                    KD: constexpr = 1, KH: constexpr = 1, KW: constexpr = 1,
                    SD: constexpr = 1, SH: constexpr = 1, SW: constexpr = 1,
                    PD: constexpr = 0, PH: constexpr = 0, PW: constexpr = 0,
                    COUNT_PAD: constexpr = 1):
    """Y = sum of the window taps / divisor; divisor > 0 overrides the window count, else the count
    includes the padding (COUNT_PAD = 1, clipped to the padded input like torch) or only real elements."""
    pc, pdh, pw = tile_grid(cdiv(NC, BC), OD * OH, cdiv(OW, BW))
    od = pdh // OH
    oh = pdh % OH
    rc = pc * BC + arange(BC)
    rw = pw * BW + arange(BW)
    acc = zeros((BC, BW), float32)
    for kd in static_range(KD):
        idd = od * SD - PD + kd
        for kh in static_range(KH):
            ih = oh * SH - PH + kh
            inside = (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H)
            for kw in static_range(KW):
                iw = rw * SW - PW + kw
                v = load(X[rc, idd, ih, iw], mask=inside).to(float32)
                tag(v, OD=od, OH=oh, OW=rw[None, :])
                assert_tag((tag_of(v, "D") >= tag_of(v, "OD") * SD - PD)
                           & (tag_of(v, "D") < tag_of(v, "OD") * SD - PD + KD),
                           "the depth read lies in the output's own window")
                assert_tag((tag_of(v, "H") >= tag_of(v, "OH") * SH - PH)
                           & (tag_of(v, "H") < tag_of(v, "OH") * SH - PH + KH),
                           "the row read lies in the output's own window")
                assert_tag((tag_of(v, "W") >= tag_of(v, "OW") * SW - PW)
                           & (tag_of(v, "W") < tag_of(v, "OW") * SW - PW + KW),
                           "the column read lies in the output's own window")
                acc = acc + v
    d0 = od * SD - PD
    d1 = minimum(d0 + KD, D + PD)
    h0 = oh * SH - PH
    h1 = minimum(h0 + KH, H + PH)
    w0 = rw * SW - PW
    w1 = minimum(w0 + KW, W + PW)
    if COUNT_PAD == 1:
        count = (d1 - d0) * (h1 - h0) * (w1 - w0)
    else:
        count = ((minimum(d1, D) - maximum(d0, 0)) * (minimum(h1, H) - maximum(h0, 0))
                 * (minimum(w1, W) - maximum(w0, 0)))
    den = maximum(where(divisor > 0, divisor, count), 1).to(float32)  # lanes past OW would divide by 0
    store(Y[rc, od, oh, rw], acc / den[None, :])


@kernel
def adaptive_avg_pool_kernel(X: Tensor("NC", "D", "H", "W"), Y: Tensor("NC", "OD", "OH", "OW"),
                             BC: constexpr = 16, BW: constexpr = 32):
    """Y[c, od, oh, ow] = mean of X over [floor(o*I/O), ceil((o+1)*I/O)) along each spatial dimension.

    Each window row is summed element-wise into a (BC, BW) tile and reduced across columns; rows add up into a
    plane, planes into the total, so that the checker follows each dimension's indices (a row per iteration, a
    depth slice per iteration) and the kernel can assert its whole window was summed."""
    pc, po = tile_grid(cdiv(NC, BC), OD * OH * OW)
    od = po // (OH * OW)
    oh = (po // OW) % OH
    ow = po % OW
    d0 = od * D // OD
    d1 = cdiv((od + 1) * D, OD)
    h0 = oh * H // OH
    h1 = cdiv((oh + 1) * H, OH)
    w0 = ow * W // OW
    w1 = cdiv((ow + 1) * W, OW)
    rc = pc * BC + arange(BC)
    total = zeros((BC,), float32)
    for idd in range(d0, d1):
        plane = zeros((BC,), float32)
        for ih in range(h0, h1):
            acc = zeros((BC, BW), float32)
            for iw0 in range(w0, w1, BW):
                rw = iw0 + arange(BW)
                # the mask states the whole window, so that the checker requires the sum over W to cover it
                v = load(X[rc, idd, ih, rw], mask=((rw >= w0) & (rw < w1))[None, :]).to(float32)
                tag(v, OD=od, OH=oh, OW=ow)
                # i lies in [floor(o*I/O), ceil((o+1)*I/O)) exactly when (i+1)*O > o*I and i*O < (o+1)*I
                assert_tag(((tag_of(v, "D") + 1) * OD > tag_of(v, "OD") * D)
                           & (tag_of(v, "D") * OD < (tag_of(v, "OD") + 1) * D),
                           "the depth read lies in the output's own window")
                assert_tag(((tag_of(v, "H") + 1) * OH > tag_of(v, "OH") * H)
                           & (tag_of(v, "H") * OH < (tag_of(v, "OH") + 1) * H),
                           "the row read lies in the output's own window")
                assert_tag(((tag_of(v, "W") + 1) * OW > tag_of(v, "OW") * W)
                           & (tag_of(v, "W") * OW < (tag_of(v, "OW") + 1) * W),
                           "the column read lies in the output's own window")
                acc = acc + v
            plane = plane + sum(acc, 1)
        total = total + plane
    assert_tag((tag_of(total, "each(D).lo") == d0) & (tag_of(total, "each(D).hi") == d1),
               "every depth slice of the window is summed")
    assert_tag((tag_of(total, "each(H).lo") == h0) & (tag_of(total, "each(H).hi") == h1),
               "every row of the window is summed")
    store(Y[rc, od, oh, ow], total / ((d1 - d0) * (h1 - h0) * (w1 - w0)))


KERNELS: tuple[Kernel, ...] = (max_pool_kernel, avg_pool_kernel, adaptive_avg_pool_kernel)


# ---- host side -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Geometry:
    """A pooling problem in the kernels' 3-D form: input (NC, D, H, W) and the window per dimension."""

    spatial: int            # the user's spatial rank (1, 2 or 3)
    batched: bool
    lead: tuple[int, ...]   # the leading (N, C) or (C,) dimensions
    size: tuple[int, int, int]
    out: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]

    def out_shape(self) -> tuple[int, ...]:
        return self.lead + self.out[3 - self.spatial:]


def _spatial_rank(shape: Sequence[int], kernel_size: int | Sequence[int], what: str) -> tuple[int, bool]:
    """(spatial rank, batched): x.dim() - 2 spatial dimensions, or one more for an unbatched input whose
    kernel_size tuple says so."""
    dim = len(shape)
    if not isinstance(kernel_size, int) and len(kernel_size) == dim - 1 and 1 <= dim - 1 <= 3:
        return dim - 1, False
    if not 3 <= dim <= 5:
        raise ValueError(f"{what} expects a (N, C, *spatial) input with 1 to 3 spatial dimensions, got shape "
                         f"{tuple(shape)}")
    return dim - 2, True


def _tuple(v: int | Sequence[int], n: int, name: str, what: str, minimum_value: int) -> tuple[int, ...]:
    vals = (v,) * n if isinstance(v, int) else tuple(v)
    if len(vals) == 1 and n > 1:
        vals = vals * n
    if len(vals) != n or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
        raise ValueError(f"{what}: {name} must be an int or a tuple of {n} ints, got {v!r}")
    if any(x < minimum_value for x in vals):
        raise ValueError(f"{what}: {name} must be >= {minimum_value}, got {v!r}")
    return vals


def _pad3(vals: tuple[int, ...], fill: int) -> tuple[int, int, int]:
    full3 = (fill,) * (3 - len(vals)) + vals
    return (full3[0], full3[1], full3[2])


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's output length of one pooled dimension."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _geometry(shape: Sequence[int], kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool,
              what: str) -> _Geometry:
    n, batched = _spatial_rank(shape, kernel_size, what)
    k = _tuple(kernel_size, n, "kernel_size", what, 1)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else \
        _tuple(stride, n, "stride", what, 1)
    p = _tuple(padding, n, "padding", what, 0)
    d = _tuple(dilation, n, "dilation", what, 1)
    for ki, pi in zip(k, p):
        if pi > ki // 2:
            raise ValueError(f"{what}: padding {padding!r} must be at most half of kernel_size {kernel_size!r}")
    size = tuple(shape[len(shape) - n:])
    lead = tuple(shape[:len(shape) - n])
    if any(x == 0 for x in lead):
        raise ValueError(f"{what}: input of shape {tuple(shape)} has an empty batch or channel dimension")
    out = tuple(_pool_out(*a, ceil_mode) for a in zip(size, k, s, p, d))
    if any(o < 1 for o in out):
        raise ValueError(f"{what}: input spatial size {size} is too small for kernel_size {k}, padding {p}, "
                         f"dilation {d} (output size {out})")
    return _Geometry(n, batched, lead, _pad3(size, 1), _pad3(out, 1), _pad3(k, 1), _pad3(s, 1), _pad3(p, 0),
                     _pad3(d, 1))


def _check_input(x: torch.Tensor, what: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what} expects a tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{what} expects a floating-point tensor, got {x.dtype}")


def _tile_policy(nc: int, ow: int, target: str, **extra: int) -> Policy:
    if target == "interpret":
        return Policy.make(BC=pow2_between(nc, 1, 16), BW=pow2_between(ow, 1, 16), **extra)
    # about 256 outputs per program, at least 64 columns wide: on H100 (16x64x224x224, 3x3 window, stride 2) 2x128
    # tiles ran 0.076 ms where 16x128 ran 0.251 and 32x32 0.459 (eager 0.197, Inductor 0.077); a 3-D average pool
    # with 32 output columns ran 0.33 ms at 4x64 against 1.07 at 16x128 (eager 0.54)
    bw = pow2_between(ow, 64, 128)
    bc = pow2_between(nc, 1, builtins.max(1, 256 // bw))
    return Policy.make(BC=bc, BW=bw, num_warps=4, num_stages=1, **extra)


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every output comes from here (tests fill it with NaN to catch unwritten elements)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _views(x: torch.Tensor, g: _Geometry) -> tuple[torch.Tensor, torch.Tensor]:
    """x as (NC, D, H, W) and a fresh output in the same form."""
    nc = 1
    for v in g.lead:
        nc *= v
    x4 = x.reshape(nc, *g.size)
    y = _alloc(g.out_shape(), x.dtype, x.device)
    return x4, y.view(nc, *g.out)


def _launch(name: str, default: Kernel, template: Policy, geometry: dict[str, int], args: tuple,
            policies: dict[str, Policy] | None, kernels: dict[str, Kernel] | None, target: str | None) -> None:
    pol = (policies or {}).get(name, template).with_consts(**geometry)
    kern = (kernels or {}).get(name, default)
    kern(*args, policy=pol, target=target)


def _window_consts(g: _Geometry, dilation: bool) -> dict[str, int]:
    c = {f"K{a}": v for a, v in zip("DHW", g.kernel)}
    c |= {f"S{a}": v for a, v in zip("DHW", g.stride)}
    c |= {f"P{a}": v for a, v in zip("DHW", g.padding)}
    if dilation:
        c |= {f"D{a}": v for a, v in zip("DHW", g.dilation)}
    return c


def max_pool_policies(shape: Sequence[int], kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                      padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                      target: str = "cuda") -> dict[str, Policy]:
    """Template tiles for max_pool of an input of this shape (window constants are added at launch)."""
    g = _geometry(shape, kernel_size, stride, padding, dilation, ceil_mode, "max_pool")
    return {"max_pool_kernel": _tile_policy(_nc(g), g.out[2], target)}


def avg_pool_policies(shape: Sequence[int], kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                      padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                      target: str = "cuda") -> dict[str, Policy]:
    """Template tiles for avg_pool of an input of this shape."""
    g = _geometry(shape, kernel_size, stride, padding, 1, ceil_mode, "avg_pool")
    return {"avg_pool_kernel": _tile_policy(_nc(g), g.out[2], target)}


def adaptive_avg_pool_policies(shape: Sequence[int], output_size: int | Sequence[int | None],
                               target: str = "cuda") -> dict[str, Policy]:
    """Template tiles for adaptive_avg_pool: channels per program, and columns per window step."""
    g = _adaptive_geometry(shape, output_size)
    if target == "interpret":
        return {"adaptive_avg_pool_kernel": Policy.make(BC=pow2_between(_nc(g), 1, 16), BW=16)}
    win = -(-g.size[2] // g.out[2]) + 1
    bw = pow2_between(win, 16, 128)
    bc = pow2_between(_nc(g), 1, builtins.max(1, 4096 // bw))
    return {"adaptive_avg_pool_kernel": Policy.make(BC=bc, BW=bw, num_warps=4 if bc * bw <= 2048 else 8,
                                                    num_stages=1)}


def _nc(g: _Geometry) -> int:
    nc = 1
    for v in g.lead:
        nc *= v
    return nc


def max_pool(x: torch.Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
             padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False, *,
             policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
             target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.max_pool{1,2,3}d (values only): x (N, C, *spatial) or unbatched (C, *spatial)
    when kernel_size is a tuple of the spatial rank."""
    _check_input(x, "max_pool")
    g = _geometry(tuple(x.shape), kernel_size, stride, padding, dilation, ceil_mode, "max_pool")
    target = _target(x, target)
    x4, y4 = _views(x, g)
    template = _tile_policy(_nc(g), g.out[2], target)
    _launch("max_pool_kernel", max_pool_kernel, template, _window_consts(g, True), (x4, y4),
            policies, kernels, target)
    return y4.view(g.out_shape())


def avg_pool(x: torch.Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
             padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
             divisor_override: int | None = None, *, policies: dict[str, Policy] | None = None,
             kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.avg_pool{1,2,3}d: x (N, C, *spatial) or unbatched (C, *spatial)."""
    _check_input(x, "avg_pool")
    if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override <= 0):
        raise ValueError(f"avg_pool: divisor_override must be a positive int, got {divisor_override!r}")
    g = _geometry(tuple(x.shape), kernel_size, stride, padding, 1, ceil_mode, "avg_pool")
    target = _target(x, target)
    x4, y4 = _views(x, g)
    template = _tile_policy(_nc(g), g.out[2], target)
    consts = _window_consts(g, False) | {"COUNT_PAD": int(bool(count_include_pad))}
    _launch("avg_pool_kernel", avg_pool_kernel, template, consts, (x4, y4, divisor_override or 0),
            policies, kernels, target)
    return y4.view(g.out_shape())


def _adaptive_geometry(shape: Sequence[int], output_size: int | Sequence[int | None]) -> _Geometry:
    dim = len(shape)
    if isinstance(output_size, int):
        if not 3 <= dim <= 5:
            raise ValueError(f"adaptive_avg_pool expects a (N, C, *spatial) input with 1 to 3 spatial "
                             f"dimensions, got shape {tuple(shape)}")
        n, batched, outs = dim - 2, True, (output_size,) * (dim - 2)
    else:
        outs = tuple(output_size)
        n = len(outs)
        if not 1 <= n <= 3 or dim not in (n + 1, n + 2):
            raise ValueError(f"adaptive_avg_pool: output_size {output_size!r} does not fit an input of shape "
                             f"{tuple(shape)}")
        batched = dim == n + 2
    size = tuple(shape[dim - n:])
    outs = tuple(s if o is None else o for o, s in zip(outs, size))
    if not all(isinstance(o, int) and o >= 1 for o in outs):
        raise ValueError(f"adaptive_avg_pool: output_size must hold positive ints (or None), got {output_size!r}")
    lead = tuple(shape[:dim - n])
    if any(s < 1 for s in size) or any(v == 0 for v in lead):
        raise ValueError(f"adaptive_avg_pool: input of shape {tuple(shape)} is empty")
    one = (1, 1, 1)
    return _Geometry(n, batched, lead, _pad3(size, 1), _pad3(outs, 1), one, one, (0, 0, 0), one)


def adaptive_avg_pool(x: torch.Tensor, output_size: int | Sequence[int | None], *,
                      policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                      target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.adaptive_avg_pool{1,2,3}d; the rank comes from output_size when it is a tuple
    (an unbatched input has one dimension fewer), else from x.dim() - 2."""
    _check_input(x, "adaptive_avg_pool")
    g = _adaptive_geometry(tuple(x.shape), output_size)
    target = _target(x, target)
    x4, y4 = _views(x, g)
    template = adaptive_avg_pool_policies(tuple(x.shape), output_size, target)["adaptive_avg_pool_kernel"]
    _launch("adaptive_avg_pool_kernel", adaptive_avg_pool_kernel, template, {}, (x4, y4), policies, kernels, target)
    return y4.view(g.out_shape())
