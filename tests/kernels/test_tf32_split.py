"""Three-pass tf32 on pre-split operands: tf32_split writes [hi hi lo] / [hi lo hi] along K exactly, a GEMM over 3K
on them computes A @ B to float32 accuracy (where hi @ hi alone is tf32's), and the op specs pick the split
(and the checker proves it) exactly where it pays."""
from __future__ import annotations

import pytest
import torch

from argus_inductor.dsl import Policy
from argus_inductor.kernels.gemm import gemm_epilogue, split_operand, split_operands, tf32x3_split_pays

from ._support import DEVICE, fresh_seed, rel_err

TARGET = None if DEVICE != "cpu" else "interpret"


def _split(x: torch.Tensor, k_dim: int, lo: int) -> torch.Tensor:
    return split_operand(x, k_dim, lo, target=TARGET)


@pytest.mark.parametrize("layout", ["k_contiguous", "a_m_major", "b_n_major", "b_k_major", "batched"])
def test_split_is_exact_and_k_contiguous(layout):
    seed = fresh_seed()
    k = 53  # not a multiple of the 128-wide column tile
    if layout == "k_contiguous":  # A (M, K) row-major
        x, k_dim = torch.randn(37, k, device=DEVICE), 1
    elif layout == "a_m_major":  # A = a.T of an untransposed a (K, M): M contiguous
        x, k_dim = torch.randn(k, 37, device=DEVICE).t(), 1
    elif layout == "b_n_major":  # B (K, N) row-major, as torch.matmul(a, b) passes it
        x, k_dim = torch.randn(k, 29, device=DEVICE), 0
    elif layout == "b_k_major":  # B = weight.t() of an nn.Linear weight (N, K)
        x, k_dim = torch.randn(29, k, device=DEVICE).t(), 0
    else:  # a batch of A (B, M, K)
        x, k_dim = torch.randn(3, 19, k, device=DEVICE) * 1e3, 2
    for lo_slot in (0, 1, 2):
        y = _split(x, k_dim, lo_slot)
        parts = y.split(k, dim=k_dim)
        lo, his = parts[lo_slot], [p for i, p in enumerate(parts) if i != lo_slot]
        assert torch.equal(his[0], his[1]), f"seed {seed}"
        hi = his[0]
        assert torch.equal(hi + lo, x), f"hi + lo must be x exactly (seed {seed})"
        assert int((hi.contiguous().view(torch.int32) & 8191).abs().sum()) == 0, "hi must be a tf32 number"
        assert float(lo.abs().max()) <= float(x.abs().max()) * 2.0 ** -10
        # K-contiguous whatever x's layout: tf32 wgmma reads both operands K-major
        assert y.stride(k_dim) == 1


def test_gemm_over_the_split_operands_has_float32_accuracy():
    seed = fresh_seed()
    m, n, k = 33, 45, 70
    a = torch.randn(m, k, device=DEVICE)
    w = torch.randn(n, k, device=DEVICE)
    ref = a.double() @ w.double().t()
    a3, b3 = split_operands(a, w.t(), target=TARGET)
    out = torch.empty(m, n, device=DEVICE)
    kw = {"target": TARGET} if TARGET else {}
    pol = Policy.make(BM=32, BN=32, BK=32, input_precision="tf32")
    gemm_epilogue(a3, b3, out.new_empty(1), out, policy=pol, **kw)
    err = rel_err(out, ref)
    assert err < 1e-5, f"relative error {err:.2e} (seed {seed})"
    # the lo parts carry what tf32 drops: hi @ hi alone is three orders worse
    hi_only = a3[:, 2 * k:].double() @ b3[2 * k:].double()  # [hi lo hi] @ [lo; hi; hi]: the last slots are hi
    assert rel_err(hi_only, ref) > 30 * err + 1e-5


def test_the_split_pays_only_where_the_gemm_is_compute_bound():
    assert tf32x3_split_pays(4096, 4096, 4096)
    assert tf32x3_split_pays(1024, 1024, 1024)
    assert not tf32x3_split_pays(32768, 256, 64)     # too little work to repay two more launches
    assert not tf32x3_split_pays(1, 4096, 4096)      # matrix-vector: memory-bound, the split would triple bytes
    assert not tf32x3_split_pays(16384, 16, 4096)    # tall-skinny
    assert not tf32x3_split_pays(4096, 4096, 8)      # almost no K
    assert not tf32x3_split_pays(512, 256, 1024)     # per matrix: a batch of small ones ran slower split
    assert not tf32x3_split_pays(256, 256, 131072)   # 3K truncating steps: 1.5e-3 relative error on H100


def _sig(op: str, m: int, n: int, k: int, dtype: torch.dtype = torch.float32, arch: str = "sm_90"):
    from dataclasses import replace

    from argus_inductor.runtime.signature import make_signature

    a, w = torch.empty(m, k, dtype=dtype), torch.empty(n, k, dtype=dtype)
    if op == "bmm":
        sig = make_signature("bmm", "", [a[None], w.t()[None]], {"N": n, "K": k}, {"B": 1, "M": m})
    else:
        sig = make_signature("gemm", "", [a, w], {"N": n, "K": k}, {"M": m})
    return replace(sig, arch=arch)


