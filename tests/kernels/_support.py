"""Shared helpers of the kernel tests: where they run, at which sizes, and how results are judged."""
from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import torch

DEVICE = os.environ.get("ARGUS_TEST_DEVICE", "cpu")
ON_GPU = DEVICE != "cpu"
DTYPES = [torch.float32, torch.bfloat16]


def fresh_seed() -> int:
    """Fresh random inputs every run; the seed is reported in failure messages to reproduce."""
    seed = random.SystemRandom().randrange(2**31)
    torch.manual_seed(seed)
    return seed


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def randn(*shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, dtype=torch.float32, device=DEVICE) * scale).to(dtype)


def rel_err(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """Error norm over the reference's norm, or over `scale`'s: a sum's rounding error is bounded by its terms'
    magnitudes (the sum of |x|), not by the sum, which cancellation can make arbitrarily small."""
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    if torch.isnan(out64).any():
        return float("inf")
    denom = ref64 if scale is None else scale.detach().double().cpu()
    return float((out64 - ref64).norm() / denom.norm().clamp_min(1e-30))


def tolerance(dtype: torch.dtype) -> float:
    if dtype == torch.float32:
        return 3e-3 if ON_GPU else 1e-5  # tf32 tensor cores on the GPU, exact fp32 in the interpreter
    return 1.6e-2


def check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, seed: int, what: str,
          scale: torch.Tensor | None = None) -> None:
    err = rel_err(out, ref, scale)
    assert err < tolerance(dtype), f"{what}: relative error {err:.3e} (dtype {dtype}, seed {seed})"


@contextlib.contextmanager
def gpu_float_semantics() -> Iterator[None]:
    """The Triton interpreter's element-wise maximum and minimum as a GPU computes them. Triton lowers
    tl.maximum/tl.minimum (propagate_nan NONE, the default) to IEEE maxNum/minNum (PTX max.f32/min.f32): a NaN
    operand yields the other operand. The interpreter runs them as np.maximum/np.minimum, which keep the NaN, so a
    kernel that drops NaN on the GPU passes on the CPU. Within this context it drops it there too (np.fmax/np.fmin),
    as the interpreter's max/min reductions already do (np.nanmax/np.nanmin). No-op off the interpreter."""
    if ON_GPU:
        yield
        return
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    saved = builder.create_maxnumf, builder.create_minnumf
    builder.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)
    builder.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)
    try:
        yield
    finally:
        builder.create_maxnumf, builder.create_minnumf = saved
