"""The agent's parts one at a time: front matter, plans, replies, rules, repair, experience, hand-set reference."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from argus_inductor.agent import handset, offline, rules, synthesizer
from argus_inductor.agent.evaluate import Outcome
from argus_inductor.agent.experience import ExperienceStore
from argus_inductor.agent.frontmatter import MiniYAML, flow, parse
from argus_inductor.agent.hardware import HOPPER, INTERPRETER
from argus_inductor.agent.planner import PlanningContext, Reward, Step
from argus_inductor.agent.space import build
from argus_inductor.agent.warmup import table
from argus_inductor.runtime.signature import make_signature
from argus_inductor.specs import Problem, signature_for, spec
from argus_inductor.specs.plan import Plan

GEMM_DECODE = Problem("gemm", "", {"N": 4096, "K": 14336, "M": 1}, "bfloat16")
GEMM_PREFILL = Problem("gemm", "", {"N": 4096, "K": 4096, "M": 4096}, "bfloat16")
CAUSAL = Problem("attention", "causal", {"H": 32, "HK": 32, "D": 128, "Z": 1, "S": 4096, "T": 4096}, "bfloat16")


def test_mini_yaml_reads_the_subset() -> None:
    text = """a: 1
b: [x, 2, "y, z"]
c: {values: [16, 32], prefer: {decode: 16}}
d:
  - name: one
    match: "does not fit|out of resources"
    action: {halve: [BK]}
  - plain, with commas: and colons
e: |
  line one
  line two
f: a plain: "value"
"""
    assert MiniYAML(text).parse() == {
        "a": 1, "b": ["x", 2, "y, z"], "c": {"values": [16, 32], "prefer": {"decode": 16}},
        "d": [{"name": "one", "match": "does not fit|out of resources", "action": {"halve": ["BK"]}},
              "plain, with commas: and colons"],
        "e": "line one\nline two\n", "f": 'a plain: "value"'}
    assert flow("[true, null, 1.5]") == [True, None, 1.5]
    data, body = parse("---\nid: x\n---\n# Title\n", use_yaml=False)
    assert data == {"id": "x"} and body == "# Title"


def test_plan_json_round_trip_and_flat_knobs() -> None:
    p = Plan({"gemm_epilogue": {"BM": 64, "BN": 128}}, ("tile-shape",))
    assert Plan.from_json(p.to_json()).key() == p.key()
    flat = Plan.from_json({"knobs": {"BM": 32}}, ("gemm_epilogue",))
    assert flat.knobs == {"gemm_epilogue": {"BM": 32}}
    with pytest.raises(ValueError):
        Plan.from_json({"knobs": {"BM": 32}}, ("moe_gate_up", "moe_down"))


def test_reply_parsing_and_the_kernel_contract() -> None:
    code, plan = synthesizer.extract("text\n```python\n@kernel\ndef f():\n    pass\n```\n```json\n{\"knobs\": {}}\n```")
    assert code is not None and "def f" in code and plan == {"knobs": {}}
    assert synthesizer.extract("no code here") == (None, None)
    prob = Problem("softmax", "", {"C": 40, "R": 4}, "float32")
    wrong = """from argus_inductor.dsl import *


