"""The Gluon lowering of gemm_epilogue for Hopper (argus_inductor.hopper.gemm).

Here, without a GPU: it compiles for sm_90 with the Hopper instructions it is written with, for the template's tiles,
every epilogue and both B layouts; the checker proves gemm_epilogue under its ring (a tile of the loop's only mma is
released one iteration late) with the ring proof of the lowering's source; the template picks it on NVIDIA for
2-byte GEMMs of 64-128 rows only; launches it cannot take run the Triton lowering at the Triton template and are
right; a plan proves its Triton fallbacks. On the H100 (ARGUS_TEST_DEVICE=cuda) its output, ragged edges, bias,
activations and both B layouts included, is compared with a float32 reference."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl.policy import Policy
from argus_inductor.invariants.api import verify
from argus_inductor.invariants.interpreter import default_staging
from argus_inductor.kernels.gemm import ACTIVATION_FNS, ACTIVATIONS, gemm, gemm_epilogue
from argus_inductor.kernels.policies import gemm_fallback, gemm_policy, gemm_ws_policy

from .sm90 import assert_compiles_with_hopper_instructions

REPO = Path(__file__).resolve().parents[2]
GPU = os.environ.get("ARGUS_TEST_DEVICE", "cpu") == "cuda"

COMPILE = r'''
import torch
from argus_inductor.dsl.policy import Policy
from argus_inductor.hopper.gemm import compile_for_sm90
from argus_inductor.kernels.policies import gemm_ws_policy


def compiled():
    cases = [(gemm_ws_policy(128, n, k), True, torch.bfloat16) for n, k in ((4096, 4096), (14336, 4096), (6144, 4096))]
    cases += [(gemm_ws_policy(64, 4096, 14336).with_consts(HAS_BIAS=1, ACT=act), act % 2 == 0, dt)
              for act, dt in ((1, torch.bfloat16), (2, torch.float16), (3, torch.bfloat16), (4, torch.float16))]
    cases.append((Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=4, warp_specialize=True), True,
                  torch.bfloat16))
    for i, (p, kmajor, dt) in enumerate(cases):
        yield f"{i} {p.key()} {kmajor} {dt}", compile_for_sm90(p, kmajor, dt)
'''


def ws(bm: int = 64, bn: int = 64, bk: int = 128, stages: int = 4, **consts: int) -> Policy:
    return Policy.make(BM=bm, BN=bn, BK=bk, num_warps=bm // 16, num_stages=stages,
                       warp_specialize=True).with_consts(**{"HAS_BIAS": 0, "ACT": 0, **consts})


@pytest.mark.skipif(GPU, reason="the compile check runs where there is no GPU")
def test_it_compiles_for_sm90_with_the_hopper_instructions_it_is_written_with() -> None:
    assert_compiles_with_hopper_instructions(COMPILE, 8)


def test_the_ring_keeps_the_only_mmas_tiles_one_iteration_longer() -> None:
    """gemm_epilogue's loop has one mma, whose result only accumulates: the lowering keeps it in flight into the
    next iteration, so its A and B tiles are staged with one reader and the loader one slot less ahead."""
    loop = next(op for op in gemm_epilogue.ir.walk() if op.kind == "for" and any(o.kind == "mma" for o in op.blocks[0].ops))
    loads = [op for op in loop.blocks[0].ops if op.kind == "load"]
    assert len(loads) == 2
    for load in loads:
        st = default_staging(ws(stages=5), loop, load)
        assert (st.buffers, st.distance, st.readers) == (5, 3, 1)
        assert default_staging(replace(ws(stages=5), warp_specialize=False), loop, load).readers == 0


@pytest.mark.parametrize("stages", [2, 6])
def test_the_checker_proves_gemm_under_the_ring_and_the_lowerings_source(stages: int) -> None:
    res = verify(gemm_epilogue, ws(stages=stages, HAS_BIAS=1, ACT=3), dict(M=128, N=4096, K=4096, NB=4096))
    assert res.ok, res.text()
    assert any(f"rings are proved at {stages} slots" in n for n in res.notes)


def test_the_template_takes_it_for_few_wave_2_byte_gemms_on_nvidia_only() -> None:
    from argus_inductor.hopper.gemm import policy_fits

    for n, k, bm, bn in ((4096, 4096, 64, 64), (6144, 4096, 64, 128), (14336, 4096, 128, 128),
                         (4096, 14336, 64, 64)):
        p = gemm_policy(128, n, k, "cuda", gluon=True)
        assert p.warp_specialize and policy_fits(p) is None and (p.const("BM"), p.const("BN")) == (bm, bn), p
        assert 128 // bm * -(-n // bn) <= 132  # one wave of the H100's SMs
    assert gemm_policy(64, 14336, 4096, "cuda", gluon=True).const("BM") == 64  # no 128-row tiles for 64 rows
    assert gemm_ws_policy(64, 57344, 4096).const("BN") == 256
    for m in (1, 16, 32, 4096):
        assert not gemm_policy(m, 4096, 4096, "cuda", gluon=True).warp_specialize
    assert not gemm_policy(128, 4096, 4096, "hip", gluon=True).warp_specialize
    assert not gemm_policy(128, 4096, 4096, "cuda").warp_specialize  # callers that do not run gemm_epilogue
    assert gemm_ws_policy(128, 4100, 4096) is None  # a row pitch TMA cannot read
    assert "BN=96" in policy_fits(ws(bn=96)) and "num_warps" in policy_fits(replace(ws(), num_warps=8))
    assert "shared memory" in policy_fits(ws(bm=128, bn=256, bk=128, stages=4))


def test_only_gemm_signatures_the_gluon_kernel_reads_get_its_template() -> None:
    from argus_inductor import ops
    from argus_inductor.specs import Problem, signature_for

    def sig(dtype: str):
        return signature_for(Problem("gemm", "", dict(N=4096, K=4096, M=128), dtype, (), "cpu"), "sm_90")

    def template(dtype: str) -> dict:
        return ops.spec_for(sig(dtype)).template(sig(dtype), "cuda")

    assert template("bfloat16")["warp_specialize"] and template("float16")["warp_specialize"]
    assert not template("float32")["warp_specialize"]
    # the residual and gate-up kernels have no Gluon lowering: their templates never ask for it
    assert not ops.gemm._gemm_fused_template(sig("bfloat16"), "cuda")["warp_specialize"]
    assert not ops.gemm._gate_up_template(sig("bfloat16"), "cuda")["warp_specialize"]


def test_launches_it_cannot_take_say_why() -> None:
    from argus_inductor.hopper.gemm import declines, supported

    a = torch.randn(128, 256, dtype=torch.bfloat16)
    w = torch.randn(512, 256, dtype=torch.bfloat16)
    c = torch.empty(128, 512, dtype=torch.bfloat16)
    assert "capability 9.0" in supported(a, w.t(), c)
    assert "dtypes" in supported(a.float(), w.t().float(), c.float())
    assert "num_stages=9" in declines(replace(ws(), num_stages=9), a, w.t(), c, c)


@pytest.mark.skipif(GPU, reason="runs the fallback on CPU tensors under the interpreter")
def test_a_launch_the_gluon_kernel_declines_runs_the_triton_template_and_is_right() -> None:
    """CPU tensors are no sm_90 launch: the runtime runs the Triton lowering at the Triton template for the launch's
    shape and element size, with the policy's epilogue; a policy whose tiles are not the Gluon kernel's keeps its
    own tiles. Run here under the interpreter, and checked against float64."""
    pol = ws(HAS_BIAS=1, ACT=ACTIVATIONS["gelu"])
    a = torch.randn(128, 256, dtype=torch.bfloat16)
    b = torch.randn(512, 256, dtype=torch.bfloat16).t()
    bias = torch.randn(512, dtype=torch.bfloat16)
    c = torch.empty(128, 512, dtype=torch.bfloat16)
    got = gemm_epilogue._hopper(pol, (a, b, bias, c), {})
    want = gemm_fallback(pol, 128, 512, 256, 2)
    assert got == want and not got.warp_specialize and got.const("HAS_BIAS") == 1
    assert (got.const("BM"), got.const("BN"), got.const("BK")) == (64, 64, 128)  # gemm_policy(128, 512, 256)
    assert gemm_fallback(pol, 4096, 4096, 4096, 2).persistent  # the prefill template
    assert gemm_fallback(pol, 4096, 4096, 4096, 4).num_stages < gemm_fallback(pol, 4096, 4096, 4096, 2).num_stages
    cand = replace(ws(), num_warps=8)  # 64-row tiles over two warp groups: not the Gluon kernel's
    assert gemm_epilogue._hopper(cand, (a, b, bias, c), {}) == replace(cand, warp_specialize=False)
    torch.manual_seed(0)
    a, bt, bias = torch.randn(70, 48), torch.randn(40, 48), torch.randn(40)
    out = gemm(a, bt.t(), bias, "silu", policy=Policy.make(BM=16, BN=16, BK=16, warp_specialize=True))
    ref = F.silu(a.double() @ bt.double().t() + bias.double())
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-4


def test_a_gluon_gemm_entry_proves_the_plan_its_rings_and_its_triton_fallbacks() -> None:
    from argus_inductor import ops
    from argus_inductor.specs import Problem, signature_for

    sig = signature_for(Problem("gemm", "bias,silu", dict(N=4096, K=4096, M=128), "bfloat16", (), "cpu"), "sm_90")
    entry = ops.make_entry(sig)
    v = entry.verification
    assert entry.policy["warp_specialize"] is True and v["status"] == "verified", v
    assert any("rings are proved" in n for n in v["kernels"]["gemm_epilogue"].get("notes", []))
    fallbacks = [n for n in v["kernels"] if n.startswith("gemm_epilogue (Triton fallback")]
    assert len(fallbacks) >= 3 and all(v["kernels"][n]["ok"] for n in fallbacks)  # decode, M=128, prefill tiles


def test_the_report_says_which_lowering_a_gemm_call_takes() -> None:
    from argus_inductor import ops

    a = torch.randn(128, 256, dtype=torch.bfloat16)
    w = torch.randn(512, 256, dtype=torch.bfloat16)
    note = ops.dispatch.lowering_note("gemm_epilogue", ws(), a, w.t(), a.new_empty(1), torch.empty(128, 512))
    assert note.startswith("gemm_epilogue: the Triton lowering at the Triton template (the Gluon kernel declines:")


@pytest.mark.skipif(not GPU, reason="needs the H100 (ARGUS_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("m,n,k,policy,act,bias,kmajor,dtype", [
    (128, 4096, 4096, None, "none", False, True, torch.bfloat16),
    (128, 6144, 4096, None, "silu", True, True, torch.bfloat16),
    (128, 14336, 4096, None, "gelu", False, True, torch.float16),
    (100, 1000, 1000, None, "relu", True, True, torch.bfloat16),    # ragged M, N and K edges
    (64, 512, 4104, None, "gelu_tanh", True, False, torch.bfloat16),  # N-major B, a K tail of 8
    (128, 384, 256, (128, 128, 64, 4), "none", True, False, torch.float16),  # two consumer warp groups
    (96, 264, 136, (64, 256, 128, 2), "silu", False, True, torch.bfloat16)])
def test_on_the_h100_it_matches_a_float32_reference(m: int, n: int, k: int, policy: tuple | None, act: str,
                                                    bias: bool, kmajor: bool, dtype: torch.dtype) -> None:
    from argus_inductor.hopper.gemm import launch

    pol = gemm_ws_policy(m, n, k) if policy is None else ws(*policy)
    pol = pol.with_consts(HAS_BIAS=int(bias), ACT=ACTIVATIONS[act])
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t() if kmajor else torch.randn(k, n, device="cuda", dtype=dtype)
    bv = torch.randn(n, device="cuda", dtype=dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    assert launch(pol, a, b, bv if bias else out.new_empty(1), out)
    ref = ACTIVATION_FNS[act](a.float() @ b.float() + (bv.float() if bias else 0))
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 2e-2
    # and through the kernel call, as the ops run it
    out2 = gemm(a, b, bv if bias else None, act, policy=pol)
    assert torch.equal(out2, out)


@pytest.mark.skipif(not GPU, reason="needs the H100 (ARGUS_TEST_DEVICE=cuda)")
def test_on_the_h100_a_declined_launch_runs_the_triton_template() -> None:
    from argus_inductor.hopper.gemm import launch

    pol = gemm_ws_policy(128, 4096, 4096).with_consts(HAS_BIAS=0, ACT=0)
    a = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)[:, :4092]  # a row pitch TMA cannot read
    b = torch.randn(4096, 4092, device="cuda", dtype=torch.bfloat16)[:, :4092].t()
    out = torch.empty(128, 4096, device="cuda", dtype=torch.bfloat16)
    assert not launch(pol, a, b, out.new_empty(1), out)
    got = gemm(a, b, policy=pol)
    ref = a.float() @ b.float()
    assert ((got.float() - ref).abs().max() / ref.abs().max()).item() < 2e-2
