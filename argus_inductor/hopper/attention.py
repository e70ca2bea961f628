"""attention_fwd lowered by hand to Gluon for Hopper (sm_90): FlashAttention-3's structure.

One program takes 128 query rows of one (batch, head):
- a 1-warp loader partition copies K and V blocks (128 keys) through TMA into rings of `stages` shared-memory
  slots, each slot with a "ready" barrier (the copy landed) and an "empty" barrier (every consumer released it);
- two consumer warp groups (4 warps each) own 64 query rows apiece. Per key block j a consumer issues S_j = Q K_j^T
  and O += P_{j-1} V_{j-1} as asynchronous wgmma, waits for S_j only (releasing K_j), runs the online softmax of
  block j (exp2, scale folded into log2 e, normalisation deferred) while P V runs, then waits for it (releasing
  V_{j-1}). So a K slot is read in its own iteration and a V slot also in the next one: the ring discipline
  `warp_specialized_staging` describes and the checker proves the DSL kernel under;
- with `pingpong` the two groups take turns issuing their wgmma (a pair of turn barriers), so one group's softmax
  runs under the other's tensor-core work;
- causal programs visit key blocks up to the diagonal, mask only the diagonal block, and start heaviest first; the
  query block is the fast grid axis, so a head's programs share its K/V through L2.
O goes back through the Q tile with a TMA store.

The policy (`policy_fits`): 128x128 tiles, num_warps 8, num_stages 2 or 3 (the ring's slots; 3 adds the turns).
Preconditions (`supported`): bf16 or fp16, head dim 64 or 128, sequence lengths multiples of 128 (the 2-D
descriptors would let a ragged tile read the next head's rows), causal only with S == T, each operand contiguous or
head-transposed (contiguous (Z, L, H, D) memory, as transformers passes q, k and v: read through the (Z*L, H*D)
view, a head's tile at column h*D), no mask tensor, a compute capability 9.0 device. Anything else runs the Triton
lowering at the Triton template for its shape (`fallback`).

Measured on the H100 (benchmarks/results/ops-attention-gluon-2026-11-23.md, `python benchmarks/ops.py --ops attention`):
1.035x the faster SDPA backend over ops.py's seven attention shapes, where the Triton lowering reached 0.877x; the
ring sizes come from the probe's sweep (gluon-attention-probe-h100-2026-11-23.json).
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import torch
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
from .device import capability, compile_sm90
from .rings import Ring, RingViolation, check_kernel

BLOCK_M = 128        # query rows a program
BLOCK_N = 128        # keys a block
CONSUMERS = 2        # consumer warp groups, BLOCK_M // CONSUMERS rows each
LOADER_REGS = 24     # registers a loader thread keeps (setmaxnreg)
CONSUMER_REGS = 240  # and a consumer thread: 12 warps x 32 x 168 at launch = 4x32x24 + 8x32x240
LAUNCH_REGS = 168
LOG2E = 1.4426950408889634
GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def policy_fits(policy: Policy) -> str | None:
    """Why `policy` does not describe this lowering, or None: 128x128 tiles, 8 consumer warps (two warp groups),
    a ring of 2 or 3 slots (num_stages; 3 slots take turns issuing, "pingpong"). The checker proves the DSL kernel
    under the same tiles and ring (warp_specialized_staging)."""
    if policy.const("BM") != BLOCK_M or policy.const("BN") != BLOCK_N:
        return f"tiles BM={policy.const('BM')}, BN={policy.const('BN')} ({BLOCK_M}x{BLOCK_N})"
    if policy.num_warps != 4 * CONSUMERS:
        return f"num_warps={policy.num_warps} ({4 * CONSUMERS}: two consumer warp groups)"
    if policy.num_stages not in (2, 3):
        return f"num_stages={policy.num_stages} (a ring of 2 or 3 slots fits shared memory)"
    return None


@gluon.jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, kv_row0, kv_col, n_blocks,
            BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    for j in range(n_blocks):
        slot = j % STAGES
        ph = (j // STAGES) & 1
        row = kv_row0 + j * BLOCK_N
        # a barrier starts with phase "1 complete", so the first pass over the ring does not wait
        mbarrier.wait(k_empty.index(slot), ph ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, kv_col], k_ready.index(slot), k_bufs.index(slot))
        mbarrier.wait(v_empty.index(slot), ph ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, kv_col], v_ready.index(slot), v_bufs.index(slot))


@gluon.jit
def _softmax_block(s, m_i, l_i, rows, cols, qk_scale, MASK: gl.constexpr):
    if MASK:
        s = gl.where(gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1), s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _consumer(q_desc, o_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, turn_bars,
              q_row, q_col, o_row, o_col, q_pos0, n_blocks, qk_scale,
              WG: gl.constexpr, CW: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr,
              BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr):
    BM_C: gl.constexpr = q_smem.type.shape[0]
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[CW, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, q_col], q_bar, q_smem)
    s_zero = gl.zeros([BM_C, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([BM_C, HEAD_D], gl.float32, o_layout)
    m_i = gl.full([BM_C], -float("inf"), gl.float32, row_s)
    l_i = gl.full([BM_C], 0.0, gl.float32, row_s)
    rows = q_pos0 + gl.arange(0, BM_C, layout=row_s)
    cols0 = gl.arange(0, BLOCK_N, layout=col_s)
    last = n_blocks - 1
    mbarrier.wait(q_bar, 0)

    # block 0: S_0 and its softmax
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    if CAUSAL and last == 0:
        p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, rows, cols0, qk_scale, True)
    else:
        p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, rows, cols0, qk_scale, False)

    # steady state: S_j and P_{j-1} V_{j-1} in flight together; softmax_j runs under P V.
    # Slots and phases are computed from j, never carried in a name (Triton 3.6's frontend does not carry an alias
    # like `prev = slot` through a loop: it keeps its value from before the loop).
    for j in range(1, n_blocks):
        slot = j % STAGES
        ph = (j // STAGES) & 1
        pslot = (j - 1) % STAGES
        pph = ((j - 1) // STAGES) & 1
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        if PINGPONG:
            mbarrier.wait(turn_bars.index(WG), (j - 1) & 1)
        mbarrier.wait(k_ready.index(slot), ph)
        s = warpgroup_mma(q_smem, k_bufs.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(pslot), pph)
        acc = warpgroup_mma(p_op, v_bufs.index(pslot), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turn_bars.index(1 - WG), count=1)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        mbarrier.arrive(k_empty.index(slot), count=1)
        if CAUSAL and j == last:
            p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, rows, cols0 + j * BLOCK_N, qk_scale, True)
        else:
            p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, rows, cols0 + j * BLOCK_N, qk_scale, False)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(pslot), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)

    # the last P V, normalise, store through the Q tile
    lslot = last % STAGES
    lph = (last // STAGES) & 1
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    mbarrier.wait(v_ready.index(lslot), lph)
    acc = warpgroup_mma(p_op, v_bufs.index(lslot), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(v_empty.index(lslot), count=1)
    acc = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
    q_smem.store(acc.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [o_row, o_col], q_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def attention_fwd_ws(q_desc, k_desc, v_desc, o_desc, qk_scale, H, HK, S, T, n_m_blocks,
                     q_rz, q_rh, q_ch, kv_rz, kv_rh, kv_ch, o_rz, o_rh, o_ch,
                     HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     LOADER_REGS: gl.constexpr):
    BM_C: gl.constexpr = BLOCK_M // 2
    CW: gl.constexpr = BM_C // 16
    dtype: gl.constexpr = q_desc.dtype
    pid_m = gl.program_id(0)
    pid_zh = gl.program_id(1)
    if CAUSAL:
        m_blk = n_m_blocks - 1 - pid_m  # heaviest first
    else:
        m_blk = pid_m
    z = pid_zh // H
    h = pid_zh % H
    hk = h // (H // HK)
    q_pos0 = m_blk * BLOCK_M
    # a tensor's 2-D view: (batch, head, position) is row z*rz + h*rh + position, column h*ch (see _views)
    q_row0 = z * q_rz + h * q_rh + q_pos0
    q_col = h * q_ch
    o_row0 = z * o_rz + h * o_rh + q_pos0
    o_col = h * o_ch
    kv_row0 = z * kv_rz + hk * kv_rh
    kv_col = hk * kv_ch
    if CAUSAL:
        n_blocks = (q_pos0 + BLOCK_M + BLOCK_N - 1) // BLOCK_N
    else:
        n_blocks = T // BLOCK_N

    q_smem = gl.allocate_shared_memory(dtype, [2, BM_C, HEAD_D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # one release from each consumer
        mbarrier.init(v_empty.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(turn_bars.index(i), count=1)
    if PINGPONG:
        mbarrier.arrive(turn_bars.index(0), count=1)  # consumer 0 takes the first turn
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (q_desc, o_desc, q_smem.index(0), q_bars.index(0), k_bufs, v_bufs, k_ready, k_empty, v_ready,
                     v_empty, turn_bars, q_row0, q_col, o_row0, o_col, q_pos0, n_blocks, qk_scale, 0, CW, CAUSAL,
                     PINGPONG, BLOCK_N, HEAD_D, STAGES)),
        (_consumer, (q_desc, o_desc, q_smem.index(1), q_bars.index(1), k_bufs, v_bufs, k_ready, k_empty, v_ready,
                     v_empty, turn_bars, q_row0 + BM_C, q_col, o_row0 + BM_C, o_col, q_pos0 + BM_C, n_blocks,
                     qk_scale, 1, CW, CAUSAL, PINGPONG, BLOCK_N, HEAD_D, STAGES)),
        (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, k_empty, v_ready, v_empty, kv_row0, kv_col, n_blocks,
                   BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


RINGS = (Ring("K", "k_bufs", "k_ready", "k_empty"), Ring("V", "v_bufs", "v_ready", "v_empty"))


@functools.cache
def prove_rings(stages: int) -> tuple[RingViolation, ...]:
    """The ring discipline of this kernel (its loader and two consumer partitions, and its barrier counts), proved
    from its source at `stages` slots: every violation found, empty when proved."""
    return tuple(check_kernel(attention_fwd_ws, RINGS, (stages,)))


@functools.cache
def _smem_layouts(dtype: torch.dtype, d: int) -> tuple[Any, Any]:
    """The shared-memory layouts of a (64-row) Q/O tile and a K/V tile."""
    gdt = GL_DTYPES[dtype]
    return (gl.NVMMASharedLayout.get_default_for([BLOCK_M // CONSUMERS, d], gdt),
            gl.NVMMASharedLayout.get_default_for([BLOCK_N, d], gdt))


def _layout(x: torch.Tensor) -> str | None:
    """'heads' for a contiguous (Z, H, L, D) tensor, 'positions' for a head-transposed one (contiguous (Z, L, H, D)
    memory viewed as (Z, H, L, D), as transformers' attention passes q, k and v), None otherwise."""
    if x.is_contiguous():
        return "heads"
    if x.transpose(1, 2).is_contiguous():
        return "positions"
    return None


def _view(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """The 2-D view a descriptor reads `x` (Z, H, L, D) through, and where (batch z, head h, position l) is in it:
    row z*rz + h*rh + l, columns h*ch .. h*ch + D - 1."""
    z, h, length, d = x.shape
    if _layout(x) == "heads":
        return x.view(z * h * length, d), h * length, length, 0
    return x.transpose(1, 2).reshape(z * length, h * d), length, 0, d  # a view: that memory is contiguous


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, causal: bool,
              has_mask: bool) -> str | None:
    """Why this lowering cannot take the launch, or None when it can."""
    if has_mask:
        return "a mask tensor"
    if q.dtype not in GL_DTYPES or not (q.dtype == k.dtype == v.dtype == o.dtype):
        return f"dtype {q.dtype} (bf16 or fp16 operands and output)"
    if not q.is_cuda or capability(q.device) != (9, 0):
        return "not a compute capability 9.0 device"
    z, h, s, d = q.shape
    hk, t = k.shape[1], k.shape[2]
    if d not in (64, 128):
        return f"head dim {d} (64 or 128)"
    if s % BLOCK_M or t % BLOCK_N:
        return f"sequence lengths {s}, {t} (multiples of {BLOCK_M})"
    if causal and s != t:
        return "causal with S != T"
    if h % hk or k.shape != v.shape or k.shape[0] != z or o.shape != q.shape:
        return "shapes"
    if any(_layout(x) is None for x in (q, k, v, o)) or _layout(k) != _layout(v):
        return "operand layouts (each contiguous, or head-transposed as transformers passes them; k and v alike)"
    return None


def _descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> tuple[Any, ...]:
    """The four tensor descriptors, and the nine (rz, rh, ch) placement numbers of q, k and v, and o (see _view)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    d = q.shape[-1]
    rows_q, rows_kv = _smem_layouts(q.dtype, d)
    (q2, *qp), (k2, *kp), (v2, *_), (o2, *op) = _view(q), _view(k), _view(v), _view(o)
    descs = (TensorDescriptor.from_tensor(q2, [BLOCK_M // CONSUMERS, d], rows_q),
             TensorDescriptor.from_tensor(k2, [BLOCK_N, d], rows_kv),
             TensorDescriptor.from_tensor(v2, [BLOCK_N, d], rows_kv),
             TensorDescriptor.from_tensor(o2, [BLOCK_M // CONSUMERS, d], rows_q))
    return descs, (*qp, *kp, *op)


def declines(policy: Policy, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, O: torch.Tensor,
             scale: float) -> str | None:
    """Why this lowering does not take attention_fwd's launch under `policy`, or None when it does."""
    if scale < 0:
        return "a negative scale"
    return policy_fits(policy) or supported(Q, K, V, O, bool(policy.const("CAUSAL", 0)),
                                            bool(policy.const("HAS_MASK", 0)))


def launch(policy: Policy, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, Mask: torch.Tensor,
           O: torch.Tensor, scale: float) -> bool:
    """Run attention_fwd's arguments through the Gluon kernel unless it `declines`; False (nothing launched) if so."""
    if declines(policy, Q, K, V, O, scale) is not None:
        return False
    causal = bool(policy.const("CAUSAL", 0))
    z, h, s, d = Q.shape
    hk, t = K.shape[1], K.shape[2]
    stages, pingpong = policy.num_stages, policy.num_stages >= 3
    n_m = s // BLOCK_M
    descs, places = _descriptors(Q, K, V, O)
    attention_fwd_ws[(n_m, z * h)](*descs, scale * LOG2E, h, hk, s, t, n_m, *places,
                                   HEAD_D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGES=stages, CAUSAL=causal,
                                   PINGPONG=pingpong, CONSUMER_REGS=CONSUMER_REGS, LOADER_REGS=LOADER_REGS,
                                   num_warps=4, maxnreg=LAUNCH_REGS)
    return True


def fallback(policy: Policy, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, Mask: torch.Tensor, O: torch.Tensor,
             scale: float) -> Policy:
    """The Triton policy of a launch `launch` declined: the policy itself where its tiles are not this lowering's
    (an explicit choice, e.g. a tuning candidate's, is kept), else the Triton template for the launch's shape
    (policies.attention_fallback)."""
    if policy_fits(policy) is not None:
        return replace(policy, warp_specialize=False)
    from ..kernels.policies import attention_fallback

    return attention_fallback(policy, Q.shape[2], Q.element_size())


def compile_for_sm90(d: int, causal: bool, stages: int = 2, dtype: torch.dtype = torch.bfloat16) -> Any:
    """Compile the kernel for sm_90 without a GPU (hopper.device.compile_sm90); returns Triton's compiled kernel."""
    q = torch.empty(1, 2, 1024, d, dtype=dtype)
    descs, _ = _descriptors(q, q, q, q)
    consts = dict(HEAD_D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGES=stages, CAUSAL=causal, PINGPONG=stages >= 3,
                  CONSUMER_REGS=CONSUMER_REGS, LOADER_REGS=LOADER_REGS)
    scalars = dict(qk_scale="fp32", H="i32", HK="i32", S="i32", T="i32", n_m_blocks="i32")
    scalars.update({n: "i32" for n in ("q_rz", "q_rh", "q_ch", "kv_rz", "kv_rh", "kv_ch", "o_rz", "o_rh", "o_ch")})
    return compile_sm90(attention_fwd_ws, dict(zip(("q_desc", "k_desc", "v_desc", "o_desc"), descs)), scalars,
                        consts, num_warps=4, maxnreg=LAUNCH_REGS)


__all__ = ["launch", "declines", "fallback", "supported", "policy_fits", "prove_rings", "compile_for_sm90",
           "attention_fwd_ws"]