@kernel
def softmax_kernel(X: Tensor("R", "C"), BR: constexpr = 4, BC: constexpr = 64):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    store(X[rr, arange(BC)], load(X[rr, arange(BC)]))
"""
    out = synthesizer.from_reply(spec("softmax"), prob, f"```python\n{wrong}```", Plan({"softmax_kernel": {}}))
    assert isinstance(out, synthesizer.Rejection) and "runtime parameters" in out.reason
    evil = "```python\nimport subprocess\n\n@kernel\ndef softmax_kernel():\n    pass\n```"
    out = synthesizer.from_reply(spec("softmax"), prob, evil, Plan({"softmax_kernel": {}}))
    assert isinstance(out, synthesizer.Rejection) and "import of 'subprocess' is not allowed" in out.reason
    top = "```python\nfrom argus_inductor.dsl import *\nprint('hi')\n\n@kernel\ndef softmax_kernel():\n    pass\n```"
    out = synthesizer.from_reply(spec("softmax"), prob, top, Plan({"softmax_kernel": {}}))
    assert isinstance(out, synthesizer.Rejection) and "top-level 'Expr'" in out.reason


def test_space_priors_and_variants_on_hopper() -> None:
    sp = build(spec("gemm"), GEMM_DECODE, HOPPER, "cuda")
    assert sp.regime == "decode" and set(sp.variants) == {"tile", "splitk"}
    for variant, space in sp.variants.items():
        for kname, knobs in space.items():
            for knob, value in sp.priors[variant][kname].items():
                assert value in knobs[knob]
    assert sp.variants["tile"]["gemm_epilogue"]["BM"] == [16]  # M=1 never needs more than the mma minimum
    pre = build(spec("gemm"), GEMM_PREFILL, HOPPER, "cuda")
    assert "splitk" not in pre.variants and pre.prior_plan().get("gemm_epilogue", "persistent") is True
    interp = build(spec("gemm"), Problem("gemm", "", {"N": 48, "K": 40, "M": 37}, "float32"), INTERPRETER,
                   "interpret")
    assert max(interp.variants["tile"]["gemm_epilogue"]["BN"]) <= 32


def test_space_completes_a_plan_s_k_step_with_static_steps_that_cover_k() -> None:
    """The decode GEMV template takes static K steps (KSTEPS) at a short K; a plan that moves BK alone gets them
    rescaled (2 steps of 2048 -> 4 of 1024), not the default's count, which would leave half of K out."""
    sp = build(spec("gemm"), Problem("gemm", "", {"N": 4096, "K": 4096, "M": 1}, "bfloat16"), HOPPER, "cuda")
    assert (sp.default.get("gemm_epilogue", "BK"), sp.default.get("gemm_epilogue", "KSTEPS")) == (2048, 2)
    plan = sp.complete(Plan({"gemm_epilogue": {"BK": 1024}}))
    assert (plan.get("gemm_epilogue", "BK"), plan.get("gemm_epilogue", "KSTEPS")) == (1024, 4)
    plan = sp.complete(Plan({"gemm_epilogue": {"BK": 1024, "KSTEPS": 5}}))  # a plan's own count is kept
    assert plan.get("gemm_epilogue", "KSTEPS") == 5


def test_rules_refuse_plans_that_cannot_work() -> None:
    sp = build(spec("gemm"), GEMM_PREFILL, HOPPER, "cuda")
    big = sp.complete(Plan({"gemm_epilogue": {"BM": 128, "BN": 256, "BK": 128, "num_stages": 3}}))
    assert "shared memory" in rules.reject_reason(sp.context("tile"), big)
    ok = sp.complete(Plan({"gemm_epilogue": {"BM": 128, "BN": 256, "BK": 64, "num_stages": 3, "num_warps": 8}}))
    assert rules.reject_reason(sp.context("tile"), ok) is None
    att = build(spec("attention"), CAUSAL, HOPPER, "cuda")
    # key blocks wider than query blocks: the template ends its unmasked loop on a key-block boundary, so the plan
    # is no longer refused (tests/invariants proves it; it once counted the straddling block twice)
    wide = att.complete(Plan({"attention_fwd": {"BM": 32, "BN": 64, "num_stages": 2}}))
    assert rules.reject_reason(att.context("fwd"), wide) is None


def _ctx(problem: Problem) -> PlanningContext:
    sp = build(spec(problem.op), problem, HOPPER, "cuda")
    return PlanningContext(None, spec(problem.op), problem, sp, HOPPER, "cuda")


def _failed(plan: Plan, text: str, index: int = 1) -> Step:
    return Step(index, "offline", "template", plan, Outcome("launch_error", text), 0.0, f"status: launch_error\n{text}")


