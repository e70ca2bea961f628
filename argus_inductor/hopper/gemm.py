"""gemm_epilogue lowered by hand to Gluon for Hopper (sm_90): C = act(A @ B + bias) for few-wave GEMMs.

One program takes one BM x BN output tile (BM = 64: one consumer warp group; 128: two):
- a 1-warp loader partition copies the A tile [BM, BK] and the B tile of each K block through TMA into a ring of
  `stages` shared-memory slots, one "ready" barrier a slot (both copies landed) and one "empty" barrier (the
  consumer released it). B is read as it lies: an nn.Linear weight (B = W^T, K-contiguous) as [BN, BK] tiles of
  W handed to wgmma transposed, a row-major B as [BK, BN] tiles;
- the consumer issues block j's wgmma while block j - 1's is still running (at most one in flight), so block
  j - 1's slot is released in iteration j, once warpgroup_mma_wait(1) has retired its wgmma: the ring discipline
  `warp_specialized_staging` describes (a tile of the loop's last mma is released one iteration late);
- the epilogue adds the bias, applies the activation in float32, and stores C through a TMA copy.
Programs walk the row blocks fastest, so the programs that share a B tile run together and read it once.

Why it exists: at M = 64-128 a GEMM has 64-224 output tiles for 132 SMs, one partial wave, and Triton's
tile-level lowering reached 0.88-1.01x cuBLAS there (benchmarks/results/ops-2026-11-23b.md); a tile width
chosen so the tiles fill one wave, with the loader running ahead of the tensor cores, is what the Gluon probe
measured faster (the removed gluon_gemm probe, 9f188d6: 1.07x over the four M=128 shapes).

The policy (`policy_fits`): BM 64 or 128 with num_warps = BM // 16, BN a power of two from 16 to 256 (a TMA box's
sides are powers of two), BK 32, 64 or 128, 2-8 slots, the ring and the C tile within shared memory. Preconditions
(`supported`): bf16 or fp16 operands and output alike, A row-major, B K- or N-contiguous, C row-major, each row
pitch a multiple of 16 bytes (TMA), a compute capability 9.0 device. Ragged M, N and K are TMA's: loads past the
edge read zeros, stores past it are dropped. Anything else runs the Triton lowering at the Triton template for its
shape (`fallback`).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..dsl.policy import Policy
from ..kernels.policies import GLUON_SMEM_BYTES, gemm_fallback, gluon_gemm_smem
from .device import capability, compile_sm90
from .rings import Ring, RingViolation, check_kernel

LOADER_REGS = 24     # registers a loader thread keeps (setmaxnreg)
GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def ring_tiles_fit(policy: Policy, widths: tuple[int, ...], why_width: str, smem: Callable[[int, int, int, int], int],
                   tiles: str) -> str | None:
    """Why `policy`'s tiles and ring are not those of a GEMM-shaped Gluon lowering here (64- or 128-row tiles over
    one or two consumer warp groups, BN one of `widths`, a K step of 32-128, 2-8 slots, and `smem(BM, BN, BK,
    slots)` bytes of shared memory within an sm_90 program's), or None. `tiles` names a slot's tiles in the message,
    formatted with bm, bn and bk."""
    bm, bn, bk = policy.const("BM"), policy.const("BN"), policy.const("BK")
    if bm not in (64, 128):
        return f"BM={bm} (64: one consumer warp group, 128: two)"
    if policy.num_warps != bm // 16:
        return f"num_warps={policy.num_warps} ({bm // 16}: {bm // 64} consumer warp group(s) of 64 rows)"
    if bn not in widths:
        return f"BN={bn} ({why_width})"
    if bk not in (32, 64, 128):
        return f"BK={bk} (32, 64 or 128)"
    if not 2 <= policy.num_stages <= 8:
        return f"num_stages={policy.num_stages} (a ring of 2 to 8 slots)"
    if smem(bm, bn, bk, policy.num_stages) > GLUON_SMEM_BYTES:
        return f"{policy.num_stages} slots of {tiles.format(bm=bm, bn=bn, bk=bk)} exceed shared memory"
    return None


def policy_fits(policy: Policy) -> str | None:
    """Why `policy` does not describe this lowering, or None. The checker proves the DSL kernel under the same
    tiles and ring (warp_specialized_staging)."""
    return ring_tiles_fit(policy, (16, 32, 64, 128, 256), "a power of two from 16 to 256: a TMA box and one wgmma's "
                          "width", gluon_gemm_smem, "{bm}x{bk} + {bn}x{bk} tiles and the C tile")


@gluon.jit
def _b_tile(view, B_KMAJOR: gl.constexpr):
    """A B slot as wgmma's [BK, BN] operand: a K-major tile [BN, BK] transposed, an N-major one as it is."""
    if B_KMAJOR:
        return view.permute((1, 0))
    else:
        return view


