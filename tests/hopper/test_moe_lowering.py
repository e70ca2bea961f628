"""The Gluon lowerings of the MoE expert GEMMs for Hopper (argus_inductor.hopper.moe_gate_up, .moe_down).

Here, without a GPU: both compile for sm_90 with the Hopper instructions they are written with; their rings are
proved from their sources at every size they launch with, and bugs planted in the gate-up's two-wgmma ring are
caught with a counterexample; the checker stages every tile of the gate-up's loop with one reader (both its mma only
accumulate) and proves the kernel and a Mixtral-sized plan under the Gluon policy, its Triton fallback included;
the template takes the gate-up's lowering only for 2-byte prefill routings of gathered rows on NVIDIA; a launch it
declines runs the Triton lowering and is right. On the H100 (ARGUS_TEST_DEVICE=cuda) both kernels, ragged edges
and padding blocks included, are compared with a float32 reference, alone and through moe_expert_step."""
from __future__ import annotations

import inspect
import os
import textwrap
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from argus_inductor.dsl.policy import Policy
from argus_inductor.hopper import moe_down as gluon_down
from argus_inductor.hopper import moe_gate_up as gluon_up
from argus_inductor.hopper.rings import check_rings
from argus_inductor.invariants.api import verify
from argus_inductor.invariants.interpreter import default_staging
from argus_inductor.kernels.moe import moe_align_block, moe_down, moe_expert_step, moe_gate_up
from argus_inductor.kernels.policies import moe_gate_up_fallback, moe_policies

from .sm90 import assert_compiles_with_hopper_instructions

GPU = os.environ.get("ARGUS_TEST_DEVICE", "cpu") == "cuda"

COMPILE = r'''
import torch
from argus_inductor.dsl.policy import Policy
from argus_inductor.hopper import moe_down, moe_gate_up
from argus_inductor.kernels.policies import moe_policies


def compiled():
    up, _ = moe_policies(2048, 2, 8, "cuda", gluon=True)
    yield "gate-up template", moe_gate_up.compile_for_sm90(up)
    yield "gate-up fp16, 64 columns", moe_gate_up.compile_for_sm90(
        Policy.make(BM=64, BN=64, BK=128, num_warps=4, num_stages=3, warp_specialize=True, GATHERED=1), torch.float16)
    yield "down", moe_down.compile_for_sm90(Policy.make(BM=128, BN=256, BK=64, num_warps=8, num_stages=3,
                                                        grid_order="grouped", group_m=8, warp_specialize=True, TOPK=2))
'''

LOADER = inspect.getsource(gluon_up._loader.fn)
CONSUMER = inspect.getsource(gluon_up._consumer.fn)
LOOP_UP_MMA = "up = warpgroup_mma(x_bufs.index(slot)"


def ws_up(bm: int = 128, bn: int = 128, bk: int = 64, stages: int = 4) -> Policy:
    return Policy.make(BM=bm, BN=bn, BK=bk, num_warps=bm // 16, num_stages=stages, grid_order="grouped", group_m=8,
                       warp_specialize=True, GATHERED=1, TOPK=2)


def ws_down(bm: int = 128, bn: int = 256, bk: int = 64, stages: int = 3) -> Policy:
    return Policy.make(BM=bm, BN=bn, BK=bk, num_warps=bm // 16, num_stages=stages, grid_order="grouped", group_m=8,
                       warp_specialize=True, TOPK=2)


def edited(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if fragment in ln)


@pytest.mark.skipif(GPU, reason="the compile check runs where there is no GPU")
def test_they_compile_for_sm90_with_the_hopper_instructions_they_are_written_with() -> None:
    assert_compiles_with_hopper_instructions(COMPILE, 3)


@pytest.mark.parametrize("stages", range(2, 9))
def test_both_lowerings_keep_their_rings(stages: int) -> None:
    assert gluon_up.prove_rings(stages) == ()
    assert gluon_down.prove_rings(stages) == ()


