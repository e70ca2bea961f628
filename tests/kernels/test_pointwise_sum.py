"""An elementwise chain summed (or averaged) in the same pass (`pointwise_sum`): against a float64 torch reference
over broadcast, rank-5, non-contiguous, ragged and empty inputs in float32 and bfloat16; the error bound is the
terms' magnitudes (a sum's rounding is bounded by the sum of |terms|, not by the sum)."""
from __future__ import annotations

import math

import pytest
import torch

from argus_inductor.dsl import Policy
from argus_inductor.kernels.pointwise import Chain, Step, pointwise_sum, pointwise_sum_policies

from ._support import DEVICE, DTYPES, check, fresh_seed

X0, X1 = ("in", 0), ("in", 1)
HINGE = Chain((Step("mul", (X0, X1)), Step("sub", (("const", 1.0), ("step", 0))),
               Step("clamp_min", (("step", 1), ("const", 0.0)))))
SOFT = Chain((Step("sub", (X0, X1)), Step("softplus", (("step", 0),))))


def _ref(chain: Chain, xs: list[torch.Tensor]) -> torch.Tensor:
    return chain.reference([x.double() for x in xs])


# (chain, shapes of the inputs): broadcast rows and columns, a rank-5 result whose broadcasts block merging (the
# host materializes one input), a single row, a single element
CASES = {
    "hinge_broadcast_row": (HINGE, [(37, 45), (45,)]),
    "hinge_broadcast_col": (HINGE, [(37, 45), (37, 1)]),
    "softplus_rank5": (SOFT, [(2, 3, 1, 5, 7), (1, 3, 4, 1, 7)]),
    "softplus_long_row": (SOFT, [(1, 1000), (1000,)]),
    "hinge_one": (HINGE, [(1,), (1,)]),
}


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_summed_chain_matches_torch(case: str, dtype: torch.dtype, mean: bool) -> None:
    seed = fresh_seed()
    chain, shapes = CASES[case]
    xs = [torch.randn(s, device=DEVICE).to(dtype) for s in shapes]
    out = pointwise_sum(chain, xs, mean=mean)
    terms = _ref(chain, xs)
    ref = terms.mean() if mean else terms.sum()
    assert out.shape == () and out.dtype == dtype
    scale = terms.abs().mean() if mean else terms.abs().sum()
    check(out, ref, dtype, seed, f"{case} {'mean' if mean else 'sum'}", scale=scale)


def test_non_contiguous_inputs_are_read_in_place() -> None:
    seed = fresh_seed()
    a = torch.randn(45, 37, device=DEVICE).t()  # (37, 45), transposed
    b = torch.randn(37, 90, device=DEVICE)[:, ::2]  # (37, 45), every other column
    out = pointwise_sum(SOFT, [a, b], mean=True)
    check(out, _ref(SOFT, [a, b]).mean(), torch.float32, seed, "non-contiguous")


def test_every_tile_and_chunk_counts_once() -> None:
    """Policies whose tiles leave ragged rows and columns and several chunks a program: each element is summed once
    (a sum of ones is the element count, exactly)."""
    ones = Chain((Step("add", (X0, ("const", 1.0))),))
    x = torch.zeros(3, 7, 13, 101, device=DEVICE)
    for b2, b3, chunk in [(1, 16, 1), (4, 16, 3), (8, 32, 2), (2, 128, 1)]:
        pol = {"pointwise_sum": Policy.make(B2=b2, B3=b3, CHUNK=chunk)}
        assert pointwise_sum(ones, [x], policies=pol).item() == x.numel(), (b2, b3, chunk)


def test_empty_input_sums_to_zero_and_its_mean_is_nan() -> None:
    x = torch.randn(0, 5, device=DEVICE)
    assert pointwise_sum(HINGE, [x, x]).item() == 0.0
    assert math.isnan(pointwise_sum(HINGE, [x, x], mean=True).item())


def test_bad_inputs_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="do not broadcast"):
        pointwise_sum(HINGE, [torch.randn(3, 4), torch.randn(5)])
    with pytest.raises(ValueError, match="dtype"):
        pointwise_sum(HINGE, [torch.randn(3, 4), torch.randn(3, 4).long()])


def test_gpu_tiles_keep_the_partial_sums_few() -> None:
    """At 32768 x 32768 (the broadcast hinge loss that went through a 4 GiB intermediate) a few thousand programs
    and partial sums; at one long row too, where a program per 1024 columns would leave millions."""
    for shape in [(1, 1, 32768, 32768), (1, 1, 1, 1 << 28), (1, 1, 5, 7)]:
        pols = pointwise_sum_policies(shape, "cuda")
        p = pols["pointwise_sum"]
        b2, b3, chunk = p.const("B2"), p.const("B3"), p.const("CHUNK")
        parts = shape[0] * shape[1] * -(-shape[2] // b2) * -(-shape[3] // (b3 * chunk))
        assert parts <= 8192, (shape, b2, b3, chunk, parts)