def test_offline_repair_applies_the_knowledge_base_fix() -> None:
    ctx = _ctx(GEMM_PREFILL)
    plan = ctx.space.complete(Plan({"gemm_epilogue": {"BM": 128, "BN": 256, "BK": 64, "num_stages": 4}}))
    base = Step(0, "baseline", "template", ctx.space.default, Outcome("ok", ms=1.0), 1.0, "ok")
    msg = "policy ... does not fit kernel gemm_epilogue on this GPU (out of resource: shared memory)"
    prop = offline.OfflinePolicy(seed=0).propose(ctx, [base, _failed(plan, msg)])
    assert prop is not None and prop.repair_of == 1 and prop.plan is not None
    assert prop.plan.note.startswith("repair:")
    before, after = plan.knobs["gemm_epilogue"], prop.plan.knobs["gemm_epilogue"]
    assert after["num_stages"] < before["num_stages"] or after["BK"] < before["BK"]
    # a counterexample the causal entry knows: BN is halved until it divides BM
    att = _ctx(CAUSAL)
    bad = att.space.complete(Plan({"attention_fwd": {"BM": 64, "BN": 128}}))
    text = "attention_fwd: reduction-once violated at attention.py:81: that index is counted twice"
    base = Step(0, "baseline", "template", att.space.default, Outcome("ok", ms=1.0), 1.0, "ok")
    step = Step(1, "offline", "template", bad, Outcome("verify_failed", counterexample=text), 0.0, text)
    prop = offline.OfflinePolicy(seed=0).propose(att, [base, step])
    assert prop is not None and prop.plan.knobs["attention_fwd"]["BN"] == 64


def test_offline_local_search_learns_from_rewards() -> None:
    ctx = _ctx(GEMM_DECODE)
    pol = offline.OfflinePolicy(seed=0)
    hist: list[Step] = []
    seen = set()
    for i in range(6):
        prop = pol.propose(ctx, hist)
        assert prop is not None and prop.plan is not None
        assert prop.plan.key() not in seen
        seen.add(prop.plan.key())
        parent = hist[prop.parent].reward if prop.parent is not None else None
        reward = 1.0 + 0.1 * i if i != 3 else 0.0
        out = Outcome("ok", ms=1.0 / reward) if reward else Outcome("wrong", "wrong result")
        hist.append(Step(i, "offline", "template", prop.plan, out, reward, out.feedback(), move=prop.move,
                         parent_reward=parent))
    assert any(s.move is not None for s in hist)


def test_reward_is_zero_for_failures_and_relative_otherwise() -> None:
    r = Reward("peer:cuBLAS", 2.0)
    assert r(Outcome("ok", ms=1.0)) == 2.0
    assert r(Outcome("verify_failed")) == 0.0 and r(None) == 0.0


def test_experience_warm_starts_from_the_nearest_solved_signature(tmp_path: Path) -> None:
    store = ExperienceStore(tmp_path)
    near = signature_for(Problem("gemm", "", {"N": 4096, "K": 4096, "M": 16}, "bfloat16"), "sm_90")
    far = signature_for(Problem("gemm", "", {"N": 4096, "K": 4096, "M": 4096}, "bfloat16"), "sm_90")
    other = signature_for(Problem("gemm", "bias", {"N": 4096, "K": 4096, "M": 8}, "bfloat16"), "sm_90")
    for sig, bn in ((near, 32), (far, 256), (other, 64)):
        store.add(sig, [(Plan({"gemm_epilogue": {"BN": bn}}), 1.0)], "peer")
    me = signature_for(Problem("gemm", "", {"N": 4096, "K": 4096, "M": 8}, "bfloat16"), "sm_90")
    got = store.nearest(me, k=1)
    assert [p.knobs["gemm_epilogue"]["BN"] for p, _ in got] == [32]  # same family, nearest; never another epilogue
    with open(store.path, "a") as f:
        f.write("{torn line\n")
    assert len(store.records()) == 3


