"""Edge-case inputs to a compiled model (issue 40): NaN, inf, -0.0, empty dims, fully masked attention rows, MoE
routings that leave experts empty. Each case runs the compiled model twice (the second call replays the first's
recorded launches) and compares both with eager: the same shape and dtype, NaN where eager has NaN, the same
infinities, the same sign of zero where the case is about it.

The interpreter's element-wise maximum/minimum are made to drop NaN as a GPU's do (gpu_float_semantics), so a
kernel that loses a NaN on the GPU fails here too."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import argus_inductor  # noqa: F401  (registers backend="argus")
from argus_inductor import ops
from argus_inductor.config import Options
from argus_inductor.runtime import reporting as report_mod
from tests.kernels._support import gpu_float_semantics

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def _gpu_nan(fresh_cache) -> Iterator[None]:
    with gpu_float_semantics():
        yield


def same(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-4, zero_sign: bool = False) -> None:
    """out is eager's ref: shape, dtype, NaN positions, infinities and values (and the sign of each zero)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, out.dtype, ref.shape, ref.dtype)
    if not ref.is_floating_point():
        assert torch.equal(out, ref), (out, ref)
        return
    assert torch.equal(out.isnan(), ref.isnan()), f"NaN at {out.isnan().nonzero().tolist()}, eager at " \
                                                  f"{ref.isnan().nonzero().tolist()}"
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol, equal_nan=True)
    if zero_sign:
        zeros = ref == 0
        assert torch.equal(out[zeros].signbit(), ref[zeros].signbit()), "a zero of the wrong sign"


def compiled_twice(fn: Callable, *args: torch.Tensor, ops_kinds: str | None = None, tol: float = 1e-4,
                   zero_sign: bool = False, argus: bool = True,
                   reference: torch.Tensor | None = None) -> list[report_mod.Entry]:
    """fn compiled with backend="argus", called twice; each call's result is eager's (or `reference`). `argus`: at least one Argus kernel ran (the case did not pass by staying Inductor's). Returns the
    report's entries."""
    if ops_kinds is not None:
        ops.set_active_options(Options.resolve(ops=ops_kinds))
    torch._dynamo.reset()
    report_mod.clear()
    with torch.no_grad():
        ref = fn(*args) if reference is None else reference
        compiled = torch.compile(fn, backend="argus")
        outs = [compiled(*args), compiled(*args)]
    for i, out in enumerate(outs):
        refs, got = (ref, out) if isinstance(ref, (tuple, list)) else ((ref,), (out,))
        for o, r in zip(got, refs, strict=True):
            try:
                same(o, r, tol, zero_sign)
            except AssertionError as e:
                raise AssertionError(f"call {i + 1}: {e}") from None
    rows = report_mod.entries()
    if argus:
        assert any(e.source.startswith("default") for e in rows), [(e.op, e.source) for e in rows]
    return rows


ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "gelu": F.gelu, "silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def gelu_reference(lin: nn.Linear, act: str, x: torch.Tensor) -> torch.Tensor:
    """act(lin(x)) in float64, as float32: eager's vectorized float32 GELU on the CPU gives NaN for gelu(+inf)
    where its scalar path, float64, CUDA and Inductor give +inf (the limit), as the kernels do."""
    with torch.no_grad():
        return ACTS[act](F.linear(x.double(), lin.weight.double(), lin.bias.double())).float()


# ------------------------------------------------------------------------------------------------- GEMM epilogues

def _specials(x: torch.Tensor) -> torch.Tensor:
    """x with a NaN, +inf, -inf in its first rows (one row each, so each reaches its own outputs) and -0.0 in the
    fourth (a matmul's sum of products rounds -0.0 + 0.0 to +0.0, as eager's does for K > 1: values compared)."""
    x = x.clone()
    flat = x.view(-1, x.shape[-1])
    flat[0, 3], flat[1, 5], flat[2, 1] = NAN, INF, -INF
    if flat.shape[0] > 3:
        flat[3, ::2] = -0.0
    return x


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("rows", [8, 1])
def test_linear_activation_keeps_nan_and_inf(act: str, rows: int) -> None:
    """act(Linear(x)) with NaN and infinities in x: NaN and inf reach the outputs as in eager (the ReLU epilogue
    max(x, 0) dropped NaN on the GPU). rows=1 takes the GEMV path."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 24)
    x = torch.randn(max(rows, 3), 16)
    x = _specials(x)[:rows]
    compiled_twice(lambda x: ACTS[act](lin(x)), x, reference=gelu_reference(lin, act, x))


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_linear_residual_and_gate_up_keep_nan(act: str) -> None:
    """The fused residual and gate*up kernels apply the same epilogue: NaN in, NaN out."""
    torch.manual_seed(0)
    up, gate, down = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False), nn.Linear(16, 16)
    x = torch.randn(6, 16)
    x[0, 3] = x[4, 0] = NAN
    compiled_twice(lambda x: ACTS[act](gate(x)) * up(x), x)
    compiled_twice(lambda x: x + ACTS[act](down(x)), x)
