"""Template policies: the GEMM regimes pick split-K where a long K meets few output tiles, and the pool tiles stay
near 256 outputs a program (both measured on the H100; see argus_inductor.policies and kernels.pool)."""
from __future__ import annotations

from argus_inductor.kernels.pool import max_pool_policies
from argus_inductor.policies import gemm_policy


def test_long_k_over_few_tiles_splits_k():
    p = gemm_policy(256, 256, 131072, "cuda")  # KernelBench 15: 4 output tiles of 128x128
    assert p.const("SPLIT_K", 1) >= 16 and not p.persistent
    assert p.const("SPLIT_K", 1) * 4 <= 256  # about one wave of programs, not thousands
    big = gemm_policy(4096, 4096, 4096, "cuda")
    assert big.const("SPLIT_K", 1) == 1 and big.persistent
    assert gemm_policy(1024, 1024, 4096, "cuda").const("SPLIT_K", 1) == 1  # K only 4x: enough tiles anyway


def test_pool_tiles_are_about_256_outputs():
    p = max_pool_policies((16, 64, 224, 224), 3, 2, 1, 2)["max_pool_kernel"]
    assert p.const("BC") * p.const("BW") == 256 and p.const("BW") >= 64