def test_releasing_a_slot_before_its_gate_and_up_wgmma_retire_is_caught() -> None:
    """The release of block g - 1 moved above warpgroup_mma_wait(2): block g - 1's gate and up wgmma, issued in the
    previous iteration (or before the loop), still read its slot."""
    wait = "        gate, up = warpgroup_mma_wait(num_outstanding=2, deps=(gate, up))\n"
    release = "        mbarrier.arrive(empty.index((g - 1) % STAGES), count=1)\n"
    bad = edited(CONSUMER, wait + release, release + wait)
    found = check_rings(LOADER, [bad], gluon_up.RINGS, (3,))
    assert {v.kind for v in found} == {"release-after-retire"} and {v.ring for v in found} == {"X", "gate", "up"}
    assert all(v.line == line_of(bad, "mbarrier.arrive(empty.index((g - 1) % STAGES)") for v in found)
    assert all("STAGES=3" in v.message and "g=" in v.message for v in found)


def test_a_release_moved_under_the_tile_boundary_is_reported() -> None:
    """The persistent consumer finishes a tile under `if g % kb == 0`; a release moved there would free a slot only
    at tile boundaries. The proof does not read a release under a runtime condition as always made: it says so."""
    release = "        mbarrier.arrive(empty.index((g - 1) % STAGES), count=1)\n"
    boundary = "        if g % kb == 0:  # the tile before is complete"
    bad = edited(edited(CONSUMER, release, ""), boundary, "        if g % kb == 0:\n" + "    " + release + boundary)
    found = check_rings(LOADER, [bad], gluon_up.RINGS, (4,))
    assert any(v.kind == "unsupported" and "arrive under a runtime condition" in v.message for v in found)


def test_an_up_tile_filled_into_the_next_slot_is_caught() -> None:
    bad = edited(LOADER, "ready.index(slot), u_bufs.index(slot))", "ready.index(slot), u_bufs.index((g + 1) % STAGES))")
    (v,) = check_rings(bad, [CONSUMER], gluon_up.RINGS, (4,))
    assert (v.kind, v.ring) == ("fill", "up") and "does not fill the slot" in v.message and "STAGES=4" in v.message


def test_reading_the_up_tile_without_waiting_for_its_fill_is_caught() -> None:
    bad = edited(CONSUMER, "        mbarrier.wait(ready.index(slot), ph)\n", "")
    found = check_rings(LOADER, [bad], gluon_up.RINGS, (2,))
    assert {(v.kind, v.ring) for v in found} == {("read-after-fill", r) for r in ("X", "gate", "up")}
    assert any(v.line == line_of(bad, LOOP_UP_MMA) for v in found)


def test_the_ring_keeps_every_gate_up_tile_one_iteration_longer() -> None:
    """Both of the gate-up loop's mma only accumulate, so the lowering leaves both in flight into the next iteration:
    the weight tiles are staged with one reader (the loader one slot less ahead). The down GEMM's only mma too."""
    for kernel, pol in ((moe_gate_up, ws_up(stages=5)), (moe_down, ws_down(stages=5))):
        loop = next(op for op in kernel.ir.walk() if op.kind == "for")
        staged = [default_staging(pol, loop, op) for op in loop.blocks[0].ops if op.kind == "load"]
        staged = [st for st in staged if st is not None]
        assert staged and all((st.buffers, st.distance, st.readers) == (5, 3, 1) for st in staged), staged


@pytest.mark.parametrize("stages", [2, 4])
def test_the_checker_proves_the_gate_up_and_down_under_their_rings(stages: int) -> None:
    shapes = dict(T=4608, HD=4096, E=8, I2=28672, I=14336, P=4608, NB=36)
    down_stages = min(stages, 3)  # the down's 256-column tile and its epilogue's staging fit three slots
    for kernel, pol, slots in ((moe_gate_up, ws_up(stages=stages), stages),
                               (moe_down, ws_down(stages=down_stages).with_consts(BM=128), down_stages)):
        names = set(kernel.ir.symbols)
        res = verify(kernel, pol, {k: v for k, v in shapes.items() if k in names},
                     assumptions=["T == P"] if kernel is moe_gate_up else [])
        assert res.proved, res.text()
        assert any(f"rings are proved at {slots} slots" in n for n in res.notes), res.notes


