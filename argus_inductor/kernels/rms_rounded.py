"""transformers' RMSNorm as its models write it, for the few rows of a decode step:
`weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype)` with x32 = x in float32.

Between two Argus GEMVs of a decode step Inductor compiles this into a one-program reduction whose tile its
coordinate-descent tuning picks per compile: 2 to 8 us a norm on the H100 for one 4096-element row, as chance has
it (benchmarks/results/NOTES.md, "End to end"). Here the library's rmsnorm_kernel (kernels/norms.py) at
ROUND=1, one program a row: it reads the row in chunks of BC, sums its squares in float32 and writes it normalized,
rounded to Y's dtype before the weight multiplies it (the model's order, so the result is eager's). eps is the
kernel's scalar argument: under dynamic=True it is a SymFloat of the graph (a float module attribute Dynamo passes
as an input), which the op `argus::rms_norm` takes as a float argument, so a new value is a new launch argument,
never a stale constant."""
from __future__ import annotations

import builtins

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    assume,
    cdiv,
    constexpr,
    float32,
    int64,
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
from .norms import rmsnorm_kernel
from .reduce import pick_kernel


@kernel
def embedding_rmsnorm_kernel(Ids: Tensor("R", dtype=int64), E: Tensor("V", "C"), W: Tensor("C"),
                             Out: Tensor("P", "R", "C"), eps: float, BR: constexpr = 1, BC: constexpr = 64):
    """Out[0] = E[Ids] (an embedding's rows) and Out[1] = transformers' RMSNorm of them, rounded as rmsnorm_kernel's
    ROUND=1 (the normalized value rounded to Out's dtype before the weight multiplies it). One output of two planes,
    not two: Inductor takes a kernel writing two views of one buffer for two in-place updates and copies each. An id
    outside [0, V) reads a row of zeros (eager's embedding raises there)."""
    assume(P == 2)
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    tok = load(Ids[rr])
    assume((tok >= 0) & (tok < V))  # embedding's contract: the ids index the table (the masks still guard a bad one)
    ss = zeros((BR,), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(E[tok, rc])
        assert_tag(tag_of(x, "V") == tok[:, None], "each row copies its own token's embedding")
        store(Out[0, rr, rc], x)
        xf = x.to(float32)
        ss = ss + sum(xf * xf, 1)
    assert_tag((tag_of(ss, "sum(C).lo") <= 0) & (tag_of(ss, "sum(C).hi") >= C),
               "each row's mean square counts every element of the row")
    rstd = rsqrt(ss / C + eps)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(E[tok, rc]).to(float32)
        assert_tag(tag_of(x, "V") == tok[:, None], "each row normalizes its own token's embedding")
        w = load(W[rc]).to(float32)
        assert_tag(tag_of(w[None, :], "C") == tag_of(x, "C"), "the weight read belongs to the element's column")
        store(Out[1, rr, rc], (x * rstd[:, None]).to(Out.dtype).to(float32) * w[None, :])


KERNELS: tuple[Kernel, ...] = (rmsnorm_kernel,)  # at ROUND=1
EMBEDDING_KERNELS: tuple[Kernel, ...] = (embedding_rmsnorm_kernel,)
MAX_ROWS = 16  # the rows of a decode step at batch 1 (a step of more rows keeps Inductor's norm, fused as it likes)


def rms_norm_policy(rows: int, length: int, target: str) -> Policy:
    """One program a row, the row in chunks of up to 4096 elements (one chunk at a Llama or Mixtral hidden size)."""
    check_target(target)
    if target == "interpret":
        return Policy.make(BR=1, BC=builtins.min(pow2(length), 32), ROUND=1)
    bc = builtins.min(pow2(length), 4096)
    return Policy.make(BR=1, BC=bc, ROUND=1, num_warps=8 if bc >= 2048 else 4)


def embedding_rms_norm_policy(rows: int, length: int, target: str) -> Policy:
    """embedding_rmsnorm_kernel's tile: rms_norm_policy's (that kernel has no ROUND: it always rounds)."""
    return rms_norm_policy(rows, length, target).without_consts("ROUND")


def _check_weight_and_eps(weight: torch.Tensor, like: torch.Tensor, eps: object) -> None:
    """ValueError unless weight is a (like.shape[-1],) tensor of like's dtype and device and eps a number >= 0."""
    length = like.shape[-1]
    if weight.shape != (length,) or weight.dtype != like.dtype or weight.device != like.device:
        raise ValueError(f"the weight must be ({length},) {like.dtype} on {like.device}, got {tuple(weight.shape)} "
                         f"{weight.dtype} on {weight.device}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")


def rms_norm_rounded(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                     policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                     target: str | None = None) -> torch.Tensor:
    """transformers' RMSNorm of x over its last dim: weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype);
    `eps` a non-negative number (the op passes each call's value)."""
    if x.dim() < 1 or not x.is_floating_point():
        raise ValueError(f"rms_norm_rounded takes a floating-point tensor, got {x.dtype}")
    length = x.shape[-1]
    _check_weight_and_eps(weight, x, eps)
    target = resolve_target(x, target)
    x2 = x.reshape(-1, length)
    y = torch.empty_like(x2, memory_format=torch.contiguous_format)
    if x2.numel():
        pol = (policies or {}).get("rmsnorm_kernel") or rms_norm_policy(x2.shape[0], length, target)
        launch = pick_kernel("rmsnorm_kernel", rmsnorm_kernel, kernels)
        launch(x2, weight, y, float(eps), policy=pol.with_consts(ROUND=1), target=target)
    return y.view(x.shape)


def embedding_rms_norm_rounded(ids: torch.Tensor, table: torch.Tensor, weight: torch.Tensor, eps: float, *,
                               policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                               target: str | None = None) -> torch.Tensor:
    """An embedding's rows and their RMSNorm in one launch, packed: out[0] = table[ids] and out[1] = transformers'
    RMSNorm of them (rms_norm_rounded's arithmetic), each of shape (*ids.shape, table.shape[1])."""
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"embedding_rms_norm_rounded takes integer ids, got {ids.dtype}")
    if table.dim() != 2 or not table.is_floating_point():
        raise ValueError(f"the table must be a 2-d floating-point tensor, got {tuple(table.shape)} {table.dtype}")
    length = table.shape[1]
    _check_weight_and_eps(weight, table, eps)
    target = resolve_target(table, target)
    flat = ids.reshape(-1).to(torch.int64)
    out = torch.empty((2, flat.numel(), length), dtype=table.dtype, device=table.device)
    if flat.numel():
        pol = (policies or {}).get("embedding_rmsnorm_kernel") or embedding_rms_norm_policy(flat.numel(), length,
                                                                                             target)
        launch = pick_kernel("embedding_rmsnorm_kernel", embedding_rmsnorm_kernel, kernels)
        launch(flat, table, weight, out, float(eps), policy=pol, target=target)
    return out.view(2, *ids.shape, length)


def embedding_rms_norm_reference(ids: torch.Tensor, table: torch.Tensor, weight: torch.Tensor,
                                 eps: float) -> torch.Tensor:
    """The model's own arithmetic: the embedding (nn.Embedding.forward) and transformers' RMSNorm of it, packed."""
    h = torch.nn.functional.embedding(ids, table)
    return torch.stack([h, rms_norm_reference(h, weight, eps)])


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The model's own arithmetic (transformers' LlamaRMSNorm.forward)."""
    x32 = x.to(torch.float32)
    n = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * n.to(x.dtype)


__all__ = ["rms_norm_rounded", "rms_norm_reference", "rms_norm_policy", "embedding_rms_norm_rounded",
           "embedding_rms_norm_policy", "embedding_rms_norm_reference", "KERNELS", "EMBEDDING_KERNELS", "MAX_ROWS"]
