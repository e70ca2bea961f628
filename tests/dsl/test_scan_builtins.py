"""The prod, cumsum and cumprod builtins: typed by the frontend, lowered to Triton, run under the
interpreter against torch, and understood by the invariant checker (covers of products and prefixes)."""
from __future__ import annotations

import pytest
import torch

from argus_inductor.dsl import DSLError, Policy, kernels_from_source
from argus_inductor.dsl.ir import walk_block
from argus_inductor.invariants import verify
from tests.kernels._support import check, fresh_seed, poisoned

SRC = '''\
from argus_inductor.dsl import *

@kernel
def row_prod(X: Tensor("R", "C"), Y: Tensor("R"), BR: constexpr = 4, BC: constexpr = 16):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    acc = full((BR,), 1.0, float32)
    for c0 in range(0, C, BC):
        x = load(X[rr, c0 + arange(BC)], other=1.0)
        acc = acc * prod(x, 1)
    store(Y[rr], acc)

@kernel
def row_scans(X: Tensor("R", "C"), S: Tensor("R", "C"), P: Tensor("R", "C"), RS: Tensor("R", "C"),
              BR: constexpr = 4, BC: constexpr = 64):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    rc = arange(BC)
    x = load(X[rr, rc], other=1.0)
    z = load(X[rr, rc], other=0.0)
    store(S[rr, rc], cumsum(z, 1))
    store(P[rr, rc], cumprod(x, axis=-1))
    store(RS[rr, rc], cumsum(z, 1, reverse=True))
'''


@pytest.fixture(scope="module")
def kernels():
    return kernels_from_source(SRC, filename="scan_builtins.py")


def test_frontend_types_scans_and_prod_like_sum(kernels):
    ops = list(walk_block(kernels["row_scans"].ir.body))
    scans = [op for op in ops if op.kind == "scan"]
    assert [(op.attrs["op"], op.attrs["axis"], op.attrs["reverse"]) for op in scans] == \
        [("cumsum", 1, False), ("cumprod", 1, False), ("cumsum", 1, True)]
    assert all(str(op.result.type) == "tile[BR, BC]<float32>" for op in scans)
    red = next(op for op in kernels["row_prod"].ir.walk() if op.kind == "reduce")
    assert red.attrs["op"] == "prod" and str(red.result.type) == "tile[BR]<float32>"


def test_lowering_uses_triton_scans_and_a_multiply_combine(kernels):
    text = kernels["row_prod"].triton_source(Policy.make())
    assert "def _argus_mul(a, b):" in text and "tl.reduce(" in text and "_argus_mul)" in text
    scans = kernels["row_scans"].triton_source(Policy.make())
    assert "tl.cumsum(" in scans and "tl.cumprod(" in scans and "reverse=True" in scans
    assert "_argus_mul" not in scans


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prod_matches_torch(kernels, dtype):
    seed = fresh_seed()
    x = (1 + 0.05 * torch.randn(7, 45)).to(dtype)
    y = poisoned(7, dtype=dtype)
    kernels["row_prod"](x, y)
    check(y, x.double().prod(1), dtype, seed, "prod")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scans_match_torch(kernels, dtype):
    seed = fresh_seed()
    x = (1 + 0.05 * torch.randn(6, 37)).to(dtype)
    s, p, rs = (poisoned(6, 37, dtype=dtype) for _ in range(3))
    kernels["row_scans"](x, s, p, rs)
    x64 = x.double()
    check(s, x64.cumsum(1), dtype, seed, "cumsum")
    check(p, x64.cumprod(1), dtype, seed, "cumprod")
    check(rs, x64.flip(1).cumsum(1).flip(1), dtype, seed, "reverse cumsum")


def test_checker_proves_the_builtins_at_odd_shapes(kernels):
    pol = Policy.make()
    assert verify(kernels["row_prod"], pol, {"R": 7, "C": 45}).proved
    assert verify(kernels["row_scans"], pol, {"R": 6, "C": 37}).proved


def test_checker_tracks_product_covers_through_a_loop(kernels):
    bad = SRC.replace("for c0 in range(0, C, BC):", "for c0 in range(BC, C, BC):", 1)
    res = verify(kernels_from_source(bad)["row_prod"], Policy.make(), {"R": 7, "C": 45})
    assert not res.ok
    assert any(v.kind == "reduction-complete" and "product over C never included C index" in v.text()
               for v in res.violations), res.text()


def test_partial_products_do_not_join_by_addition():
    bad = SRC.replace("acc = acc * prod(x, 1)", "acc = acc + prod(x, 1)", 1)
    res = verify(kernels_from_source(bad)["row_prod"], Policy.make(), {"R": 7, "C": 45})
    assert not res.ok and any(v.kind in ("reduction-complete", "loop-summary") for v in res.violations), res.text()


def test_checker_requires_the_whole_prefix_of_a_scan(kernels):
    # a tile narrower than the row: cumsum at column 20 never saw columns 16..20 (and later ones are unwritten)
    res = verify(kernels["row_scans"], Policy.make(BC=16), {"R": 6, "C": 37})
    assert not res.ok
    assert any(v.kind == "write-all" for v in res.violations)
    # a scan that starts at column 1: every prefix misses column 0
    bad = SRC.replace("rc = arange(BC)", "rc = 1 + arange(BC)", 1)
    res = verify(kernels_from_source(bad)["row_scans"], Policy.make(), {"R": 6, "C": 37})
    assert any(v.kind == "reduction-complete" and "never included C index 0" in v.text()
               for v in res.violations), res.text()


def test_frontend_rejects_bad_scan_arguments():
    bad = SRC.replace("cumsum(z, 1, reverse=True)", "cumsum(z, 1, reverse=BR)", 1)
    with pytest.raises(DSLError, match="reverse must be the literal True or False"):
        kernels_from_source(bad)
    bad = SRC.replace("cumsum(z, 1)", "cumsum(z, 2)", 1)
    with pytest.raises(DSLError, match="axis 2 is out of range"):
        kernels_from_source(bad)
