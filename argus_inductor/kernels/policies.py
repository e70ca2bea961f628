"""The template-default policy of each library kernel for a shape: what runs before any search."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..dsl import Policy


def gemm_policy(m: int, n: int, k: int, target: str, gluon: bool = False, split: bool = True) -> Policy:
    """Regimes from benchmarks/results/sweep-gemm-2026-11-22.json (H100, bf16, CUDA-graph timing). `gluon`: the
    caller runs gemm_epilogue on 2-byte operands, so few-wave shapes may take its Gluon lowering (gemm_ws_policy).
    `split`: the kernel can split K (gemm_epilogue's split-K path); the fused kernels (residual, gate*up) keep the
    whole K loop, and take the tiles of the unsplit regime instead, where the split tile would leave SMs idle."""
    if target == "interpret":
        return Policy.make(BM=16, BN=32, BK=32)
    if gluon and target == "cuda":
        ws = gemm_ws_policy(m, n, k)
        if ws is not None:
            return ws
    if n <= 16 and m > 16:  # matrix-vector shapes (x @ a vector): narrow N tiles and enough programs to stream A
        # (a MoE router's x @ W^T, N = 8: 9.9 us at 2048 rows and 14.3 at 4096 with K steps of 256, against 12.3 and
        # 15.6 with 128 and cuBLAS's 11.0 and 17.0; the removed gemm_fewtiles probe (a64f9be),
        # gemm-fewtiles-h100-2026-11-24.json)
        return Policy.make(BM=32, BN=16, BK=256, num_warps=4, num_stages=4)
    if m <= 16:  # decode: skinny tiles, many programs, deep K pipeline (memory-bound)
        # wide N (>= 8192 columns: 14336 measured) runs 3.5-4% faster with 3 stages than 5, in both H100 sweeps of
        # 2026-11-22 at M = 1 and 16 (sweep-gemm-2026-11-22.json, sweep-gemm-splitk-2026-11-22.json); at N = 6144
        # 5 stages win by 10%
        return Policy.make(BM=16, BN=32, BK=256 if n <= 4096 else 128, num_warps=4, num_stages=3 if n >= 8192 else 5)
    if m <= 128:
        if k >= 3 * n and split:  # long K, few output tiles: split K in two (sweep-gemm-splitk-2026-11-22.json)
            return Policy.make(BM=128, BN=64, BK=128, num_warps=8, num_stages=4, SPLIT_K=2)
        if n <= 4096:  # sweep-gemm-splitk-2026-11-22.json: M=128, N=K=4096
            # a long K unsplit (a residual GEMM: Llama's down projection at 17-64 rows): 32 columns a tile where 64
            # would leave half the SMs without a program, five slots deep (`argus warmup`'s search, H100: 0.0457 and
            # 0.0465 ms at 32 and 64 rows of 4096 x 14336, against 0.0479 and 0.0493 for cuBLAS + the add; NOTES.md,
            # session 25)
            if k >= 3 * n and -(-m // 64) * -(-n // 64) < 128:
                return Policy.make(BM=64, BN=32, BK=128, num_warps=4, num_stages=5)
            return Policy.make(BM=64, BN=64, BK=128, num_warps=4, num_stages=4)
        return Policy.make(BM=128, BN=128 if n >= 8192 else 64, BK=128 if n < 8192 else 64, num_warps=8,
                           num_stages=4)
    tiles = -(-m // 128) * -(-n // 128)
    if tiles < 32 and k >= 8 * max(m, n) and split:  # a long K over a few output tiles: split K so every SM streams
        # (KernelBench 15, 256x256x131072: 4 tiles of 128x128; unsplit, 2-4 programs walk all of K)
        return Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=3,
                           SPLIT_K=max(2, min(64, 128 // tiles)))
    # operand tiles through tensor descriptors: 0.96-1.00x cuBLAS against 0.89-0.94x with pointer loads
    # (sweep-gemm-kmajor-tma-2026-11-23.json, nn.Linear weights: K-contiguous B)
    wide = Policy.make(BM=128, BN=256, BK=64, num_warps=8, num_stages=3, grid_order="grouped", group_m=8,
                       persistent=True, tma=target == "cuda")
    if -(-m // 128) * -(-n // 256) <= GLUON_GEMM_SMS // 2:
        # 128x256 tiles would leave half the SMs idle (the k and v projections of Llama-3-8B and Mixtral at 2048
        # rows: 64 tiles): 128x128 tiles, four slots deep, 29.1 us there against 42.3 (cuBLAS 26.2); at 4096 rows
        # (128 wide tiles, one wave) the wide tile stays faster, 54.0 against 55.6 (gemm-fewtiles-h100-2026-11-24)
        return replace(wide.with_consts(BN=128), num_stages=4)
    return wide


def gemv_policy(m: int, n: int, target: str, k: int | None = None, k_major: bool = True) -> Policy | None:
    """The CUDA-core path (GEMV=1) of gemm_epilogue, gemm_residual and gemm_gate_up for one row of A, else None.
    - A weight read along K (an nn.Linear weight, `k_major`): one column a program, K in steps of 2048 (one 4 KB
      run of the weight row a step), 8 warps. From the H100 probe of M = 1 at Llama-3-8B's and Mixtral's
      linears (benchmarks/results/gemv-probe-h100-2026-11-24.log: products kept per K lane and summed once after
      the loop): 3.02 TB/s at N = 14336, K = 4096 against 2.80 for the tensor-core template (BM = 16) and 2.82 for
      cuBLAS; 2.98 against 2.81 at N = 4096, K = 14336; 2.65 against 2.37 at N = K = 4096; 3.19 against 3.06 (the
      earlier 32-column GEMV tile) at an LM head's N = 128256, where max-autotune's Inductor kernel also reaches
      3.19. Wider tiles (2-16 columns, steps of 512-4096) were within 1-4% of it, the sum inside the K loop
      slower at every shape.
    - Narrow (a MoE router: 8-256 experts), any layout: a few programs walk K, so the time is their serial K
      steps; long steps (BK = 2048) and 8-column blocks. H100 (`sweep.py --ops router`,
      sweep-cat-router-h100-2026-11-24.log): N=8, K=4096 2.85 us against 7.97 for the template and 5.66 for
      cuBLAS; N=60, K=2048 2.31 against 4.96 and 4.36; N=256, K=7168 3.72 against 13.31 and 6.09 (8.14 with the
      sum inside the K loop, sweep-router-h100-2026-11-24.json).
    A weight read along N takes the tensor-core template (a column a program would read it with N's stride). Where K
    is static, ops widens a long one-weight loop to two columns (gemv_columns) and a short one to static steps
    (gemv_static_steps)."""
    if m != 1 or target != "cuda":
        return None
    if n <= GEMV_NARROW_N:
        return Policy.make(BM=1, BN=8, BK=2048, num_warps=8, num_stages=3, GEMV=1)
    if not k_major:
        return None
    return Policy.make(BM=1, BN=1, BK=gemv_k_step(k), num_warps=8, num_stages=1, GEMV=1)


def weight_k_major(layouts: tuple[str, ...]) -> bool:
    """Whether a linear's (N, K) weight, the second operand of its signature's layouts, is read along K (laid out
    'row', as an nn.Linear weight is; no layouts given reads as that too): what gemv_policy's `k_major` asks."""
    return layouts[1:2] in ((), ("row",))


def gemv_k_step(k: int | None) -> int:
    """The K step of a one-column GEMV program: 2048, or the power of two that covers a shorter K (at least 256)."""
    if k is None or k >= 2048:
        return 2048
    return max(256, 1 << (k - 1).bit_length())


GEMV_NARROW_N = 256  # the widest weight gemv_policy gives the narrow GEMV tiles (a router's experts)

GEMV_MAX_STATIC_STEPS = 4  # the longest K loop gemv_static_steps unrolls


def gemv_static_steps(k: int, bk: int, bn: int, weights: int = 1) -> int:
    """KSTEPS for a GEMV program's K loop of ceil(k / bk) steps (its loads all issued before the first product), or
    0 for the range loop. H100, CUDA-graph medians with the weights cold (`benchmarks/probes/gemv_stages.py`,
    gemv-stages-probe-h100-2026-11-25.log; one column a program, steps of 2048): static steps pay where the loop is
    short and the program streams one weight: o + residual 4096 x 4096 (2 steps) 14.32 -> 13.05 us, q|k|v as one
    6144 x 4096 18.79 -> 17.92, an LM head 32000 x 4096 85.22 -> 83.97, gemv_cat's q|k|v (4 steps of 1024) 18.91 ->
    18.52. They lose with a longer loop (down + residual 4096 x 14336, 7 steps: 41.06 -> 43.10) and with two
    weights a step (gate*up 14336 x 4096: 75.95 -> 77.38); the narrow router tiles (8 columns) were not timed."""
    steps = -(-k // bk)
    return steps if weights == 1 and bn == 1 and steps <= GEMV_MAX_STATIC_STEPS else 0


def gemv_columns(k: int, bk: int, weights: int = 1) -> int:
    """Columns a GEMV program computes (BN) for a K loop of ceil(k / bk) steps: 2 where the program streams one weight
    over a loop longer than static steps take (GEMV_MAX_STATIC_STEPS), else 1. H100, CUDA-graph medians with the
    weights cold (`benchmarks/probes/gemv_stages.py`): down + residual 4096 x 14336 (7 steps of 2048) 41.23 -> 40.74
    us (gemv-stages-probe-h100-2026-11-25b.log), 41.06 -> 40.62 (gemv-stages-probe-h100-2026-11-25.log), 41.3 ->
    40.8 (sweep-gemv-h100-2026-11-24.log). Two columns lose where the loop is short (o + residual 4096 x 4096 with
    static steps 13.06 against 13.67) and with two weights a step (gate*up 14336 x 4096: 75.94 against 86.03)."""
    return 2 if weights == 1 and -(-k // bk) > GEMV_MAX_STATIC_STEPS else 1


def rescaled_steps(consts: dict[str, Any], bk: int) -> dict[str, Any]:
    """A kernel's constexprs with its K step moved to `bk`: static steps (KSTEPS, nonzero) rescaled so they still
    cover the K the old ones covered (KSTEPS * BK), for a search that moves BK alone."""
    out = {**consts, "BK": bk}
    if consts.get("KSTEPS") and consts.get("BK"):
        out["KSTEPS"] = -(-consts["KSTEPS"] * consts["BK"] // bk)
    return out


# Decode's few rows: the projections of one input fuse into one gemv_cat launch up to this many rows of A (each row
# a program streaming its segment's weight columns; more rows take the tensor-core GEMMs one projection each).
GEMV_CAT_MAX_M = 4


def gemv_cat_policy(target: str, k: int | None = None) -> Policy:
    """gemv_cat's tiles: BN columns of one segment a program, K in BK steps, the products kept per K lane and summed
    after the loop. H100, one row against Llama-3-8B's and Mixtral's q, k and v (4096 / 1024 / 1024 of K = 4096)
    with the weights cold in L2 (`sweep.py --ops cat`, sweep-cat-branches-h100-2026-11-24.json, each segment's loop
    under a branch of its own): one column a program and K steps of 1024 on 4 warps 18.8 us, against 23.3 for the
    three GEMV launches and 33.5 for three cuBLAS calls; 4 columns with steps of 2048 18.5, the other tiles of 1-4
    columns within 2 us, wider ones slower. A single 6144-column GEMV streams the same bytes in 17.9 us
    (gemv-probe-h100-2026-11-24.log). With the three segments' loads masked in one loop the same tile took 20.6."""
    if target == "interpret":
        return Policy.make(BN=16, BK=16)
    return Policy.make(BN=1, BK=min(1024, gemv_k_step(k)), num_warps=4, num_stages=1)


def gluon_reads(dtype: str) -> bool:
    """Whether the Hopper Gluon lowerings read operands of `dtype` (a dtype name, as signatures and problems carry
    it): bf16 and fp16 only; other dtypes take the Triton templates."""
    return dtype in ("bfloat16", "float16")


GLUON_GEMM_SMS = 132  # the H100 SXM's SMs: the Gluon GEMM's tiles are sized to fill one wave of them
GLUON_SMEM_BYTES = 227 * 1024  # an sm_90 program's shared memory


def gluon_gemm_smem(bm: int, bn: int, bk: int, stages: int, elem: int = 2) -> int:
    """Shared memory the Gluon GEMM allocates: the ring's A and B slots, the C tile, the barriers."""
    return stages * (bm + bn) * bk * elem + bm * bn * elem + 2 * stages * 8


def gemm_ws_policy(m: int, n: int, k: int, sms: int = GLUON_GEMM_SMS) -> Policy | None:
    """The Gluon lowering of gemm_epilogue (argus_inductor.hopper.gemm) for 64 <= M <= 128, else None. The tile is
    the smallest of 64x64, 64x128, 128x128 (M > 64 only), 64x256 and 128x256 whose output tiles fit one wave of
    `sms` programs, so each SM streams one tile's K loop with the loader running ahead; the K step is 128 where
    three ring slots of it fit shared memory beside the C tile, else 64, with as many slots as fit (at most 8).
    Row pitches must be whole 16 bytes (TMA): K and N multiples of 8. From the H100 sweep of the lowering
    (benchmarks/results/sweep-gemm-gluon-2026-11-23.json): the rule picks the fastest tile at all eight M = 64 and
    128 shapes of ops.py (0.96-1.19x cuBLAS; Triton's tile-level lowering 0.86-1.05x)."""
    if not 64 <= m <= 128 or n % 8 or k % 8:
        return None
    tiles = [(64, 64), (64, 128), (128, 128), (64, 256), (128, 256)]
    tiles = [(bm, bn) for bm, bn in tiles if bm == 64 or m > 64]
    bm, bn = next(((bm, bn) for bm, bn in tiles if -(-m // bm) * -(-n // bn) <= sms), tiles[-1])
    for bk in (128, 64):
        stages = 8
        while stages > 2 and gluon_gemm_smem(bm, bn, bk, stages) > GLUON_SMEM_BYTES:
            stages -= 1
        if stages >= 3 or bk == 64:
            return Policy.make(BM=bm, BN=bn, BK=bk, num_warps=bm // 16, num_stages=stages, warp_specialize=True)
    return None


def gemm_fallback(policy: Policy, m: int, n: int, k: int, elem_bytes: int) -> Policy:
    """The Triton policy of a gemm_epilogue launch whose policy asks for the Gluon lowering but which that lowering
    cannot take: the Triton template for its shape (gemm_policy without the Gluon lowering, the whole K loop),
    fitted to shared memory for its element size, with the policy's epilogue constexprs."""
    p = fit_shared_memory(gemm_policy(m, n, k, "cuda").without_consts("SPLIT_K"), elem_bytes)
    return p.with_consts(**{c: v for c, v in policy.consts if c not in ("BM", "BN", "BK")})


def gemm_fallbacks(policy: Policy, n: int, k: int, elem_bytes: int) -> list[Policy]:
    """Every policy gemm_fallback can give for `policy` at N and K, whatever M (what the checker proves beside
    the Gluon plan)."""
    return list(dict.fromkeys(gemm_fallback(policy, m, n, k, elem_bytes) for m in (1, 16, 128, 4096)))


def presplit_gemm_policy(m: int, n: int, k: int) -> Policy:
    """A tf32 GEMM over the 3K of pre-split float32 operands (three-pass tf32, kernels.gemm.tf32_split). From
    benchmarks/results/fp32-gemm-2026-11-23.json (H100): 128x256 tiles with a 32-wide K step and 3 stages, in row
    order and not persistent (the persistent grouped prefill template ran 4096^3 at 4.9-5.5 ms, this at 1.3)."""
    return Policy.make(BM=128, BN=256, BK=32, num_warps=8, num_stages=3)


def attention_policy(s: int, d: int, target: str, has_mask: bool = False, gluon: bool = True) -> Policy:
    """From benchmarks/results/sweep-attention-2026-11-23.json (H100, bf16). Long sequences at head dim 128 take
    128x128 tiles whose K/V blocks stream through tensor descriptors (0.83-0.95x cuDNN there; pointer loads of
    the same tiles 0.76-0.81x); sequences of 1024 and head dim 64 are fastest with pointer loads. A mask tensor
    adds a BM x BN tile to every stage (and is broadcast, so no descriptor reads it): 64x64 tiles."""
    if target == "interpret":
        return Policy.make(BM=16, BN=16)
    if gluon and target == "cuda" and not has_mask and d in (64, 128) and (s >= 1024 or (d == 128 and s >= 512)):
        # the Gluon lowering (argus_inductor.hopper.attention): 1.035x the faster SDPA backend over ops.py's seven
        # attention shapes on the H100 (Triton lowering: 0.877x); a ring of two slots up to 4096 queries, three
        # taking turns beyond (gluon-attention-probe-h100-2026-11-23.json). Launches it cannot take (ragged lengths,
        # head-transposed or other non-contiguous operands, float32) run attention_fallback's Triton policy. At 512
        # queries of head dim 128 (Llama's 8x512 prefill, causal, GQA 4) 0.0675 ms against the Triton template's
        # 0.0743 and cuDNN's 0.0555 (CUDA-graph replay, sweep-attention-8x512-h100-2026-11-24.json).
        return Policy.make(BM=128, BN=128, num_warps=8, num_stages=3 if s >= 8192 else 2, tma=True,
                           warp_specialize=True)
    if s <= 16:
        return Policy.make(BM=16, BN=128, num_warps=8, num_stages=3)
    if d > 128:
        return Policy.make(BM=64, BN=64, num_warps=4, num_stages=2)
    if has_mask:
        return Policy.make(BM=64, BN=64, num_warps=4, num_stages=3)
    if d <= 64:
        return Policy.make(BM=128, BN=64, num_warps=8, num_stages=3)
    if s >= 2048:
        return Policy.make(BM=128, BN=128, num_warps=8, num_stages=3, tma=target == "cuda")
    return Policy.make(BM=64, BN=64, num_warps=4, num_stages=3)


def attention_fallback(policy: Policy, s: int, elem_bytes: int) -> Policy:
    """The Triton policy of an attention_fwd launch whose policy asks for the Gluon lowering but which that
    lowering cannot take: the Triton template for its query length (attention_policy without the Gluon lowering),
    fitted to shared memory for its element size, with the policy's constexprs (BD, CAUSAL, HAS_MASK)."""
    d = policy.const("BD", 128)
    has_mask = bool(policy.const("HAS_MASK", 0))
    p = fit_attention(attention_policy(s, d, "cuda", has_mask, gluon=False), d, elem_bytes, has_mask=has_mask)
    return p.with_consts(**{k: v for k, v in policy.consts if k not in ("BM", "BN")})


def attention_fallbacks(policy: Policy, elem_bytes: int) -> list[Policy]:
    """Every policy attention_fallback can give for `policy`, whatever the query length (what the checker proves
    beside the Gluon plan)."""
    return list(dict.fromkeys(attention_fallback(policy, s, elem_bytes) for s in (1024, 2048, 8192)))


def moe_policies(tokens: int, topk: int, experts: int, target: str, gluon: bool = False) -> tuple[Policy, Policy]:
    """(gate-up, down) policies by rows per expert; from benchmarks/results/sweep-moe-2026-11-22.json. `gluon`: the
    operands are 2-byte, so a prefill gate-up of gathered rows may take its Gluon lowering on NVIDIA
    (argus_inductor.hopper.moe_gate_up; moe_gate_up_fallback gives the Triton policy of a launch it declines)."""
    if target == "interpret":
        return Policy.make(BM=16, BN=16, BK=16), Policy.make(BN=16, BK=16)
    rows_per_expert = tokens * topk / experts
    if rows_per_expert <= 4:  # decode: a few rows per expert, weight streaming dominates
        return (Policy.make(BM=16, BN=32, BK=128, num_warps=4, num_stages=5),
                Policy.make(BN=64, BK=128, num_warps=4, num_stages=5))
    if rows_per_expert <= 64:
        return (Policy.make(BM=16, BN=128, BK=64, num_warps=4, num_stages=3),
                Policy.make(BN=128, BK=64, num_warps=4, num_stages=3))
    # Prefill: row blocks walk in bands of 8, so the programs that read one expert weight column block run
    # together and read it from memory once per band instead of once per row block. In row order the H100 read
    # each weight about 8 times at Mixtral dims, 4096 tokens (1024 rows an expert): 15 GB gate-up + 7.5 GB down is
    # 7.5 ms at 3 TB/s, against 7.78 ms measured (sweep-moe-2026-11-22.json); banded, the weights are 2.8 GB.
    # Bands of 8 measured 5.90 ms there (sweep-moe-prefill-2026-11-23.json). Persistent programs with the weights
    # through tensor descriptors took 3-4.5% off that at 2048 and 4096 tokens, with bands of 8 or 16 within 1.5%
    # of each other (sweep-moe-launch-2026-11-23.json: 5.57 ms at 4096 tokens, grouped_mm 5.72).
    # With 512 or more rows an expert, gathering the routed rows into expert order first (moe_gather, GATHERED=1)
    # lets the gate-up GEMM read dense descriptor tiles: 2.97 -> 2.81 ms at 2048 tokens and 5.65 -> 5.14 ms at
    # 4096 (Mixtral dims, sweep-moe-gather-2026-11-23.json; grouped_mm 3.08 and 5.50). Measured on the H100 only.
    tma = target == "cuda"
    gathered = {"GATHERED": 1} if tma and rows_per_expert >= 512 else {}
    up = Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=MOE_GATE_UP_TRITON_STAGES, grid_order="grouped",
                     group_m=8, persistent=True, tma=tma, **gathered)
    if gluon and gathered:
        # the Gluon lowering's TMA loader warp and wgmma consumers at the same tile, four slots deep: 2.904 -> 2.790
        # ms at 2048 tokens and 5.318 -> 4.967 ms at 4096 for the whole expert step (Mixtral dims, gate-up alone
        # changed; `sweep.py --ops moe --gluon --moe-experts 8 --moe-tokens 2048,4096`, sweep-moe-gluon-2026-11-24
        # .json; grouped_mm 3.128 and 5.653). The lowering runs one program an SM (the template is persistent):
        # 1-1.4% faster than one a tile (benchmarks/probes/moe_gemm.py, moe-gemm-persistent-h100-2026-11-24.json). The
        # down GEMM's lowering (for plans that ask for it) measured no faster than the Triton down's.
        up = replace(up, num_stages=MOE_GATE_UP_GLUON_STAGES, warp_specialize=True)
    down = Policy.make(BN=256, BK=64, num_warps=8, num_stages=MOE_DOWN_STAGES, grid_order="grouped",
                       group_m=8, persistent=True, tma=tma)
    if gluon and gathered:
        # the Gluon down (argus_inductor.hopper.moe_down): one program an SM, full waves of tiles, then the tiles
        # left over cut along K into parts of one wave (its atomics already combine them). Its tiles are 224 K
        # blocks long, so whole waves cost the most here: at 2048 Mixtral tokens 592 tiles are 4.48 waves of 132,
        # paid as 5 (benchmarks/probes/moe_gemm.py: the down 0.92 ms on random routing, 0.76 on a balanced one of 512
        # tiles, 3.9 waves; moe-gemm-random-h100-2026-11-24.json, moe-gemm-balanced-h100-2026-11-24.json). The
        # template's three slots (MOE_DOWN_STAGES) leave room for its epilogue's staging (128-bit atomics). H100,
        # random routing: 0.871 ms at 2048 tokens and 1.600 at 4096 against the Triton down's 0.926 and 1.624
        # (moe-gemm-v4-atomics-h100-2026-11-24.json).
        down = replace(down, warp_specialize=True)
    return up, down


MOE_GATE_UP_GLUON_STAGES = 4
MOE_GATE_UP_TRITON_STAGES = 3
MOE_DOWN_STAGES = 3  # both down lowerings (the Gluon one's epilogue staging fits beside three slots)


def moe_gate_up_fallback(policy: Policy) -> Policy:
    """The Triton policy of a gate-up launch its Gluon lowering declines: the same tiles and launch at the Triton
    template's depth (its slots take the shared memory of the Gluon ring's four)."""
    stages = MOE_GATE_UP_TRITON_STAGES if policy.num_stages == MOE_GATE_UP_GLUON_STAGES else policy.num_stages
    return replace(policy, warp_specialize=False, num_stages=stages)


def moe_down_fallback(policy: Policy) -> Policy:
    """The Triton policy of a down launch its Gluon lowering declines: the same tiles, ring depth and launch (both
    lowerings run the template's MOE_DOWN_STAGES)."""
    return replace(policy, warp_specialize=False)


# Bytes of staged operand tiles a policy may plan for: H100/H200 give a block 227 KB, the rest is left to the
# epilogue's layout conversion (MI300X has 64 KB of LDS; Triton's pipeliner keeps fewer stages there itself).
SMEM_BUDGET = 160 * 1024
# Attention's epilogue is a plain store, so its staged tiles may take nearly all of a Hopper block's 227 KB: the
# 128x128 tiles of head dim 128 with 3 stages (Q 32 KB + 3 x (K, V) 192 KB) compile and are the fastest there.
ATTENTION_SMEM_BUDGET = 226 * 1024


# MI300X (gfx942) gives a workgroup 64 KB of LDS. Triton's AMD pipeliner keeps num_stages - 1 copies of each
# staged GEMM tile there (one at num_stages=1), and for attention the Q tile plus num_stages - 1 copies of the K
# and V tiles: measured by compiling the templates for gfx942 (argus_inductor.dsl.precompile), where the Hopper
# templates asked for 96-160 KB and would not have launched.
LDS_BYTES = 64 * 1024


def _staged_copies(stages: int, target: str) -> int:
    """How many copies of a pipelined operand tile a kernel keeps in shared memory (LDS) on `target`."""
    return max(stages - 1, 1) if target == "hip" else stages


def fit_shared_memory(p: Policy, elem_bytes: int, b_tiles: int = 1, budget: int = SMEM_BUDGET,
                      target: str = "cuda") -> Policy:
    """`p` with fewer pipeline stages, then a shorter K tile, then a narrower N tile, until its staged GEMM
    operand tiles (BM x BK of A and `b_tiles` BK x BN of B per stage) fit `budget` (on AMD, also the LDS): the
    templates are tuned for 2-byte inputs on Hopper, float32 doubles every tile, and MI300X has 64 KB."""
    bm, bn, bk, stages = p.const("BM", 64), p.const("BN", 64), p.const("BK", 32), p.num_stages
    if target == "hip":
        budget = min(budget, LDS_BYTES)

    def need() -> int:
        return _staged_copies(stages, target) * (bm * bk + b_tiles * bk * bn) * elem_bytes
    while need() > budget and stages > 2:
        stages -= 1
    while need() > budget and bk > 16:
        bk //= 2
    while need() > budget and bn > 16:
        bn //= 2
    return replace(p, num_stages=stages).with_consts(BK=bk, BN=bn) if "BK" in dict(p.consts) else \
        replace(p, num_stages=stages)


def fit_attention(p: Policy, head_block: int, elem_bytes: int, budget: int = ATTENTION_SMEM_BUDGET,
                  has_mask: bool = False, target: str = "cuda") -> Policy:
    """An attention policy whose Q tile and staged K/V (and mask) tiles fit `budget` (fewer stages, then a narrower
    key tile). The mask is counted at 4 bytes an entry (it may be float32 whatever q's dtype). On AMD the budget is
    the 64 KB of LDS, and a pipeline of two stages is kept before the key tile narrows below 32."""
    bm, bn, stages = p.const("BM", 64), p.const("BN", 64), p.num_stages
    if target == "hip":
        budget = min(budget, LDS_BYTES)

    def need() -> int:
        copies = stages - 1 if target == "hip" else stages
        return (bm * head_block + copies * 2 * bn * head_block) * elem_bytes + \
            (copies * bm * bn * 4 if has_mask else 0)
    floor = 2 if target == "hip" else 1
    while need() > budget and stages > floor:
        stages -= 1
    while need() > budget and bn > (32 if target == "hip" else 16):
        bn //= 2
    while need() > budget and stages > 1:
        stages -= 1
    while need() > budget and bn > 16:
        bn //= 2
    return replace(p, num_stages=stages).with_consts(BN=bn)


CONV_OPS = ("conv", "conv_chain")  # signatures whose float32 precision follows cuDNN's setting, not matmul's
# torch's float32 matmul precision -> the mma precision of float32 inputs
MATMUL_PRECISIONS = {"highest": "ieee", "high": "tf32x3", "medium": "tf32"}


def matmul_precision() -> str:
    """torch's float32 matmul precision, "highest", "high" or "medium". torch.get_float32_matmul_precision() raises
    once a program has set the newer per-backend setting (torch.backends.cuda.matmul.fp32_precision = "tf32" or
    "ieee", which it then reads against the legacy API): that setting answers then, "tf32" as "high" (TF32 allowed)
    and "ieee" as "highest"; "none" defers to torch.backends.fp32_precision."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        pass
    new = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
    if new == "none":
        new = getattr(torch.backends, "fp32_precision", "ieee")
    return "high" if new == "tf32" else "highest"


def conv_allows_tf32() -> bool:
    """torch.backends.cudnn.allow_tf32 (on by default), or where a program set the newer per-operator setting
    (which makes the legacy flag raise), whether torch.backends.cudnn.conv.fp32_precision is "tf32"."""
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        conv = getattr(torch.backends.cudnn, "conv", None)
        return getattr(conv, "fp32_precision", "tf32") == "tf32"


# the longest run of K a float32 GEMM at "ieee" sums in one sequential chain of fused multiply-adds: a float32 sum's
# rounding grows with the length of its chain (terms of one sign: about K * eps / 4 relative, 2.7e-5 at K = 262144
# against 1.2e-6 for 16 chains of 16384 added, simulated), so a longer K is split (gemm_splitk's partitions, summed
# in float32), as a vendor SGEMM splits a long K over few output tiles. 2048: on the H200 one chain of 8192 left
# 4.3e-7 componentwise against cuBLAS SGEMM's 1.8e-7 (2048^2 x 8192, magnitude 1e-3; gpu-tests-fp32-swapin-h200-
# 2026-11-28.log); four chains of 2048 halve the chain's part of it
IEEE_CHAIN_K = 2048


def ieee_chain_split(policy: Policy, k: int) -> Policy:
    """`policy` with SPLIT_K raised so that no partition's K exceeds IEEE_CHAIN_K (a float32 "ieee" GEMM with a
    split-K kernel), at most 256 partitions; unchanged where its chains are short enough already."""
    split = int(policy.const("SPLIT_K", 1) or 1)
    if -(-k // split) <= IEEE_CHAIN_K:
        return policy
    return policy.with_consts(SPLIT_K=min(256, -(-k // IEEE_CHAIN_K)))


def fp32_precision(op: str = "gemm") -> str:
    """The mma precision of float32 inputs, as torch's own settings ask.

    Matmuls (GEMMs, bmm, gate*up, residual, MoE, attention) follow torch's float32 matmul precision:
    "highest" (torch's default) -> "ieee", full float32 products, as cuBLAS's SGEMM: three-pass tf32 measured
    1.1e-5 max relative error on 4096^3 against SGEMM's 3e-6 (benchmarks/fp32_gemm.py, H100), no better than
    float32, so it does not stand in for it; "high" -> "tf32x3" (three tf32 products, more accurate than the one
    TF32 pass torch allows cuBLAS there); "medium" -> "tf32". Convolutions follow cuDNN's allow_tf32 (on by
    default -> "tf32", as cuDNN runs them; off -> "tf32x3")."""
    if op in CONV_OPS:
        return "tf32" if conv_allows_tf32() else "tf32x3"
    return MATMUL_PRECISIONS.get(matmul_precision(), "ieee")
