"""An in-kernel `assume` that no program can satisfy at the shapes and policy being verified would make every
obligation hold vacuously: the checker rejects such a verification and names the assume's line. It once proved a
rotary table tile of 64 columns for rows of 128 (the kernel assumes D <= BD), which left half of each row unwritten
and was cached by the library tuner."""
from __future__ import annotations

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.rotary import rotary_table_rows


def test_a_tile_narrower_than_the_rows_its_kernel_assumes_it_covers_is_rejected() -> None:
    shapes = {"R": 2048, "D": 128, "R2": 4096}
    assert verify(rotary_table_rows, Policy.make(BR=16, BD=128), shapes).ok
    res = verify(rotary_table_rows, Policy.make(BR=16, BD=64), shapes)
    assert not res.ok
    ir = rotary_table_rows.ir
    want = ir.first_line + next(i for i, line in enumerate(ir.source.splitlines()) if "assume(" in line)
    assert any(f"line {want}:" in e and "D <= BD" in e and "vacuous" in e for e in res.errors), res.errors
    assert verify(rotary_table_rows, Policy.make(BR=16, BD=64)).ok  # symbolic D: D <= 64 is possible


SRC = '''from argus_inductor.dsl import *

@kernel
def one_row(X: Tensor("S", "D"), Y: Tensor("S", "D"), BD: constexpr = 64):
    (p,) = tile_grid(S)
    assume(S == 1)
    rd = arange(BD)
    store(Y[p, rd], load(X[p, rd]))
'''


def test_a_shape_precondition_the_shapes_break_is_rejected() -> None:
    k = kernels_from_source(SRC)["one_row"]
    assert verify(k, Policy.make(BD=64), {"S": 1, "D": 64}).ok
    res = verify(k, Policy.make(BD=64), {"S": 4, "D": 64})
    assert not res.ok and any("assume(S == 1)" in e for e in res.errors), res.errors
