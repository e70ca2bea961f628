"""moe_gate_up lowered by hand to Gluon for Hopper (sm_90): the grouped gate-up GEMM of a prefill MoE step,
Hout[p] = silu(x_p W_gate[e]^T) * (x_p W_up[e]^T), for routed rows already gathered into expert order
(GATHERED=1: row p of X is sorted pair p's token row).

One program runs on each SM and walks the BM x BN tiles of Hout (BM sorted rows of one expert block, BN of its I
columns) pid, pid + nprog, ...; the tiles are those of the real row blocks, which it counts from block_expert
(moe_align puts the padding blocks, block_expert = E, last), so padding blocks cost nothing.
- Tiles go in groups of `group_m` row blocks (grid_order="grouped"): a group's row blocks read each expert column
  block together, so a weight tile comes from memory about once a group, and a group's X rows stay in L2 while its
  column blocks go by.
- A 1-warp loader partition runs one loop over every K block of the program's tiles, copying three tiles a block
  through TMA into one ring slot: X [BM, BK], the gate rows W1[e, off_n:off_n+BN] and the up rows
  W1[e, I+off_n:I+off_n+BN] as [BN, BK] tiles of W1 viewed (E*2I, HD). One ready and one empty barrier guard the
  slot's three tiles. It fills the next tile's slots while the consumers finish the tile before.
- The consumer warp groups issue block j's two wgmma (gate, up) while block j - 1's are still running, then retire
  those (warpgroup_mma_wait(2)) and release block j - 1's slot: the ring discipline `warp_specialized_staging`
  describes (the tiles of the loop's last mma released one iteration late). At a tile boundary they retire
  everything (a `warpgroup_mma_wait(0)` under that condition, which the ring proof reads as absent: it only retires
  more), compute silu(gate) * up in float32 and store the tile through TMA, leaving the store in flight until the
  next tile's epilogue needs the C tile again.
Ragged edges are TMA's: K past HD reads zeros; a column block past I reads the next rows of W1 (the up rows, the
next expert's) into output columns >= I, which the store to Hout (P, I) drops.

Preconditions (`declines`): GATHERED=1, bf16 or fp16 operands and output alike, X, W1 (as (E*2I, HD)) and Hout
row-major with 16-byte row pitches, the block layout of moe_align (P = NB * BM), a compute capability 9.0 device.
Anything else runs the Triton lowering at the policy's tiles (`fallback`).
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
from ..kernels.policies import moe_gate_up_fallback
from .device import capability, compile_sm90, sm_count
from .gemm import GL_DTYPES, LOADER_REGS, ring_tiles_fit, rows_ok, smem_layout
from .rings import Ring, RingViolation, check_kernel


def gate_up_smem(bm: int, bn: int, bk: int, stages: int, elem: int = 2) -> int:
    """Shared memory the kernel allocates: each slot's X tile and two weight tiles, the Hout tile, the barriers."""
    return stages * (bm + 2 * bn) * bk * elem + bm * bn * elem + 2 * stages * 8


def policy_fits(policy: Policy) -> str | None:
    """Why `policy` does not describe this lowering, or None."""
    if policy.const("GATHERED", 0) != 1:
        return "GATHERED=0 (the lowering reads routed rows gathered into expert order)"
    return ring_tiles_fit(policy, (32, 64, 128), "32, 64 or 128: two accumulators of BN columns", gate_up_smem,
                          "{bm}x{bk} + 2 x {bn}x{bk} tiles and the Hout tile")


