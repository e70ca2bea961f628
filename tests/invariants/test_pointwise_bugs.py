"""Kernels generated from elementwise chains (standalone, summed, GEMM epilogue, conv epilogue) prove at odd concrete
shapes, and a bug planted in their generated text is rejected with a counterexample at the mutated line or at
the assertion it breaks."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.conv import conv_geometry
from argus_inductor.kernels.pointwise import (
    Chain,
    Step,
    conv_chain_kernel,
    conv_chain_source,
    linear_chain_kernel,
    linear_chain_source,
    pointwise_kernel,
    pointwise_source,
    pointwise_sum_kernel,
    pointwise_sum_source,
)

from .planted import assert_flags_one_of, first_line

X0, X1, X2 = ("in", 0), ("in", 1), ("in", 2)
CHAIN = Chain((Step("mul", (X0, X1)), Step("softplus", (("step", 0),)), Step("add", (("step", 1), X2)),
               Step("hardswish", (("step", 2),))))

_CONV_NAME, _CONV_CONSTS, _CONV_SHAPES = conv_geometry((2, 6, 9, 11), (8, 3, 3, 3), 2, 1, 1, 2)
_CONVT_NAME, _CONVT_CONSTS, _CONVT_SHAPES = conv_geometry((2, 4, 5, 7), (4, 3, 2, 3), 2, 1, 1, 2, True, 1)

# name -> (source maker, policy, concrete shapes not multiples of the tiles)
SPECS: dict[str, tuple[Callable[[], str], dict[str, Any], dict[str, int]]] = {
    "pointwise": (lambda: pointwise_source(CHAIN, 3), dict(B2=4, B3=16), dict(D0=2, D1=3, D2=7, D3=37)),
    "pointwise_row": (lambda: pointwise_source(CHAIN, 3), dict(B2=1, B3=64), dict(D0=1, D1=1, D2=1, D3=301)),
    # summed in the same pass: 7 rows in tiles of 4, 37 columns in programs of 2 x 16 (ragged in both)
    "pointwise_sum": (lambda: pointwise_sum_source(CHAIN, 3), dict(B2=4, B3=16, CHUNK=2),
                      dict(D0=2, D1=3, D2=7, D3=37, P0=6, P2=2, P3=2)),
    "linear": (lambda: linear_chain_source(CHAIN, 2), dict(BM=16, BN=16, BK=16, HAS_BIAS=1),
               dict(M=37, N=29, K=45, NB=29)),
    "conv": (lambda: conv_chain_source(CHAIN, 2), dict(BM=16, BN=16, BK=16, HAS_BIAS=1, **_CONV_CONSTS),
             _CONV_SHAPES),
    "conv_transpose": (lambda: conv_chain_source(CHAIN, 2, transposed=True),
                       dict(BM=16, BN=16, BK=16, HAS_BIAS=1, **_CONVT_CONSTS), _CONVT_SHAPES),
}


def _verify(name: str, text: str):
    _, pol, shapes = SPECS[name]
    (k,) = kernels_from_source(text, filename=f"{name}.py").values()
    return verify(k, Policy.make(**pol), shapes)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_kernel_proves_at_odd_shapes(name):
    res = _verify(name, SPECS[name][0]())
    assert res.proved, res.text()


def test_memoized_kernels_are_the_generated_text():
    assert pointwise_kernel(CHAIN, 3).ir.source in pointwise_source(CHAIN, 3)
    assert pointwise_sum_kernel(CHAIN, 3).ir.source in pointwise_sum_source(CHAIN, 3)
    assert linear_chain_kernel(CHAIN, 2).ir.source in linear_chain_source(CHAIN, 2)
    assert conv_chain_kernel(CHAIN, 2).ir.source in conv_chain_source(CHAIN, 2)


# (kernel, text to replace, its replacement, text of the line the bug breaks)
BUGS = [
    ("pointwise", "store(Y[i0, i1, r2, r3]", "store(Y[i0, i1, r2, r3 + 1]", "store(Y[i0, i1, r2, r3 + 1]"),
    ("pointwise", "store(Y[i0, i1, r2, r3]", "store(Y[i0, i1, r2 // 2, r3]", "store(Y[i0, i1, r2 // 2, r3]"),
    ("pointwise", "i1 = p01 % D1", "i1 = p01 % D0", "store(Y[i0, i1, r2, r3]"),
    ("pointwise", "cdiv(D3, B3)", "D3 // B3", "store(Y[i0, i1, r2, r3]"),  # the ragged tail is never written
    ("pointwise", "x1 = load(X1[i0, i1, r2, r3])", "x1 = load(X1[i0, i1, r2, r3 + 1])",
     'assert_tag((tag_of(x1, "D0")'),
    ("pointwise", "x2 = load(X2[i0, i1, r2, r3])", "x2 = load(X2[i0, 0, r2, r3])", 'assert_tag((tag_of(x2, "D0")'),
    ("pointwise_row", "r3 = p3 * B3 + arange(B3)", "r3 = p3 * B3 + arange(B3) + 1", "store(Y[i0, i1, r2, r3]"),
    # the sum: padded lanes summed, a tile's columns cut short, programs' tiles overlapping, a row skipped, an
    # input read at the wrong place
    ("pointwise_sum", "where((r2[:, None] < D2) & (r3[None, :] < D3), ", "where(r2[:, None] < D2, ",
     "acc = acc + sum(where(r2[:, None] < D2, "),
    ("pointwise_sum", "for j in range(0, CHUNK):", "for j in range(0, CHUNK - 1):", 'assert_tag((tag_of(part, '),
    ("pointwise_sum", "lo = p3 * (CHUNK * B3)", "lo = p3 * B3", 'assert_tag((tag_of(x0, "D0") * D1'),
    ("pointwise_sum", "r2 = p2 * B2 + arange(B2)", "r2 = p2 * B2 + arange(B2) + 1", 'assert_tag((tag_of(x0, "D0") * D1'),
    ("pointwise_sum", "x1 = load(X1[i0, i1, r2, r3])", "x1 = load(X1[i0, i1, r2 + 1, r3])",
     'assert_tag((tag_of(x1, "D0")'),
    ("linear", "e1 = load(E1[rm, rn])", "e1 = load(E1[rm, rn + 1])", 'assert_tag((tag_of(e1, "M")'),
    ("linear", "e2 = load(E2[rm, rn])", "e2 = load(E2[rm // 2, rn])", 'assert_tag((tag_of(e2, "M")'),
    ("conv", "e1 = load(E1[n, g, rn, rm])", "e1 = load(E1[n, 0, rn, rm])", 'assert_tag((tag_of(e1, "N")'),
    ("conv", "e2 = load(E2[n, g, rn, rm])", "e2 = load(E2[n, g, rn, rm + 1])", 'assert_tag((tag_of(e2, "N")'),
    ("conv_transpose", "e1 = load(E1[n, g, rn, od, oh, ow]", "e1 = load(E1[0, g, rn, od, oh, ow]",
     'assert_tag((tag_of(e1, "N")'),
    ("conv_transpose", "e2 = load(E2[n, g, rn, od, oh, ow]", "e2 = load(E2[n, g, rn, od, oh, ow + 1]",
     'assert_tag((tag_of(e2, "N")'),
]


@pytest.mark.parametrize("name,old,new,broken", BUGS, ids=[f"{b[0]}:{b[2]}" for b in BUGS])
def test_planted_bug_is_rejected(name, old, new, broken):
    text = SPECS[name][0]()
    assert old in text, f"generated {name} text changed: update this test"
    bad = text.replace(old, new, 1)
    res = _verify(name, bad)
    assert not res.ok, f"{name} with `{new}` was not rejected"
    assert_flags_one_of(res, {first_line(bad, new.strip()), first_line(bad, broken)})
    text = res.text()
    # a wrong value names the program/thread that computes it; an unwritten element names no program
    assert "thread" in text or "no program and element of the grid stores to it" in text, text
