"""scan(): torch.cumsum / torch.cumprod along any dimension, reversed, exclusive and masked, against a
float64 torch reference (L never a multiple of the chunk)."""
from __future__ import annotations

import itertools

import pytest
import torch

from argus_inductor.kernels.scan import KERNELS, scan, scan_kernel, scan_policies

from ._support import DEVICE, DTYPES, check, fresh_seed

TARGET = None  # the launcher's default for the device (the interpreter on the CPU)


def _input(shape: tuple[int, ...], kind: str, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(*shape, device=DEVICE)
    return (1 + 0.05 * x if kind == "prod" else x).to(dtype)  # products of values near 1 stay finite


def _reference(x: torch.Tensor, dim: int, kind: str, reverse: bool = False, exclusive: bool = False,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    ident = 1.0 if kind == "prod" else 0.0
    v = x.double()
    if mask is not None:
        v = torch.where(mask, v, torch.full_like(v, ident))
    if reverse:
        v = v.flip(dim)
    if exclusive:  # shift by one along dim, the identity first
        first = torch.full_like(v.narrow(dim, 0, 1), ident)
        v = torch.cat([first, v.narrow(dim, 0, v.shape[dim] - 1)], dim)
    r = v.cumsum(dim) if kind == "sum" else v.cumprod(dim)
    return r.flip(dim) if reverse else r


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["sum", "prod"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scan_along_each_dim(dim, kind, dtype):
    seed = fresh_seed()
    x = _input((19, 37, 3), kind, dtype)
    y = scan(x, dim, kind, target=TARGET)
    assert y.dtype == dtype and y.shape == x.shape
    check(y, _reference(x, dim, kind), dtype, seed, f"{kind} scan along dim {dim}")


@pytest.mark.parametrize("kind,reverse,exclusive,masked",
                         list(itertools.product(["sum", "prod"], [False, True], [False, True], [False, True])))
def test_reverse_exclusive_and_masked_scans(kind, reverse, exclusive, masked):
    seed = fresh_seed()
    x = _input((3, 45, 2), kind, torch.float32)
    mask = (torch.rand(x.shape, device=DEVICE) > 0.3) if masked else None
    y = scan(x, 1, kind, reverse, exclusive, mask, target=TARGET)
    check(y, _reference(x, 1, kind, reverse, exclusive, mask), torch.float32, seed,
          f"{kind} reverse={reverse} exclusive={exclusive} masked={masked}")


def test_bfloat16_reverse_exclusive_masked_sum():
    seed = fresh_seed()
    x = _input((5, 41), "sum", torch.bfloat16)
    mask = torch.rand(x.shape, device=DEVICE) > 0.5
    y = scan(x, -1, "sum", reverse=True, exclusive=True, mask=mask, target=TARGET)
    assert y.dtype == torch.bfloat16
    check(y, _reference(x, 1, "sum", True, True, mask), torch.bfloat16, seed, "bf16 masked reverse exclusive sum")


def test_non_contiguous_input_and_1d():
    seed = fresh_seed()
    x = _input((37, 6), "sum", torch.float32).t()  # (6, 37), strided
    assert not x.is_contiguous()
    check(scan(x, 1, target=TARGET), _reference(x, 1, "sum"), torch.float32, seed, "transposed input")
    v = _input((53,), "prod", torch.float32)
    check(scan(v, 0, "prod", reverse=True, target=TARGET), _reference(v, 0, "prod", reverse=True), torch.float32,
          seed, "1-D reverse cumprod")


def test_policies_and_kernels_override_the_templates():
    seed = fresh_seed()
    x = _input((4, 50), "sum", torch.float32)
    pol = scan_policies(tuple(x.shape), 1, "interpret")["scan_kernel"].with_consts(BL=32, BO=2)
    y = scan(x, 1, policies={"scan_kernel": pol}, kernels={"scan_kernel": scan_kernel}, target=TARGET)
    check(y, _reference(x, 1, "sum"), torch.float32, seed, "BL=32 policy")
    assert KERNELS == (scan_kernel,)
    assert set(scan_policies((4, 50), 1, "cuda")) == {"scan_kernel"}


@pytest.mark.parametrize("flags", [{}, {"reverse": True}, {"exclusive": True}, {"kind": "prod"}, {"mask": True},
                                   {"reverse": True, "exclusive": True, "mask": True}], ids=str)
def test_the_gpu_template_of_a_last_dim_scan_is_right(flags):
    """The GPU template of a last-dimension scan (one row a program, chunks of up to 2048) at a length that leaves
    a ragged second chunk, in six modes (each flag, and all three at once), here under the interpreter."""
    seed = fresh_seed()
    kind = flags.get("kind", "sum")
    x = _input((3, 2100), kind, torch.float32)
    mask = torch.rand(3, 2100, device=DEVICE) > 0.3 if flags.get("mask") else None
    pol = scan_policies(tuple(x.shape), 1, "cuda")["scan_kernel"]
    assert (pol.const("BO"), pol.const("BL")) == (1, 2048)
    rev, exc = flags.get("reverse", False), flags.get("exclusive", False)
    y = scan(x, 1, kind, rev, exc, mask, policies={"scan_kernel": pol}, target=TARGET)
    check(y, _reference(x, 1, kind, rev, exc, mask), torch.float32, seed, f"GPU template {flags}")


def test_scan_rejects_bad_arguments():
    x = torch.randn(4, 5)
    with pytest.raises(ValueError, match="kind must be 'sum' or 'prod'"):
        scan(x, 1, "max")
    with pytest.raises(ValueError, match="dim 2 is out of range"):
        scan(x, 2)
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        scan(x, 1, mask=torch.ones(4, 5))
    with pytest.raises(ValueError, match="mask has shape"):
        scan(x, 1, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="floating-point"):
        scan(torch.ones(4, 5, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="unknown target"):
        scan_policies((4, 5), 1, "tpu")
