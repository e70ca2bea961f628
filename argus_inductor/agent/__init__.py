"""The Argus agent: synthesizes a verified, tested, timed kernel for a shape signature.

    from argus_inductor.agent import synthesize, Budget
    result = synthesize(signature)            # LLM policy if ARGUS_LLM_BASE_URL is set, else offline
    result.kernels, result.policies, result.timings, result.trail_path, result.run(inputs)
    launcher(cache_entry)(inputs)             # run what the agent put in the cache

    argus warmup --preset fast-kernels        # fill the cache ahead of time (see agent/cli.py)

The LLM endpoint (OpenAI-compatible chat completions, e.g. `vllm serve`): ARGUS_LLM_BASE_URL, ARGUS_LLM_MODEL,
ARGUS_LLM_API_KEY, and ARGUS_LLM_TIMEOUT / _MAX_RETRIES / _BACKOFF / _TEMPERATURE / _MAX_TOKENS (agent/llm.py).
Without them the offline policy searches the kernel library's templates with the knowledge base's priors.

Parts: kb.py (the knowledge base kb/), space.py + rules.py (what to search), planner.py (in-context RL:
history, reward, policies), offline.py / llm_policy.py + prompts.py (the two policies), synthesizer.py (plan or
LLM reply -> candidate kernel), evaluate.py + verifier.py + bench.py (verify -> lower -> test -> time), llm.py
(the client), experience.py (warm start), store.py (cache entry and trail), loop.py (synthesize), shapes.py +
warmup.py + cli.py (`argus warmup`), handset.py (the hand-set reference), launch.py (run a cache entry).
What each op computes (semantics, reference, inputs, peers, how a plan becomes policies) is argus_inductor.specs,
shared with the ops.

May import: everything below it (dsl, invariants, kernels, specs, runtime, ops, graph for tracing a model).
Nothing below imports it: the ops reach the agent only through ops.core's agent hooks, installed by the package
root.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["synthesize", "Budget", "SynthesisResult", "SynthesisError", "Problem", "Plan", "launcher", "tune"]


def __getattr__(name: str) -> Any:  # lazy: importing the package must not import torch/triton work early
    if name in ("synthesize", "Budget", "SynthesisResult", "SynthesisError"):
        from . import loop

        return getattr(loop, name)
    if name == "Problem":
        from ..specs import Problem

        return Problem
    if name == "Plan":
        from ..specs.plan import Plan

        return Plan
    if name == "tune":  # the policy search the ops run for a library op's miss (ops.plans)
        return importlib.import_module(f"{__name__}.tune")  # not `from . import`: that asks __getattr__ again
    if name == "launcher":
        from .launch import launcher

        return launcher
    raise AttributeError(name)
