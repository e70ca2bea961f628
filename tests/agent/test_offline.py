"""The offline policy finds a verified, correct plan for every op of the kernel library under the interpreter
(small odd shapes, tiny budgets)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from argus_inductor.agent import Budget, Problem, synthesize
from argus_inductor.agent.evaluate import Evaluator, rel_error
from argus_inductor.agent.hardware import INTERPRETER
from argus_inductor.agent.space import build
from argus_inductor.agent.synthesizer import from_template
from argus_inductor.specs import spec
from argus_inductor.specs.base import generator

CASES = [
    Problem("gemm", "bias+silu", {"N": 48, "K": 40, "M": 37}, "float32"),
    Problem("gemm", "", {"N": 40, "K": 72, "M": 5}, "bfloat16"),
    Problem("gemm", "bias+relu+residual", {"N": 24, "K": 40, "M": 20}, "float32"),
    Problem("gemm", "silu*up", {"N": 24, "K": 40, "M": 20}, "float32"),
    Problem("gemm", "cat24/8/8", {"N": 40, "K": 72, "M": 1}, "bfloat16"),
    Problem("bmm", "", {"N": 24, "K": 40, "B": 3, "M": 20}, "float32"),
    Problem("attention", "causal,gqa2", {"H": 4, "HK": 2, "D": 16, "Z": 1, "S": 33, "T": 33}, "float32"),
    Problem("attention", "gqa2", {"H": 4, "HK": 2, "D": 16, "Z": 2, "S": 1, "T": 40}, "float32"),
    Problem("moe", "top2,silu", {"HD": 32, "I": 32, "E": 4, "TOPK": 2, "T": 5}, "float32"),
    Problem("softmax", "", {"C": 100, "R": 7}, "float32"),
    Problem("rmsnorm", "", {"C": 100, "R": 7}, "float32"),
    Problem("layernorm", "", {"C": 100, "R": 7}, "float32"),
]


@pytest.mark.parametrize("problem", CASES, ids=[p.short().split(")")[0] + ")" for p in CASES])
def test_offline_policy_finds_a_verified_correct_kernel(problem: Problem, tmp_path: Path) -> None:
    res = synthesize(problem, policy="offline", budget=Budget(trials=1, seconds=120, test_trials=1, patience=0),
                     cache_root=tmp_path, seed=1)
    assert res.verification["ok"]
    assert all(k["ok"] for k in res.verification["kernels"].values())
    assert res.timings["reward_source"] == "template-default" and res.timings["reward"] > 0
    assert res.trail_path is not None and res.trail_path.is_file()
    # an independent check on fresh inputs at another shape of the same signature
    op = spec(problem.op)
    odd = op.test_problem(res.problem, dict(res.signature.dynamic_dims), random.Random(7))
    inputs = op.make_inputs(odd, generator("cpu", 11))
    err, where = rel_error(res.run(inputs), op.reference(odd, inputs))
    assert err <= op.tolerance(odd, "interpret"), where


def test_every_template_variant_verifies_and_matches_the_reference() -> None:
    """Variants the tiny search budget may not reach (split-k) still pass the whole pipeline."""
    problem = Problem("gemm", "bias+gelu", {"N": 40, "K": 200, "M": 5}, "float32")
    op = spec("gemm")
    sp = build(op, problem, INTERPRETER, "interpret")
    assert set(sp.variants) == {"tile", "splitk"}
    ev = Evaluator(op, problem, "interpret", seed=5)
    for variant in sp.variants:
        out = ev.evaluate(from_template(op, problem, sp.prior_plan(variant)))
        assert out.ok, (variant, out.feedback())
        assert out.verification["ok"] and out.ms is not None


def test_a_kernel_that_writes_nothing_cannot_pass_for_correct() -> None:
    """Outputs are NaN-poisoned under test: a stale buffer holding the right answer does not count."""
    problem = Problem("softmax", "", {"C": 40, "R": 3}, "float32")
    op = spec("softmax")
    inputs = op.make_inputs(problem, generator("cpu", 1))
    out = torch.full((3, 40), float("nan"))
    err, where = rel_error(out, op.reference(problem, inputs))
    assert err == float("inf") and "NaN" in where


def test_cache_entries_run_again_and_read_as_the_backend_reads_them(tmp_path: Path) -> None:
    """An entry the agent wrote runs through launcher(), and argus_inductor.ops turns its policy into the same
    kernels and policies (flat for one searched kernel, SPLIT_K selecting split-k; per kernel for MoE)."""
    from argus_inductor import ops as backend
    from argus_inductor.agent import launcher
    from argus_inductor.agent.launch import kernels_of
    from argus_inductor.runtime.cache import KernelCache

    problems = [Problem("gemm", "bias+gelu", {"N": 40, "K": 200, "M": 5}, "float32"),
                Problem("moe", "top2,silu", {"HD": 32, "I": 32, "E": 4, "TOPK": 2, "T": 5}, "float32")]
    for problem in problems:
        op = spec(problem.op)
        res = synthesize(problem, policy="offline", budget=Budget(trials=0, seconds=60, test_trials=1, patience=0),
                         cache_root=tmp_path, seed=2)
        if problem.op == "gemm":  # force the split-k variant into the entry
            plan = build(op, res.problem, INTERPRETER, "interpret").prior_plan("splitk")
            cand = from_template(op, res.problem, plan)
            res.plan, res.kernels, res.dsl_source = plan, cand.kernels, cand.source
            res.policies = op.policies(res.problem, plan, res.kernels)
        entry = res.cache_entry("synthesized")
        KernelCache(tmp_path).put(res.signature.key(), entry)
        kernels, pols = kernels_of(entry)
        assert set(kernels) == set(res.kernels) and {k: p.key() for k, p in pols.items()} == \
            {k: p.key() for k, p in res.policies.items()}
        inputs = op.make_inputs(res.problem, generator("cpu", 3))
        err, where = rel_error(launcher(entry, "cpu")(inputs), op.reference(res.problem, inputs))
        assert err <= op.tolerance(res.problem, "interpret"), where
        if hasattr(backend, "spec_for") and hasattr(backend, "_plan_from_entry"):
            bplan = backend._plan_from_entry(backend.spec_for(res.signature), res.signature, entry, "cache", "")
            assert {k: p.key() for k, p in bplan.policies.items()} == {k: p.key() for k, p in res.policies.items()}
