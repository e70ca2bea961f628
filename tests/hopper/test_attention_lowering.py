"""The Gluon lowering of attention_fwd for Hopper (argus_inductor.hopper.attention).

Here, without a GPU: it compiles for sm_90 with the Hopper instructions it is written with; the checker proves
attention_fwd under its ring discipline and gives the counterexample for a ring that releases V too early; the
template picks it on NVIDIA only; launches it cannot take run the Triton lowering and match SDPA; and a recorded
op call that ran it is refused (a replay would miss its launch). On the H100 (ARGUS_TEST_DEVICE=cuda) its output
is compared with a float32 SDPA reference."""
from __future__ import annotations

import os
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl.policy import Policy
from argus_inductor.invariants.api import verify
from argus_inductor.invariants.interpreter import Staging, mmas_reading
from argus_inductor.kernels.attention import attention, attention_fwd, mask_operand
from argus_inductor.kernels.policies import attention_policy

from .sm90 import assert_compiles_with_hopper_instructions

REPO = Path(__file__).resolve().parents[2]
GPU = os.environ.get("ARGUS_TEST_DEVICE", "cpu") == "cuda"

COMPILE = r'''
import torch
from argus_inductor.hopper.attention import compile_for_sm90


def compiled():
    for d, causal, stages, dtype in ((128, True, 2, torch.bfloat16), (64, False, 3, torch.bfloat16),
                                     (128, False, 3, torch.float16)):
        yield f"{d} {causal} {stages} {dtype}", compile_for_sm90(d, causal, stages, dtype)
'''


def ws_policy(stages: int = 2, causal: int = 1, d: int = 128) -> Policy:
    return Policy.make(BM=128, BN=128, num_warps=8, num_stages=stages, tma=True, warp_specialize=True).with_consts(
        BD=d, CAUSAL=causal, HAS_MASK=0)


@pytest.mark.skipif(GPU, reason="the compile check runs where there is no GPU")
def test_it_compiles_for_sm90_with_the_hopper_instructions_it_is_written_with() -> None:
    assert_compiles_with_hopper_instructions(COMPILE, 3)


@pytest.mark.parametrize("stages", [2, 3])
def test_the_checker_proves_attention_under_the_ring_and_catches_an_early_release(stages: int) -> None:
    shapes = dict(Z=2, H=8, HK=2, S=4096, T=4096, D=128)
    res = verify(attention_fwd, ws_policy(stages), shapes)
    assert res.ok, res.text()

    def early_v(policy: Policy, loop, load) -> Staging | None:  # V released before P V retired
        readers = mmas_reading(loop, load)
        if not readers:
            return None
        later = readers[0] is not next(op for op in loop.blocks[0].ops if op.kind == "mma")  # P V, not Q K^T
        return Staging(policy.num_stages, policy.num_stages - 1, 1 if later else 0)

    bad = verify(attention_fwd, ws_policy(stages), shapes, staging=early_v)
    assert {v.kind for v in bad.violations} == {"pipeline-stage"}
    v = bad.violations[0]
    v_loads = [op.line for op in attention_fwd.ir.walk() if op.kind == "load" and op.attrs["tensor"] == "V"]
    assert v.line in v_loads, v.message
    assert "ring buffer" in v.message and f"of {stages}" in v.message and "may still be read by the mma" in v.message


def test_the_template_takes_it_on_nvidia_only_and_where_it_fits() -> None:
    from argus_inductor.hopper.attention import policy_fits

    p = attention_policy(4096, 128, "cuda")
    assert p.warp_specialize and policy_fits(p) is None and p.num_stages == 2
    assert attention_policy(16384, 128, "cuda").num_stages == 3
    assert attention_policy(512, 128, "cuda").warp_specialize  # measured faster than the Triton template there
    for other in (attention_policy(4096, 128, "hip"), attention_policy(4096, 128, "cuda", has_mask=True),
                  attention_policy(4096, 256, "cuda"), attention_policy(16, 128, "cuda"),
                  attention_policy(512, 64, "cuda"), attention_policy(256, 128, "cuda")):
        assert not other.warp_specialize
    assert "num_stages=4" in policy_fits(replace(p, num_stages=4))
    assert "BN=64" in policy_fits(p.with_consts(BN=64))


def test_launches_it_cannot_take_say_why_and_run_the_triton_lowering() -> None:
    from argus_inductor.hopper.attention import supported

    q = torch.randn(1, 2, 128, 64, dtype=torch.bfloat16)
    assert "capability 9.0" in supported(q, q, q, q, False, False)
    assert "mask" in supported(q, q, q, q, False, True)
    assert "dtype" in supported(q.float(), q.float(), q.float(), q.float(), False, False)
    if not GPU:  # the policy asks for the Gluon kernel; on CPU tensors the Triton lowering runs, and is right
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 4, 40, 64) for _ in range(3))
        k, v = k[:, :2], v[:, :2]
        out = attention(q, k, v, causal=True, policy=ws_policy(2, 1, 64).without_consts("BD", "CAUSAL", "HAS_MASK"))
        ref = F.scaled_dot_product_attention(q.double(), k.repeat_interleave(2, 1).double(),
                                             v.repeat_interleave(2, 1).double(), is_causal=True)
        assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-4


