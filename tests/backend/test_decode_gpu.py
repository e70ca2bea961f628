"""Decode steps on a real GPU (ARGUS_TEST_DEVICE=cuda): a transformers decoder against a StaticCache, at batch 1 and
then batch 32 (a dynamic graph, compiled once for every batch above 1), compiled as benchmarks/e2e.py compiles
(`dynamic=True`, mode max-autotune), matches eager sequence by sequence whichever side each op's swap-in takes.

Why: on the H200 on 2026-11-29 the e2e decode at batch 32 of Llama-3-8B and of Mixtral dims gave logits off for all
32 sequences (relative error 0.70 and 0.87) once the swap-in measured dynamic graphs. Forcing the sides op class by
op class named the attention's fallback side (the KV cache then read off too, at the slot written: the next layer's
keys come from a wrong attention output): SDPA with bf16 q, k, v and the float32 mask went to cuDNN's attention and
came back wrong (tests/backend/test_references.py). The same wrong call judged the swap-in's output check, which put
the right Argus plan out ("relative error inf"). With the mask handed over in q's dtype (ops/references.py), the
all-fallback case and the measured one (now "shipped") passed on the H200; the other cases were not run again, and
the Mixtral cases (its batch 32 was wrong too) have not run yet."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmark_scripts import load

from argus_inductor.graph import swapin
from argus_inductor.ops import swapin as decide
from argus_inductor.runtime import reporting as report_mod

pytestmark = pytest.mark.skipif(os.environ.get("ARGUS_TEST_DEVICE") != "cuda" or not torch.cuda.is_available(),
                                reason="decode steps at e2e sizes on a GPU (ARGUS_TEST_DEVICE=cuda)")

def _model(kind: str) -> torch.nn.Module:
    """Llama-3-8B's head layout at a quarter of its width, 2 layers; or Mixtral's (8 experts, top 2) alike."""
    import transformers

    dims = dict(hidden_size=1024, num_attention_heads=8, num_key_value_heads=2, head_dim=128, num_hidden_layers=2,
                vocab_size=1024, max_position_embeddings=2048)
    torch.manual_seed(0)
    if kind == "mixtral":
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
            intermediate_size=1408, num_local_experts=8, num_experts_per_tok=2, **dims))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(intermediate_size=2816, **dims))
    return model.eval().cuda().to(torch.bfloat16)


def _forced(sides: dict[str, str]):
    """measure_node / measure_group that give each op the side `sides` names for its op (default: argus)."""
    def verdict(node: Any) -> decide.Verdict:
        name = node.target.name().split("::")[-1]
        return decide.Verdict(sides.get(name, sides.get("*", "argus")), 1.0, 1.0, "forced", "forced by the test")
    return (lambda node, *a, **k: verdict(node)), (lambda group, *a, **k: verdict(group[-1].node))


def _cache(decoder: Any) -> list[torch.Tensor]:
    """Copies of every layer's keys and values in the decoder's StaticCache (what a step wrote)."""
    return [t.clone() for layer in decoder.cache.layers for t in (layer.keys, layer.values)]


SIDES = {
    "shipped": None,  # measured, as the backend runs: real times, the output check
    "all-fallback": {"*": "fallback"},
    "all-fallback-no-cudagraphs": {"*": "fallback"},  # mode max-autotune-no-cudagraphs: is the graph replay it?
    "all-fallback-static": {"*": "fallback"},  # dynamic=False: a static graph at batch 32 too: is it the symbols?
    "attention-fallback": {"attention_mask": "fallback", "attention": "fallback"},
    "gemm-fallback": {"linear": "fallback", "linear_residual": "fallback", "linear_cat": "fallback",
                      "gate_up": "fallback"},
}


# Mixtral dims gave wrong logits at batch 32 too (relative error 0.87): the shipped rule and every op to Inductor
CASES = [("llama", s) for s in SIDES] + [("mixtral", "shipped"), ("mixtral", "all-fallback")]


@pytest.mark.parametrize("kind,sides", CASES, ids=[f"{k}-{s}" for k, s in CASES])
def test_decode_at_batch_1_then_32_matches_eager_whichever_side_each_op_takes(
        kind: str, sides: str, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    e2e = load("e2e")  # its decode steps: a 1040-slot StaticCache, positions from 1024 on
    if SIDES[sides] is not None:
        node_fn, group_fn = _forced(SIDES[sides])
        monkeypatch.setattr(swapin, "measure_node", node_fn)
        monkeypatch.setattr(swapin, "measure_group", group_fn)
    monkeypatch.setenv("ARGUS_SWAPIN_BACKGROUND", "0")  # every verdict in the compile: the run is deterministic
    model = _model(kind)
    torch._dynamo.reset()
    mode = "max-autotune-no-cudagraphs" if sides.endswith("no-cudagraphs") else "max-autotune"
    compiled = torch.compile(model, backend="argus", mode=mode, dynamic=not sides.endswith("static"))
    failures = []
    with torch.no_grad():
        for batch in (1, 32):
            decoder = e2e.Decoder(model, batch, "cuda")
            for i in range(2):
                decoder.rewind()  # the same slots written again with the same keys
                ref = decoder.step(model, i).float()
                ref_cache = _cache(decoder)
                decoder.rewind()
                out = decoder.step(compiled, i).float()
                err = ((out - ref).norm(dim=-1) / ref.norm(dim=-1)).flatten()
                diffs = [(a.float() - b.float()).abs() for a, b in zip(_cache(decoder), ref_cache)]
                slots = sorted({int(p) for d in diffs for p in (d > 0.1).nonzero()[:, 2].tolist()})
                print(f"{kind} {sides} batch {batch} step {i}: worst sequence {float(err.max()):.2e}, "
                      f"sequences off {int((err > 3e-2).sum())}, KV cache written off by "
                      f"{max(float(d.max()) for d in diffs):.2e} at slots {slots[:8]}")
                off = int((err > 3e-2).sum())
                # a MoE model: a bf16 rounding before the router may flip a near-tied expert for a sequence, so (as
                # e2e.py judges) the median sequence must be right and at most a quarter of them off
                wrong = (float(err.median()) > 3e-2 or off > len(err) // 4) if kind == "mixtral" else off > 0
                if wrong:
                    failures.append((batch, i, off, float(err.max())))
    print("sides the output check put out:", [n for e in report_mod.entries() for n in e.notes if "off the" in n])
    assert not failures, f"{kind} {sides}: (batch, step, sequences off, worst relative error) {failures}"
