"""Float32 precision (issue 40): which mma precision each of torch's settings selects for every float32 op family,
and the accuracy of what "highest" runs against a float64 reference.

torch.get_float32_matmul_precision() is "highest" by default and Inductor honours it, so Argus does too:
"highest" -> full float32 products ("ieee"), "high" -> three-pass tf32 (pre-split where that pays), "medium" -> one
tf32 pass; convolutions follow cuDNN's allow_tf32. The GPU comparison with cuBLAS is test_fp32_gemm_vs_cublas.py."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch

from argus_inductor import ops
from argus_inductor.dsl import Policy
from argus_inductor.kernels.gemm import bmm_kernel, gemm_epilogue
from argus_inductor.kernels.gemm_residual import gemm_gate_up, gemm_residual
from argus_inductor.kernels.policies import fp32_precision
from argus_inductor.runtime.signature import make_signature

from ._support import DEVICE, ON_GPU, fresh_seed


@pytest.fixture
def matmul_precision() -> Iterator[None]:
    """Restores torch's float32 matmul precision and cuDNN's allow_tf32 after the test."""
    prec, conv = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(prec)
    torch.backends.cudnn.allow_tf32 = conv


def _signatures(m: int, n: int, k: int) -> dict[str, object]:
    """A float32 signature of each op family on an sm_90 device (the CPU's never set a precision: the interpreter
    computes in float32 whatever the policy says)."""
    x, w = torch.empty(m, k), torch.empty(n, k)
    sigs = {
        "gemm": make_signature("gemm", "bias", [x, w], {"N": n, "K": k}, {"M": m}),
        "gemm_residual": make_signature("gemm", "residual", [x, w, torch.empty(m, n)], {"N": n, "K": k}, {"M": m}),
        "gate_up": make_signature("gemm", "silu*up", [x, w, w], {"N": n, "K": k}, {"M": m}),
        "bmm": make_signature("bmm", "", [x[None], w.t()[None]], {"N": n, "K": k}, {"B": 1, "M": m}),
        "moe": make_signature("moe", "top2,silu", [x, torch.empty(4, 2 * n, k), torch.empty(4, k, n)],
                              {"E": 4, "I": n, "HD": k, "TOPK": 2}, {"T": m}),
        "attention": make_signature("attention", "causal", [torch.empty(1, 4, m, 64)] * 3,
                                    {"H": 4, "HK": 4, "D": 64}, {"Z": 1, "S": m, "T": m}),
        "attention_mask": make_signature("attention", "mask", [torch.empty(1, 4, 1, 64)] * 3,
                                         {"H": 4, "HK": 4, "D": 64}, {"Z": 1, "S": 1, "T": m}),
    }
    return {name: replace(s, arch="sm_90") for name, s in sigs.items()}


def _plan_policies(sig) -> dict[str, Policy]:
    spec = ops.spec_for(sig)
    return spec.policies(spec.template(sig, "cuda"), sig)


@pytest.mark.parametrize("size", [(1024, 1024, 1024), (1, 4096, 4096)], ids=["compute_bound", "decode"])
def test_each_setting_selects_its_precision_for_every_float32_op(size, matmul_precision) -> None:
    """highest: every mma of every float32 op family runs "ieee" (full float32), never a tf32 pass nor the operand
    split; high: three-pass tf32 (the compute-bound GEMMs on pre-split operands: one tf32 pass over 3K); medium:
    one tf32 pass."""
    for setting in ("highest", "high", "medium"):
        torch.set_float32_matmul_precision(setting)
        for name, sig in _signatures(*size).items():
            pols = _plan_policies(sig)
            precisions = {p.input_precision for n, p in pols.items() if n != "tf32_split"}
            split = "tf32_split" in pols
            if setting == "highest":
                assert precisions == {"ieee"} and not split, (setting, name, pols)
            elif setting == "medium":
                assert precisions == {"tf32"} and not split, (setting, name, pols)
            elif split:  # high, where the split pays: one tf32 pass over the pre-split operands' 3K
                assert name in ("gemm", "gemm_residual", "gate_up", "bmm") and size == (1024, 1024, 1024), name
                assert precisions == {"tf32"}, (name, pols)
            else:
                assert precisions == {"tf32x3"}, (setting, name, pols)
        if setting == "high":  # the compute-bound GEMMs do split there
            assert size != (1024, 1024, 1024) or "tf32_split" in _plan_policies(_signatures(*size)["gemm"])


def test_highest_is_the_default_and_bf16_or_cpu_plans_set_no_precision(matmul_precision) -> None:
    """torch's default is "highest", so a float32 model gets full float32 GEMMs unless it asks for less; a bf16
    signature's policy keeps Triton's default, and a CPU signature (the interpreter) sets none."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_float32_matmul_precision())"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "highest"
    torch.set_float32_matmul_precision("highest")
    assert fp32_precision("gemm") == "ieee"
    x, w = torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 64, dtype=torch.bfloat16)
    bf16 = replace(make_signature("gemm", "", [x, w], {"N": 64, "K": 64}, {"M": 64}), arch="sm_90")
    assert {p.input_precision for p in _plan_policies(bf16).values()} == {"tf32"}  # Triton's default: untouched
    cpu = make_signature("gemm", "", [torch.empty(64, 64), torch.empty(64, 64)], {"N": 64, "K": 64}, {"M": 64})
    assert {p.input_precision for p in _plan_policies(cpu).values()} == {"tf32"}