def test_a_recording_of_a_call_that_ran_a_gluon_lowering_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch recording (replay, inlining) sees DSL launches only: a call whose kernel ran its Gluon lowering
    must keep its op, never be replayed without that launch."""
    from argus_inductor.dsl import runtime as dsl_runtime
    from argus_inductor.runtime.replay import record

    ran = []
    fake = types.SimpleNamespace(launch=lambda policy, *args: ran.append("attention_fwd") or True,
                                 fallback=lambda policy, *args: pytest.fail("the fake lowering took the launch"))
    monkeypatch.setattr(dsl_runtime, "lowering_for", lambda name: fake)
    q = torch.randn(1, 2, 128, 64)
    out = torch.empty_like(q)
    m = mask_operand(None, q, q)
    _, rec, why = record(lambda: attention_fwd(q, q, q, m, out, 0.125, policy=ws_policy(2, 0, 64), target="cuda")
                         or out, [q, out])
    assert ran == ["attention_fwd"] and rec is None and "Gluon lowering" in why


@pytest.mark.parametrize("layout", ["heads", "positions"])
def test_each_layouts_view_places_every_row_where_the_kernel_reads_it(layout: str) -> None:
    """The kernel reads (batch z, head h, position l) at row z*rz + h*rh + l, columns h*ch.. of the view _view
    builds: checked here element for element, for contiguous and head-transposed tensors."""
    from argus_inductor.hopper.attention import _layout, _view

    z, h, length, d = 2, 3, 5, 4
    x = torch.randn(z, h, length, d) if layout == "heads" else torch.randn(z, length, h, d).transpose(1, 2)
    assert _layout(x) == layout
    view, rz, rh, ch = _view(x)
    assert view.data_ptr() == x.data_ptr() and view.is_contiguous()
    for zi in range(z):
        for hi in range(h):
            for li in range(length):
                assert torch.equal(view[zi * rz + hi * rh + li, hi * ch:hi * ch + d], x[zi, hi, li])
    assert _layout(torch.randn(2, 3, 8, 4)[:, :, ::2]) is None


@pytest.mark.skipif(not GPU, reason="needs the H100 (ARGUS_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("z,h,hk,s,d,causal,dtype,stages,layout", [
    (2, 4, 4, 512, 128, True, torch.bfloat16, 2, "heads"), (1, 4, 2, 1024, 64, False, torch.bfloat16, 2, "heads"),
    (2, 8, 2, 768, 128, True, torch.float16, 3, "heads"), (1, 2, 2, 2048, 128, False, torch.bfloat16, 3, "heads"),
    (2, 8, 2, 512, 128, True, torch.bfloat16, 2, "positions"), (1, 4, 4, 1024, 64, False, torch.float16, 3,
                                                                "positions")])
def test_on_the_h100_it_matches_sdpa(z: int, h: int, hk: int, s: int, d: int, causal: bool, dtype: torch.dtype,
                                     stages: int, layout: str) -> None:
    """Contiguous operands, and head-transposed ones as transformers passes them (the output then too)."""
    from argus_inductor.hopper.attention import launch

    def make(heads: int) -> torch.Tensor:
        if layout == "heads":
            return torch.randn(z, heads, s, d, device="cuda", dtype=dtype)
        return torch.randn(z, s, heads, d, device="cuda", dtype=dtype).transpose(1, 2)

    q, k, v = make(h), make(hk), make(hk)
    out = torch.full_like(q, float("nan"))
    assert launch(ws_policy(stages, int(causal), d), q, k, v, mask_operand(None, q, k), out, d ** -0.5)
    ref = F.scaled_dot_product_attention(q.float(), k.repeat_interleave(h // hk, 1).float(),
                                         v.repeat_interleave(h // hk, 1).float(), is_causal=causal)
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 2e-2
    ragged = torch.randn(z, h, s - 8, d, device="cuda", dtype=dtype)  # not a multiple of 128: Triton lowering
    assert not launch(ws_policy(stages, int(causal), d), ragged, ragged, ragged, mask_operand(None, ragged, ragged),
                      torch.empty_like(ragged), d ** -0.5)
    got = attention(ragged, ragged, ragged, causal, policy=attention_policy(s, d, "cuda"))
    want = F.scaled_dot_product_attention(ragged.float(), ragged.float(), ragged.float(), is_causal=causal)
    assert ((got.float() - want).abs().max() / want.abs().max()).item() < 2e-2


def test_a_launch_the_gluon_kernel_declines_runs_the_triton_template_for_its_shape() -> None:
    """transformers passes head-transposed q, k, v (and CPU tensors here are no sm_90 launch): the Gluon kernel
    declines, and the runtime runs the Triton lowering at the Triton template for the launch's query length and
    element size, with the policy's constexprs, not at the Gluon ring's tiles."""
    from argus_inductor.kernels.policies import attention_fallback, fit_attention

    pol = ws_policy(2, 1, 128)
    q = torch.randn(1, 4, 2048, 128, dtype=torch.bfloat16)
    args = (q, q, q, mask_operand(None, q, q), torch.empty_like(q), 0.1)
    got = attention_fwd._hopper(pol, args, {})
    want = attention_policy(2048, 128, "cuda", gluon=False)
    assert got == want.with_consts(BD=128, CAUSAL=1, HAS_MASK=0) and got.num_stages == 3 and not got.warp_specialize
    assert attention_fallback(pol, 1024, 2).const("BM") == 64  # the short-sequence template
    assert attention_fallback(ws_policy(2, 0, 64), 4096, 2).const("BN") == 64
    f32 = attention_fallback(pol, 4096, 4)  # float32 tiles are fitted to shared memory
    assert f32 == fit_attention(want, 128, 4).with_consts(BD=128, CAUSAL=1, HAS_MASK=0) and f32 != got


def test_a_gluon_attention_entry_proves_the_plan_its_rings_and_its_triton_fallbacks() -> None:
    from argus_inductor import ops
    from argus_inductor.specs import Problem, signature_for

    sig = signature_for(Problem("attention", "causal,gqa4", dict(H=32, HK=8, D=128, Z=1, S=4096, T=4096),
                                "bfloat16", (), "cpu"), "sm_90")
    entry = ops.make_entry(sig)
    v = entry.verification
    assert entry.policy["warp_specialize"] is True and v["status"] == "verified", v
    fallbacks = [n for n in v["kernels"] if n.startswith("attention_fwd (Triton fallback")]
    assert len(fallbacks) == 2 and all(v["kernels"][n]["ok"] for n in fallbacks)  # 64x64 and 128x128 templates


def test_only_signatures_the_gluon_kernel_reads_get_its_template() -> None:
    from argus_inductor import ops
    from argus_inductor.specs import Problem, signature_for

    def template(dtype: str, epi: str = "causal") -> dict:
        sig = signature_for(Problem("attention", epi, dict(H=8, HK=8, D=128, Z=1, S=4096, T=4096), dtype, (), "cpu"),
                            "sm_90")
        return ops.SPECS["attention"].template(sig, "cuda")

    assert template("bfloat16")["warp_specialize"] and template("float16")["warp_specialize"]
    assert not template("float32")["warp_specialize"] and not template("bfloat16", "causal,mask")["warp_specialize"]


def test_the_report_says_which_lowering_a_call_takes() -> None:
    from argus_inductor import ops
    from argus_inductor.hopper.attention import declines

    q = torch.randn(1, 2, 128, 64, dtype=torch.bfloat16)
    note = ops.dispatch.lowering_note("attention_fwd", ws_policy(2, 0, 64), q, q, q, torch.empty_like(q), 0.125)
    assert note == ("attention_fwd: the Triton lowering at the Triton template (the Gluon kernel declines: not a "
                    "compute capability 9.0 device)")
    assert declines(ws_policy(2, 0, 64), q, q, q, q, -0.1) == "a negative scale"
    assert "num_stages=4" in declines(replace(ws_policy(2, 0, 64), num_stages=4), q, q, q, q, 0.1)


def test_a_policy_whose_tiles_are_not_the_gluon_kernels_runs_and_is_proved_as_it_is() -> None:
    """A tuning candidate (or a user) asking for warp_specialize with other tiles gets the Triton lowering at those
    tiles, not the template: the runtime keeps them, the checker proves them under Triton's pipelining (no ring
    proof), and the plan lists no template fallbacks."""
    from argus_inductor import ops

    cand = replace(ws_policy(2, 1, 128), num_warps=4).with_consts(BM=64, BN=64)
    q = torch.randn(1, 4, 2048, 128, dtype=torch.bfloat16)
    got = attention_fwd._hopper(cand, (q, q, q, mask_operand(None, q, q), torch.empty_like(q), 0.1), {})
    assert got == replace(cand, warp_specialize=False)
    res = verify(attention_fwd, cand, dict(Z=1, H=4, HK=4, S=2048, T=2048, D=128))
    assert res.ok and not any("rings are proved" in n for n in res.notes)
    assert ops.SPECS["attention"].host_kernels(None, {"attention_fwd": cand}, "cuda") == {}
