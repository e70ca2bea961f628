"""zero_terms(x, cond): a kernel's word that a term is zero by the op's definition where cond is false (a convolution
tap off the input, off its stride, past the kernel), so that the lanes its mask kills there in some iterations of the
tap loop still have their whole sum. The claim is scoped to cond: a conjunct of the load's mask that is not cond's (a
real in-bounds tap dropped) still leaves a partial sum, and is rejected; the load's index must lie inside the tensor
wherever cond holds (a 'zero-terms' obligation), and the claim excuses no lane on a GEMM's moving mask it does not
name. The op is a ghost: the lowered Triton is the same with and without it."""
from __future__ import annotations

import re

import pytest

from argus_inductor.dsl import DSLError, Policy, kernels_from_source
from argus_inductor.dsl.lowering import lower
from argus_inductor.invariants import verify

from .test_conv_bugs import DEPTHWISE, FWD, KERNELS, TRANSPOSED, TRANSPOSED_GCD, _setup
from .test_moving_lane_bugs import A_GEMM, SHAPES, SRC

CONV_MASK = "mask=(rc < CG)[:, None] & inside[None, :])"
INCOMPLETE = {"reduction-complete", "loop-summary"}


def _conv(name: str, case, old: str, new: str):
    text = "from argus_inductor.dsl import *\n" + KERNELS[name].ir.source
    assert text.count(old) == 1, f"{name} changed: update this test"
    kname, pol, shapes = _setup(case)
    assert kname == name
    return verify(kernels_from_source(text.replace(old, new), filename=f"{name}.py")[name], pol, shapes)


@pytest.mark.parametrize("name,case,old,new", [
    # a tap that is on the input (in bounds, on its stride) dropped from the load's mask, next to the zero taps
    ("conv_fwd", FWD, CONV_MASK, "mask=(rc < CG)[:, None] & (inside & (t != 1))[None, :])"),
    ("conv_fwd", FWD, CONV_MASK, "mask=(rc < CG)[:, None] & (inside & (rm + t != 7))[None, :])"),
    ("conv_transpose_fwd", TRANSPOSED, CONV_MASK, "mask=(rc < CG)[:, None] & (inside & (t != 1))[None, :])"),
    ("conv_transpose_fwd", TRANSPOSED_GCD, CONV_MASK, "mask=(rc < CG)[:, None] & (inside & (t > 0))[None, :])"),
    ("conv_depthwise", DEPTHWISE, "x = load(X[n, rc, s], mask=inside[None, :])",
     "x = load(X[n, rc, s], mask=(inside & (t != 2))[None, :])"),
    # the claim names less than the mask: the taps off the input are no longer excused
    ("conv_fwd", FWD, "zero_terms(a, inside[None, :])", "zero_terms(a, (rm < OS)[None, :])"),
    ("conv_depthwise", DEPTHWISE, "zero_terms(x, inside[None, :])", "zero_terms(x, (ih >= 0)[None, :])"),
], ids=["fwd-tap-1", "fwd-lane-tap", "transposed-tap-1", "transposed-gcd-first-tap", "depthwise-tap-2",
        "fwd-claim-names-lanes-only", "depthwise-claim-names-one-edge"])
def test_a_real_tap_dropped_next_to_the_zero_taps_is_rejected(name, case, old, new):
    res = _conv(name, case, old, new)
    assert not res.ok, f"{name} with `{new}` was not rejected"
    assert INCOMPLETE & {v.kind for v in res.violations}, res.text()


def test_a_term_whose_index_leaves_the_tensor_where_the_claim_holds_is_rejected():
    """Where cond holds the term is not zero by definition: the load's auto-mask (its index inside X) that the claim
    lets go of where cond is false must hold there, or the load silently dropped a real term."""
    res = _conv("conv_fwd", FWD, "s = (id_ * IH + ih) * IW + iw", "s = (id_ * IH + ih) * IW + iw + 7")
    assert not res.ok, res.text()
    v = next((v for v in res.violations if v.kind == "zero-terms"), None)
    assert v is not None, res.text()
    assert "outside the tensor" in v.message, v.message


@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("planted,claim", [
    ("(rm < 2 + k)", "(rm < M)[:, None]"),       # the claim names the static mask, not the moving one
    ("(rm < M - k)", "(rm < M)[:, None]"),
    ("(rm < 2 + k)", "(rk < K)[None, :]"),       # the claim names the reduced index's mask
], ids=["grow-claims-static", "shrink-claims-static", "grow-claims-k"])
def test_the_claim_does_not_excuse_a_gemm_lane_mask_it_does_not_name(planted, claim, mode):
    a = A_GEMM.replace("(rm < M)", planted)
    text = SRC.replace(A_GEMM, f"{a}\n        zero_terms(a, {claim})", 1)
    res = verify(kernels_from_source(text, "zero.py")["moving_gemm"], Policy(),
                 SHAPES["moving_gemm"] if mode == "specialized" else None)
    assert not res.ok, res.text()
    v = next((v for v in res.violations if v.kind == "reduction-complete"), None)
    assert v is not None and "never included K index" in v.message, res.text()


@pytest.mark.parametrize("case", [FWD, TRANSPOSED, TRANSPOSED_GCD, DEPTHWISE], ids=["fwd", "transposed",
                                                                                   "transposed-gcd", "depthwise"])
def test_without_the_claim_the_zero_taps_read_as_partial_sums(case):
    """The conv kernels need the claim: without it their masked-off taps are a mask that moves with the tap loop."""
    name, _, _ = _setup(case)
    var = "x" if name == "conv_depthwise" else "a"
    res = _conv(name, case, f"zero_terms({var}, inside[None, :])", "")
    assert not res.ok, res.text()
    assert INCOMPLETE & {v.kind for v in res.violations}, res.text()


def test_zero_terms_is_a_ghost():
    text = SRC.replace(A_GEMM, f"{A_GEMM}\n        zero_terms(a, (rm < M)[:, None])", 1)
    with_claim = kernels_from_source(text, "zero.py")["moving_gemm"]
    without = kernels_from_source(SRC, "zero.py")["moving_gemm"]
    body = [re.sub(r"^# Generated by .*\n", "", lower(k.ir, Policy())[0].source) for k in (with_claim, without)]
    assert body[0] == body[1]


def test_zero_terms_needs_a_boolean_predicate_of_the_terms_shape():
    text = SRC.replace(A_GEMM, f"{A_GEMM}\n        zero_terms(a, rm)", 1)
    with pytest.raises(DSLError, match="zero_terms needs a boolean predicate"):
        kernels_from_source(text, "zero.py")