@gluon.jit
def _activation(x, ACT: gl.constexpr):
    """The DSL's activation codes (argus_inductor.dsl.lang.ACTIVATION_KINDS), the same formulas as its lowering."""
    if ACT == 1:  # relu keeping NaN and -0.0, as torch's (gl.maximum drops NaN)
        x = gl.where(x < 0.0, 0.0, x)
    elif ACT == 2:
        x = 0.5 * x * (1.0 + gl.erf(x * 0.7071067811865476))
    elif ACT == 3:
        x = x / (1.0 + gl.exp(-x))
    elif ACT == 4:
        x = x / (1.0 + gl.exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)))
    return x


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, n_blocks,
            BK: gl.constexpr, B_KMAJOR: gl.constexpr, STAGES: gl.constexpr):
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for j in range(n_blocks):
        slot = j % STAGES
        ph = (j // STAGES) & 1
        # B's tile at (off_n, k) in a K-major B's (N, K) storage, at (k, off_n) in an N-major one
        b_row = off_n * B_KMAJOR + j * BK * (1 - B_KMAJOR)
        b_col = j * BK * B_KMAJOR + off_n * (1 - B_KMAJOR)
        # a barrier starts with phase "1 complete", so the first pass over the ring does not wait
        mbarrier.wait(empty.index(slot), ph ^ 1)
        mbarrier.expect(ready.index(slot), nbytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, j * BK], ready.index(slot), a_bufs.index(slot))
        tma.async_copy_global_to_shared(b_desc, [b_row, b_col], ready.index(slot), b_bufs.index(slot))


@gluon.jit
def _consumer(c_desc, bias_ptr, a_bufs, b_bufs, ready, empty, c_smem, off_m, off_n, N, n_blocks,
              BN: gl.constexpr, CW: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_BIAS: gl.constexpr,
              ACT: gl.constexpr, STAGES: gl.constexpr):
    BM: gl.constexpr = c_smem.type.shape[0]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    mbarrier.wait(ready.index(0), 0)
    acc = warpgroup_mma(a_bufs.index(0), _b_tile(b_bufs.index(0), B_KMAJOR), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))  # the loop carries a tensor; the wgmma runs on
    # block j's wgmma runs while block j - 1's finishes; retiring j - 1's frees its slot. Slots and phases are
    # computed from j, never carried in a name (Triton 3.6's frontend does not carry an alias like `prev = slot`
    # through a loop: it keeps its value from before the loop).
    for j in range(1, n_blocks):
        slot = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(ready.index(slot), ph)
        acc = warpgroup_mma(a_bufs.index(slot), _b_tile(b_bufs.index(slot), B_KMAJOR), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index((n_blocks - 1) % STAGES), count=1)

    if HAS_BIAS:
        cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
        bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
        acc = acc + gl.expand_dims(bias, 0)
    acc = _activation(acc, ACT)
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def gemm_epilogue_ws(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                     BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                     B_KMAJOR: gl.constexpr, HAS_BIAS: gl.constexpr, ACT: gl.constexpr,
                     LOADER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    n_m = gl.cdiv(M, BM)
    pid = gl.program_id(0)
    off_m = (pid % n_m) * BM  # row blocks fastest: the programs sharing a B tile run together
    off_n = (pid // n_m) * BN
    n_blocks = gl.cdiv(K, BK)

    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)  # one consumer partition releases each slot
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (c_desc, bias_ptr, a_bufs, b_bufs, ready, empty, c_smem, off_m, off_n, N, n_blocks, BN,
                     BM // 16, B_KMAJOR, HAS_BIAS, ACT, STAGES)),
        (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, n_blocks, BK, B_KMAJOR, STAGES)),
    ], [1], [LOADER_REGS])


# A and B share one ready and one empty barrier a slot: one expect covers both copies, one release frees both
RINGS = (Ring("A", "a_bufs", "ready", "empty"), Ring("B", "b_bufs", "ready", "empty"))


@functools.cache
def prove_rings(stages: int) -> tuple[RingViolation, ...]:
    """The ring discipline of this kernel (its loader and consumer partitions, and its barrier counts), proved
    from its source at `stages` slots: every violation found, empty when proved."""
    return tuple(check_kernel(gemm_epilogue_ws, RINGS, (stages,)))


def rows_ok(x: torch.Tensor) -> bool:
    """A 2-D operand TMA can read as row-major tiles: unit column stride, a row pitch of whole 16 bytes."""
    return x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0


def _b_layout(b: torch.Tensor) -> str | None:
    """'k' for a K-contiguous B (K, N) (an nn.Linear weight transposed: read as its (N, K) storage), 'n' for a
    row-major one, None where TMA cannot read it."""
    if rows_ok(b.t()):
        return "k"
    if rows_ok(b):
        return "n"
    return None


