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
from dataclasses import asdict, replace
from argus_inductor.dsl import Policy
from argus_inductor.dsl.precompile import compile_report
from argus_inductor.kernels import attention_fwd, gemm_epilogue
from argus_inductor.kernels.conv import conv_fwd
from argus_inductor.kernels.moe import gather_policy, moe_gate_up, moe_gather
from argus_inductor.policies import attention_policy, gemm_policy, moe_policies

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
    "gemm, warp-specialized": (gemm_epilogue, Policy.make(BM=128, BN=128, BK=64, num_warps=4, num_stages=3, tma=True,
                                                          warp_specialize=True), gemm),
    "gemm, K tile below the mma minimum": (gemm_epilogue, Policy.make(BM=64, BN=64, BK=8), gemm),
}
out = {}
for name, (k, pol, shapes) in cases.items():
    out[name] = asdict(compile_report(k, pol, shapes))

# what the backend's default plans run on MI300X (64 KB of LDS): each op's template for the hip target
import dataclasses
import torch
from argus_inductor import ops
from argus_inductor.signature import make_signature

def template_reports(op, epilogue, tensors, static, dynamic, sizes, dtype="bfloat16"):
    sig = dataclasses.replace(make_signature(op, epilogue, tensors, static, dynamic), arch="gfx942")
    spec = ops.spec_for(sig)
    pols = spec.policies(spec.template(sig, "hip"), sig)
    kernels = {k.name: k for k in spec.kernels}
    return {f"{op} {epilogue} {name}": asdict(compile_report(kernels[name], pol, {s: sizes[s] for s in
                                                                                   kernels[name].ir.symbols},
                                                             dtype, arch="gfx942"))
            for name, pol in pols.items()}

bf = torch.bfloat16
for m in (1, 128, 4096):
    out.update({f"M={m} " + k: v for k, v in template_reports(
        "gemm", "bias+silu", [torch.empty(m, 4096, dtype=bf), torch.empty(4096, 4096, dtype=bf)],
        {"N": 4096, "K": 4096}, {"M": m}, dict(M=m, N=4096, K=4096, NB=4096)).items()})
for s_, d_ in ((4096, 128), (1024, 64), (2048, 256), (1, 128)):
    q = torch.empty(4, 32, s_, d_, dtype=bf)
    kv = torch.empty(4, 8, 4096, d_, dtype=bf)
    out.update({f"S={s_} D={d_} " + k: v for k, v in template_reports(
        "attention", "causal" if s_ > 1 else "", [q, kv, kv], {"H": 32, "HK": 8, "D": d_, "Z": 4},
        {"S": s_, "T": 4096}, dict(Z=4, H=32, HK=8, S=s_, T=4096, D=d_)).items()})
for t_ in (1, 4096):
    x = torch.empty(t_, 4096, dtype=bf)
    w1, w2 = torch.empty(8, 28672, 4096, dtype=bf), torch.empty(8, 4096, 14336, dtype=bf)
    nb = min(8, 2 * t_) + 2 * t_ // 16
    out.update({f"T={t_} " + k: v for k, v in template_reports(
        "moe", "top2,silu", [x, w1, w2], {"E": 8, "I": 14336, "HD": 4096, "TOPK": 2}, {"T": t_},
        dict(T=t_, HD=4096, E=8, I2=28672, I=14336, P=nb * 128, NB=nb, TK=2 * t_)).items()})
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


def test_a_warp_specialized_gemm_loop_gets_partitions(reports):
    """Triton 3.6's Hopper pass splits a descriptor-fed, non-persistent GEMM loop into producer and consumer warp
    groups (what policy.warp_specialize asks for)."""
    r = reports["gemm, warp-specialized"]
    assert r["ok"] and r["warp_specialized"], r


def test_a_policy_that_cannot_compile_is_reported_not_raised(reports):
    r = reports["gemm, K tile below the mma minimum"]
    assert not r["ok"] and "below the tensor-core minimum" in r["error"]


def test_every_op_template_fits_mi300x_lds(reports):
    """The default plan of each GEMM, attention and MoE shape, as the backend builds it for gfx942, compiles for
    MI300X and asks for at most its 64 KB of LDS (the Hopper-sized templates asked for 96-160 KB and would not have
    launched there)."""
    amd = {k: v for k, v in reports.items() if k.startswith(("M=", "S=", "T="))}
    assert len(amd) >= 9, sorted(amd)
    for name, r in amd.items():
        assert r["ok"], (name, r["error"])
        assert r["shared_bytes"] <= 64 * 1024, (name, r["shared_bytes"])
