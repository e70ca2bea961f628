"""Reductions and softmax/log-softmax (argus_inductor.kernels.reduce) against torch in float64, at odd shapes,
every dim form (single, negative, tuple, non-adjacent tuple, None), keepdim, non-contiguous inputs, fp32 and bf16."""
from __future__ import annotations

import pytest
import torch

from argus_inductor.dsl import Policy
from argus_inductor.kernels.reduce import (
    KINDS,
    argreduce_cols,
    argreduce_rows,
    reduce,
    reduce_cols,
    reduce_policies,
    reduce_rows,
    softmax,
    softmax_cols,
    softmax_policies,
    softmax_rows,
    sum_of_powers,
)

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, poisoned, randn

SHAPE = (64, 129, 37, 5) if ON_GPU else (5, 7, 9, 3)
TARGET = None
FLOAT_KINDS = ["sum", "mean", "amax", "amin", "prod"]
DIMS = [0, 1, -1, (1, 2), (0, 2), (-1, 0), None]


def _ref(x: torch.Tensor, dim, kind: str, keepdim: bool) -> torch.Tensor:
    x64 = x.double()
    if kind == "prod":
        dims = tuple(range(x.dim())) if dim is None else ((dim,) if isinstance(dim, int) else dim)
        for d in sorted((d % x.dim() for d in dims), reverse=True):
            x64 = x64.prod(d, keepdim=True)
        return x64 if keepdim else x64.reshape([n for d, n in enumerate(x.shape) if d not in
                                                 {e % x.dim() for e in dims}])
    name = {"max": "amax", "min": "amin"}.get(kind, kind)
    if dim is None:
        return getattr(torch, name)(x64).reshape((1,) * x.dim() if keepdim else ())
    return getattr(torch, name)(x64, dim=dim, keepdim=keepdim)


def _magnitude(x: torch.Tensor, dim, kind: str, keepdim: bool) -> torch.Tensor | None:
    """What a sum's or mean's error is judged against: the same reduction of |x| (cancellation can make the
    result itself near zero, with a rounding error still ~eps times the terms); other kinds: the result."""
    return _ref(x.abs(), dim, kind, keepdim) if kind in ("sum", "mean") else None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", FLOAT_KINDS)
def test_float_reductions_every_dim_form(dtype, kind):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype)
    if kind == "prod":  # values near +-1 keep products of up to 945 factors finite
        x = (1.0 + 0.05 * randn(*SHAPE, dtype=torch.float32)).to(dtype) * torch.where(
            torch.rand(*SHAPE, device=DEVICE) < 0.1, -1.0, 1.0).to(dtype)
    for j, dim in enumerate(DIMS):
        keepdim = bool(j % 2)
        out = reduce(x, dim, kind, keepdim)
        ref = _ref(x, dim, kind, keepdim)
        assert out.shape == ref.shape and out.dtype == dtype, f"{kind} dim={dim}: {out.shape} vs {ref.shape}"
        check(out, ref, dtype, seed, f"{kind} dim={dim} keepdim={keepdim}", _magnitude(x, dim, kind, keepdim))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_arg_reductions_match_torch_exactly(dtype, kind):
    fresh_seed()
    x = randn(*SHAPE, dtype=dtype)
    for j, dim in enumerate([0, 1, -1, 2, None]):
        keepdim = bool(j % 2)
        out = reduce(x, dim, kind, keepdim)
        ref = getattr(torch, kind)(x.double(), dim=dim, keepdim=keepdim)
        assert out.dtype == torch.int64 and out.shape == ref.shape
        assert torch.equal(out.cpu(), ref.cpu()), f"{kind} dim={dim}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_arg_reductions_pick_the_first_of_ties(dtype):
    # rows with the extreme value repeated, across block boundaries (tiles of 32 in the interpreter)
    x = torch.zeros(6, 70, dtype=dtype, device=DEVICE)
    for row, cols in enumerate([(3, 40), (0, 69), (33, 34, 35), (5,), (64, 1), (69,)]):
        x[row, list(cols)] = 2.0
        x[row, [c + 1 for c in cols if c + 1 < 70 and c + 1 not in cols]] = -2.0
    assert torch.equal(reduce(x, 1, "argmax").cpu(), torch.tensor([3, 0, 33, 5, 1, 69]))
    assert torch.equal(reduce(x, 1, "argmax").cpu(), torch.argmax(x.double(), 1).cpu())
    assert torch.equal(reduce(x.t(), 0, "argmax").cpu(), torch.argmax(x.double(), 1).cpu())  # columns kernel
    assert torch.equal(reduce(-x, 1, "argmin").cpu(), torch.argmax(x.double(), 1).cpu())
    flat = torch.zeros(100, dtype=dtype, device=DEVICE)
    flat[[17, 50, 99]] = 1.0
    assert int(reduce(flat, None, "argmax")) == 17


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_input(dtype):
    seed = fresh_seed()
    x = randn(SHAPE[2], SHAPE[0], SHAPE[1], dtype=dtype).permute(1, 2, 0)  # (5, 7, 9) with odd strides
    for dim, kind in [(1, "sum"), (-1, "max"), ((0, 2), "mean"), (0, "min")]:  # max/min: the values
        check(reduce(x, dim, kind), _ref(x, dim, kind, False), dtype, seed, f"non-contiguous {kind} dim={dim}",
              _magnitude(x, dim, kind, False))
    assert torch.equal(reduce(x, 2, "argmax").cpu(), torch.argmax(x.double(), 2).cpu())


