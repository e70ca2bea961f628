"""Prefix scans along one dimension: torch.cumsum / torch.cumprod, reversed, exclusive and masked.

The input is viewed as (outer, L, inner) with L the scanned dimension. One program owns a block of
outer rows and a block of inner columns and walks L in chunks of BL: each chunk is scanned with the
cumsum / cumprod builtin and combined with the running total (the carry) of the chunks before it.
A reversed scan walks the chunks from the end of L (by index arithmetic, no host flip) and scans each
chunk backwards; an exclusive scan scans the chunk's elements shifted by one towards the start of
the scan (the identity enters first).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    cdiv,
    constexpr,
    cumprod,
    cumsum,
    float32,
    full,
    int8,
    load,
    prod,
    store,
    sum,
    tag,
    tag_of,
    tile_grid,
    where,
)
from ..dsl.runtime import Kernel, kernel
from .launch import pow2_between
from .launch import resolve_target as _target

__all__ = ["KERNELS", "scan", "scan_policies", "scan_kernel"]


@kernel
def scan_kernel(X: Tensor("O", "L", "I"), M: Tensor("O", "L", "I", dtype=int8), Y: Tensor("O", "L", "I"),
                BO: constexpr = 1, BL: constexpr = 16, BI: constexpr = 16, PROD: constexpr = 0,
                REVERSE: constexpr = 0, EXCLUSIVE: constexpr = 0, MASKED: constexpr = 0):
    """Y[o, :, i] = the inclusive (or exclusive) prefix sum / product of X[o, :, i] (or its suffix,
    REVERSE), counting elements whose M is 0 as the identity when MASKED."""
    po, pi = tile_grid(cdiv(O, BO), cdiv(I, BI))
    ro = po * BO + arange(BO)
    ri = pi * BI + arange(BI)
    ident = PROD * 1.0
    carry = full((BO, BI), 0.0, float32) + ident
    for c in range(0, cdiv(L, BL)):
        start = c * BL + REVERSE * (L - 2 * c * BL - BL)  # chunk c from the start, or from the end
        rl = start + arange(BL)
        x = load(X[ro, rl, ri]).to(float32)
        if MASKED:
            x = where(load(M[ro, rl, ri]) != 0, x, ident)
        x = where(((rl >= 0) & (rl < L))[None, :, None], x, ident)
        if EXCLUSIVE:  # element l scans the element one step earlier in scan order, within this chunk
            src = rl - 1 + 2 * REVERSE
            inside = (src >= start) & (src < start + BL) & (src >= 0) & (src < L)
            xs = load(X[ro, src, ri], mask=inside[None, :, None]).to(float32)
            if MASKED:
                xs = where(load(M[ro, src, ri], mask=inside[None, :, None]) != 0, xs, ident)
            xs = where(inside[None, :, None], xs, ident)
        else:
            xs = x
        if PROD:
            if REVERSE:
                s = cumprod(xs, 1, reverse=True)
            else:
                s = cumprod(xs, 1)
            y = s * carry[:, None, :]
            carry = carry * prod(x, 1)
            # the carry leaving chunk c covers exactly the chunks 0..c in scan order: [0, end of chunk c)
            # forward, [start of chunk c, L) reversed
            assert_tag(tag_of(carry, "prod(L).lo") == REVERSE * start, "the carry starts where the scan starts")
            assert_tag(tag_of(carry, "prod(L).hi") == (1 - REVERSE) * (start + BL) + REVERSE * L,
                       "the carry ends where chunk c ends")
        else:
            if REVERSE:
                s = cumsum(xs, 1, reverse=True)
            else:
                s = cumsum(xs, 1)
            y = s + carry[:, None, :]
            carry = carry + sum(x, 1)
            # the carry leaving chunk c covers exactly the chunks 0..c in scan order: [0, end of chunk c)
            # forward, [start of chunk c, L) reversed
            assert_tag(tag_of(carry, "sum(L).lo") == REVERSE * start, "the carry starts where the scan starts")
            assert_tag(tag_of(carry, "sum(L).hi") == (1 - REVERSE) * (start + BL) + REVERSE * L,
                       "the carry ends where chunk c ends")
        if EXCLUSIVE:
            tag(y, L=rl[None, :, None])  # the exclusive value of element l: the scan up to l's predecessor
        store(Y[ro, rl, ri], y)


KERNELS: tuple[Kernel, ...] = (scan_kernel,)

_KINDS = ("sum", "prod")


def _dim(ndim: int, dim: int) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"scan: dim must be an int, got {type(dim).__name__}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise ValueError(f"scan: dim {dim} is out of range for a tensor of {ndim} dimension(s)")
    return dim % max(ndim, 1)


def _geometry(shape: Sequence[int], dim: int) -> tuple[int, int, int]:
    """(outer, L, inner) of a scan of a tensor of `shape` along `dim`."""
    shape = tuple(shape) or (1,)
    d = _dim(len(shape), dim)
    outer = 1
    for s in shape[:d]:
        outer *= s
    inner = 1
    for s in shape[d + 1:]:
        inner *= s
    return outer, shape[d], inner


def scan_policies(shape: Sequence[int], dim: int, target: str) -> dict[str, Policy]:
    """Template launch policy of scan_kernel for a tensor of `shape` scanned along `dim`."""
    if target not in ("cuda", "hip", "interpret"):
        raise ValueError(f"scan_policies: unknown target {target!r} (use 'cuda', 'hip' or 'interpret')")
    outer, length, inner = _geometry(shape, dim)
    if target == "interpret":
        bl = pow2_between(length, 16, 16)
        bo, bi = (pow2_between(outer, 1, 8), 1) if inner == 1 else (1, pow2_between(inner, 1, 16))
    elif inner == 1:
        # A scan along the last dimension: rows side by side. A program walks its chunks one after another, so
        # the rows spread over the SMs first (one a program up to 256 rows) and the chunks are long. (128, 4000)
        # had run as 4 programs of 32 rows walking 63 chunks each: 0.19 ms on the H100 where eager takes 0.05.
        bo, bi = pow2_between(outer // 256, 1, 32), 1
        bl = pow2_between(length, 16, max(64, 2048 // bo))
    else:
        bo, bi = 1, pow2_between(inner, 1, 128)
        bl = pow2_between(length, 16, 64)
    return {"scan_kernel": Policy.make(BO=bo, BL=bl, BI=bi, num_warps=4, num_stages=1)}


def scan(x: torch.Tensor, dim: int, kind: str = "sum", reverse: bool = False, exclusive: bool = False,
         mask: torch.Tensor | None = None, *, policies: dict[str, Policy] | None = None,
         kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """torch.cumsum (kind="sum") / torch.cumprod (kind="prod") of x along dim, in x's dtype.

    reverse: scan from the end (x.flip(dim).cumsum(dim).flip(dim)). exclusive: element i combines the
    elements strictly before it (the identity first). mask: a bool tensor of x's shape; elements where
    it is False count as the identity (0 for sums, 1 for products).
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"scan: x must be a tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"scan: x must be a floating-point tensor, got {x.dtype}")
    if kind not in _KINDS:
        raise ValueError(f"scan: kind must be 'sum' or 'prod', got {kind!r}")
    d = _dim(x.dim(), dim)
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError("scan: mask must be a bool tensor")
        if mask.shape != x.shape:
            raise ValueError(f"scan: mask has shape {tuple(mask.shape)} but x has shape {tuple(x.shape)}")
        if mask.device != x.device:
            raise ValueError(f"scan: mask is on {mask.device} but x is on {x.device}")
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.numel() == 0:
        return out
    outer, length, inner = _geometry(tuple(x.shape), d)
    x3 = x.reshape(outer, length, inner)  # a view when the layout allows, else one copy
    y3 = out.view(outer, length, inner)
    if mask is not None:
        m3 = mask.reshape(outer, length, inner).to(torch.int8)
    else:
        m3 = torch.ones((1, 1, 1), dtype=torch.int8, device=x.device).expand(outer, length, inner)
    target = _target(x, target)
    template = scan_policies(tuple(x.shape), d, target)["scan_kernel"]
    pol = (policies or {}).get("scan_kernel", template).with_consts(
        PROD=int(kind == "prod"), REVERSE=int(bool(reverse)), EXCLUSIVE=int(bool(exclusive)),
        MASKED=int(mask is not None))
    kern = (kernels or {}).get("scan_kernel", scan_kernel)
    kern(x3, m3, y3, policy=pol, target=target)
    return out
