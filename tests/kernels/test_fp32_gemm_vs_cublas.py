"""GPU only (ARGUS_TEST_DEVICE=cuda): Argus's float32 GEMM at torch's default precision ("highest") is no less
accurate than cuBLAS's SGEMM (torch.mm), both against a float64 reference, over a spread of shapes (K up to 262144)
and magnitudes (issue 40). Argus's error may be at most 1.5x cuBLAS's (plus one float32 epsilon, the rounding of
the result, where both are a few ulps), by each of two measures:

* max over outputs of |C - C64| / (|A| @ |B|): each output's error over the sum of its terms' magnitudes, the scale
  a float32 sum's rounding error is bounded by (it does not blow up where a sum cancels);
* ||C - C64||_F / ||C64||_F, the usual normwise error.

Both run the op as a compiled model would (torch.ops.argus.linear / argus.bmm, their template plan), with the swap-in
forced to Argus's kernel so that what is measured is Argus's and not the fallback's."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from argus_inductor import ops
from argus_inductor.config import Options
from argus_inductor.runtime import reporting as report_mod

from ._support import ON_GPU

pytestmark = pytest.mark.skipif(not ON_GPU, reason="needs the GPU (ARGUS_TEST_DEVICE=cuda): cuBLAS is the reference")

RATIO = 1.5
SLACK = 2.0 ** -23  # plus one float32 epsilon: the rounding of the result itself, where both errors are a few ulps

# (M, N, K): square compute-bound, the pre-split regime's sizes, decode GEMV, split-K's few-tile long-K shapes,
# K in the hundreds of thousands, tall-skinny
SHAPES = [(4096, 4096, 4096), (1024, 1024, 1024), (2048, 2048, 8192), (1, 4096, 4096), (16, 4096, 14336),
          (128, 128, 262144), (256, 512, 131072), (64, 64, 262144), (8192, 256, 1024), (1000, 1000, 1000)]
MAGNITUDES = [("normal", 1e-3), ("normal", 1.0), ("normal", 1e3), ("positive", 1.0)]


@pytest.fixture
def highest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    prec = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    ops.set_active_options(Options.resolve({"swapin": "always", "replay": False}))
    ops.forget_plans()
    report_mod.clear()
    yield
    torch.set_float32_matmul_precision(prec)
    ops.set_active_options(Options.resolve())
    ops.forget_plans()


def _operands(kind: str, magnitude: float, *shape: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(*shape, generator=gen, device="cuda") if kind == "normal" else \
        torch.rand(*shape, generator=gen, device="cuda")
    return x * magnitude


def _errors(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max componentwise error over the terms' magnitudes, normwise relative error) of c = a @ b (batched or not)."""
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    terms = (a64.abs() @ b64.abs()).clamp_min(1e-300)
    diff = c.double() - ref
    return float((diff.abs() / terms).max()), float(diff.norm() / ref.norm().clamp_min(1e-300))


def _check(argus: tuple[float, float], cublas: tuple[float, float], what: str) -> None:
    for name, x, y in zip(("componentwise", "normwise"), argus, cublas, strict=True):
        assert x <= RATIO * y + SLACK, (f"{what}: Argus's {name} error {x:.3e} > {RATIO} x cuBLAS's {y:.3e} + "
                                        f"2^-23 (all: Argus {argus}, cuBLAS {cublas})")


def _argus_ran() -> None:
    rows = report_mod.entries()
    assert rows and all(not e.source.startswith("fallback") for e in rows), [(e.signature, e.source) for e in rows]


@pytest.mark.parametrize("kind,magnitude", MAGNITUDES, ids=[f"{k}{m:g}" for k, m in MAGNITUDES])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_float32_gemm_at_highest_is_as_accurate_as_cublas(m: int, n: int, k: int, kind: str, magnitude: float,
                                                          highest) -> None:
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 13 + k)
    x = _operands(kind, magnitude, m, k, gen=gen)
    w = _operands(kind, magnitude, n, k, gen=gen)
    with torch.no_grad():
        argus = torch.ops.argus.linear(x, w, None, "none", f"fp32-{m}x{n}x{k}")
        cublas = torch.mm(x, w.t())
    torch.cuda.synchronize()
    _argus_ran()
    _check(_errors(argus, x, w.t()), _errors(cublas, x, w.t()), f"linear {m}x{n}x{k} {kind} x{magnitude:g}")


@pytest.mark.parametrize("bt,m,n,k", [(32, 512, 256, 1024), (8, 1024, 1024, 4096), (4, 64, 64, 65536)])
def test_float32_bmm_at_highest_is_as_accurate_as_cublas(bt: int, m: int, n: int, k: int, highest) -> None:
    gen = torch.Generator(device="cuda").manual_seed(bt + m + n + k)
    a = _operands("positive", 1.0, bt, m, k, gen=gen)
    b = _operands("normal", 1.0, bt, k, n, gen=gen)
    with torch.no_grad():
        argus = torch.ops.argus.bmm(a, b, f"fp32-bmm-{bt}x{m}x{n}x{k}")
        cublas = torch.bmm(a, b)
    torch.cuda.synchronize()
    _argus_ran()
    _check(_errors(argus, a, b), _errors(cublas, a, b), f"bmm {bt}x{m}x{n}x{k}")
