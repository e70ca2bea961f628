"""transformers' RMSNorm as its models write it, for the few rows of a decode step:
`weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype)` with x32 = x in float32.

Between two Argus GEMVs of a decode step Inductor compiles this into a one-program reduction whose tile its
coordinate-descent tuning picks per compile: 2 to 8 us a norm on the H100 for one 4096-element row, as chance has
it (benchmarks/results/NOTES.md, sessions 20 and 21). Here the library's rmsnorm_kernel (kernels/norms.py) at
ROUND=1, one program a row: it reads the row in chunks of BC, sums its squares in float32 and writes it normalized,
rounded to Y's dtype before the weight multiplies it (the model's order, so the result is eager's). eps is the
kernel's scalar argument: under dynamic=True it is a SymFloat of the graph (a float module attribute Dynamo passes
as an input), which the op `argus::rms_norm` takes as a float argument, so a new value is a new launch argument,
never a stale constant."""
from __future__ import annotations

import builtins

import torch

from ..dsl import Policy
from ..dsl.runtime import Kernel
from .launch import check_target, pow2, resolve_target
from .norms import rmsnorm_kernel
from .reduce import pick_kernel

KERNELS: tuple[Kernel, ...] = (rmsnorm_kernel,)  # at ROUND=1
MAX_ROWS = 16  # the rows of a decode step at batch 1 (a step of more rows keeps Inductor's norm, fused as it likes)


def rms_norm_policy(rows: int, length: int, target: str) -> Policy:
    """One program a row, the row in chunks of up to 4096 elements (one chunk at a Llama or Mixtral hidden size)."""
    check_target(target)
    if target == "interpret":
        return Policy.make(BR=1, BC=builtins.min(pow2(length), 32), ROUND=1)
    bc = builtins.min(pow2(length), 4096)
    return Policy.make(BR=1, BC=bc, ROUND=1, num_warps=8 if bc >= 2048 else 4)


def rms_norm_rounded(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                     policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                     target: str | None = None) -> torch.Tensor:
    """transformers' RMSNorm of x over its last dim: weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype);
    `eps` a non-negative number (the op passes each call's value)."""
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
        pol = (policies or {}).get("rmsnorm_kernel") or rms_norm_policy(x2.shape[0], length, target)
        launch = pick_kernel("rmsnorm_kernel", rmsnorm_kernel, kernels)
        launch(x2, weight, y, float(eps), policy=pol.with_consts(ROUND=1), target=target)
    return y.view(x.shape)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The model's own arithmetic (transformers' LlamaRMSNorm.forward)."""
    x32 = x.to(torch.float32)
    n = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * n.to(x.dtype)


__all__ = ["rms_norm_rounded", "rms_norm_reference", "rms_norm_policy", "KERNELS", "MAX_ROWS"]
