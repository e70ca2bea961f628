"""The template-default policy of each library kernel for a shape: what runs before any search."""
from __future__ import annotations

from .dsl import Policy


def gemm_policy(m: int, n: int, k: int, target: str) -> Policy:
    """Regimes from benchmarks/results/sweep-gemm-2026-11-22.json (H100, bf16, CUDA-graph timing)."""
    if target == "interpret":
        return Policy.make(BM=16, BN=32, BK=32)
    if m <= 16:  # decode: skinny tiles, many programs, deep K pipeline (memory-bound)
        return Policy.make(BM=16, BN=32, BK=256 if n <= 4096 else 128, num_warps=4, num_stages=5)
    if m <= 128:
        if k >= 3 * n:  # long K, few output tiles: split K in two (sweep-gemm-splitk-2026-11-22.json)
            return Policy.make(BM=128, BN=64, BK=128, num_warps=8, num_stages=4, SPLIT_K=2)
        if n <= 4096:  # sweep-gemm-splitk-2026-11-22.json: M=128, N=K=4096
            return Policy.make(BM=64, BN=64, BK=128, num_warps=4, num_stages=4)
        return Policy.make(BM=128, BN=128 if n >= 8192 else 64, BK=128 if n < 8192 else 64, num_warps=8,
                           num_stages=4)
    return Policy.make(BM=128, BN=256, BK=64, num_warps=8, num_stages=3, grid_order="grouped", group_m=8,
                       persistent=True)


def attention_policy(s: int, d: int, target: str, causal: bool = False) -> Policy:
    """From benchmarks/results/sweep-attention-2026-11-22.json (H100, bf16)."""
    if target == "interpret":
        return Policy.make(BM=16, BN=16)
    if s <= 16:
        return Policy.make(BM=16, BN=128, num_warps=8, num_stages=3)
    if d > 128:
        return Policy.make(BM=64, BN=64, num_warps=4, num_stages=2)
    if causal:
        return Policy.make(BM=128, BN=64, num_warps=4, num_stages=2)
    return Policy.make(BM=64, BN=64, num_warps=4, num_stages=3)


def moe_policies(tokens: int, topk: int, experts: int, target: str) -> tuple[Policy, Policy]:
    """(gate-up, down) policies by rows per expert; from benchmarks/results/sweep-moe-2026-11-22.json."""
    if target == "interpret":
        return Policy.make(BM=16, BN=16, BK=16), Policy.make(BN=16, BK=16)
    rows_per_expert = tokens * topk / experts
    if rows_per_expert <= 4:  # decode: a few rows per expert, weight streaming dominates
        return (Policy.make(BM=16, BN=32, BK=128, num_warps=4, num_stages=5),
                Policy.make(BN=64, BK=128, num_warps=4, num_stages=5))
    if rows_per_expert <= 64:
        return (Policy.make(BM=16, BN=128, BK=64, num_warps=4, num_stages=3),
                Policy.make(BN=128, BK=64, num_warps=4, num_stages=3))
    return (Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=3),
            Policy.make(BN=256, BK=64, num_warps=8, num_stages=3))