def supported(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> str | None:
    """Why this lowering cannot take the launch, or None when it can."""
    if a.dtype not in GL_DTYPES or not (a.dtype == b.dtype == c.dtype):
        return f"dtypes {a.dtype}, {b.dtype} -> {c.dtype} (bf16 or fp16 operands and output alike)"
    if not a.is_cuda or capability(a.device) != (9, 0):
        return "not a compute capability 9.0 device"
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2 or a.shape[1] != b.shape[0] or \
            tuple(c.shape) != (a.shape[0], b.shape[1]) or min(*a.shape, b.shape[1]) < 1:
        return "shapes"
    if not rows_ok(a):
        return "A is not row-major with 16-byte aligned rows"
    if _b_layout(b) is None:
        return "B is neither K- nor N-contiguous with 16-byte aligned rows"
    if not rows_ok(c):
        return "C is not row-major with 16-byte aligned rows"
    return None


@functools.cache
def smem_layout(shape: tuple[int, int], dtype: torch.dtype) -> Any:
    return gl.NVMMASharedLayout.get_default_for(list(shape), GL_DTYPES[dtype])


def _descriptors(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bm: int, bn: int, bk: int,
                 kmajor: bool) -> tuple[Any, Any, Any]:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b_src, b_block = (b.t(), (bn, bk)) if kmajor else (b, (bk, bn))
    return (TensorDescriptor.from_tensor(a, [bm, bk], smem_layout((bm, bk), a.dtype)),
            TensorDescriptor.from_tensor(b_src, list(b_block), smem_layout(b_block, b.dtype)),
            TensorDescriptor.from_tensor(c, [bm, bn], smem_layout((bm, bn), c.dtype)))


def declines(policy: Policy, A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, C: torch.Tensor) -> str | None:
    """Why this lowering does not take gemm_epilogue's launch under `policy`, or None when it does."""
    why = policy_fits(policy) or supported(A, B, C)
    if why is None and policy.const("HAS_BIAS", 0) and (bias.dim() != 1 or bias.numel() < B.shape[1]
                                                        or not bias.is_contiguous()):
        why = "the bias is not a contiguous row of N values"
    return why


def launch(policy: Policy, A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, C: torch.Tensor) -> bool:
    """Run gemm_epilogue's arguments through the Gluon kernel unless it `declines`; False (nothing launched) if so."""
    if declines(policy, A, B, bias, C) is not None:
        return False
    bm, bn, bk = policy.const("BM"), policy.const("BN"), policy.const("BK")
    m, k = A.shape
    n = B.shape[1]
    kmajor = _b_layout(B) == "k"
    descs = _descriptors(A, B, C, bm, bn, bk, kmajor)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), )
    gemm_epilogue_ws[grid](*descs, bias, m, n, k, BM=bm, BN=bn, BK=bk, STAGES=policy.num_stages,
                           B_KMAJOR=int(kmajor), HAS_BIAS=int(policy.const("HAS_BIAS", 0)),
                           ACT=int(policy.const("ACT", 0)), LOADER_REGS=LOADER_REGS, num_warps=bm // 16)
    return True


def fallback(policy: Policy, A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, C: torch.Tensor) -> Policy:
    """The Triton policy of a launch `launch` declined: the policy itself where its tiles are not this lowering's
    (an explicit choice, e.g. a tuning candidate's, is kept), else the Triton template for the launch's shape
    (policies.gemm_fallback)."""
    if policy_fits(policy) is not None:
        return replace(policy, warp_specialize=False)
    return gemm_fallback(policy, A.shape[0], B.shape[1], A.shape[1], A.element_size())


def compile_for_sm90(policy: Policy, kmajor: bool = True, dtype: torch.dtype = torch.bfloat16) -> Any:
    """Compile the kernel for sm_90 without a GPU (hopper.device.compile_sm90); returns Triton's compiled kernel."""
    bm, bn, bk = policy.const("BM"), policy.const("BN"), policy.const("BK")
    a = torch.empty(256, 512, dtype=dtype)
    b = torch.empty(1024, 512, dtype=dtype).t() if kmajor else torch.empty(512, 1024, dtype=dtype)
    c = torch.empty(256, 1024, dtype=dtype)
    descs = _descriptors(a, b, c, bm, bn, bk, kmajor)
    consts = dict(BM=bm, BN=bn, BK=bk, STAGES=policy.num_stages, B_KMAJOR=int(kmajor),
                  HAS_BIAS=int(policy.const("HAS_BIAS", 0)), ACT=int(policy.const("ACT", 0)), LOADER_REGS=LOADER_REGS)
    scalars = dict(bias_ptr="*bf16" if dtype == torch.bfloat16 else "*fp16", M="i32", N="i32", K="i32")
    return compile_sm90(gemm_epilogue_ws, dict(zip(("a_desc", "b_desc", "c_desc"), descs)), scalars, consts,
                        num_warps=bm // 16)


__all__ = ["launch", "declines", "fallback", "supported", "policy_fits", "prove_rings", "compile_for_sm90",
           "gemm_epilogue_ws"]
