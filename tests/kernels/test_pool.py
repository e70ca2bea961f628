"""Max, average and adaptive average pooling (argus_inductor.kernels.pool) against torch in float64, in 1, 2
and 3 spatial dimensions with stride, padding, dilation, ceil_mode and count_include_pad, at odd sizes, fp32
and bf16; outputs are NaN-poisoned so an unwritten element fails."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl import Policy
from argus_inductor.kernels import pool

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, randn


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output the module allocates starts as NaN."""
    monkeypatch.setattr(pool, "_alloc", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype,
                                                                                 device=device))


SCALE = 8 if ON_GPU else 1
MAX_POOL = torch.nn.functional.max_pool1d, F.max_pool2d, F.max_pool3d
AVG_POOL = F.avg_pool1d, F.avg_pool2d, F.avg_pool3d
ADAPTIVE = F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d

# (input shape, kernel_size, stride, padding, dilation, ceil_mode)
MAX_CASES = {
    1: [((2, 3, 37 * SCALE), 4, 2, 2, 3, False), ((3, 2, 23), 3, 2, 1, 1, True)],
    2: [((2, 3, 13 * SCALE, 11 * SCALE), 3, 2, 1, 2, False), ((1, 5, 9, 14), (2, 3), (2, 1), (1, 0), (1, 2), True)],
    3: [((2, 2, 5, 7, 6), 3, 2, 1, 1, True), ((1, 3, 6, 5, 9), (2, 1, 3), (1, 2, 2), (1, 0, 1), (2, 1, 1), False)],
}
# (input shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_CASES = {
    1: [((2, 3, 37 * SCALE), 8, 1, 4, False, True, None), ((3, 2, 23), 4, 3, 2, True, False, None)],
    2: [((2, 3, 13 * SCALE, 11 * SCALE), 3, 2, 1, False, True, None), ((1, 5, 9, 14), (2, 3), (2, 1), (1, 1), True,
                                                                         False, None),
        ((2, 2, 7, 8), 3, 2, 1, True, True, 5)],
    3: [((2, 2, 5, 7, 6), 3, 2, 1, True, True, None), ((1, 3, 6, 5, 9), (2, 1, 3), (1, 2, 2), (1, 0, 1), False,
                                                         False, 4)],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_max_pool_matches_torch(dtype, rank):
    for shape, k, s, p, d, ceil in MAX_CASES[rank]:
        seed = fresh_seed()
        x = randn(*shape, dtype=dtype)
        out = pool.max_pool(x, k, s, p, d, ceil)
        ref = MAX_POOL[rank - 1](x.double(), k, s, p, d, ceil)
        assert out.shape == ref.shape and out.dtype == dtype
        check(out, ref, dtype, seed, f"max_pool{rank}d {shape} k={k} s={s} p={p} d={d} ceil={ceil}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_avg_pool_matches_torch(dtype, rank):
    for shape, k, s, p, ceil, cip, div in AVG_CASES[rank]:
        seed = fresh_seed()
        x = randn(*shape, dtype=dtype)
        out = pool.avg_pool(x, k, s, p, ceil, cip, div)
        args = (x.double(), k, s, p, ceil, cip) + ((div,) if rank > 1 else ())
        ref = AVG_POOL[rank - 1](*args)
        assert out.shape == ref.shape and out.dtype == dtype
        check(out, ref, dtype, seed, f"avg_pool{rank}d {shape} k={k} s={s} p={p} ceil={ceil} cip={cip} div={div}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_avg_pool_matches_torch(dtype):
    cases = [((2, 3, 37), 5), ((2, 3, 5), 7), ((2, 5, 7 * SCALE, 9 * SCALE), (1, 1)), ((1, 3, 13, 10), (4, None)),
             ((2, 2, 5, 7, 6), (2, 3, 4)), ((3, 9, 11), (2, 3))]
    for shape, size in cases:
        seed = fresh_seed()
        x = randn(*shape, dtype=dtype)
        rank = len(size) if isinstance(size, tuple) else len(shape) - 2
        out = pool.adaptive_avg_pool(x, size)
        ref = ADAPTIVE[rank - 1](x.double(), size)
        assert out.shape == ref.shape and out.dtype == dtype
        check(out, ref, dtype, seed, f"adaptive_avg_pool {shape} -> {size}")


def test_unbatched_inputs_and_strided_views():
    seed = fresh_seed()
    x = randn(3, 11, 13, dtype=torch.float32)
    check(pool.max_pool(x, (3, 3), 2, 1), F.max_pool2d(x.double(), 3, 2, 1), torch.float32, seed, "unbatched max")
    check(pool.avg_pool(x, (3,), 2, 1), F.avg_pool1d(x.double(), 3, 2, 1), torch.float32, seed, "unbatched avg1d")
    check(pool.adaptive_avg_pool(x, (2, 3)), F.adaptive_avg_pool2d(x.double(), (2, 3)), torch.float32, seed,
          "unbatched adaptive")
    xt = randn(2, 13, 11, 3, dtype=torch.float32).permute(0, 3, 1, 2)  # channels-last storage
    check(pool.max_pool(xt, 2), F.max_pool2d(xt.double(), 2), torch.float32, seed, "channels-last max")


def test_policies_and_kernel_substitution():
    shape = (2, 3, 13, 11)
    for fn, pols in ((pool.max_pool_policies, pool.max_pool_policies(shape, 3, 2, 1, target="cuda")),
                     (pool.avg_pool_policies, pool.avg_pool_policies(shape, 3, 2, 1, target="interpret")),
                     (pool.adaptive_avg_pool_policies, pool.adaptive_avg_pool_policies(shape, 1, target="cuda"))):
        (name, pol), = pols.items()
        assert name in {k.name for k in pool.KERNELS}, fn.__name__
        assert {"BC", "BW"} <= dict(pol.consts).keys()
        assert 1 <= pol.const("BC") * pol.const("BW") <= 4096
    seed = fresh_seed()
    x = randn(*shape, dtype=torch.float32)
    out = pool.max_pool(x, 3, 2, 1, policies={"max_pool_kernel": Policy.make(BC=2, BW=4)})
    check(out, F.max_pool2d(x.double(), 3, 2, 1), torch.float32, seed, "max_pool with a policy override")
    seen: list[Policy] = []

    class Spy:
        name = "max_pool_kernel"

        def __call__(self, *args, policy, target):
            seen.append(policy)
            pool.max_pool_kernel(*args, policy=policy, target=target)

    out = pool.max_pool(x, 3, 2, 1, 2, kernels={"max_pool_kernel": Spy()})
    assert len(seen) == 1 and seen[0].const("KW") == 3 and seen[0].const("SH") == 2 and seen[0].const("DW") == 2
    check(out, F.max_pool2d(x.double(), 3, 2, 1, 2), torch.float32, seed, "substituted kernel")


@pytest.mark.parametrize("call,match", [
    (lambda x: pool.max_pool(x, 0), "kernel_size must be >= 1"),
    (lambda x: pool.max_pool(x, 3, 1, 2), "at most half"),
    (lambda x: pool.max_pool(x, 3, 0), "stride must be >= 1"),
    (lambda x: pool.max_pool(x, (3, 3, 3, 3)), "tuple of 2 ints"),
    (lambda x: pool.max_pool(x, 20), "too small"),
    (lambda x: pool.max_pool(x.to(torch.int32), 2), "floating-point"),
    (lambda x: pool.max_pool(x[0, 0], 2), "1 to 3 spatial"),
    (lambda x: pool.avg_pool(x, 2, divisor_override=0), "divisor_override"),
    (lambda x: pool.avg_pool(x, (2, 2, 2), padding=(1, 1)), "padding"),
    (lambda x: pool.adaptive_avg_pool(x, (0, 2)), "positive"),
    (lambda x: pool.adaptive_avg_pool(x, (1, 2, 3, 4)), "does not fit"),
])
def test_bad_input_gives_value_error(call, match):
    x = torch.randn(2, 3, 9, 8, device=DEVICE)
    with pytest.raises(ValueError, match=match):
        call(x)
