"""benchmarks/ops.py's roofline columns (issue 44: each row's distance to the card's measured ceilings): a row is
bound by whichever of its bytes at the copy rate and its FLOPs at the bf16 rate takes longer."""
from __future__ import annotations

import pytest
from benchmark_scripts import load


@pytest.fixture(scope="module")
def ops_bench():
    return load("ops")


def test_each_row_is_bound_by_the_longer_of_its_bytes_and_its_flops(ops_bench) -> None:
    ceil = {"copy_tbps": 4.0, "bf16_tflops": 800.0}
    square = {"flops": 2 * 4096**3, "bytes": 3 * 4096 * 4096 * 2, "ours_ms": 0.2}  # 0.172 ms of FLOPs, 0.025 of bytes
    gemv = {"flops": 2 * 4096 * 14336, "bytes": 4096 * 14336 * 2, "ours_ms": 0.04}  # 0.0294 ms of bytes
    ops_bench.roofline([square, gemv, {"ours_ms": 1.0}], ceil)
    assert square["bound"] == "tensor cores" and square["roof_frac"] == pytest.approx(2 * 4096**3 / 800e9 / 0.2)
    assert gemv["bound"] == "bytes" and gemv["roof_frac"] == pytest.approx(4096 * 14336 * 2 / 4e9 / 0.04)