def test_a_mixtral_prefill_plan_proves_both_gluon_lowerings_and_their_triton_fallbacks() -> None:
    from argus_inductor import ops
    from argus_inductor.specs import Problem, signature_for

    sig = signature_for(Problem("moe", "top2,silu", dict(E=8, I=14336, HD=4096, TOPK=2, T=2048), "bfloat16", (),
                                "cpu"), "sm_90")
    entry = ops.make_entry(sig)
    v = entry.verification
    assert entry.policy["moe_gate_up"]["warp_specialize"] is True and v["status"] == "verified", v
    assert any("rings are proved at 4 slots" in n for n in v["kernels"]["moe_gate_up"].get("notes", []))
    assert entry.policy["moe_down"]["warp_specialize"] is True
    assert any("rings are proved at 3 slots" in n for n in v["kernels"]["moe_down"].get("notes", []))
    for fallback in ("moe_gate_up (Triton fallback, 3 stages)", "moe_down (Triton fallback, 3 stages)"):
        assert v["kernels"][fallback]["ok"], fallback


def test_the_template_takes_both_lowerings_for_2_byte_prefill_on_nvidia_only() -> None:
    up, down = moe_policies(2048, 2, 8, "cuda", gluon=True)
    assert up.warp_specialize and gluon_up.policy_fits(up) is None and up.num_stages == 4
    assert down.warp_specialize and gluon_down.policy_fits(down.with_consts(BM=128)) is None and down.num_stages == 3
    fb = moe_gate_up_fallback(up)
    assert not fb.warp_specialize and fb.num_stages == 3 and fb == moe_policies(2048, 2, 8, "cuda")[0]
    assert gluon_up.fallback(up) == fb
    fb_down = gluon_down.fallback(down)
    assert not fb_down.warp_specialize and fb_down.num_stages == 3 and fb_down == moe_policies(2048, 2, 8, "cuda")[1]
    for tokens, target, gluon in ((2048, "cuda", False), (2048, "hip", True), (64, "cuda", True),
                                  (1024, "cuda", True), (1, "cuda", True)):
        for pol in moe_policies(tokens, 2, 8, target, gluon=gluon):
            assert not pol.warp_specialize, (tokens, target, gluon)


def _schedule() -> dict:
    """The Gluon down's schedule helpers, their own source run over Python integers (they use integer arithmetic,
    minimum and maximum only)."""
    ns: dict = {"gl": SimpleNamespace(minimum=min, maximum=max, constexpr=int)}
    for f in (gluon_down.tail_split, gluon_down.program_run, gluon_down.block_of, gluon_down.starts_tile):
        src = textwrap.dedent(inspect.getsource(f.fn))
        exec("\n".join(ln for ln in src.splitlines() if not ln.startswith("@")), ns)
    return ns


def _runs(ns: dict, tiles: int, nprog: int, kb: int) -> tuple[Counter, list[int]]:
    """Every (tile, K block) the programs accumulate, counted, and each program's block count; each stretch the
    consumer adds as one tile (from a start to the block before the next start) is checked to be one tile's
    consecutive K blocks."""
    seen: Counter = Counter()
    lengths = []
    for pid in range(nprog):
        dp, k0, tail, n = ns["program_run"](pid, nprog, tiles, kb, gluon_down.MAX_SPLIT)
        lengths.append(n)
        blocks = [ns["block_of"](g, pid, nprog, kb, dp, k0, tail) for g in range(n)]
        seen.update(blocks)
        for g in range(1, n):
            if not ns["starts_tile"](g, kb, dp):  # the same tile goes on
                assert blocks[g] == (blocks[g - 1][0], blocks[g - 1][1] + 1), (tiles, nprog, kb, pid, g)
    return seen, lengths


