"""transformers' RMSNorm as its models write it, for the few rows of a decode step:
`weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype)` with x32 = x in float32.

Between two Argus GEMVs of a decode step Inductor compiles this into a one-program reduction whose tile its
coordinate-descent tuning picks per compile: 2 to 8 us a norm on the H100 for one 4096-element row, as chance has
it (benchmarks/results/NOTES.md, sessions 20 and 21). Here one program a row reads the row in chunks of BR, sums its
squares in float32 and writes it normalized, rounded to Y's dtype before the weight multiplies it (the model's
order, so the result is eager's). eps is the kernel's scalar argument: under dynamic=True it is a SymFloat of the
graph (a float module attribute Dynamo passes as an input), which the op `argus::rms_norm` takes as a float
argument, so a new value is a new launch argument, never a stale constant."""
from __future__ import annotations

import builtins

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    cdiv,
    constexpr,
    float32,
    load,
    rsqrt,
    store,
    sum,
    tag_of,
    tile_grid,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .launch import check_target, pow2, resolve_target
from .reduce import pick_kernel


@kernel
def rms_norm_rows(X: Tensor("O", "L"), W: Tensor("L"), Y: Tensor("O", "L"), eps: float, BO: constexpr = 1,
                  BR: constexpr = 64):
    """Y[o, l] = W[l] * (X[o, l] * rsqrt(mean over l of X[o, l]^2 + eps)) with the normalized value rounded to
    Y's dtype before the weight multiplies it; float32 statistics."""
    (po,) = tile_grid(cdiv(O, BO))
    ro = po * BO + arange(BO)
    s = zeros((BO,), float32)
    for l0 in range(0, L, BR):
        rl = l0 + arange(BR)
        x = load(X[ro, rl]).to(float32)
        s = s + sum(x * x, 1)
    assert_tag((tag_of(s, "sum(L).lo") <= 0) & (tag_of(s, "sum(L).hi") >= L),
               "each row's mean square counts every element of the row")
    inv = rsqrt(s / L + eps)
    for l0 in range(0, L, BR):
        rl = l0 + arange(BR)
        x = load(X[ro, rl]).to(float32)
        w = load(W[rl]).to(float32)
        assert_tag(tag_of(w[None, :], "L") == tag_of(x, "L"), "the weight read belongs to the element's column")
        n = (x * inv[:, None]).to(Y.dtype).to(float32)
        store(Y[ro, rl], n * w[None, :])


KERNELS: tuple[Kernel, ...] = (rms_norm_rows,)
MAX_ROWS = 16  # the rows of a decode step at batch 1 (a step of more rows keeps Inductor's norm, fused as it likes)


def rms_norm_policy(rows: int, length: int, target: str) -> Policy:
    """One program a row, the row in chunks of up to 4096 elements (one chunk at a Llama or Mixtral hidden size)."""
    check_target(target)
    if target == "interpret":
        return Policy.make(BO=1, BR=builtins.min(pow2(length), 32))
    br = builtins.min(pow2(length), 4096)
    return Policy.make(BO=1, BR=br, num_warps=8 if br >= 2048 else 4)


def rms_norm_rounded(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                     policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                     target: str | None = None) -> torch.Tensor:
    """transformers' RMSNorm of x over its last dim: weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype);
    `eps` a one-element float tensor on x's device."""
    if x.dim() < 1 or not x.is_floating_point():
        raise ValueError(f"rms_norm_rounded takes a floating-point tensor, got {x.dtype}")
    length = x.shape[-1]
    if weight.shape != (length,) or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(f"the weight must be ({length},) {x.dtype} on {x.device}, got {tuple(weight.shape)} "
                         f"{weight.dtype} on {weight.device}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    target = resolve_target(x, target)
    x2 = x.reshape(-1, length)
    y = torch.empty_like(x2, memory_format=torch.contiguous_format)
    if x2.numel():
        pol = (policies or {}).get("rms_norm_rows") or rms_norm_policy(x2.shape[0], length, target)
        pick_kernel("rms_norm_rows", rms_norm_rows, kernels)(x2, weight, y, float(eps), policy=pol,
                                                            target=target)
    return y.view(x.shape)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The model's own arithmetic (transformers' LlamaRMSNorm.forward)."""
    x32 = x.to(torch.float32)
    n = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * n.to(x.dtype)


__all__ = ["rms_norm_rows", "rms_norm_rounded", "rms_norm_reference", "rms_norm_policy", "KERNELS", "MAX_ROWS"]
