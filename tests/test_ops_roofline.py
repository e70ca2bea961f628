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


def test_the_table_says_how_close_a_memory_bound_row_is_to_a_copy_of_its_bytes(ops_bench) -> None:
    row = {"op": "gemm", "shape": "M=1 N=4096 K=4096", "ours_ms": 0.0114, "peer": "cuBLAS", "peer_ms": 0.0135,
           "ratio": 0.0135 / 0.0114, "tflops": 2.9, "tbps": 2.95, "rel_err": 1.7e-3, "roof_frac": 0.70,
           "bound": "bytes", "copy_same_ms": 0.0100, "of_same_copy": 0.0100 / 0.0114}
    other = {**row, "shape": "M=4096 N=4096 K=4096", "bound": "tensor cores"}
    del other["copy_same_ms"], other["of_same_copy"]
    lines = ops_bench.table([row, other]).splitlines()
    assert "of a copy of its bytes" in lines[0]
    assert "| 70% (bytes) | 88% (10.0 us) |" in lines[2]
    assert "| - |" in lines[3]  # a compute-bound row has no copy to compare with
