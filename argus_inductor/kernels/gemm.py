"""GEMM with fused epilogue, and batched GEMM."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from ..dsl import Policy
from ..dsl.lang import (
    ACTIVATION_KINDS,
    Tensor,
    activation,
    arange,
    assume,
    atomic_add,
    bitcast,
    cdiv,
    constexpr,
    float32,
    inf,
    int32,
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

ACTIVATIONS = {name: code for code, name in enumerate(ACTIVATION_KINDS)}  # the DSL's activation(x, ACT) codes
# the torch function of each activation (what a fused epilogue's ACT code must match)
ACTIVATION_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": lambda x: x, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@kernel
def gemm_epilogue(A: Tensor("M", "K"), B: Tensor("K", "N"), bias: Tensor("NB"), C: Tensor("M", "N"),
                  BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32,
                  HAS_BIAS: constexpr = 0, ACT: constexpr = 0, GEMV: constexpr = 0, KSTEPS: constexpr = 0):
    """C = act(A @ B + bias); A and B in any layout (strides), fp32 accumulation. GEMV=1: no tensor cores, each of
    the tile's rows multiplied into B's tile (decode's memory-bound M = 1, with BM = 1): the products accumulate
    element-wise over the K loop and are summed across K once after it, so no K step waits on a cross-lane
    reduction before its next load. KSTEPS > 0 (GEMV=1): the K loop as that many static steps, which must cover K
    (the checker proves it at the launch's shape): every step's loads can then be issued before the first product
    (SASS of the o projection's 4096 x 4096, compiled for sm_90: the four 128-bit loads of its two steps first,
    where the range loop issues one pair a step; a plain Triton kernel of that schedule took 12.65 us on the H100
    against the range loop's 14.2, benchmarks/results/norm-fold-probe-h100-2026-11-25.log)."""
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    if GEMV == 1:  # each row of the tile in turn, multiplied into B's tile on the CUDA cores
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
    store(C[rm, rn], acc)


@kernel
def gemv_cat(A: Tensor("M", "K"), B0: Tensor("K", "N0"), B1: Tensor("K", "N1"), B2: Tensor("K", "N2"),
             C: Tensor("M", "NC"), BN: constexpr = 32, BK: constexpr = 256, KSTEPS: constexpr = 0):
    """C = A @ [B0 | B1 | B2] for a few rows of A (decode): three projections of one input (an attention's q, k
    and v) in one launch, their outputs side by side in C's columns. One program a row of A and BN columns of one
    segment, on the CUDA cores, so the launch streams all three weights at once, where three launches each stream
    one (the k and v projections of decode alone are too small to reach the copy rate).

    Each segment's programs run their own K loop and store under a branch of their own (the branch is the same
    for all of a program's lanes), so a program loads only its own weight, where one loop over masked loads of all
    three issued three loads a step (20.6 us against 17.9 for one 6144-column GEMV of the same bytes on the H100,
    session 19). KSTEPS > 0: each K loop as that many static steps (as gemm_epilogue's)."""
    t0 = cdiv(N0, BN)
    t1 = cdiv(N1, BN)
    pm, pn = tile_grid(M, t0 + t1 + cdiv(N2, BN))
    assume(NC == N0 + N1 + N2)
    s1 = (pn >= t0).to(int32)  # past the first segment's tiles
    s2 = (pn >= t0 + t1).to(int32)  # past the second's
    rn = (pn - s1 * t0 - s2 * t1) * BN + arange(BN)  # the program's columns of its segment
    if s1 == 0:
        part0 = zeros((BK, BN), float32)  # partial sums kept per K lane, reduced once after the loop
        for k in unrollable_range(0, K, BK, KSTEPS):
            rk = k + arange(BK)
            part0 = part0 + load(A[pm, rk]).to(float32)[:, None] * load(B0[rk, rn]).to(float32)
        store(C[pm, rn], sum(part0, 0), mask=rn < N0)
    if (s1 == 1) & (s2 == 0):
        part1 = zeros((BK, BN), float32)
        for k in unrollable_range(0, K, BK, KSTEPS):
            rk = k + arange(BK)
            part1 = part1 + load(A[pm, rk]).to(float32)[:, None] * load(B1[rk, rn]).to(float32)
        store(C[pm, N0 + rn], sum(part1, 0), mask=rn < N1)
    if s2 == 1:
        part2 = zeros((BK, BN), float32)
        for k in unrollable_range(0, K, BK, KSTEPS):
            rk = k + arange(BK)
            part2 = part2 + load(A[pm, rk]).to(float32)[:, None] * load(B2[rk, rn]).to(float32)
        store(C[pm, N0 + N1 + rn], sum(part2, 0), mask=rn < N2)


def cat_epilogue(widths: tuple[int, ...]) -> str:
    """The epilogue string of a gemv_cat signature: the segments' widths, "cat4096/1024/1024"."""
    return "cat" + "/".join(str(w) for w in widths)


def cat_widths(epilogue: str) -> tuple[int, ...] | None:
    """The segment widths a gemv_cat epilogue names, or None when `epilogue` is not one."""
    if not epilogue.startswith("cat"):
        return None
    try:
        widths = tuple(int(w) for w in epilogue[3:].split("/"))
    except ValueError:
        raise ValueError(f"unknown GEMM epilogue {epilogue!r}") from None
    if len(widths) != 3 or min(widths) < 1:
        raise ValueError(f"a cat epilogue names three positive widths, not {epilogue!r}")
    return widths


def cat_shapes(epilogue: str, dims: dict[str, int]) -> dict[str, int]:
    """gemv_cat's shape symbols (what its proofs run at) for a signature's or problem's dims (M rows, K, the N
    columns of C) and the widths its cat epilogue names."""
    n0, n1, n2 = cat_widths(epilogue) or (0, 0, 0)
    return {"M": dims.get("M", 1), "K": dims["K"], "N0": n0, "N1": n1, "N2": n2, "NC": dims["N"]}


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
    if ACT == 1:  # relu keeping NaN and -0.0, as torch (max(x, 0) drops NaN on a GPU)
        y = where(y < 0.0, 0.0, y)
    else:
        y = activation(y, ACT)
    store(Y[rm, rn], y)


TF32_SPLIT_POLICY = {"BR": 32, "BC": 128}


@kernel
def tf32_split(X: Tensor("Bt", "R", "C"), Y: Tensor("Bt", "R", "C3"),
               BR: constexpr = 32, BC: constexpr = 128, LO: constexpr = 1):
    """Y[b, r, j*C + c] = hi(X[b, r, c]) for two of j = 0, 1, 2 and lo(X[b, r, c]) for j = LO.

    hi is x with the 13 mantissa bits a tf32 mma drops cleared (exactly a tf32 number), lo = x - hi (exact; a tf32
    mma keeps its top 11 bits, so hi + lo carries 22 of float32's 24). Split A as [hi lo hi] (LO=1) and B as
    [lo; hi; hi] (LO=0): one tf32 GEMM over 3K computes hi*lo + lo*hi + hi*hi, the three-pass tf32 product, with
    the operands read straight into the mma pipeline instead of split tile by tile in registers. An infinite x
    splits as hi = x, lo = 0 (so the product is infinite, as x's, not NaN); NaN stays NaN. The small
    cross terms come first: the tensor cores' accumulation truncates each step to the running sum's exponent,
    and a running sum that is still small loses less of them.
    """
    assume(C3 == 3 * C)
    b, pr, pc = tile_grid(Bt, cdiv(R, BR), cdiv(C, BC))
    rr = pr * BR + arange(BR)
    rc = pc * BC + arange(BC)
    inside = (rc < C)[None, :]
    x = load(X[b, rr, rc]).to(float32)
    hi = bitcast(bitcast(x, int32) & -8192, float32)  # -8192: all bits but the low 13
    lo = where((x == inf) | (x == -inf), 0.0, x - hi)  # hi of +-inf is +-inf itself: lo 0, not inf - inf = NaN
    store(Y[b, rr, LO * C + rc], lo, mask=inside)
    store(Y[b, rr, ((LO + 1) % 3) * C + rc], hi, mask=inside)
    store(Y[b, rr, ((LO + 2) % 3) * C + rc], hi, mask=inside)


A_LO_SLOT, B_LO_SLOT = 1, 0  # A' = [hi lo hi], B' = [lo; hi; hi]: the cross terms first, hi*hi last


SPLIT_MAX_K = 8192  # beyond it the tensor cores' truncating accumulation over 3K steps loses float32 accuracy


def tf32x3_split_pays(m: int, n: int, k: int) -> bool:
    """Whether a float32 GEMM at three-pass tf32 should run on pre-split operands (one tf32 GEMM over 3K) rather
    than split every tile in registers. The split moves 16 bytes per element of A and B and costs two launches;
    it pays where the GEMM is compute-bound (each operand element feeds enough outputs: m*n/(m+n) >= 128) and
    large enough to repay the launches (m*n*k >= 2^30). It stays accurate while K is moderate: the tensor cores
    accumulate 3K products into one float32 sum, truncating at each step, where the in-register split adds each
    K tile's product to the running sum in IEEE float32. Measured on H100 (benchmarks/results/fp32-gemm-2026-11-23):
    4096^3 1.3 ms pre-split against 2.8 ms in registers, max relative error 1.2e-5 (cuBLAS 3e-6, one tf32 pass
    8e-4); at K = 131072 the pre-split error reached 1.5e-3, hence SPLIT_MAX_K. A batch of small matrices
    (bmm 32 x 512x256x1024) ran slower split (0.50 against 0.38 ms), so the size test is per matrix."""
    return 16 <= k <= SPLIT_MAX_K and m * n >= 128 * (m + n) and m * n * k >= 1 << 30


def split_operand(x: torch.Tensor, k_dim: int, lo_slot: int, policy: Policy | None = None,
                  target: str | None = None, kernel_fn: Any = None) -> torch.Tensor:
    """x (..., K, ...) float32 -> x' with K tripled along k_dim, lo at slot lo_slot and hi at the other two.
    2-D or 3-D (a leading batch dim). x' is K-contiguous whatever x's strides: tf32 wgmma reads both operands
    K-major from shared memory, and an M- or N-major float32 operand drops Triton to a 3-4x slower mma."""
    if x.dtype != torch.float32 or x.dim() not in (2, 3):
        raise ValueError(f"split_operand takes a 2-D or 3-D float32 tensor, got {x.dtype} {tuple(x.shape)}")
    k_dim %= x.dim()
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    kd = k_dim + (3 - x.dim())
    if kd == 1:  # K is the rows: split the transpose, whose K is the columns
        x3 = x3.transpose(1, 2)
    y = torch.empty(x3.shape[0], x3.shape[1], 3 * x3.shape[2], dtype=x.dtype, device=x.device)
    pol = (policy or Policy.make(**TF32_SPLIT_POLICY)).with_consts(LO=lo_slot)
    (kernel_fn or tf32_split)(x3, y, policy=pol, **({"target": target} if target else {}))
    if kd == 1:
        y = y.transpose(1, 2)
    return y if x.dim() == 3 else y.squeeze(0)


def split_operands(a: torch.Tensor, *bs: torch.Tensor, policy: Policy | None = None, target: str | None = None,
                   kernel_fn: Any = None) -> tuple[torch.Tensor, ...]:
    """A (.., M, K) and each B (.., K, N) split for one tf32 GEMM over 3K (A_LO_SLOT, B_LO_SLOT)."""
    kw = {"policy": policy, "target": target, "kernel_fn": kernel_fn}
    return (split_operand(a, -1, A_LO_SLOT, **kw), *(split_operand(b, -2, B_LO_SLOT, **kw) for b in bs))


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
