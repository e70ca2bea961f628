"""transformers' RMSNorm at decode rows (argus_inductor.kernels.rms_rounded) against the model's own arithmetic in
float64 (by relative error) and in the input dtype (within one rounding of it), fp32 and bf16, odd lengths; the
compiled op `argus::rms_norm` takes a new eps each call; bad operands refused with a message. The embedding's rows
and their norm in one launch (embedding_rms_norm_rounded, the op `argus::embedding_rms_norm`) alike, the rows copied
exactly."""
from __future__ import annotations

import pytest
import torch

import argus_inductor.ops.library  # noqa: F401  (registers torch.ops.argus.rms_norm)
from argus_inductor.kernels.rms_rounded import (
    embedding_rms_norm_reference,
    embedding_rms_norm_rounded,
    rms_norm_reference,
    rms_norm_rounded,
)

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, randn

SHAPES = [(1, 1, 64), (3, 37), (1, 100), (16, 33)] + ([(1, 1, 4096), (1, 1, 5120)] if ON_GPU else [])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rms_norm_rounded_matches_the_model(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    seed = fresh_seed()
    x = randn(*shape, dtype=dtype, scale=2.0)
    w = randn(shape[-1], dtype=dtype)
    eps = 1e-5
    out = rms_norm_rounded(x, w, eps)
    assert out.shape == x.shape and out.dtype == dtype
    x64 = x.double()
    ref64 = w.double() * x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5)
    check(out, ref64, dtype, seed, "rms_norm_rounded")
    same = rms_norm_reference(x, w, eps)  # the model's own roundings: at most one unit in the last place apart
    ulp = torch.finfo(dtype).eps * same.abs().double().clamp_min(torch.finfo(dtype).tiny)
    assert ((out.double() - same.double()).abs() <= 2 * ulp + 1e-6).all(), f"seed {seed}"


def test_the_op_adds_each_calls_eps() -> None:
    """argus::rms_norm carries eps as an argument: two calls with two values give two results (no stale plan)."""
    x = torch.full((1, 8), 1e-3, device=DEVICE)
    w = torch.ones(8, device=DEVICE)
    small = torch.ops.argus.rms_norm(x, w, 1e-12, "test:rms_eps")
    large = torch.ops.argus.rms_norm(x, w, 1.0, "test:rms_eps")
    torch.testing.assert_close(small, torch.ones_like(x), rtol=1e-3, atol=0)
    torch.testing.assert_close(large, x / (1.0 + 1e-6) ** 0.5, rtol=1e-4, atol=0)


@pytest.mark.parametrize("x,w,eps,match", [
    (torch.zeros(2, 8, dtype=torch.int32), torch.zeros(8), 1e-5, "floating-point tensor"),
    (torch.zeros(2, 8), torch.zeros(7), 1e-5, "weight must be \\(8,\\)"),
    (torch.zeros(2, 8), torch.zeros(8, dtype=torch.float64), 1e-5, "weight must be"),
    (torch.zeros(2, 8), torch.zeros(8), -1.0, "eps must be a non-negative number"),
])
def test_bad_operands_are_refused(x, w, eps, match) -> None:
    with pytest.raises(ValueError, match=match):
        rms_norm_rounded(x.to(DEVICE), w.to(DEVICE), eps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,length", [(1, 64), (3, 37), (16, 100)] + ([(1, 4096)] if ON_GPU else []),
                         ids=lambda v: str(v))
def test_embedding_rms_norm_copies_the_rows_and_normalizes_them(rows: int, length: int, dtype: torch.dtype) -> None:
    seed = fresh_seed()
    vocab = 257
    table = randn(vocab, length, dtype=dtype, scale=2.0)
    w = randn(length, dtype=dtype)
    ids = torch.randint(0, vocab, (1, rows), device=DEVICE)
    out = embedding_rms_norm_rounded(ids, table, w, 1e-5)
    assert out.shape == (2, 1, rows, length) and out.dtype == dtype
    assert torch.equal(out[0], table[ids]), f"seed {seed}"  # the residual stream: the rows themselves
    x64 = table[ids].double()
    ref64 = w.double() * x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5)
    check(out[1], ref64, dtype, seed, "embedding_rms_norm_rounded")
    same = embedding_rms_norm_reference(ids, table, w, 1e-5)[1]
    ulp = torch.finfo(dtype).eps * same.abs().double().clamp_min(torch.finfo(dtype).tiny)
    assert ((out[1].double() - same.double()).abs() <= 2 * ulp + 1e-6).all(), f"seed {seed}"
    packed = torch.ops.argus.embedding_rms_norm(ids, table, w, 1e-5, "test:embedding_rms")
    assert torch.equal(packed, out)


@pytest.mark.parametrize("ids,table,w,eps,match", [
    (torch.zeros(1, 2), torch.zeros(5, 8), torch.zeros(8), 1e-5, "integer ids"),
    (torch.zeros(1, 2, dtype=torch.int64), torch.zeros(5, 8, dtype=torch.int32), torch.zeros(8), 1e-5,
     "2-d floating-point"),
    (torch.zeros(1, 2, dtype=torch.int64), torch.zeros(5, 8), torch.zeros(7), 1e-5, "weight must be \\(8,\\)"),
    (torch.zeros(1, 2, dtype=torch.int64), torch.zeros(5, 8), torch.zeros(8), -1.0, "eps must be"),
])
def test_embedding_rms_norm_refuses_bad_operands(ids, table, w, eps, match) -> None:
    with pytest.raises(ValueError, match=match):
        embedding_rms_norm_rounded(ids.to(DEVICE), table.to(DEVICE), w.to(DEVICE), eps)


def test_an_id_outside_the_table_reads_a_row_of_zeros() -> None:
    """The masks keep a bad id (eager's embedding raises there, which a kernel cannot without a host sync) from
    reading outside the table: its rows and its norm are zeros, and the other rows are unaffected."""
    table = randn(10, 32, dtype=torch.float32)
    w = randn(32, dtype=torch.float32)
    ids = torch.tensor([[3, 10, -1, 7]], device=DEVICE)
    out = embedding_rms_norm_rounded(ids, table, w, 1e-5)
    assert not out[:, 0, 1:3].any()
    good = torch.tensor([[3, 7]], device=DEVICE)
    torch.testing.assert_close(out[:, :, [0, 3]], embedding_rms_norm_rounded(good, table, w, 1e-5))