@pytest.mark.parametrize("op", ["gemm", "bmm"])
def test_float32_plans_split_where_it_pays_and_the_checker_proves_them_at_3k(op):
    from argus_inductor import ops

    prec = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # three-pass tf32 ("highest" runs full float32)
        sig = _sig(op, 1024, 1024, 1024)
        spec = ops.spec_for(sig)
        pols = spec.policies(spec.template(sig, "cuda"), sig)
        mma = "bmm_kernel" if op == "bmm" else "gemm_epilogue"
        assert "tf32_split" in pols and pols[mma].input_precision == "tf32"
        assert not pols[mma].persistent and pols[mma].const("BN") == 256  # the pre-split template (H100 sweep)
        assert spec.checked_shapes(sig, pols)[mma]["K"] == 3 * 1024
        entry = ops.make_entry(sig, origin="warmup", target="cuda", verify=True)
        assert entry.verification["status"] == "verified", entry.verification
        assert set(entry.verification["kernels"]) >= {mma, "tf32_split"}
        assert "bitcast=True" in entry.triton_source
        # memory-bound shapes keep the in-register three-pass product
        small = _sig(op, 1, 4096, 4096)
        pols = spec.policies(spec.template(small, "cuda"), small)
        assert "tf32_split" not in pols and all(p.input_precision == "tf32x3" for p in pols.values())
        # one tf32 pass asked for: no split
        torch.set_float32_matmul_precision("medium")
        pols = spec.policies(spec.template(sig, "cuda"), sig)
        assert "tf32_split" not in pols and pols[mma].input_precision == "tf32"
        # full float32: no split, no tf32
        torch.set_float32_matmul_precision("highest")
        pols = spec.policies(spec.template(sig, "cuda"), sig)
        assert "tf32_split" not in pols and pols[mma].input_precision == "ieee"
    finally:
        torch.set_float32_matmul_precision(prec)


def test_bf16_and_cpu_signatures_never_split():
    from argus_inductor import ops

    for sig in (_sig("gemm", 512, 512, 512, torch.bfloat16), _sig("gemm", 512, 512, 512, arch="cpu")):
        spec = ops.spec_for(sig)
        assert "tf32_split" not in spec.policies(spec.template(sig, "cuda"), sig)


def test_the_agent_verifies_and_runs_the_split_the_same_way(monkeypatch):
    from argus_inductor.specs import gemm as agent_gemm
    from argus_inductor.specs import spec as agent_spec
    from argus_inductor.specs import templates
    from argus_inductor.specs.base import Problem, generator

    seed = fresh_seed()
    gemm = agent_spec("gemm")
    big = Problem("gemm", "bias", {"M": 2048, "N": 2048, "K": 1024}, "float32", device=DEVICE)
    three = Policy.make(BM=32, BN=32, BK=32, HAS_BIAS=1, input_precision="tf32x3")
    assert gemm.verify_shapes(big, "gemm_epilogue", three)[0]["K"] == 3 * 1024
    assert gemm.verify_shapes(big, "gemm_epilogue", Policy.make(BM=64, BN=64, BK=32))[0]["K"] == 1024
    # the agent times what runs: at a small shape made to split, its run goes through the split operands
    calls = []
    real = agent_gemm.split_operands
    monkeypatch.setattr(agent_gemm, "tf32x3_split_pays", lambda *dims: True)
    monkeypatch.setattr(agent_gemm, "split_operands", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    prob = Problem("gemm", "bias", {"M": 40, "N": 48, "K": 70}, "float32", device=DEVICE)
    inputs = gemm.make_inputs(prob, generator(DEVICE, seed))
    out = gemm.run(prob, {"gemm_epilogue": templates.kernel("gemm_epilogue")}, {"gemm_epilogue": three}, inputs)
    assert calls, "the float32 three-pass candidate must run on split operands"
    ref = gemm.reference(prob, inputs)
    assert rel_err(out, ref) < (1e-5 if DEVICE == "cpu" else 1e-4), f"seed {seed}"


def test_split_of_infinities_nan_and_extremes():
    """+-inf splits as hi = x, lo = 0, so a GEMM over the split operands is infinite where A @ B is (lo = inf - inf
    made it NaN); NaN stays NaN; float32's largest and smallest numbers split exactly."""
    x = torch.tensor([[float("inf"), -float("inf"), float("nan"), 3.4028235e38, -1.17549435e-38, 1e-45, -0.0, 1.0]],
                     device=DEVICE)
    y = _split(x, 1, 1)
    lo, hi = y[:, 8:16], y[:, :8]
    assert torch.equal(hi[0, :2], x[0, :2]) and torch.equal(lo[0, :2], torch.zeros(2, device=DEVICE))
    assert bool(hi[0, 2].isnan() | lo[0, 2].isnan())
    assert torch.equal(hi[0, 3:] + lo[0, 3:], x[0, 3:])
    a = torch.randn(4, 16, device=DEVICE)
    a[1, 3], a[2, 5] = float("inf"), -float("inf")
    w = torch.rand(8, 16, device=DEVICE) + 0.5  # positive: the infinite rows stay infinite, of a's sign
    a3, b3 = split_operands(a, w.t(), target=TARGET)
    out = torch.empty(4, 8, device=DEVICE)
    kw = {"target": TARGET} if TARGET else {}
    gemm_epilogue(a3, b3, out.new_empty(1), out, policy=Policy.make(BM=16, BN=16, BK=16, input_precision="tf32"),
                  **kw)
    ref = a @ w.t()
    assert torch.equal(out.isinf(), ref.isinf()) and not out.isnan().any()
    assert torch.equal(out[out.isinf()], ref[ref.isinf()])