@gluon.jit
def grouped_tile(pid, n_rows, n_cols, GROUP: gl.constexpr):
    """(row block, column block) of program `pid` when row blocks go in groups of GROUP, each group's column
    blocks in turn and its row blocks fastest."""
    per_group = GROUP * n_cols
    first = (pid // per_group) * GROUP
    size = gl.minimum(n_rows - first, GROUP)
    return first + (pid % per_group) % size, (pid % per_group) // size


@gluon.jit
def real_blocks(block_expert_ptr, NB, E, NUM_WARPS: gl.constexpr):
    """How many row blocks carry a real expert (block_expert < E): moe_align puts the padding blocks last."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    count = 0
    for c in range(0, NB, 32 * NUM_WARPS):
        offs = c + gl.arange(0, 32 * NUM_WARPS, layout=layout)
        be = gl.load(block_expert_ptr + offs, mask=offs < NB, other=E)
        count += gl.sum((be < E).to(gl.int32), 0)
    return count


@gluon.jit
def _loader(x_desc, w_desc, x_bufs, g_bufs, u_bufs, ready, empty, block_expert_ptr, pid, nprog, nreal, n_n, kb,
            up_offset, n_blocks, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP: gl.constexpr,
            STAGES: gl.constexpr):
    nbytes: gl.constexpr = x_desc.block_type.nbytes + 2 * w_desc.block_type.nbytes
    off_m = 0
    w_row = 0
    # block g of this program's run: K block g % kb of its tile g // kb (tiles pid, pid + nprog, ...)
    for g in range(n_blocks):
        if g % kb == 0:  # a new tile: its rows and its expert's weight rows
            pb, pn = grouped_tile(pid + (g // kb) * nprog, nreal, n_n, GROUP)
            off_m = pb * BM
            w_row = gl.load(block_expert_ptr + pb) * 2 * up_offset + pn * BN
        slot = g % STAGES
        ph = (g // STAGES) & 1
        mbarrier.wait(empty.index(slot), ph ^ 1)  # the first pass over the ring does not wait
        mbarrier.expect(ready.index(slot), nbytes)
        k = (g % kb) * BK
        tma.async_copy_global_to_shared(x_desc, [off_m, k], ready.index(slot), x_bufs.index(slot))
        tma.async_copy_global_to_shared(w_desc, [w_row, k], ready.index(slot), g_bufs.index(slot))
        tma.async_copy_global_to_shared(w_desc, [w_row + up_offset, k], ready.index(slot), u_bufs.index(slot))


@gluon.jit
def _store_tile(h_desc, c_smem, gate, up, t, nreal, n_n, GROUP: gl.constexpr):
    """silu(gate) * up of tile t into Hout through c_smem, once the previous tile's store has left it."""
    BM: gl.constexpr = c_smem.type.shape[0]
    BN: gl.constexpr = c_smem.type.shape[1]
    pb, pn = grouped_tile(t, nreal, n_n, GROUP)
    h = gate / (1.0 + gl.exp(-gate)) * up
    tma.store_wait(pendings=0)
    c_smem.store(h.to(h_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(h_desc, [pb * BM, pn * BN], c_smem)


@gluon.jit
def _consumer(h_desc, x_bufs, g_bufs, u_bufs, ready, empty, c_smem, pid, nprog, nreal, n_n, kb, n_blocks,
              BN: gl.constexpr, CW: gl.constexpr, GROUP: gl.constexpr, STAGES: gl.constexpr):
    BM: gl.constexpr = c_smem.type.shape[0]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                         instr_shape=[16, BN, 16])
    gate = gl.zeros([BM, BN], gl.float32, acc_layout)
    up = gl.zeros([BM, BN], gl.float32, acc_layout)
    mbarrier.wait(ready.index(0), 0)
    gate = warpgroup_mma(x_bufs.index(0), g_bufs.index(0).permute((1, 0)), gate, is_async=True)
    up = warpgroup_mma(x_bufs.index(0), u_bufs.index(0).permute((1, 0)), up, is_async=True)
    gate, up = warpgroup_mma_wait(num_outstanding=2, deps=(gate, up))
    for g in range(1, n_blocks):
        slot = g % STAGES
        ph = (g // STAGES) & 1
        if g % kb == 0:  # the tile before is complete: its epilogue runs while the loader fills this one's slots
            gate, up = warpgroup_mma_wait(num_outstanding=0, deps=(gate, up))
            _store_tile(h_desc, c_smem, gate, up, pid + (g // kb - 1) * nprog, nreal, n_n, GROUP)
            gate = gl.zeros([BM, BN], gl.float32, acc_layout)
            up = gl.zeros([BM, BN], gl.float32, acc_layout)
        mbarrier.wait(ready.index(slot), ph)
        gate = warpgroup_mma(x_bufs.index(slot), g_bufs.index(slot).permute((1, 0)), gate, is_async=True)
        up = warpgroup_mma(x_bufs.index(slot), u_bufs.index(slot).permute((1, 0)), up, is_async=True)
        gate, up = warpgroup_mma_wait(num_outstanding=2, deps=(gate, up))
        mbarrier.arrive(empty.index((g - 1) % STAGES), count=1)
    gate, up = warpgroup_mma_wait(num_outstanding=0, deps=(gate, up))
    mbarrier.arrive(empty.index((n_blocks - 1) % STAGES), count=1)
    _store_tile(h_desc, c_smem, gate, up, pid + (n_blocks // kb - 1) * nprog, nreal, n_n, GROUP)
    tma.store_wait(pendings=0)


@gluon.jit
def moe_gate_up_ws(x_desc, w_desc, h_desc, block_expert_ptr, NB, I, HD, E,
                   BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                   GROUP: gl.constexpr, LOADER_REGS: gl.constexpr, NUM_WARPS: gl.constexpr):
    """One program an SM: each walks the tiles pid, pid + nprog, ... of the real row blocks (padding blocks are no
    tiles), its loader filling the ring across tile boundaries while the consumers store the tile before."""
    nreal = real_blocks(block_expert_ptr, NB, E, NUM_WARPS)
    n_n = gl.cdiv(I, BN)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    my_tiles = gl.cdiv(nreal * n_n - pid, nprog)
    if my_tiles <= 0:
        return
    kb = gl.cdiv(HD, BK)
    n_blocks = my_tiles * kb
    dtype: gl.constexpr = x_desc.dtype
    x_bufs = gl.allocate_shared_memory(dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    g_bufs = gl.allocate_shared_memory(dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    u_bufs = gl.allocate_shared_memory(dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, h_desc.block_type.shape, h_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)  # one consumer partition releases each slot
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (h_desc, x_bufs, g_bufs, u_bufs, ready, empty, c_smem, pid, nprog, nreal, n_n, kb, n_blocks,
                     BN, BM // 16, GROUP, STAGES)),
        (_loader, (x_desc, w_desc, x_bufs, g_bufs, u_bufs, ready, empty, block_expert_ptr, pid, nprog, nreal, n_n,
                   kb, I, n_blocks, BM, BN, BK, GROUP, STAGES)),
    ], [1], [LOADER_REGS])


# X, the gate rows and the up rows share one ready and one empty barrier a slot
RINGS = (Ring("X", "x_bufs", "ready", "empty"), Ring("gate", "g_bufs", "ready", "empty"),
         Ring("up", "u_bufs", "ready", "empty"))


@functools.cache
def prove_rings(stages: int) -> tuple[RingViolation, ...]:
    """The ring discipline of this kernel proved from its source at `stages` slots: the violations, empty when
    proved."""
    return tuple(check_kernel(moe_gate_up_ws, RINGS, (stages,)))


def supported(x: torch.Tensor, w1: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
              h: torch.Tensor, bm: int) -> str | None:
    """Why this lowering cannot take the launch, or None when it can."""
    if x.dtype not in GL_DTYPES or not (x.dtype == w1.dtype == h.dtype):
        return f"dtypes {x.dtype}, {w1.dtype} -> {h.dtype} (bf16 or fp16 operands and output alike)"
    if x.dim() != 2 or w1.dim() != 3 or h.dim() != 2 or w1.shape[1] % 2 or w1.shape[2] != x.shape[1] or \
            h.shape[1] != w1.shape[1] // 2 or h.shape[0] != x.shape[0] or x.shape[0] != sorted_ids.numel() or \
            sorted_ids.numel() != block_expert.numel() * bm:
        return "shapes (X must hold the gathered rows, P = NB * BM)"
    if not w1.is_contiguous() or not rows_ok(w1.view(-1, w1.shape[2])):
        return "W1 is not contiguous with 16-byte aligned rows"
    if not rows_ok(x) or not rows_ok(h):
        return "X or Hout is not row-major with 16-byte aligned rows"
    if block_expert.dtype != torch.int32 or not block_expert.is_contiguous():
        return "block_expert is not a contiguous int32 vector"
    if not x.is_cuda or capability(x.device) != (9, 0):
        return "not a compute capability 9.0 device"
    return None


def declines(policy: Policy, x: torch.Tensor, w1: torch.Tensor, sorted_ids: torch.Tensor,
             block_expert: torch.Tensor, h: torch.Tensor) -> str | None:
    """Why this lowering does not take moe_gate_up's launch under `policy`, or None when it does."""
    return policy_fits(policy) or supported(x, w1, sorted_ids, block_expert, h, policy.const("BM"))


def _descriptors(x: torch.Tensor, w1: torch.Tensor, h: torch.Tensor, bm: int, bn: int, bk: int) -> tuple[Any, ...]:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    w = w1.view(-1, w1.shape[2])
    return (TensorDescriptor.from_tensor(x, [bm, bk], smem_layout((bm, bk), x.dtype)),
            TensorDescriptor.from_tensor(w, [bn, bk], smem_layout((bn, bk), w.dtype)),
            TensorDescriptor.from_tensor(h, [bm, bn], smem_layout((bm, bn), h.dtype)))


def _consts(policy: Policy) -> dict[str, int]:
    return dict(BM=policy.const("BM"), BN=policy.const("BN"), BK=policy.const("BK"), STAGES=policy.num_stages,
                GROUP=policy.group_m if policy.grid_order == "grouped" else 1, LOADER_REGS=LOADER_REGS,
                NUM_WARPS=policy.num_warps)


def launch(policy: Policy, x: torch.Tensor, w1: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
           h: torch.Tensor) -> bool:
    """Run moe_gate_up's arguments through the Gluon kernel unless it `declines`; False (nothing launched) if so.
    One program an SM (times programs_per_sm), at most one a tile."""
    if declines(policy, x, w1, sorted_ids, block_expert, h) is not None:
        return False
    c = _consts(policy)
    e, i2, hd = w1.shape
    nb = block_expert.numel()
    grid = (min(nb * triton.cdiv(i2 // 2, c["BN"]), sm_count(x.device) * policy.programs_per_sm), )
    moe_gate_up_ws[grid](*_descriptors(x, w1, h, c["BM"], c["BN"], c["BK"]), block_expert, nb, i2 // 2, hd, e, **c,
                         num_warps=policy.num_warps)
    return True


def fallback(policy: Policy, *args: Any) -> Policy:
    """The Triton policy of a launch `launch` declined (policies.moe_gate_up_fallback): the policy's tiles and
    launch, at the Triton template's depth where it asked for the Gluon ring's."""
    return moe_gate_up_fallback(policy)


def compile_for_sm90(policy: Policy, dtype: torch.dtype = torch.bfloat16) -> Any:
    """Compile the kernel for sm_90 without a GPU (hopper.device.compile_sm90); returns Triton's compiled kernel."""
    c = _consts(policy)
    x = torch.empty(512, 1024, dtype=dtype)
    w1 = torch.empty(4, 2 * 768, 1024, dtype=dtype)
    h = torch.empty(512, 768, dtype=dtype)
    descs = _descriptors(x, w1, h, c["BM"], c["BN"], c["BK"])
    scalars = dict(block_expert_ptr="*i32", NB="i32", I="i32", HD="i32", E="i32")
    return compile_sm90(moe_gate_up_ws, dict(zip(("x_desc", "w_desc", "h_desc"), descs)), scalars, c,
                        num_warps=policy.num_warps)


__all__ = ["launch", "declines", "fallback", "supported", "policy_fits", "prove_rings", "compile_for_sm90",
           "moe_gate_up_ws", "grouped_tile", "real_blocks", "gate_up_smem"]
