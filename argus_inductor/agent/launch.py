"""Running what the agent put in the cache: a CacheEntry's DSL source (read again by the frontend, never
executed) and policies, launched through the op's host code."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dsl import Kernel, Policy, kernels_from_source
from ..runtime.signature import Signature
from ..specs import plan_from_policy, problem_from_signature, spec


def kernels_of(entry: Any, device: str = "cpu") -> tuple[dict[str, Kernel], dict[str, Policy]]:
    """The kernels an entry holds, by the names the op launches them by, and their policies."""
    sig = Signature.from_dict(entry.signature)
    problem = problem_from_signature(sig, device)
    op = spec(sig.op)
    plan = plan_from_policy(problem, entry.policy)
    found = kernels_from_source(entry.dsl_source, "<cache entry>")
    missing = [n for n in plan.knobs if n not in found]
    if missing:
        raise ValueError(f"cache entry lacks kernel(s) {missing}")
    kernels = {n: found[n] for n in plan.knobs}
    return kernels, op.policies(problem, plan, kernels)


def launcher(entry: Any, device: str = "cuda") -> Callable[[dict[str, Any]], Any]:
    """A callable running the entry's kernels on an inputs dict: gemm {"a" (M,K), "b" (K,N), "bias", "residual"},
    bmm {"a", "b"}, attention {"q", "k", "v", "scale"}, moe {"x", "w1", "w2", "topk_weights", "topk_ids"},
    softmax {"x"}, rmsnorm {"x", "w"}, layernorm {"x", "w", "b"}."""
    sig = Signature.from_dict(entry.signature)
    problem = problem_from_signature(sig, device)
    op = spec(sig.op)
    kernels, policies = kernels_of(entry, device)

    def run(inputs: dict[str, Any]) -> Any:
        return op.run(problem, kernels, policies, inputs)

    return run