def test_signature_for_matches_what_the_backend_computes() -> None:
    x = torch.empty(9, 40, dtype=torch.bfloat16)
    w = torch.empty(24, 40, dtype=torch.bfloat16)
    want = make_signature("gemm", "bias+silu", [x, w], {"N": 24, "K": 40}, {"M": 9})
    got = signature_for(Problem("gemm", "bias+silu", {"N": 24, "K": 40, "M": 9}, "bfloat16"), "cpu")
    assert got == want
    q = torch.empty(2, 8, 5, 16)
    k = torch.empty(2, 2, 7, 16)
    want = make_signature("attention", "causal,gqa4", [q, k, k], {"H": 8, "HK": 2, "D": 16}, {"Z": 2, "S": 5, "T": 7})
    got = signature_for(Problem("attention", "causal,gqa4", {"H": 8, "HK": 2, "D": 16, "Z": 2, "S": 5, "T": 7},
                                "float32"), "cpu")
    assert got == want


def test_hand_set_reference_becomes_a_plan(tmp_path: Path) -> None:
    pol = {"BM": 128, "BN": 64, "BK": 128, "SPLIT_K": 2, "num_warps": 8, "num_stages": 4}
    f1 = tmp_path / "a.json"
    f1.write_text(json.dumps({"rows": [{"op": "gemm", "m": 128, "n": 4096, "k": 14336, "policy": {"BM": 64}, "ms": 0.01},
                                       {"op": "attention", "shape": [1, 32, 8, 1, 8192, 128, False],
                                        "policy": {"BN": 128, "num_warps": 4}, "ms": 0.3}]}))
    f2 = tmp_path / "b.json"
    f2.write_text(json.dumps({"rows": [{"op": "gemm", "m": 128, "n": 4096, "k": 14336, "policy": pol, "ms": 0.05}]}))
    table_ = handset.load([f1, f2])
    prob = Problem("gemm", "", {"N": 4096, "K": 14336, "M": 128}, "bfloat16")
    ref = handset.lookup(table_, prob)
    assert ref is not None and ref["policy"] == pol  # the later file wins for its shapes
    plan = handset.as_plan(prob, pol)
    assert set(plan.knobs) == {"gemm_splitk", "bias_act_cast"} and plan.knobs["gemm_splitk"]["SPLIT_K"] == 2
    dec = Problem("attention", "gqa4", {"H": 32, "HK": 8, "D": 128, "Z": 1, "S": 1, "T": 8192}, "bfloat16")
    ref = handset.lookup(table_, dec)
    assert ref is not None and handset.as_plan(dec, ref["policy"]).knobs == {"attention_decode": {"BN": 128,
                                                                                                   "num_warps": 4}}


def test_table_reports_sources_and_ratios() -> None:
    rows = [{"signature": "gemm(K=1,N=2,M=3)", "source": "offline/template", "plan": "BK=64,BM=16,num_warps=4",
             "ms": 0.01, "peer": "cuBLAS", "speed_vs_peer": 1.1, "vs_handset": 0.99, "trials": 5, "seconds": 3},
            {"signature": "gemm(K=1,N=2,M=4)", "source": "failed", "error": "no kernel", "seconds": 1}]
    text = table(rows)
    assert "| gemm(K=1,N=2,M=3) | offline/template | BM=16 BK=64 w4" in text or "BK=64 BM=16 w4" in text
    assert "failed: no kernel" in text and "1/1 >= 0.95" in text


def test_agent_budget_from_the_environment(monkeypatch) -> None:
    from argus_inductor.agent.loop import Budget

    monkeypatch.setenv("ARGUS_AGENT_TRIALS", "3")
    monkeypatch.setenv("ARGUS_AGENT_SECONDS", "12.5")
    b = Budget.for_target("cuda")
    assert (b.trials, b.seconds, b.patience) == (3, 12.5, Budget().patience)
    monkeypatch.setenv("ARGUS_AGENT_SECONDS", "0")
    with pytest.raises(ValueError, match="ARGUS_AGENT_SECONDS must be > 0"):
        Budget.for_target("cuda")
    monkeypatch.setenv("ARGUS_AGENT_SECONDS", "soon")
    with pytest.raises(ValueError, match="ARGUS_AGENT_SECONDS must be a number"):
        Budget.for_target("interpret")
