"""The plan a search starts from (its baseline trial) is the plan the backend runs on a cache miss: the same
kernels and policies, so an `argus warmup` entry is never a plan the backend's own template beats (before this,
the agent's GEMM template left out the Gluon lowering at 64-128 rows and the shared-memory fit of 4-byte tiles)."""
from __future__ import annotations

import pytest

from argus_inductor import ops
from argus_inductor.agent import synthesizer
from argus_inductor.agent.hardware import for_arch
from argus_inductor.agent.loop import SynthesisResult
from argus_inductor.agent.space import build
from argus_inductor.specs import Problem, attention_epilogue, moe_epilogue, signature_for, spec

GEMMS = [(1, 4096, 4096), (64, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336), (2048, 4096, 4096),
         (16, 8, 4096), (256, 256, 131072)]
PROBLEMS = [Problem("gemm", epi, {"M": m, "N": n, "K": k}, dt)
            for dt in ("bfloat16", "float16", "float32") for m, n, k in GEMMS
            for epi in ("", "bias+silu", "silu*up", "residual")]
PROBLEMS += [Problem("gemm", "cat4096/1024/1024", {"M": 1, "N": 6144, "K": 4096}, "bfloat16")]
PROBLEMS += [Problem("bmm", "", {"B": 32, "M": 512, "N": 256, "K": 1024}, dt) for dt in ("bfloat16", "float32")]
PROBLEMS += [Problem("attention", attention_epilogue(h, hk, c), {"Z": z, "H": h, "HK": hk, "S": s, "T": t, "D": d}, dt)
             for dt in ("bfloat16", "float32")
             for z, h, hk, s, t, d, c in ((1, 32, 8, 2048, 2048, 128, True), (8, 32, 8, 512, 512, 128, True),
                                          (1, 32, 8, 1, 1040, 128, False), (4, 16, 16, 1024, 1024, 64, False))]
PROBLEMS += [Problem("moe", moe_epilogue(2), {"T": t, "HD": 4096, "I": 14336, "E": 8, "TOPK": 2}, dt)
             for dt in ("bfloat16", "float32") for t in (1, 64, 4096)]
# (the agent's row ops, softmax / rmsnorm / layernorm, have signatures of their own that no backend op makes)


def _label(p: Problem) -> str:
    return f"{p.op}[{p.epilogue}]{'x'.join(str(v) for v in p.dims.values())}-{p.dtype}"


@pytest.mark.parametrize("target", ["cuda", "interpret"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=_label)
def test_baseline_is_the_backends_miss_plan(problem: Problem, target: str) -> None:
    op = spec(problem.op)
    space = build(op, problem, for_arch("sm_90"), target)
    cand = synthesizer.from_template(op, problem, space.default)
    pols = op.policies(problem, cand.plan, cand.kernels)
    stored = SynthesisResult.policy_dict(_Result(problem, pols))  # what warmup would write to the cache
    sig = signature_for(problem, "sm_90")
    backend = ops.spec_for(sig)
    assert backend.policies(stored, sig) == backend.policies(backend.template(sig, target), sig)


class _Result:
    """The two fields SynthesisResult.policy_dict reads."""

    def __init__(self, problem: Problem, policies: dict) -> None:
        self.problem = problem
        self.policies = policies