def test_whole_tensor_reduction_in_two_passes():
    seed = fresh_seed()
    n = 66_001  # above the split threshold, not a multiple of the partial rows
    x = randn(n, dtype=torch.float32, scale=3.0)
    assert "reduce_rows" in reduce_policies((n,), None, "sum", "interpret")
    for kind in ("sum", "mean", "amin"):
        check(reduce(x, None, kind), _ref(x, None, kind, False), torch.float32, seed, f"split {kind}",
              _magnitude(x, None, kind, False))


def test_kernels_write_every_output_element():
    """Outputs poisoned with NaN (and int64 outputs with -1): any element a kernel misses fails."""
    seed = fresh_seed()
    o, r, i = 13, 37, 21
    x3 = randn(o, r, i, dtype=torch.float32)
    x2 = randn(o, r, dtype=torch.float32)
    for kind, ref in ((0, x2.double().sum(1)), (2, x2.double().amax(1)), (3, x2.double().amin(1))):
        y = poisoned(o, dtype=torch.float32)
        reduce_rows(x2, y, 1.0, policy=Policy.make(BO=4, BR=16, KIND=kind), target=TARGET)
        check(y, ref, torch.float32, seed, f"reduce_rows kind {kind}", x2.double().abs().sum(1) if kind == 0 else None)
        y = poisoned(o, i, dtype=torch.float32)
        reduce_cols(x3, y, 1.0 / r, policy=Policy.make(BR=8, BI=16, KIND=1 if kind == 0 else kind), target=TARGET)
        ref3 = {0: x3.double().mean(1), 2: x3.double().amax(1), 3: x3.double().amin(1)}[kind]
        check(y, ref3, torch.float32, seed, f"reduce_cols kind {kind}", x3.double().abs().mean(1) if kind == 0 else None)
    yi = torch.full((o,), -1, dtype=torch.int64, device=DEVICE)
    argreduce_rows(x2, yi, policy=Policy.make(BO=4, BR=16, KIND=1), target=TARGET)
    assert torch.equal(yi.cpu(), x2.argmin(1).cpu())
    yi = torch.full((o, i), -1, dtype=torch.int64, device=DEVICE)
    argreduce_cols(x3, yi, policy=Policy.make(BR=8, BI=16, KIND=0), target=TARGET)
    assert torch.equal(yi.cpu(), x3.argmax(1).cpu())
    y = poisoned(o, r, dtype=torch.float32)
    softmax_rows(x2, y, policy=Policy.make(BO=4, BR=16, LOG=1), target=TARGET)
    check(y, torch.log_softmax(x2.double(), 1), torch.float32, seed, "softmax_rows log")
    y = poisoned(o, r, i, dtype=torch.float32)
    softmax_cols(x3, y, policy=Policy.make(BR=8, BI=16, LOG=0), target=TARGET)
    check(y, torch.softmax(x3.double(), 1), torch.float32, seed, "softmax_cols")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_any_dim(dtype, log):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype, scale=4.0)
    for dim in (0, 1, -1, 2):
        out = softmax(x, dim, log)
        ref = torch.log_softmax(x.double(), dim) if log else torch.softmax(x.double(), dim)
        assert out.shape == x.shape and out.dtype == dtype
        check(out, ref, dtype, seed, f"{'log_' if log else ''}softmax dim={dim}")
    xt = x.transpose(0, 2)
    ref = torch.log_softmax(xt.double(), 1) if log else torch.softmax(xt.double(), 1)
    check(softmax(xt, 1, log), ref, dtype, seed, "softmax of a non-contiguous view")


