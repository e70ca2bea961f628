"""moe_down lowered by hand to Gluon for Hopper (sm_90): the grouped down GEMM of a prefill MoE step,
Y[token of p] += routing_weight[p] * (Hin[p] W2[e]^T), scattered back to token order in float32.

One program runs on each SM and walks BM x BN tiles (BM sorted rows of one real expert block, BN of the HD output
columns; padding blocks are no tiles) in moe_gate_up_ws's grouped order. A down tile is long (K = I, 224 blocks of
64 at Mixtral's dims), so whole waves of tiles leave the last wave part-empty: 592 tiles at 2048 tokens are 4.48
waves of 132 SMs, paid as 5. The tiles go in full waves (program pid takes tiles pid, pid + nprog, ...), and each of
the `rem` tiles left after them is cut along K into `split` parts (`tail_split`: as many as fit in one wave, at
most MAX_SPLIT), one part a program: 4.5 waves there. The parts need nothing to combine them: every tile already
adds into Y with atomics.
- A 1-warp loader partition runs one loop over every K block of the program's tiles and tail part, copying the Hin
  tile [BM, BK] and the two halves of the W2 tile, [BN/2, BK] each (W2 viewed (E*HD, I)), through TMA into one
  ring slot.
- The consumer warp groups keep two accumulators of BN/2 columns, issue block j's two wgmma while block j - 1's
  are still running, then retire those and release block j - 1's slot (moe_gate_up_ws's ring). Where a tile (or the
  tail part) ends they retire everything and add the tile, each row scaled by its pair's routing weight, into Y
  with float32 atomics (two pairs of a token meet there); padding rows (id >= T*TOPK) and columns >= HD are
  masked. Each half goes through shared memory into rows of 4-column vectors first: the atomics are then 128-bit
  and a warp's cover whole cache lines, a quarter of the instructions the accumulator's own layout needs (the
  atomics were 8% of the kernel's time at 4096 Mixtral tokens with 64-bit ones; moe-down-ab-h100-2026-11-24.txt).
  Two halves keep that staging at BM x BN/2 floats. K past I reads zeros (TMA); a column block past HD reads the
  next expert's rows into masked columns.

Preconditions (`declines`): bf16 or fp16 Hin and W2 alike, Y float32 and contiguous, Hin and W2 (as (E*HD, I))
row-major with 16-byte row pitches, P = NB * BM, a compute capability 9.0 device. Anything else runs the Triton
lowering at the policy's tiles (`fallback`).
"""
from __future__ import annotations

import functools
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
from ..kernels.policies import moe_down_fallback
from .device import capability, compile_sm90, sm_count
from .gemm import GL_DTYPES, LOADER_REGS, ring_tiles_fit, rows_ok, smem_layout
from .moe_gate_up import grouped_tile, real_blocks
from .rings import Ring, RingViolation, check_kernel


