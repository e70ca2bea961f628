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
        x = load(X[b, rr - shift, rc])
        store(Y[b, rr, rc], x)

@kernel
def row_blocks(X: Tensor("R", "C"), Y: Tensor("R", "C"), BR: constexpr = 16, BC: constexpr = 16):
    (pc,) = tile_grid(cdiv(C, BC))
    rc = pc * BC + arange(BC)
    for r0 in range(0, R, BR):
        rr = r0 + arange(BR)
        store(Y[rr, rc], load(X[rr, rc]))

@kernel
def unaligned_columns(X: Tensor("R", "C"), Y: Tensor("R", "C"), shift: int, BR: constexpr = 16, BC: constexpr = 16):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    for c0 in range(0, C, BC):
        x = load(X[rr, c0 + arange(BC) + shift])
        y = load(X[rr, c0 + 8 + arange(BC)])
        store(Y[rr, c0 + arange(BC)], x + y)

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


def test_a_box_whose_stride_1_offset_may_be_unaligned_keeps_a_pointer_load():
    """The copy engine starts a box at a 16-byte boundary along the stride-1 dimension; the lowering proves the
    offset a multiple of 16 elements (c0 steps by BC=16) or leaves the load to pointers: `+ shift` is unknown,
    `+ 8` is 8 elements."""
    text = _kernels()["unaligned_columns"].triton_source(Policy.make(tma=True))
    assert "make_tensor_descriptor" not in text
    aligned = _kernels()["shifted_copy"].triton_source(Policy.make(tma=True))
    assert "make_tensor_descriptor" in aligned


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
        # the reference itself: rows shifted down, zeros where the source row is outside X
        ref = torch.zeros_like(x)
        rows = torch.arange(37) - shift
        ok = (rows >= 0) & (rows < 37)
        ref[:, ok] = x[:, rows[ok]]
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


def _launched(k, *args, policy):
    """(tma, majors) of each compiled kernel the call launched."""
    seen = []
    with observe_launches(lambda compiled, flat, programs, launched:
                          seen.append((compiled.policy.tma, compiled.source.majors))):
        k(*args, policy=policy)
    return seen


def test_each_operand_layout_gets_the_kernel_lowered_for_it():
    """Descriptors are laid out around each tensor's stride-1 dimension: a transposed operand gets a sibling whose
    descriptor puts that dimension last and transposes the loaded box back; operands no descriptor can describe
    run the pointer-load sibling. Every one matches the pointer kernel bit for bit."""
    k = _kernels()["row_blocks"]
    pol = Policy.make(tma=True)
    x = torch.randn(37, 48)
    y = torch.empty_like(x)
    assert _launched(k, x, y, policy=pol) == [(True, ())]
    cases = {
        "rows stride 1 (a transpose)": (torch.randn(48, 40).t(), [(True, (("X", 0),))]),
        "address not 16-byte aligned": (torch.randn(37 * 48 + 1)[1:].view(37, 48), [(False, ())]),
        "row stride not a multiple of 16 bytes": (torch.randn(37, 45), [(False, ())]),
        "a broadcast (zero) stride": (torch.randn(1, 48).expand(37, 48), [(False, ())]),
        "transposed, its other stride 148 bytes": (torch.randn(48, 37).t(), [(False, ())]),
    }
    for why, (xs, launched) in cases.items():
        want = torch.full(xs.shape, float("nan"))
        k(xs, want, policy=Policy.make())
        got = torch.full(xs.shape, float("nan"))
        assert _launched(k, xs, got, policy=pol) == launched, why
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=why)
        torch.testing.assert_close(got, xs, rtol=0, atol=0, msg=why)
    # a row-major launch after them still takes the first kernel
    assert _launched(k, x, y, policy=pol) == [(True, ())]


def test_a_transposed_box_is_loaded_through_a_permuted_descriptor():
    from argus_inductor.dsl.lowering import lower

    src, _ = lower(_kernels()["row_blocks"].ir, Policy.make(tma=True), "cuda", (("X", 0),))
    assert "X_desc = tl.make_tensor_descriptor(X, shape=[C, R], strides=[X_stride1, 1], block_shape=[16, 16])" \
        in src.source
    assert "tl.trans(X_desc.load([v_" in src.source and ", r0]))" in src.source
    assert src.majors == (("X", 0),) and src.descriptors == (("X", (16, 16)),)