def test_custom_policies_and_kernel_substitution():
    seed = fresh_seed()
    x = randn(9, 50, dtype=torch.float32)
    calls = []

    class Spy:
        def __call__(self, *args, **kw):
            calls.append(kw["policy"])
            return reduce_rows(*args, **kw)

    out = reduce(x, 1, "sum", policies={"reduce_rows": Policy.make(BO=2, BR=8)}, kernels={"reduce_rows": Spy()})
    check(out, x.double().sum(1), torch.float32, seed, "sum with a custom policy", x.double().abs().sum(1))
    assert calls and calls[0].const("BR") == 8 and calls[0].const("KIND") == 0
    pol = softmax_policies((9, 50), -1, "cuda")["softmax_rows"]
    assert pol.const("BR") == 64
    check(softmax(x, 1, policies={"softmax_rows": Policy.make(BO=1, BR=16)}), torch.softmax(x.double(), 1),
          torch.float32, seed, "softmax with a custom policy")


def test_user_mistakes_raise_value_errors():
    x = randn(3, 4, dtype=torch.float32)
    for bad in (2, -3, (0, 0), (0, 5), 1.0):
        with pytest.raises(ValueError, match="dim"):
            reduce(x, bad, "sum")
    with pytest.raises(ValueError, match="kind"):
        reduce(x, 0, "median")
    with pytest.raises(ValueError, match="one dim"):
        reduce(x, (0, 1), "argmax")
    with pytest.raises(ValueError, match="floating-point"):
        reduce(torch.ones(3, 4, dtype=torch.int32), 0, "sum")
    with pytest.raises(ValueError, match="empty"):
        reduce(torch.ones(3, 0), 1, "amax")
    with pytest.raises(ValueError, match="dim"):
        softmax(x, 2)
    with pytest.raises(ValueError, match="one dim"):
        softmax(x, (0, 1))
    with pytest.raises(ValueError, match="target"):
        reduce(x, 0, "sum", target="tpu")
    assert "prod" in KINDS


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [1, 2])
def test_sum_of_powers_over_the_whole_tensor(dtype, p):
    """sum(|x|^p) in float32, in one program at small sizes and in two passes above SPLIT_MIN elements, where the
    partials' rows do not divide the length (a tail pass); an empty tensor sums to 0; other p are refused."""
    seed = fresh_seed()
    for shape in ((5, 7, 9), (66_001,)):
        x = randn(*shape, dtype=dtype, scale=3.0)
        out = sum_of_powers(x, p)
        assert out.shape == () and out.dtype == torch.float32
        check(out, x.double().abs().pow(p).sum(), dtype, seed,
              f"sum |x|^{p} over {shape}")
    assert float(sum_of_powers(torch.empty(0, 3, device=DEVICE), p)) == 0.0
    with pytest.raises(ValueError, match="p = 1 or 2"):
        sum_of_powers(randn(4, dtype=torch.float32), 3)