@pytest.mark.parametrize("nprog", [1, 5, 132])
def test_the_down_schedule_covers_every_k_block_of_every_tile_once(nprog: int) -> None:
    """Full waves, then the tiles left cut along K: whatever the tile count, every K block of every tile is added
    exactly once, each added stretch is one tile's consecutive blocks, and no program runs more than a full wave's
    share plus one part."""
    ns = _schedule()
    for tiles in [1, 2, 3, 4, 7, 64, 131, 132, 133, 200, 263, 264, 265, 592]:
        for kb in [1, 3, 4, 9, 16, 224] if tiles < 300 else [224]:
            seen, lengths = _runs(ns, tiles, nprog, kb)
            assert seen == Counter({(t, k): 1 for t in range(tiles) for k in range(kb)}), (tiles, nprog, kb)
            full, rem, split = ns["tail_split"](tiles, nprog, kb, gluon_down.MAX_SPLIT)
            assert max(lengths) == full * kb + (-(-kb // split) if rem else 0), (tiles, nprog, kb)


def test_at_mixtral_2048_tokens_the_down_runs_four_and_a_half_waves_not_five() -> None:
    ns = _schedule()
    _, lengths = _runs(ns, 37 * 16, 132, 224)  # 37 real row blocks of 128, 16 column blocks of 256, K 14336 / 64
    assert max(lengths) == 4 * 224 + 112


def test_only_2_byte_moe_signatures_get_the_gluon_template() -> None:
    from argus_inductor import ops
    from argus_inductor.specs import Problem, signature_for

    def template(dtype: str) -> dict:
        sig = signature_for(Problem("moe", "top2,silu", dict(E=8, I=14336, HD=4096, TOPK=2, T=2048), dtype, (),
                                    "cpu"), "sm_90")
        return ops.spec_for(sig).template(sig, "cuda")

    assert template("bfloat16")["moe_gate_up"]["warp_specialize"]
    assert template("float16")["moe_gate_up"]["warp_specialize"]
    assert not template("float32")["moe_gate_up"].get("warp_specialize")


def test_policies_and_launches_it_cannot_take_say_why() -> None:
    assert "GATHERED=0" in gluon_up.policy_fits(ws_up().with_consts(GATHERED=0))
    assert "BN=256" in gluon_up.policy_fits(ws_up(bn=256))
    assert "shared memory" in gluon_up.policy_fits(ws_up(bk=128, stages=4))
    assert "num_warps" in gluon_down.policy_fits(Policy.make(BM=128, BN=256, BK=64, num_warps=4, num_stages=3))
    x = torch.randn(256, 64, dtype=torch.bfloat16)
    w1 = torch.randn(2, 96, 64, dtype=torch.bfloat16)
    ids, be = torch.zeros(256, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    h = torch.empty(256, 48, dtype=torch.bfloat16)
    assert "capability 9.0" in gluon_up.declines(ws_up(), x, w1, ids, be, h)
    assert "dtypes" in gluon_up.declines(ws_up(), x.float(), w1.float(), ids, be, h.float())
    assert "P = NB * BM" in gluon_up.supported(x, w1, ids[:200], be, h, 128)
    assert "float32" in gluon_down.declines(ws_down(), h, w1[:, :64, :48].contiguous(), ids, be, ids.float(),
                                            torch.empty(4, 64, dtype=torch.bfloat16))


@pytest.mark.skipif(GPU, reason="runs the fallback on CPU tensors under the interpreter")
def test_a_launch_the_gluon_kernels_decline_runs_the_triton_lowering_and_is_right() -> None:
    """CPU tensors are no sm_90 launch: a warp-specialized MoE policy runs the Triton lowering (here under the
    interpreter), checked against float64."""
    torch.manual_seed(0)
    t, hd, inter, e, topk = 24, 32, 40, 4, 2
    x = torch.randn(t, hd)
    w1 = torch.randn(e, 2 * inter, hd) * hd ** -0.5
    w2 = torch.randn(e, hd, inter) * inter ** -0.5
    tw, ti = torch.topk(torch.softmax(torch.randn(t, e), -1), topk)
    up = Policy.make(BM=64, BN=32, BK=32, num_warps=4, num_stages=2, warp_specialize=True, GATHERED=1)
    down = Policy.make(BN=32, BK=32, num_warps=4, num_stages=2, warp_specialize=True)
    got = moe_expert_step(x, w1, w2, tw, ti, policy_up=up, policy_down=down)
    ref = _reference(x.double(), w1.double(), w2.double(), tw.double(), ti)
    assert ((got.double() - ref).abs().max() / ref.abs().max()).item() < 1e-4
    rows = torch.empty(64 * 4, hd)
    ids, be = moe_align_block(ti, e, 64)
    assert moe_gate_up._hopper(up, (rows, w1, ids, be, torch.empty(rows.shape[0], inter)), {}) == \
        moe_gate_up_fallback(up)


def _reference(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, tw: torch.Tensor, ti: torch.Tensor
               ) -> torch.Tensor:
    inter = w1.shape[1] // 2
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(ti.shape[1]):
            e = int(ti[t, j])
            g, u = w1[e, :inter] @ x[t], w1[e, inter:] @ x[t]
            y[t] += tw[t, j] * (w2[e] @ (torch.nn.functional.silu(g) * u))
    return y


@pytest.mark.skipif(not GPU, reason="needs the H100 (ARGUS_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("t,hd,inter,e,up_pol,down_pol,dtype", [
    (2048, 4096, 14336, 8, ws_up(), ws_down(), torch.bfloat16),              # Mixtral's layer at 2048 tokens
    (700, 1032, 200, 6, ws_up(), ws_down(bn=128, stages=3), torch.bfloat16),  # ragged I, HD and expert runs
    (700, 1032, 200, 6, replace(ws_up(), programs_per_sm=2), ws_down(), torch.bfloat16),  # two programs an SM
    (2048, 4096, 14336, 8, moe_policies(2048, 2, 8, "cuda", gluon=True)[0], ws_down(), torch.bfloat16),
    (300, 512, 384, 4, ws_up(64, 64, 128, 3), ws_down(64, 64, 128, 2), torch.float16),
    (64, 256, 2048, 4, ws_up(), ws_down(bn=128), torch.bfloat16)])  # few tiles: each cut along K into 4 parts
def test_on_the_h100_they_match_a_float32_reference(t: int, hd: int, inter: int, e: int, up_pol: Policy,
                                                     down_pol: Policy, dtype: torch.dtype) -> None:
    x = torch.randn(t, hd, device="cuda", dtype=dtype)
    w1 = (torch.randn(e, 2 * inter, hd, device="cuda") * hd ** -0.5).to(dtype)
    w2 = (torch.randn(e, hd, inter, device="cuda") * inter ** -0.5).to(dtype)
    tw, ti = torch.topk(torch.softmax(torch.randn(t, e, device="cuda"), -1), 2)
    tw = tw.to(dtype)
    bm = up_pol.const("BM")
    ids, be = moe_align_block(ti, e, bm)
    assert int((be == e).sum()) >= 1  # padding blocks past the last real one
    xs = torch.zeros(ids.numel(), hd, device="cuda", dtype=dtype)
    real = ids < t * 2
    xs[real] = x[(ids[real] // 2).long()]
    h = torch.full((ids.numel(), inter), float("nan"), device="cuda", dtype=dtype)
    assert gluon_up.launch(up_pol, xs, w1, ids, be, h)
    xf, w1f = xs.float(), w1.float()
    blk_e = be.repeat_interleave(bm).long()
    live = blk_e < e
    want = torch.zeros(ids.numel(), inter, device="cuda")
    for ex in range(e):
        rows = live & (blk_e == ex)
        g, u = xf[rows] @ w1f[ex, :inter].t(), xf[rows] @ w1f[ex, inter:].t()
        want[rows] = torch.nn.functional.silu(g) * u
    err = (h.float()[live] - want[live]).abs().max() / want[live].abs().max()
    assert err.item() < 2e-2
    y = torch.zeros(t, hd, device="cuda")
    assert gluon_down.launch(down_pol.with_consts(BM=bm), h, w2, ids, be, tw.reshape(-1).contiguous(), y)
    ref = _reference(x.float(), w1.float(), w2.float(), tw.float(), ti) if t <= 300 else None
    got = moe_expert_step(x, w1, w2, tw, ti, policy_up=up_pol, policy_down=down_pol)
    if ref is None:  # the big shape: against a float32 expert loop
        ref = torch.zeros(t, hd, device="cuda")
        for ex in range(e):
            tok, slot = (ti == ex).nonzero(as_tuple=True)
            g, u = x[tok].float() @ w1[ex, :inter].float().t(), x[tok].float() @ w1[ex, inter:].float().t()
            ref.index_add_(0, tok, (torch.nn.functional.silu(g) * u) @ w2[ex].float().t() * tw[tok, slot, None])
    for out in (y, got.float()):
        assert ((out - ref).abs().max() / ref.abs().max()).item() < 2e-2