def test_convolutions_follow_cudnn_allow_tf32(matmul_precision) -> None:
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True
    assert fp32_precision("conv") == fp32_precision("conv_chain") == "tf32"
    torch.backends.cudnn.allow_tf32 = False
    assert fp32_precision("conv") == "tf32x3"
    assert fp32_precision("gemm") == "ieee"  # matmuls keep their own setting


@pytest.mark.parametrize("setting,expected", [("'ieee'", "ieee"), ("'tf32'", "tf32x3"), ("'none'", "ieee")])
def test_the_newer_per_backend_setting_is_honoured(setting: str, expected: str) -> None:
    """A program that sets torch.backends.cuda.matmul.fp32_precision (the newer API) makes
    torch.get_float32_matmul_precision() raise; the precision then comes from the newer setting, where reading it
    raised into the user's call. Run in a fresh interpreter: torch remembers that both APIs were used."""
    code = ("import torch\n"
            f"torch.backends.cuda.matmul.fp32_precision = {setting}\n"
            "torch.backends.cudnn.conv.fp32_precision = 'ieee'\n"
            "from argus_inductor.kernels.policies import fp32_precision\n"
            "print(fp32_precision('gemm'), fp32_precision('conv'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [expected, "tf32x3"]


# ------------------------------------------------------------------------------- accuracy of what "highest" runs

def _inputs(m: int, n: int, k: int, magnitude: float, positive: bool, gen: torch.Generator):
    def one(*shape: int) -> torch.Tensor:
        x = torch.rand(*shape, generator=gen) if positive else torch.randn(*shape, generator=gen)
        return (x * magnitude).to(DEVICE)
    return one(m, k), one(n, k)


def _error(out: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> float:
    """max |out - ref| / (|a| @ |w|^T): each output's error over the sum of its terms' magnitudes (the scale a
    rounding error of a sum is bounded by), with ref in float64."""
    a64, w64 = a.double().cpu(), w.double().cpu()
    ref = a64 @ w64.t()
    scale = (a64.abs() @ w64.abs().t()).clamp_min(1e-300)
    return float(((out.double().cpu() - ref).abs() / scale).max())


# (m, n, k, magnitude, positive): small and long K, tiny and large magnitudes, terms of both signs (cancelling) and
# of one sign (a growing running sum, the hard case for a long float32 sum)
CASES = [(m, n, k, mag, pos) for m, n, k in ((64, 48, 40), (33, 65, 1000)) for mag in (1e-3, 1.0, 1e4)
         for pos in (False, True)] + [(8, 16, 20000, 1.0, True), (8, 16, 20000, 1e4, False)]


@pytest.mark.parametrize("m,n,k,magnitude,positive", CASES)
def test_highest_matches_float64_within_float32_error(m, n, k, magnitude, positive, matmul_precision) -> None:
    """The GEMM, residual, gate*up and bmm kernels under the policy "highest" selects (input_precision "ieee"): within
    a float32 sum's rounding error of the float64 product (K * eps of the terms' magnitudes, the bound of a sum in
    any order; the error of the products themselves is far below it), over a spread of shapes and magnitudes."""
    torch.set_float32_matmul_precision("highest")
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    a, w = _inputs(m, n, k, magnitude, positive, gen)
    prec = fp32_precision("gemm")
    assert prec == "ieee"
    kw = {} if ON_GPU else {"target": "interpret"}
    pol = replace(Policy.make(BM=32, BN=32, BK=512 if k > 4096 else 32), input_precision=prec)  # few interpreted steps
    bound = k * 2.0 ** -24 * 1.01
    out = torch.empty(m, n, device=DEVICE)
    gemm_epilogue(a, w.t(), out.new_empty(1), out, policy=pol.with_consts(HAS_BIAS=0, ACT=0), **kw)
    assert _error(out, a, w) <= bound, f"gemm: seed {seed}"
    res = torch.zeros(m, n, device=DEVICE)
    gemm_residual(a, w.t(), out.new_empty(1), res, out, policy=pol.with_consts(HAS_BIAS=0, ACT=0), **kw)
    assert _error(out, a, w) <= bound, f"residual: seed {seed}"
    gemm_gate_up(a, w.t(), w.t(), out, policy=pol.with_consts(ACT=0), **kw)  # (a @ w^T)^2, ACT 0: none
    g64 = a.double().cpu() @ w.double().cpu().t()
    terms = a.double().cpu().abs() @ w.double().cpu().abs().t()
    err = (out.double().cpu() - g64 * g64).abs() / (2 * terms * g64.abs() + g64 * g64).clamp_min(1e-300)
    assert float(err.max()) <= bound, f"gate_up: seed {seed}"
    out3 = torch.empty(1, m, n, device=DEVICE)
    bmm_kernel(a[None], w.t()[None], out3, policy=pol, **kw)
    assert _error(out3[0], a, w) <= bound, f"bmm: seed {seed}"


@pytest.mark.parametrize("m,n,k", [(128, 128, 262144), (16, 4096, 14336), (4096, 4096, 16384), (2048, 2048, 8192)])
def test_highest_splits_a_long_k_into_short_chains(m, n, k, matmul_precision) -> None:
    """At "highest" a float32 GEMM's K is summed in chains of at most IEEE_CHAIN_K multiply-adds (split-K
    partitions added in float32), as a vendor SGEMM splits a long K; the plan is proved at its shape."""
    from argus_inductor.kernels.policies import IEEE_CHAIN_K

    torch.set_float32_matmul_precision("highest")
    sig = _signatures(m, n, k)["gemm"]
    pols = _plan_policies(sig)
    split = int(pols["gemm_splitk"].const("SPLIT_K")) if "gemm_splitk" in pols else 1
    assert -(-k // split) <= IEEE_CHAIN_K, pols
    assert (split > 1) == (k > IEEE_CHAIN_K)
    if k > 100000:
        entry = ops.make_entry(sig, origin="warmup", target="cuda", verify=True)
        assert entry.verification["status"] == "verified", entry.verification
    torch.set_float32_matmul_precision("high")  # three-pass tf32 keeps the measured templates
    assert "gemm_splitk" not in _plan_policies(sig) or k >= 3 * n
