"""policy.tma: which loads the lowering turns into tensor-descriptor box loads, that a box past the tensor's edges
reads zeros as a masked load does, and that a launch whose operands no descriptor can describe runs the
pointer-load twin of the same kernel."""
from __future__ import annotations

import torch

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.dsl.runtime import observe_launches

SRC = '''\
from argus_inductor.dsl import *

@kernel
def shifted_copy(X: Tensor("B", "R", "C"), Y: Tensor("B", "R", "C"), shift: int, BR: constexpr = 16,
                 BC: constexpr = 16):
    b, pr = tile_grid(B, cdiv(R, BR))
    rr = pr * BR + arange(BR)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[b, rr - shift, rc + shift])
        store(Y[b, rr, rc], x)

@kernel
def mixed_loads(X: Tensor("R", "C"), I: Tensor("R", dtype=int32), Y: Tensor("R", "C"), BR: constexpr = 16, BC: constexpr = 16):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    rc = arange(BC)
    once = load(X[rr, rc])
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        a = load(X[rr, rc])
        g = load(X[load(I[rr]), rc])
        m = load(X[rr, rc], mask=(rc < 3)[None, :], other=0.0)
        w = load(X[rr, rc], other=-inf)
        store(Y[rr, rc], once + a + g + m + w)
'''


def _kernels():
    return kernels_from_source(SRC)


def test_box_loads_become_descriptors_created_once_at_entry():
    text = _kernels()["shifted_copy"].triton_source(Policy.make(tma=True))
    body = text.split("):\n", 1)[1].splitlines()
    assert body[0].strip().startswith("X_desc = tl.make_tensor_descriptor(X, shape=[B, R, C]")
    assert "strides=[X_stride0, X_stride1, 1], block_shape=[1, 16, 16]" in body[0]
    assert text.count("make_tensor_descriptor") == 1
    assert "X_desc.load([b, v_" in text and "tl.reshape(" in text
    assert "tl.store(" in text  # stores keep pointers
    assert "make_tensor_descriptor" not in _kernels()["shifted_copy"].triton_source(Policy.make())
    assert "make_tensor_descriptor" not in _kernels()["shifted_copy"].triton_source(Policy.make(tma=True), "hip")


def test_gathers_masked_loads_and_nonzero_fills_keep_pointer_loads():
    text = _kernels()["mixed_loads"].triton_source(Policy.make(tma=True))
    assert text.count("X_desc.load(") == 1  # only `a`: the box with the default zero fill, in the loop
    assert "I_desc.load(" in text  # I[rr] is a 1-D box too
    assert text.count("tl.load(X_ptrs") == 4  # `once` (outside any loop), the gather, the masked, the -inf fill


def test_box_past_the_edges_reads_zeros_like_a_masked_load():
    k = _kernels()["shifted_copy"]
    x = torch.randn(2, 37, 45)
    for shift in (0, 3, -5, 40):
        want = torch.full_like(x, float("nan"))
        got = torch.full_like(x, float("nan"))
        k(x, want, shift, policy=Policy.make())
        k(x, got, shift, policy=Policy.make(tma=True))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        # the reference itself: rows shifted down, columns shifted left, zeros where the source is outside X
        ref = torch.zeros_like(x)
        rows = torch.arange(37) - shift
        cols = torch.arange(45) + shift
        ok = ((rows >= 0) & (rows < 37))[:, None] & ((cols >= 0) & (cols < 45))[None, :]
        ref[:, ok] = x[:, rows.clamp(0, 36)][:, :, cols.clamp(0, 44)][:, ok]
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


def _launched_policies(k, *args, policy):
    seen = []
    with observe_launches(lambda compiled, flat, programs, launched: seen.append(compiled.policy.tma)):
        k(*args, policy=policy)
    return seen


def test_operands_no_descriptor_can_describe_run_the_pointer_twin():
    k = _kernels()["shifted_copy"]
    pol = Policy.make(tma=True)
    x = torch.randn(2, 37, 48)
    y = torch.empty_like(x)
    assert _launched_policies(k, x, y, 0, policy=pol) == [True]
    torch.testing.assert_close(y, x)
    cases = {
        "innermost stride is not 1": torch.randn(2, 48, 37).transpose(1, 2),
        "address not 16-byte aligned": torch.randn(2 * 37 * 48 + 1)[1:].view(2, 37, 48),
        "row stride not a multiple of 16 bytes": torch.randn(2, 37, 45),
        "a broadcast (zero) stride": torch.randn(1, 37, 48).expand(2, 37, 48),
    }
    for why, xs in cases.items():
        ys = torch.full(xs.shape, float("nan"))
        assert _launched_policies(k, xs, ys, 0, policy=pol) == [False], why
        torch.testing.assert_close(ys, xs, rtol=0, atol=0, msg=why)
    # a describable launch after them still takes the descriptor kernel
    assert _launched_policies(k, x, y, 0, policy=pol) == [True]
