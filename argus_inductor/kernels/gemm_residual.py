"""GEMM epilogue variants the backend fuses into: a residual add after the activation, and the gated
(SwiGLU-style) pair of GEMMs that share their input, act(x Wg^T) * (x Wu^T)."""
from __future__ import annotations

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    activation,
    arange,
    cdiv,
    constexpr,
    float32,
    load,
    minimum,
    mma,
    static_range,
    store,
    sum,
    tile_grid,
    unrollable_range,
    where,
    zeros,
)
from ..dsl.runtime import kernel
from .gemm import ACTIVATIONS


@kernel
def gemm_residual(A: Tensor("M", "K"), B: Tensor("K", "N"), bias: Tensor("NB"), R: Tensor("M", "N"),
                  C: Tensor("M", "N"), BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32,
                  HAS_BIAS: constexpr = 0, ACT: constexpr = 0, GEMV: constexpr = 0, KSTEPS: constexpr = 0):
    """C = R + act(A @ B + bias); fp32 accumulation, the residual added before the one rounding. GEMV=1: on the
    CUDA cores, row by row (as gemm_epilogue's); KSTEPS > 0: its K loop as that many static steps (as
    gemm_epilogue's)."""
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    if GEMV == 1:
        for r in static_range(BM):
            row = minimum(pm * BM + r, M - 1)  # a row past M reads row M - 1, and is not stored
            part = zeros((BK, BN), float32)  # partial sums kept per K lane, reduced once after the loop
            for k in unrollable_range(0, K, BK, KSTEPS):
                rk = k + arange(BK)
                part = part + load(A[row, rk]).to(float32)[:, None] * load(B[rk, rn]).to(float32)
            acc = where((arange(BM) == r)[:, None], sum(part, 0)[None, :], acc)
    else:
        for k in range(0, K, BK):
            rk = k + arange(BK)
            acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    if HAS_BIAS == 1:
        acc = acc + load(bias[rn]).to(float32)[None, :]
    if ACT == 1:  # relu keeping NaN and -0.0, as torch (max(x, 0) drops NaN on a GPU)
        acc = where(acc < 0.0, 0.0, acc)
    else:
        acc = activation(acc, ACT)
    acc = acc + load(R[rm, rn]).to(float32)
    store(C[rm, rn], acc)


@kernel
def gemm_gate_up(A: Tensor("M", "K"), BG: Tensor("K", "N"), BU: Tensor("K", "N"), C: Tensor("M", "N"),
                 BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32, ACT: constexpr = 3,
                 GEMV: constexpr = 0, KSTEPS: constexpr = 0):
    """C = act(A @ BG) * (A @ BU): two GEMMs over one load of each A tile (the MLP's gate and up). GEMV=1: on the
    CUDA cores, row by row (as gemm_epilogue's); KSTEPS > 0: its K loop as that many static steps (as
    gemm_epilogue's)."""
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    gate = zeros((BM, BN), float32)
    up = zeros((BM, BN), float32)
    if GEMV == 1:
        for r in static_range(BM):
            row = minimum(pm * BM + r, M - 1)  # a row past M reads row M - 1, and is not stored
            part_g = zeros((BK, BN), float32)  # partial sums kept per K lane, reduced once after the loop
            part_u = zeros((BK, BN), float32)
            for k in unrollable_range(0, K, BK, KSTEPS):
                rk = k + arange(BK)
                a = load(A[row, rk]).to(float32)[:, None]
                part_g = part_g + a * load(BG[rk, rn]).to(float32)
                part_u = part_u + a * load(BU[rk, rn]).to(float32)
            gate = where((arange(BM) == r)[:, None], sum(part_g, 0)[None, :], gate)
            up = where((arange(BM) == r)[:, None], sum(part_u, 0)[None, :], up)
    else:
        for k in range(0, K, BK):
            rk = k + arange(BK)
            a = load(A[rm, rk])
            gate = mma(a, load(BG[rk, rn]), gate)
            up = mma(a, load(BU[rk, rn]), up)
    if ACT == 1:  # relu keeping NaN and -0.0, as torch (max(x, 0) drops NaN on a GPU)
        gate = where(gate < 0.0, 0.0, gate)
    else:
        gate = activation(gate, ACT)
    store(C[rm, rn], gate * up)


def gemm_add(a: torch.Tensor, b: torch.Tensor, residual: torch.Tensor, bias: torch.Tensor | None = None,
             activation: str = "none", out: torch.Tensor | None = None,
             policy: Policy | None = None) -> torch.Tensor:
    """residual + act(a @ b + bias) for a (M, K), b (K, N), residual (M, N), any strides."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if tuple(residual.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(f"residual has shape {tuple(residual.shape)}, expected {(a.shape[0], b.shape[1])}")
    if out is None:
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    policy = (policy or Policy.make(BM=64, BN=64, BK=32)).with_consts(HAS_BIAS=int(bias is not None),
                                                                      ACT=ACTIVATIONS[activation])
    gemm_residual(a, b, bias if bias is not None else out.new_empty(1), residual, out, policy=policy)
    return out


def gate_up(a: torch.Tensor, b_gate: torch.Tensor, b_up: torch.Tensor, activation: str = "silu",
            out: torch.Tensor | None = None, policy: Policy | None = None) -> torch.Tensor:
    """act(a @ b_gate) * (a @ b_up) for a (M, K), b_gate and b_up (K, N), any strides."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if a.dim() != 2 or b_gate.shape != b_up.shape or b_gate.dim() != 2 or a.shape[1] != b_gate.shape[0]:
        raise ValueError(f"gate_up needs (M, K) @ (K, N) twice, got {tuple(a.shape)} @ {tuple(b_gate.shape)}, "
                         f"{tuple(b_up.shape)}")
    if out is None:
        out = torch.empty(a.shape[0], b_gate.shape[1], dtype=a.dtype, device=a.device)
    policy = (policy or Policy.make(BM=64, BN=64, BK=32)).with_consts(ACT=ACTIVATIONS[activation])
    gemm_gate_up(a, b_gate, b_up, out, policy=policy)
    return out
