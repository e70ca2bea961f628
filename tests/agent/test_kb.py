"""The knowledge base: enough entries, every field filled, every knob real, every entry used by code."""
from __future__ import annotations

import re

import pytest

from argus_inductor.agent import kb, prompts, rules
from argus_inductor.agent.hardware import CDNA3, HOPPER
from argus_inductor.agent.planner import PlanningContext
from argus_inductor.agent.space import build
from argus_inductor.dsl import Policy
from argus_inductor.dsl.policy import LAUNCH_FIELDS
from argus_inductor.specs import SPECS, Problem, spec, templates

ENTRIES = kb.load()
REGIMES = {"gemm": {"decode", "mid", "prefill"}, "bmm": {"decode", "mid", "prefill"},
           "attention": {"decode", "prefill"}, "moe": {"decode", "prefill"}}

# one problem per (op, regime), at real sizes (only the search space and the prompt are built)
SAMPLES = [
    Problem("gemm", "", {"N": 4096, "K": 4096, "M": 1}, "bfloat16"),
    Problem("gemm", "", {"N": 4096, "K": 14336, "M": 128}, "bfloat16"),
    Problem("gemm", "bias+silu", {"N": 4096, "K": 4096, "M": 4096}, "bfloat16"),
    Problem("gemm", "bias+gelu+residual", {"N": 4096, "K": 4096, "M": 4096}, "bfloat16"),
    Problem("gemm", "", {"N": 4096, "K": 4096, "M": 64}, "float8_e4m3fn"),
    Problem("bmm", "", {"N": 128, "K": 128, "B": 32, "M": 1024}, "bfloat16"),
    Problem("attention", "causal", {"H": 32, "HK": 32, "D": 128, "Z": 1, "S": 4096, "T": 4096}, "bfloat16"),
    Problem("attention", "gqa4", {"H": 32, "HK": 8, "D": 128, "Z": 8, "S": 1, "T": 8192}, "bfloat16"),
    Problem("moe", "", {"HD": 4096, "I": 14336, "E": 8, "TOPK": 2, "T": 1}, "bfloat16"),
    Problem("moe", "", {"HD": 4096, "I": 14336, "E": 8, "TOPK": 2, "T": 4096}, "bfloat16"),
    Problem("moe", "", {"HD": 4096, "I": 14336, "E": 8, "TOPK": 2, "T": 4096}, "float8_e4m3fn"),
    Problem("softmax", "", {"C": 4096, "R": 64}, "bfloat16"),
    Problem("rmsnorm", "", {"C": 4096, "R": 64}, "bfloat16"),
    Problem("layernorm", "", {"C": 4096, "R": 64}, "bfloat16"),
]


def all_knobs() -> set[str]:
    names = set(LAUNCH_FIELDS)
    for name in templates.available():
        names |= {p.name for p in templates.kernel(name).ir.constexprs}
    return names


def test_at_least_25_techniques_with_every_field() -> None:
    assert len(ENTRIES) >= 25
    for e in ENTRIES:
        assert e.title and e.summary.strip() and e.when.strip(), e.id
        assert e.ops and set(e.ops) <= set(SPECS), e.id
        assert e.hardware and set(e.hardware) <= {"hopper", "cdna3"}, e.id
        for op in e.ops:
            assert "any" in e.regimes or set(e.regimes) & REGIMES.get(op, {"any"}), (e.id, op)
        assert e.knobs, f"{e.id} names no knobs"
        assert e.invariants, f"{e.id} names no invariants"
        assert e.failure_modes, f"{e.id} names no failure modes"
        for f in e.failure_modes:
            assert f.counterexample.strip() and f.fix.strip(), (e.id, f.name)
            re.compile(f.match)


def test_the_techniques_the_issue_names_are_there() -> None:
    ids = {e.id for e in ENTRIES}
    for want in ("tile-shape", "grouped-grid-order", "software-pipelining", "shared-memory-staging", "smem-swizzle",
                 "split-k", "stream-k", "persistent-kernel", "tma-block-pointers", "warp-specialization",
                 "epilogue-fusion", "online-softmax", "causal-block-skipping", "flash-decoding-split-kv",
                 "gqa-head-packing", "moe-token-sorting", "moe-expert-grouping", "fp8-scaling"):
        assert want in ids


def test_every_knob_exists_and_its_values_are_legal() -> None:
    known = all_knobs()
    for e in ENTRIES:
        for k in e.knobs:
            assert k.name in known, f"{e.id}: knob {k.name} is neither a Policy field nor a template constexpr"
            for v in k.values:
                if k.name in LAUNCH_FIELDS:
                    Policy.make(**{k.name: v})  # raises on an illegal value
                else:
                    assert isinstance(v, int) and v >= 0, (e.id, k.name, v)
            pref = k.prefer.values() if isinstance(k.prefer, dict) else [k.prefer]
            for p in pref:
                assert p is None or p in k.values, (e.id, k.name, p)
        for f in e.failure_modes:
            for verb, arg in f.action.items():
                names = list(arg) if verb == "set" else (arg if isinstance(arg, list) else [arg])
                for n in names:
                    assert n in known, (e.id, f.name, n)


def test_every_entry_is_used_by_code() -> None:
    rendered: dict[str, str] = {}
    for prob in SAMPLES:
        for hw in (HOPPER, CDNA3):
            sp = build(spec(prob.op), prob, hw, "cuda")
            ctx = PlanningContext(None, spec(prob.op), prob, sp, hw, "cuda")
            text = prompts.user_prompt(ctx, [], "peer")
            for e in sp.entries:
                rendered[e.id] = text
    for e in ENTRIES:
        assert e.used_by, e.id
        for use in e.used_by:
            kind, _, name = use.partition(":")
            if kind == "template":
                assert name in templates.TEMPLATES and name in templates.available(), (e.id, use)
                assert e.id in templates.TEMPLATES[name].techniques, (e.id, use)
            elif kind == "rule":
                assert name in rules.RULES, (e.id, use)
            elif use == "prompt":
                assert e.id in rendered and f"### {e.id}:" in rendered[e.id], f"{e.id} never reaches a prompt"
            else:
                pytest.fail(f"{e.id}: unknown use {use!r}")


def test_templates_and_rules_point_back_at_entries() -> None:
    for t in templates.TEMPLATES.values():
        claimed = {e.id for e in ENTRIES if f"template:{t.name}" in e.used_by}
        assert set(t.techniques) == claimed, t.name
        assert t.name in templates.available(), t.name
    for r in rules.RULES.values():
        entry = kb.by_id(r.entry)
        assert f"rule:{r.id}" in entry.used_by, f"rule {r.id} implements {r.entry}, which does not list it"


@pytest.mark.parametrize("use_yaml", [True, False])
def test_front_matter_reads_the_same_with_and_without_pyyaml(use_yaml: bool) -> None:
    if use_yaml:
        pytest.importorskip("yaml")
    assert kb.load(use_yaml=use_yaml) == ENTRIES
