"""The measured swap-in (issue 39): which side runs, decided by timing both, stored in the cache entry, read back
without timing, and applied to the graph (a node Inductor's code wins gets its reference, so Inductor compiles that
subgraph). Timed here with a fake clock: on the CPU interpreter real times mean nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import argus_inductor  # noqa: F401  (registers backend="argus")
from argus_inductor import ops
from argus_inductor.graph import rewrite
from argus_inductor.graph.swapin import measuring_with, swap_in
from argus_inductor.ops import references
from argus_inductor.ops import swapin as decide
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime.cache import FORMAT, CacheEntry, checksum

from .graphs import capture


def test_choose_keeps_argus_only_where_it_is_faster_by_more_than_a_tie() -> None:
    assert decide.choose(1.0, 2.0) == "argus"               # Argus wins
    assert decide.choose(2.0, 1.0) == "fallback"            # the fallback wins
    assert decide.choose(1.0, 1.0 * (1 + decide.TIE / 2)) == "fallback"  # a tie: Inductor's code
    assert decide.choose(None, 1.0) == "fallback"           # Argus could not be timed
    assert decide.choose(1.0, None) == "argus"              # the fallback could not be timed


class Clock:
    """A fake timer: side -> milliseconds (or an exception to raise); counts what it was asked."""

    def __init__(self, argus: float | Exception, fallback: float | Exception) -> None:
        self.times = {"argus": argus, "fallback": fallback}
        self.calls: list[str] = []
        self.dead: set[str] = set()  # a side whose timing raised is not timed again

    def __call__(self, fns, target, rep_ms, method):
        if self.dead:
            side = ({"argus", "fallback"} - self.dead).pop()
        else:  # measure() times the sides in turn, argus first
            side = "argus" if not self.calls or self.calls[-1] == "fallback" else "fallback"
        self.calls.append(side)
        if isinstance(self.times[side], Exception):
            self.dead.add(side)
        for f in fns:  # the calls timed run for real (under the interpreter)
            f()
        t = self.times[side]
        if isinstance(t, Exception):
            raise t
        return t, "fake clock"


def test_the_sides_are_timed_in_turn_each_keeping_its_median() -> None:
    """A B A B A B: a transient load on the device (another process's work) lands on both sides, not on one."""
    times = iter([1.0, 2.0, 9.0, 2.1, 1.1, 30.0])  # argus 1.0, 9.0, 1.1 -> 1.1; fallback 2.0, 2.1, 30.0 -> 2.1
    order = []

    def timer(fns, target, rep_ms, method):
        order.append(fns[0]())
        return next(times), "fake clock"

    v = decide.measure([lambda: "argus"], [lambda: "fallback"], "cuBLAS", timer)
    assert order == ["argus", "fallback"] * decide.ROUNDS
    assert (v.argus_ms, v.fallback_ms, v.winner) == (1.1, 2.1, "argus")


def test_a_long_argus_call_far_slower_than_the_fallback_ends_the_timing_after_one_round() -> None:
    """A plan of 271 ms against 2.9 ms (a full-precision float32 GEMM against SGEMM on the H200) is timed once, not
    in three rounds: the verdict (Inductor's code) cannot change. A short call, or a long one within 3x, or Argus
    far faster, keeps its rounds."""
    for argus, fallback, rounds in ((271.0, 2.9, 1), (3.0, 0.5, decide.ROUNDS), (25.0, 10.0, decide.ROUNDS),
                                    (10.0, 100.0, decide.ROUNDS)):
        clock = Clock(argus, fallback)
        v = decide.measure([lambda: None], [lambda: None], "cuBLAS", clock)
        assert clock.calls == ["argus", "fallback"] * rounds, (argus, fallback, clock.calls)
        assert v.winner == ("argus" if argus < fallback else "fallback") and v.argus_ms == argus


def test_measure_counts_a_timing_that_throws_against_its_side() -> None:
    v = decide.measure([lambda: None], [lambda: None], "cuBLAS", Clock(RuntimeError("boom"), 1.0))
    assert v.winner == "fallback" and v.argus_ms is None and "Argus plan failed to time" in v.why
    v = decide.measure([lambda: None], [lambda: None], "cuBLAS", Clock(1.0, RuntimeError("boom")))
    assert v.winner == "argus" and v.fallback_ms is None and "fallback failed to time" in v.why
    v = decide.measure([lambda: None], None, "cuBLAS", Clock(1.0, 1.0), why_no_fallback="no compiler")
    assert v.winner == "argus" and v.why == "no compiler"


def test_a_verdict_round_trips_and_a_damaged_one_is_measured_again() -> None:
    v = decide.Verdict("argus", 0.5, 1.0, "cuBLAS + Inductor epilogue", "cudagraph median", "", 1.0)
    assert decide.Verdict.from_dict(json.loads(json.dumps(v.as_dict()))) == v
    assert "2.00x faster than cuBLAS + Inductor epilogue" in v.text()
    f = decide.Verdict("fallback", 2.4, 1.0, "cuDNN + Inductor epilogue", "cudagraph median")
    assert f.text().startswith("swap-in: fallback: cuDNN + Inductor epilogue, 2.40x faster than argus")
    for bad in ({}, {"winner": "maybe", "fallback": "x", "method": "y"}, {**v.as_dict(), "argus_ms": -1},
                {**v.as_dict(), "argus_ms": "fast"}):
        assert decide.Verdict.from_dict(bad) is None


def _mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = F.gelu(F.linear(x, w1))
    return F.linear(h, w2) + h.sum(-1, keepdim=True)  # h has two readers: each GEMM is decided on its own


def _chain(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.linear(F.gelu(F.linear(x, w1)), w2)  # the first GEMM feeds only the second: decided together


def _graph(fn=_mlp) -> tuple[torch.fx.GraphModule, list]:
    x, w1, w2 = torch.randn(8, 32), torch.randn(48, 32), torch.randn(16, 48)
    gm, inputs = capture(fn, x, w1, w2)
    assert rewrite(gm, ("gemm",))
    return gm, inputs


def _eager(fn, args, kwargs):
    return lambda *tensors: fn(*args, **kwargs)


def _argus_nodes(gm: torch.fx.GraphModule) -> list:
    return [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith("argus.")]


@pytest.mark.parametrize("argus_ms, fallback_ms, winner", [(1.0, 2.0, "argus"), (2.0, 1.0, "fallback"),
                                                           (1.0, 1.005, "fallback")])
def test_swap_in_applies_the_verdict_and_stores_it(fresh_cache: Path, argus_ms, fallback_ms, winner) -> None:
    gm, inputs = _graph()
    clock = Clock(argus_ms, fallback_ms)
    decided = swap_in(gm, inputs, "interpret", timer=clock, compile_fallback=_eager, devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {winner}
    assert len(clock.calls) == 2 * 2 * decide.ROUNDS  # two signatures, each side timed in ROUNDS turns
    left = _argus_nodes(gm)
    refs = [n for n in gm.graph.nodes if n.target is references.linear]
    assert (len(left), len(refs)) == ((2, 0) if winner == "argus" else (0, 2))
    got = gm(*inputs)
    torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, _mlp(*inputs), rtol=1e-4, atol=1e-4)
    cache = ops.kernel_cache()
    entries = cache.entries()
    assert len(entries) == 2 and all(e.origin == "default" and e.verification["status"] == "verified"
                                     for e in entries)
    assert all(decide.stored(e, "cpu | fp32 ieee").winner == winner for e in entries)
    notes = [n for e in report_mod.entries() for n in e.notes]
    assert sum("swap-in: " + ("argus" if winner == "argus" else "fallback") in n for n in notes) == 2, notes


def test_a_stored_verdict_decides_without_timing(fresh_cache: Path) -> None:
    gm, inputs = _graph()
    swap_in(gm, inputs, "interpret", timer=Clock(2.0, 1.0), compile_fallback=_eager, devices=("cpu",))
    ops.forget_plans()
    gm2, inputs2 = _graph()
    clock = Clock(RuntimeError("must not time"), RuntimeError("must not time"))
    decided = swap_in(gm2, inputs2, "interpret", timer=clock, compile_fallback=_eager, devices=("cpu",))
    assert clock.calls == [] and {v.winner for _, v in decided} == {"fallback"}
    assert not _argus_nodes(gm2)
    # the verdict's miss is still a miss for `argus warmup` (a default entry solves nothing)
    assert all(not m["solved"] for m in ops.kernel_cache().misses())


@pytest.mark.parametrize("argus_ms, fallback_ms, winner", [(1.0, 2.0, "argus"), (2.0, 1.0, "fallback")])
def test_ops_that_feed_only_each_other_are_decided_together(fresh_cache: Path, argus_ms, fallback_ms,
                                                            winner) -> None:
    """Inductor fuses across the boundary of two ops it runs both of, so such a pair is timed as a whole: the Argus
    ops in turn against the two references compiled together; one verdict for both, kept in the last one's entry
    (the first gets its entry too), read back without timing."""
    gm, inputs = _graph(_chain)
    assert len(_argus_nodes(gm)) == 2
    clock = Clock(argus_ms, fallback_ms)
    decided = swap_in(gm, inputs, "interpret", timer=clock, devices=("cpu",))  # the fallback compiled by Inductor
    assert len(clock.calls) == 2 * decide.ROUNDS and len(decided) == 2 and {v.winner for _, v in decided} == {winner}
    assert decided[0][1].fallback.startswith("Inductor across the group")
    got = gm(*inputs)
    torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, _chain(*inputs), rtol=1e-4, atol=1e-4)
    entries = ops.kernel_cache().entries()
    assert len(entries) == 2
    slots = [s for e in entries for s in e.swapin]
    assert len(slots) == 1 and slots[0].startswith("cpu | fp32 ieee | group ")
    gm2, inputs2 = _graph(_chain)
    clock2 = Clock(RuntimeError("must not time"), RuntimeError("must not time"))
    assert {v.winner for _, v in swap_in(gm2, inputs2, "interpret", timer=clock2, devices=("cpu",))} == {winner}
    assert clock2.calls == []


def test_an_old_format_entry_is_read_and_measured(fresh_cache: Path) -> None:
    gm, inputs = _graph()
    sig = None
    with ops.recording_signatures() as seen:
        for n in _argus_nodes(gm)[:1]:
            try:
                n.target(*[inputs[[p.name for p in gm.graph.nodes if p.op == "placeholder"].index(a.name)]
                           if isinstance(a, torch.fx.Node) and a.op == "placeholder" else a for a in n.args])
            except ops.SignatureRecorded:
                pass
    sig = seen[0] if seen else None
    if sig is None:
        pytest.skip("the first GEMM's operands are not graph inputs here")
    entry = ops.make_entry(sig, origin="warmup")
    payload = {k: v for k, v in entry.to_json().items() if k != "swapin"}  # as a format 1 entry was written
    doc = {"format": 1, "key": sig.key(), "checksum": checksum(payload), "written": 0.0, "entry": payload}
    cache = ops.kernel_cache()
    cache.kernels.mkdir(parents=True, exist_ok=True)
    cache.path(sig.key()).write_text(json.dumps(doc))
    assert isinstance(cache.get(sig.key()), CacheEntry) and cache.get(sig.key()).swapin == {}
    swap_in(gm, inputs, "interpret", timer=Clock(1.0, 2.0), compile_fallback=_eager, devices=("cpu",))
    again = cache.get(sig.key())
    assert again.origin == "warmup" and decide.stored(again, "cpu | fp32 ieee").winner == "argus"
    assert json.loads(cache.path(sig.key()).read_text())["format"] == FORMAT


def test_the_interpreter_keeps_the_template_rule_and_says_so(fresh_cache: Path) -> None:
    gm, inputs = _graph()
    assert swap_in(gm, inputs, "interpret") == []
    assert len(_argus_nodes(gm)) == 2
    notes = [n for e in report_mod.entries() for n in e.notes]
    assert any("swap-in not measured (the Triton interpreter" in n for n in notes), notes


def test_the_fallback_side_is_compiled_by_inductor(fresh_cache: Path) -> None:
    """The default compile_fallback compiles the reference alone with Inductor (here its CPU code), not eager."""
    from argus_inductor.graph.swapin import compile_alone

    x, w, b = torch.randn(8, 32), torch.randn(16, 32), torch.randn(16)
    fn = compile_alone(references.linear, (x, w, b, "gelu", "g0:x"), {})
    out = fn(x, w, b)
    out = out[0] if isinstance(out, (list, tuple)) else out
    torch.testing.assert_close(out, F.gelu(F.linear(x, w, b)), rtol=1e-5, atol=1e-5)


def test_swapin_never_leaves_every_graph_to_inductor(fresh_cache: Path) -> None:
    f = torch.compile(torch.nn.Linear(32, 16), backend="argus", options={"swapin": "never"})
    with torch.no_grad():
        f(torch.randn(4, 32))
    assert not any(e.calls for e in report_mod.entries())


def test_the_moe_fallback_compiles_alone_so_its_swap_in_is_measured(fresh_cache: Path) -> None:
    """The MoE reference counts the rows of each expert in a tensor of static shape: with bincount (whose shape
    depends on the ids' values) Inductor could not compile it alone, and the swap-in kept Argus's experts unmeasured
    ("the fallback failed to compile", seen on the H200 in the Qwen3-MoE e2e runs of 2026-11-29)."""
    from argus_inductor.graph.swapin import compile_alone

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no grouped GEMM")
    t, hidden, experts, inter, top = 16, 32, 4, 24, 2
    bf = torch.bfloat16
    x, w1 = torch.randn(t, hidden, dtype=bf), torch.randn(experts, 2 * inter, hidden, dtype=bf)
    w2 = torch.randn(experts, hidden, inter, dtype=bf)
    ids = torch.rand(t, experts).topk(top, dim=1).indices
    weights = torch.softmax(torch.randn(t, top), -1).to(bf)
    expected = torch.zeros(t, hidden)
    for row in range(t):  # token by token, each routed expert's SiLU-gated MLP, weighted
        for j in range(top):
            e = int(ids[row, j])
            gu = w1[e].float() @ x[row].float()
            expected[row] += weights[row, j].float() * (w2[e].float() @ (F.silu(gu[:inter]) * gu[inter:]))
    fn = compile_alone(references.moe, (x, weights, ids, w1, w2, "g0:moe"), {})
    out = fn(x, weights, ids, w1, w2)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert ((out.float() - expected).norm() / expected.norm()) < 2e-2


def test_a_moe_behind_its_router_is_measured_on_a_routing_not_on_random_ids(fresh_cache: Path) -> None:
    """The router op hands the experts their ids as floats packed beside its weights, so a random stand-in of them
    (normals) indexed experts out of range: on the H200 a device-side assert in the fallback's count that broke the
    Mixtral e2e run (2026-11-29), on the CPU an error that left the swap-in unmeasured. The MoE call is measured on a
    routing of distinct experts a token, and both sides run."""
    import transformers

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no grouped GEMM")
    cfg = transformers.MixtralConfig(hidden_size=32, intermediate_size=24, num_local_experts=4,
                                     num_experts_per_tok=2)
    cfg._experts_implementation = "grouped_mm"  # traced whole, as the e2e models run it
    torch.manual_seed(0)
    block = transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(cfg).eval().to(torch.bfloat16)
    with torch.no_grad():
        for p in block.parameters():
            p.uniform_(-p.shape[-1] ** -0.5, p.shape[-1] ** -0.5)
    x = torch.randn(1, 16, 32, dtype=torch.bfloat16)
    f = torch.compile(block, backend="argus", options={"ops": "moe", "swapin_background": False})
    clock = Clock(2.0, 1.0)
    with torch.no_grad(), measuring_with(clock, ("cpu",)):
        out = f(x)
        ref = block(x)
    out, ref = (out[0], ref[0]) if isinstance(out, tuple) else (out, ref)
    torch.testing.assert_close(out.float(), ref.float(), rtol=3e-2, atol=3e-2)
    notes = [n for e in report_mod.entries() for n in e.notes if n.startswith("swap-in")]
    assert any(n.startswith("swap-in: fallback") and "grouped_mm" in n for n in notes), notes
    assert not any("failed" in n for n in notes), notes


def test_disagreement_is_the_relative_error_and_infinite_where_the_non_finite_values_differ() -> None:
    r = torch.tensor([1.0, 2.0, float("nan"), float("-inf")])
    assert decide.disagreement(r.clone(), r) == 0.0
    off = r.clone()
    off[0] = 1.5
    assert decide.disagreement(off, r) == pytest.approx(0.5 / 5 ** 0.5)
    assert decide.disagreement((off, r), [r, r]) == pytest.approx(0.5 / 10 ** 0.5)  # tuples: over all tensors
    for bad in (torch.tensor([1.0, 2.0, 0.0, float("-inf")]), torch.tensor([1.0, 2.0, float("nan"), float("inf")]),
                torch.tensor([1.0, float("nan"), float("nan"), float("-inf")]), r[:3]):
        assert decide.disagreement(bad, r) == float("inf")
    assert decide.agree_limit(r.bfloat16()) == decide.AGREE["16-bit"]
    assert decide.agree_limit(r) == decide.AGREE["32-bit"]


def _wrong(fn, args, kwargs):  # a planted bug on the fallback side: Inductor's code off by a factor
    return lambda *tensors: fn(*args, **kwargs) * 2


def test_a_fallback_whose_output_is_off_the_reference_never_wins(fresh_cache: Path) -> None:
    """The fallback is faster by the clock but computes something else: it is out of the choice, Argus's plan runs,
    and the report says why (a fast wrong answer never wins)."""
    gm, inputs = _graph()
    decided = swap_in(gm, inputs, "interpret", timer=Clock(2.0, 1.0), compile_fallback=_wrong, devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {"argus"}
    assert all("the fallback's output is off the reference's (relative error 1" in v.why for _, v in decided)
    assert len(_argus_nodes(gm)) == 2
    got = gm(*inputs)
    torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, _mlp(*inputs), rtol=1e-4, atol=1e-4)


def test_an_argus_plan_whose_output_is_off_the_reference_never_wins(fresh_cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the reference (what the fallback compiles and the check runs) computes twice the op's result, so the
    Argus plan is the side off it; faster by the clock, it still loses."""
    real = references.reference_for

    def doubled(target):
        ref = real(target)
        return None if ref is None else (lambda *a, **k: ref(*a, **k) * 2)

    monkeypatch.setattr(references, "reference_for", doubled)
    gm, inputs = _graph()
    decided = swap_in(gm, inputs, "interpret", timer=Clock(1.0, 2.0), compile_fallback=_eager, devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {"fallback"}
    assert all("its output is off the reference's" in v.why for _, v in decided), [v.why for _, v in decided]
    assert _argus_nodes(gm) == []


def test_a_group_whose_fallback_is_off_the_reference_keeps_argus(fresh_cache: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from argus_inductor.graph import swapin as swapin_mod

    monkeypatch.setattr(swapin_mod, "_compile_fx", lambda gm, inputs: (lambda *t: [gm(*t) * 2]))
    gm, inputs = _graph(_chain)
    decided = swap_in(gm, inputs, "interpret", timer=Clock(2.0, 1.0), devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {"argus"}
    assert all("the fallback's output is off the reference's" in v.why for _, v in decided)


def test_a_reference_wrong_only_at_16_bits_cannot_judge_the_argus_plan_out(fresh_cache: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the reference (what the fallback compiles) is wrong on bf16 operands only, as SDPA handed a float32
    mask went wrong through cuDNN on the H200. The output check runs the reference on float32 copies, so it judges
    the right Argus plan right and the fallback wrong: Argus's plan runs, though slower by the clock."""
    real = references.reference_for

    def wrong_at_16_bits(target):
        ref = real(target)
        if ref is None:
            return None

        def fn(*a, **k):
            out = ref(*a, **k)
            return out * 2 if out.dtype == torch.bfloat16 else out
        return fn

    monkeypatch.setattr(references, "reference_for", wrong_at_16_bits)
    x, w1, w2 = ((torch.randn(*shape) / 4).bfloat16() for shape in ((8, 32), (48, 32), (16, 48)))
    gm, inputs = capture(_mlp, x, w1, w2)
    assert rewrite(gm, ("gemm",))
    decided = swap_in(gm, inputs, "interpret", timer=Clock(2.0, 1.0), compile_fallback=_eager, devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {"argus"}, [v.why for _, v in decided]
    assert all("the fallback's output is off the reference's" in v.why for _, v in decided)
    got = gm(*inputs)
    torch.testing.assert_close((got[0] if isinstance(got, tuple) else got).float(), _mlp(x.float(), w1.float(),
                               w2.float()), rtol=3e-2, atol=3e-2)


def test_a_reference_that_takes_only_16_bit_operands_judges_at_their_precision(fresh_cache: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference that refuses float32 copies (torch._grouped_mm takes bf16 only) still judges, run on the operands
    as they are. Planted: it computes twice the op's result, so the Argus plan is the side off it, and loses though
    faster by the clock."""
    real = references.reference_for

    def bf16_only_doubled(target):
        ref = real(target)

        def fn(*a, **k):
            if any(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in a):
                raise RuntimeError("expected bfloat16 operands")
            return ref(*a, **k) * 2
        return None if ref is None else fn

    monkeypatch.setattr(references, "reference_for", bf16_only_doubled)
    x, w1, w2 = ((torch.randn(*shape) / 4).bfloat16() for shape in ((8, 32), (48, 32), (16, 48)))
    gm, inputs = capture(_mlp, x, w1, w2)
    assert rewrite(gm, ("gemm",))
    decided = swap_in(gm, inputs, "interpret", timer=Clock(1.0, 2.0), compile_fallback=_eager, devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {"fallback"}
    assert all("its output is off the reference's" in v.why for _, v in decided), [v.why for _, v in decided]


def test_an_output_of_indices_is_judged_at_the_operands_precision() -> None:
    """Indices (a top-k's, an argmax's) from 16-bit values: a float32 run of the reference may break a tie the 16-bit
    one made, so where a side's output is an integer tensor the reference runs on the operands as they are, and two
    sides that match it both stand."""
    from argus_inductor.graph import swapin as swapin_mod

    x, w = torch.ones(1, 2).bfloat16(), torch.tensor([[1.0, 1.0], [0.0, 0.001]]).bfloat16()

    def eager(widen):  # x @ w is (1, 1.001): one value, a tie, once rounded to bf16
        a, b = widen((x, w))
        return (a @ b).argmax(-1)

    assert int(eager(lambda a: a)) == 0 and int(eager(swapin_mod._widened)) == 1
    sides = [lambda: (x @ w).argmax(-1)]
    argus, fallback, why = swapin_mod._agreeing(sides, list(sides), "", eager, "argmax")
    assert argus is sides and fallback is not None and why == ""