def down_smem(bm: int, bn: int, bk: int, stages: int, elem: int = 2) -> int:
    """Shared memory the kernel takes: each slot's Hin and W2 tiles, the barriers, and the epilogue's staging of
    one accumulator half (BM x BN/2 floats)."""
    return stages * (bm + bn) * bk * elem + 2 * stages * 8 + bm * (bn // 2) * 4


def policy_fits(policy: Policy) -> str | None:
    """Why `policy` does not describe this lowering, or None."""
    return ring_tiles_fit(policy, (64, 128, 256), "64, 128 or 256: two accumulators of BN/2 columns", down_smem,
                          "{bm}x{bk} + {bn}x{bk} tiles and the epilogue's staging")


# The schedule's helpers use integer arithmetic, minimum and maximum only (no casts or selects), so that
# tests/hopper/test_moe_lowering.py runs this same source over plain Python integers and checks that the programs
# cover every K block of every tile exactly once.
MAX_SPLIT = 4  # at most this many parts a tail tile (each part's Y tile is one more set of atomics)


@gluon.jit
def tail_split(tiles, nprog, kb, MAX_SPLIT: gl.constexpr):
    """(full waves, tail tiles, parts a tail tile): the tiles left after the full waves of nprog are cut along K
    into as many parts as fit in one wave, at most MAX_SPLIT and at least 4 K blocks a part."""
    full = tiles // nprog
    rem = tiles % nprog
    split = gl.minimum(gl.minimum(nprog // gl.maximum(rem, 1), MAX_SPLIT), gl.maximum(kb // 4, 1))
    return full, rem, gl.maximum(split, 1)


@gluon.jit
def program_run(pid, nprog, tiles, kb, MAX_SPLIT: gl.constexpr):
    """Program pid's run: (blocks of its full-wave tiles, first K block of its tail part, its tail tile, blocks in
    all). Its tail part is part pid // rem of tail tile full * nprog + pid % rem, for pid < rem * split."""
    full, rem, split = tail_split(tiles, nprog, kb, MAX_SPLIT)
    rem1 = gl.maximum(rem, 1)
    part = pid // rem1
    k0 = part * kb // split
    has_part = gl.minimum(gl.maximum(rem * split - pid, 0), 1)  # 1 where pid < rem * split
    return full * kb, k0, full * nprog + pid % rem1, full * kb + has_part * ((part + 1) * kb // split - k0)


@gluon.jit
def block_of(g, pid, nprog, kb, dp_blocks, k0, tail_tile):
    """(tile, K block) of block g of the program's run: its full-wave tiles pid, pid + nprog, ... then its tail
    part's K blocks k0, k0 + 1, ..."""
    in_waves = gl.minimum(gl.maximum(dp_blocks - g, 0), 1)  # 1 where g < dp_blocks
    tile = in_waves * (pid + (g // kb) * nprog) + (1 - in_waves) * tail_tile
    k = in_waves * (g % kb) + (1 - in_waves) * (k0 + g - dp_blocks)
    return tile, k


@gluon.jit
def starts_tile(g, kb, dp_blocks):
    """Whether block g of the run starts a tile (or the tail part): the block before it ended one."""
    return ((g % kb == 0) & (g < dp_blocks)) | (g == dp_blocks)


@gluon.jit
def _add_half(acc, off_m, off_n, y_ptr, sorted_ids_ptr, weights_ptr, HD, PAIRS, TOPK: gl.constexpr,
              EPI_TM: gl.constexpr, EPI_TN: gl.constexpr, NUM_WARPS: gl.constexpr):
    """Y[token of each real row] += weight * acc over the columns off_n.. below HD: acc moved into rows of 4-column
    vectors (through shared memory), then 128-bit float32 atomics."""
    BM: gl.constexpr = acc.type.shape[0]
    HALF: gl.constexpr = acc.type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [EPI_TM, EPI_TN], [NUM_WARPS, 1], [1, 0])
    val = gl.convert_layout(acc, layout)
    rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    pair = gl.load(sorted_ids_ptr + rows)
    real = pair < PAIRS  # padding rows carry the id T*TOPK
    weight = gl.load(weights_ptr + pair, mask=real, other=0.0).to(gl.float32)
    cols = off_n + gl.arange(0, HALF, layout=gl.SliceLayout(0, layout))
    tok = (pair // TOPK).to(gl.int64)
    ptrs = y_ptr + gl.expand_dims(tok * HD, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(real, 1) & gl.expand_dims(cols < HD, 0)
    gl.atomic_add(ptrs, val * gl.expand_dims(weight, 1), mask=mask, sem="relaxed")


@gluon.jit
def _add_tile(acc0, acc1, tile, y_ptr, sorted_ids_ptr, weights_ptr, nreal, n_n, HD, PAIRS, BM: gl.constexpr,
              BN: gl.constexpr, GROUP: gl.constexpr, TOPK: gl.constexpr, EPI_TM: gl.constexpr, EPI_TN: gl.constexpr,
              NUM_WARPS: gl.constexpr):
    """Y[token of each real row] += weight * (the tile's two halves) over its columns below HD."""
    pb, pn = grouped_tile(tile, nreal, n_n, GROUP)
    _add_half(acc0, pb * BM, pn * BN, y_ptr, sorted_ids_ptr, weights_ptr, HD, PAIRS, TOPK, EPI_TM, EPI_TN,
              NUM_WARPS)
    _add_half(acc1, pb * BM, pn * BN + BN // 2, y_ptr, sorted_ids_ptr, weights_ptr, HD, PAIRS, TOPK, EPI_TM, EPI_TN,
              NUM_WARPS)


@gluon.jit
def _loader(h_desc, w_desc, a_bufs, b0_bufs, b1_bufs, ready, empty, block_expert_ptr, pid, nprog, nreal, n_n, kb, HD,
            dp_blocks, k0, tail_tile, n_blocks, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
            GROUP: gl.constexpr, STAGES: gl.constexpr):
    nbytes: gl.constexpr = h_desc.block_type.nbytes + 2 * w_desc.block_type.nbytes
    off_m = 0
    w_row = 0
    for g in range(n_blocks):
        tile, k = block_of(g, pid, nprog, kb, dp_blocks, k0, tail_tile)
        if starts_tile(g, kb, dp_blocks):  # the tile's rows and its expert's W2 rows (W2 viewed (E*HD, I))
            pb, pn = grouped_tile(tile, nreal, n_n, GROUP)
            off_m = pb * BM
            w_row = gl.load(block_expert_ptr + pb) * HD + pn * BN
        slot = g % STAGES
        ph = (g // STAGES) & 1
        mbarrier.wait(empty.index(slot), ph ^ 1)  # the first pass over the ring does not wait
        mbarrier.expect(ready.index(slot), nbytes)
        tma.async_copy_global_to_shared(h_desc, [off_m, k * BK], ready.index(slot), a_bufs.index(slot))
        tma.async_copy_global_to_shared(w_desc, [w_row, k * BK], ready.index(slot), b0_bufs.index(slot))
        tma.async_copy_global_to_shared(w_desc, [w_row + BN // 2, k * BK], ready.index(slot), b1_bufs.index(slot))


@gluon.jit
def _consumer(a_bufs, b0_bufs, b1_bufs, ready, empty, y_ptr, sorted_ids_ptr, weights_ptr, pid, nprog, nreal, n_n, kb,
              HD, PAIRS, dp_blocks, k0, tail_tile, n_blocks, BM: gl.constexpr, BN: gl.constexpr, CW: gl.constexpr,
              GROUP: gl.constexpr, TOPK: gl.constexpr, STAGES: gl.constexpr, EPI_TM: gl.constexpr,
              EPI_TN: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                         instr_shape=[16, BN // 2, 16])
    acc0 = gl.zeros([BM, BN // 2], gl.float32, acc_layout)
    acc1 = gl.zeros([BM, BN // 2], gl.float32, acc_layout)
    mbarrier.wait(ready.index(0), 0)
    acc0 = warpgroup_mma(a_bufs.index(0), b0_bufs.index(0).permute((1, 0)), acc0, is_async=True)
    acc1 = warpgroup_mma(a_bufs.index(0), b1_bufs.index(0).permute((1, 0)), acc1, is_async=True)
    acc0, acc1 = warpgroup_mma_wait(num_outstanding=2, deps=(acc0, acc1))
    for g in range(1, n_blocks):
        slot = g % STAGES
        ph = (g // STAGES) & 1
        if starts_tile(g, kb, dp_blocks):  # the tile before is complete: add it while the loader fills this one
            acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
            tile, _ = block_of(g - 1, pid, nprog, kb, dp_blocks, k0, tail_tile)
            _add_tile(acc0, acc1, tile, y_ptr, sorted_ids_ptr, weights_ptr, nreal, n_n, HD, PAIRS, BM, BN, GROUP,
                      TOPK, EPI_TM, EPI_TN, CW)
            acc0 = gl.zeros([BM, BN // 2], gl.float32, acc_layout)
            acc1 = gl.zeros([BM, BN // 2], gl.float32, acc_layout)
        mbarrier.wait(ready.index(slot), ph)
        acc0 = warpgroup_mma(a_bufs.index(slot), b0_bufs.index(slot).permute((1, 0)), acc0, is_async=True)
        acc1 = warpgroup_mma(a_bufs.index(slot), b1_bufs.index(slot).permute((1, 0)), acc1, is_async=True)
        acc0, acc1 = warpgroup_mma_wait(num_outstanding=2, deps=(acc0, acc1))
        mbarrier.arrive(empty.index((g - 1) % STAGES), count=1)
    acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
    mbarrier.arrive(empty.index((n_blocks - 1) % STAGES), count=1)
    tile, _ = block_of(n_blocks - 1, pid, nprog, kb, dp_blocks, k0, tail_tile)
    _add_tile(acc0, acc1, tile, y_ptr, sorted_ids_ptr, weights_ptr, nreal, n_n, HD, PAIRS, BM, BN, GROUP, TOPK,
              EPI_TM, EPI_TN, CW)


@gluon.jit
def moe_down_ws(h_desc, w_desc, sorted_ids_ptr, block_expert_ptr, weights_ptr, y_ptr, NB, I, HD, E, PAIRS,
                BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr,
                TOPK: gl.constexpr, MAX_SPLIT: gl.constexpr, EPI_TM: gl.constexpr, EPI_TN: gl.constexpr,
                LOADER_REGS: gl.constexpr, NUM_WARPS: gl.constexpr):
    """One program an SM: full waves of tiles, then a part of a tail tile (`program_run`)."""
    nreal = real_blocks(block_expert_ptr, NB, E, NUM_WARPS)
    n_n = gl.cdiv(HD, BN)
    kb = gl.cdiv(I, BK)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    dp_blocks, k0, tail_tile, n_blocks = program_run(pid, nprog, nreal * n_n, kb, MAX_SPLIT)
    if n_blocks <= 0:
        return
    dtype: gl.constexpr = h_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + h_desc.block_type.shape, h_desc.layout)
    b0_bufs = gl.allocate_shared_memory(dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    b1_bufs = gl.allocate_shared_memory(dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)  # one consumer partition releases each slot
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (a_bufs, b0_bufs, b1_bufs, ready, empty, y_ptr, sorted_ids_ptr, weights_ptr, pid, nprog, nreal,
                     n_n, kb, HD, PAIRS, dp_blocks, k0, tail_tile, n_blocks, BM, BN, BM // 16, GROUP, TOPK, STAGES,
                     EPI_TM, EPI_TN)),
        (_loader, (h_desc, w_desc, a_bufs, b0_bufs, b1_bufs, ready, empty, block_expert_ptr, pid, nprog, nreal, n_n,
                   kb, HD, dp_blocks, k0, tail_tile, n_blocks, BM, BN, BK, GROUP, STAGES)),
    ], [1], [LOADER_REGS])


# Hin and the two halves of the W2 tile share one ready and one empty barrier a slot
RINGS = (Ring("Hin", "a_bufs", "ready", "empty"), Ring("W2 first half", "b0_bufs", "ready", "empty"),
         Ring("W2 second half", "b1_bufs", "ready", "empty"))


@functools.cache
def prove_rings(stages: int) -> tuple[RingViolation, ...]:
    """The ring discipline of this kernel proved from its source at `stages` slots: the violations, empty when
    proved."""
    return tuple(check_kernel(moe_down_ws, RINGS, (stages,)))


def supported(h: torch.Tensor, w2: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
              weights: torch.Tensor, y: torch.Tensor, bm: int) -> str | None:
    """Why this lowering cannot take the launch, or None when it can."""
    if h.dtype not in GL_DTYPES or h.dtype != w2.dtype:
        return f"dtypes {h.dtype}, {w2.dtype} (bf16 or fp16 operands alike)"
    if y.dtype != torch.float32 or not y.is_contiguous():
        return "Y is not a contiguous float32 tensor"
    if h.dim() != 2 or w2.dim() != 3 or y.dim() != 2 or w2.shape[2] != h.shape[1] or y.shape[1] != w2.shape[1] or \
            h.shape[0] != sorted_ids.numel() or sorted_ids.numel() != block_expert.numel() * bm:
        return "shapes (P = NB * BM)"
    if not w2.is_contiguous() or not rows_ok(w2.view(-1, w2.shape[2])) or not rows_ok(h):
        return "Hin or W2 is not row-major with 16-byte aligned rows"
    if sorted_ids.dtype != torch.int32 or block_expert.dtype != torch.int32 or not sorted_ids.is_contiguous() or \
            not block_expert.is_contiguous() or not weights.is_contiguous():
        return "the routing vectors are not contiguous (int32 ids)"
    if not h.is_cuda or capability(h.device) != (9, 0):
        return "not a compute capability 9.0 device"
    return None


def declines(policy: Policy, h: torch.Tensor, w2: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
             weights: torch.Tensor, y: torch.Tensor) -> str | None:
    """Why this lowering does not take moe_down's launch under `policy`, or None when it does."""
    return policy_fits(policy) or supported(h, w2, sorted_ids, block_expert, weights, y, policy.const("BM"))


def _descriptors(h: torch.Tensor, w2: torch.Tensor, bm: int, bn: int, bk: int) -> tuple[Any, ...]:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    w = w2.view(-1, w2.shape[2])
    return (TensorDescriptor.from_tensor(h, [bm, bk], smem_layout((bm, bk), h.dtype)),
            TensorDescriptor.from_tensor(w, [bn // 2, bk], smem_layout((bn // 2, bk), w.dtype)))


def _consts(policy: Policy) -> dict[str, int]:
    return dict(BM=policy.const("BM"), BN=policy.const("BN"), BK=policy.const("BK"), STAGES=policy.num_stages,
                GROUP=policy.group_m if policy.grid_order == "grouped" else 1, TOPK=policy.const("TOPK", 2),
                MAX_SPLIT=MAX_SPLIT, EPI_TM=32 // min(32, policy.const("BN") // 8),
                EPI_TN=min(32, policy.const("BN") // 8), LOADER_REGS=LOADER_REGS, NUM_WARPS=policy.num_warps)


def launch(policy: Policy, h: torch.Tensor, w2: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
           weights: torch.Tensor, y: torch.Tensor) -> bool:
    """Run moe_down's arguments through the Gluon kernel unless it `declines`; False (nothing launched) if so.
    One program an SM (times programs_per_sm), at most one a tile."""
    if declines(policy, h, w2, sorted_ids, block_expert, weights, y) is not None:
        return False
    c = _consts(policy)
    e, hd, i = w2.shape
    nb = block_expert.numel()
    grid = (min(nb * triton.cdiv(hd, c["BN"]), sm_count(h.device) * policy.programs_per_sm), )
    moe_down_ws[grid](*_descriptors(h, w2, c["BM"], c["BN"], c["BK"]), sorted_ids, block_expert, weights, y, nb, i,
                      hd, e, weights.numel(), **c, num_warps=policy.num_warps)
    return True


def fallback(policy: Policy, *args: Any) -> Policy:
    """The Triton policy of a launch `launch` declined (policies.moe_down_fallback): the policy's tiles, ring depth
    and launch, without the Gluon request."""
    return moe_down_fallback(policy)


def compile_for_sm90(policy: Policy, dtype: torch.dtype = torch.bfloat16) -> Any:
    """Compile the kernel for sm_90 without a GPU (hopper.device.compile_sm90); returns Triton's compiled kernel."""
    c = _consts(policy)
    h = torch.empty(512, 768, dtype=dtype)
    w2 = torch.empty(4, 1024, 768, dtype=dtype)
    descs = _descriptors(h, w2, c["BM"], c["BN"], c["BK"])
    wt = "*bf16" if dtype == torch.bfloat16 else "*fp16"
    scalars = dict(sorted_ids_ptr="*i32", block_expert_ptr="*i32", weights_ptr=wt, y_ptr="*fp32", NB="i32", I="i32",
                   HD="i32", E="i32", PAIRS="i32")
    return compile_sm90(moe_down_ws, dict(zip(("h_desc", "w_desc"), descs)), scalars, c, num_warps=policy.num_warps)


__all__ = ["launch", "declines", "fallback", "supported", "policy_fits", "prove_rings", "compile_for_sm90",
           "moe_down_ws", "down_smem", "tail_split", "program_run", "block_of", "starts_tile", "MAX_SPLIT"]
