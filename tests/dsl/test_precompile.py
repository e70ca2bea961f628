"""The library's templates compile for the H100 (sm_90) here, without a GPU (argus_inductor.dsl.precompile: Triton's
compiler and ptxas run on the CPU): the interpreter the other tests use never runs Triton's GPU passes, so a
kernel that interprets fine but fails to compile, or compiles without the Hopper instructions its policy asks
for, is caught only here. Runs in a subprocess without TRITON_INTERPRET."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json
from dataclasses import asdict
from argus_inductor.dsl import Policy
from argus_inductor.dsl.precompile import compile_report
from argus_inductor.kernels import attention_fwd, gemm_epilogue
from argus_inductor.kernels.moe import gather_policy, moe_gate_up, moe_gather
from argus_inductor.kernels.policies import attention_policy, gemm_policy, moe_policies

gemm = dict(M=4096, N=4096, K=4096, NB=4096)
up, _ = moe_policies(4096, 2, 8, "cuda")
moe = dict(T=9216, HD=4096, E=8, I2=28672, I=14336, P=9216, NB=72)
cases = {
    "gemm prefill template": (gemm_epilogue, gemm_policy(4096, 4096, 4096, "cuda").with_consts(HAS_BIAS=1, ACT=3),
                              gemm),
    "gemm decode template": (gemm_epilogue, gemm_policy(1, 4096, 4096, "cuda"), dict(gemm, M=1)),
    "attention prefill template": (attention_fwd, attention_policy(4096, 128, "cuda").with_consts(BD=128, CAUSAL=1),
                                   dict(Z=4, H=32, HK=8, S=4096, T=4096, D=128)),
    "moe gate-up, gathered rows": (moe_gate_up, up.with_consts(TOPK=2, GATHERED=1), moe),
    "moe gather": (moe_gather, gather_policy(None, 2), dict(T=4096, HD=4096, P=9216)),
    "gemm, K tile below the mma minimum": (gemm_epilogue, Policy.make(BM=64, BN=64, BK=8), gemm),
}
out = {}
for name, (k, pol, shapes) in cases.items():
    out[name] = asdict(compile_report(k, pol, shapes))

# ops.py's odd regime row (127 x 255 x 513, 0.14x cuBLAS on the H200), B an nn.Linear weight's transpose, as launched
odd = gemm_policy(127, 255, 513, "cuda").with_consts(HAS_BIAS=0, ACT=0)
for k in (513, 512):
    out[f"gemm 127x255x{k}"] = asdict(compile_report(gemm_epilogue, odd, dict(M=127, N=255, K=k, NB=1),
                                                     strides={"B": (1, k)}))

# what the backend's default plans run on MI300X (64 KB of LDS): each ops.py shape's template for the hip target
from benchmarks.compile_audit import template_kernels

for label, kernel, pol, sizes in template_kernels("gfx942"):
    out[f"gfx942 {label} {kernel.name}"] = asdict(compile_report(kernel, pol, sizes, arch="gfx942"))
print("REPORTS " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ARGUS_INTERPRET")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=900,
                          cwd=REPO)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("REPORTS ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("REPORTS "):])


@pytest.mark.parametrize("name", ["gemm prefill template", "attention prefill template",
                                  "moe gate-up, gathered rows"])
def test_prefill_templates_compile_to_wgmma_with_descriptor_copies(reports, name):
    r = reports[name]
    assert r["ok"], r["error"]
    assert r["wgmma"] and r["descriptors"], r
    assert r["spills"] == 0 and r["shared_bytes"] <= 227 * 1024, r


def test_decode_gemm_and_the_gather_compile(reports):
    for name in ("gemm decode template", "moe gather"):
        assert reports[name]["ok"], reports[name]["error"]
        assert reports[name]["spills"] == 0


def test_a_policy_that_cannot_compile_is_reported_not_raised(reports):
    r = reports["gemm, K tile below the mma minimum"]
    assert not r["ok"] and "below the tensor-core minimum" in r["error"]


def test_every_op_template_fits_mi300x_lds(reports):
    """The default plan of each GEMM, attention and MoE shape of benchmarks/ops.py, as the backend builds it for
    gfx942 (benchmarks/compile_audit.py), compiles for MI300X and asks for at most its 64 KB of LDS (the Hopper-sized templates asked for 96-160 KB and would not have
    launched there)."""
    amd = {k: v for k, v in reports.items() if k.startswith("gfx942 ")}
    assert len(amd) >= 30, sorted(amd)
    for name, r in amd.items():
        assert r["ok"], (name, r["error"])
        assert r["shared_bytes"] <= 64 * 1024, (name, r["shared_bytes"])


def test_the_command_line_refuses_a_bad_policy_with_a_usage_error() -> None:
    """A mistyped or refused policy is the user's mistake: a usage line naming it, exit status 2, no traceback."""
    for policy, says in (("BM=64,num_warps=3", "num_warps must be a power of two"),
                         ("BM=64,num_warps=8,warp_specialize=True", "compiles the Triton lowering")):
        proc = subprocess.run([sys.executable, "-m", "argus_inductor.dsl.precompile",
                               "argus_inductor.kernels:gemm_epilogue", "--policy", policy, "--shapes", "M=64"],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_an_odd_k_leaves_the_rows_unaligned_so_no_pipelined_copies(reports):
    """K = 513: the rows of A and of B's K-contiguous storage start at odd element offsets, so Triton can prove no
    alignment: every load is one element, in registers (255 a thread), and num_stages buys no cp.async pipeline;
    K = 512, the same policy: 16-byte cp.async copies into a 4-stage ring. What the 0.14x row pays for."""
    odd, even = reports["gemm 127x255x513"], reports["gemm 127x255x512"]
    assert odd["ok"] and even["ok"], (odd["error"], even["error"])
    assert even["async_copies"] > 0 and even["scalar_loads"] == 0, even
    assert odd["async_copies"] == 0 and odd["scalar_loads"] > 0, odd
    assert odd["shared_bytes"] < even["shared_bytes"], (odd, even)
