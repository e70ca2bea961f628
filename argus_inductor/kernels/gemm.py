"""GEMM with fused epilogue, and batched GEMM."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    atomic_add,
    cdiv,
    constexpr,
    float32,
    gelu,
    gelu_tanh,
    load,
    minimum,
    mma,
    relu,
    silu,
    store,
    tile_grid,
    zeros,
)
from ..dsl.runtime import kernel

ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "silu": 3, "gelu_tanh": 4}
# the torch function of each activation (what a fused epilogue's ACT code must match)
ACTIVATION_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": lambda x: x, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@kernel
def gemm_epilogue(A: Tensor("M", "K"), B: Tensor("K", "N"), bias: Tensor("NB"), C: Tensor("M", "N"),
                  BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32,
                  HAS_BIAS: constexpr = 0, ACT: constexpr = 0):
    """C = act(A @ B + bias); A and B in any layout (strides), fp32 accumulation."""
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    if HAS_BIAS == 1:
        acc = acc + load(bias[rn]).to(float32)[None, :]
    if ACT == 1:
        acc = relu(acc)
    if ACT == 2:
        acc = gelu(acc)
    if ACT == 3:
        acc = silu(acc)
    if ACT == 4:
        acc = gelu_tanh(acc)
    store(C[rm, rn], acc)


@kernel
def bmm_kernel(A: Tensor("Bt", "M", "K"), B: Tensor("Bt", "K", "N"), C: Tensor("Bt", "M", "N"),
               BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32):
    """C[b] = A[b] @ B[b]."""
    b, pm, pn = tile_grid(Bt, cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        acc = mma(load(A[b, rm, rk]), load(B[b, rk, rn]), acc)
    store(C[b, rm, rn], acc)


@kernel
def gemm_splitk(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"),
                BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 64, SPLIT_K: constexpr = 2):
    """C += A @ B with K cut into SPLIT_K partitions of whole BK tiles, one program per (partition, tile).

    For GEMMs with too few output tiles to fill the GPU (decode, M <= 128). C is float32 and zeroed
    first; the partial sums meet in C through atomic adds.
    """
    s, pm, pn = tile_grid(SPLIT_K, cdiv(M, BM), cdiv(N, BN))
    chunk = cdiv(cdiv(K, BK), SPLIT_K) * BK
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(s * chunk, minimum(K, (s + 1) * chunk), BK):
        rk = k + arange(BK)
        acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    atomic_add(C[rm, rn], acc)


@kernel
def bias_act_cast(X: Tensor("M", "N"), bias: Tensor("NB"), Y: Tensor("M", "N"),
                  BM: constexpr = 16, BN: constexpr = 128, HAS_BIAS: constexpr = 0, ACT: constexpr = 0):
    """Y = act(X + bias) in Y's dtype: the epilogue of a split-k GEMM."""
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    y = load(X[rm, rn]).to(float32)
    if HAS_BIAS == 1:
        y = y + load(bias[rn]).to(float32)[None, :]
    if ACT == 1:
        y = relu(y)
    if ACT == 2:
        y = gelu(y)
    if ACT == 3:
        y = silu(y)
    if ACT == 4:
        y = gelu_tanh(y)
    store(Y[rm, rn], y)


def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none",
         out: torch.Tensor | None = None, policy: Policy | None = None) -> torch.Tensor:
    """act(a @ b + bias) through the DSL kernel; `a` (M, K) and `b` (K, N) may be any strided views."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if out is None:
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    policy = policy or Policy.make(BM=64, BN=64, BK=32)
    epilogue = dict(HAS_BIAS=int(bias is not None), ACT=ACTIVATIONS[activation])
    bias_arg = bias if bias is not None else out.new_empty(1)
    split = policy.const("SPLIT_K", 1)
    if split > 1:
        part = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
        gemm_splitk(a, b, part, policy=policy)
        bias_act_cast(part, bias_arg, out, policy=Policy.make(BM=16, BN=128, **epilogue))
        return out
    consts = {k: v for k, v in policy.consts if k != "SPLIT_K"}
    policy = replace(policy, consts=tuple(sorted({**consts, **epilogue}.items())))
    gemm_epilogue(a, b, bias_arg, out, policy=policy)
    return out


def bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
        policy: Policy | None = None) -> torch.Tensor:
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ValueError(f"bmm needs (B, M, K) @ (B, K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if out is None:
        out = torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=a.dtype, device=a.device)
    bmm_kernel(a, b, out, policy=policy)
    return out
