"""The measured swap-in on graphs of dynamic shapes (issue 39: every swap-in a measured decision): Dynamo's
dynamic graphs (`dynamic=True`, or a size that changed between calls) are measured at the sizes they were compiled
for, each symbolic size by its hint, as Inductor's autotuning picks its kernels, and keep that verdict at every
size they run; a size known only at run time leaves the template rule, and the report says which. Fake clock: on
the CPU interpreter real times mean nothing."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import argus_inductor  # noqa: F401  (registers backend="argus")
from argus_inductor import ops
from argus_inductor.graph import rewrite
from argus_inductor.graph.operands import at_hints, hint, random_like
from argus_inductor.graph.swapin import measuring_with, swap_in
from argus_inductor.ops import references
from argus_inductor.ops import swapin as decide
from argus_inductor.runtime import reporting as report_mod

from .graphs import capture
from .test_swapin import Clock
from .test_tiers import MLP


def _mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = F.gelu(F.linear(x, w1))
    return F.linear(h, w2) + h.sum(-1, keepdim=True)  # h has two readers: each GEMM is decided on its own


def _eager(fn, args, kwargs):
    return lambda *tensors: fn(*args, **kwargs)


def _notes() -> list[str]:
    return [n for e in report_mod.entries() for n in e.notes]


def _concrete(inputs: list) -> list:
    return [hint(a) if isinstance(a, torch.SymInt) else a for a in inputs]


def test_a_symbolic_size_is_read_at_its_hint_and_an_unbacked_one_has_none() -> None:
    env = ShapeEnv()
    assert hint(7) == 7 and hint(2.5) is None and hint(env.create_unbacked_symint()) is None
    gm, inputs = capture(_mlp, torch.randn(8, 32), torch.randn(48, 32), torch.randn(16, 48), dynamic=True)
    x = next(n for n in gm.graph.nodes if n.op == "placeholder" and n.name == "l_x_").meta["example_value"]
    assert any(isinstance(s, torch.SymInt) for s in x.shape)
    meta = at_hints(x)
    assert tuple(meta.shape) == (8, 32) and tuple(meta.stride()) == (32, 1) and meta.storage_offset() == 0
    stand_in = random_like(meta)
    assert stand_in.shape == (8, 32) and stand_in.dtype == x.dtype and stand_in.std() > 0.5


@pytest.mark.parametrize("argus_ms, fallback_ms, winner", [(1.0, 2.0, "argus"), (2.0, 1.0, "fallback")])
def test_a_dynamic_graph_is_measured_at_its_compile_sizes_and_says_so(fresh_cache: Path, argus_ms, fallback_ms,
                                                                        winner) -> None:
    x, w1, w2 = torch.randn(8, 32), torch.randn(48, 32), torch.randn(16, 48)
    gm, inputs = capture(_mlp, x, w1, w2, dynamic=True)
    assert rewrite(gm, ("gemm",))
    clock = Clock(argus_ms, fallback_ms)
    decided = swap_in(gm, inputs, "interpret", timer=clock, compile_fallback=_eager, devices=("cpu",))
    assert len(decided) == 2 and {v.winner for _, v in decided} == {winner}
    assert len(clock.calls) == 2 * 2 * decide.ROUNDS
    refs = [n for n in gm.graph.nodes if n.target is references.linear]
    assert len(refs) == (0 if winner == "argus" else 2)
    got = gm(*_concrete(inputs))
    torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, _mlp(x, w1, w2), rtol=1e-4, atol=1e-4)
    notes = _notes()
    assert sum("measured at the sizes this dynamic graph was compiled for (gemm" in n and "M=5-8" in n
               for n in notes) == 2, notes
    # the verdict is stored under the signature of the compile's sizes: the next compile reads it without timing
    entries = ops.kernel_cache().entries()
    assert len(entries) == 2 and all(decide.stored(e, "cpu | fp32 ieee").winner == winner for e in entries)
    gm2, inputs2 = capture(_mlp, torch.randn(7, 32), w1, w2, dynamic=True)
    assert rewrite(gm2, ("gemm",))
    never = Clock(RuntimeError("must not time"), RuntimeError("must not time"))
    again = swap_in(gm2, inputs2, "interpret", timer=never, compile_fallback=_eager, devices=("cpu",))
    assert never.calls == [] and {v.winner for _, v in again} == {winner}


@pytest.mark.parametrize("argus_ms, fallback_ms, argus_runs", [(1.0, 2.0, True), (2.0, 1.0, False)])
def test_the_backend_measures_a_dynamic_graph_and_runs_its_verdict_at_every_size(fresh_cache: Path, argus_ms,
                                                                                  fallback_ms, argus_runs) -> None:
    model = MLP().eval()
    clock = Clock(argus_ms, fallback_ms)
    with measuring_with(clock, ("cpu",)), torch.no_grad():
        f = torch.compile(model, backend="argus", dynamic=True, options={"ops": "gemm"})
        for rows in (8, 5, 13):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
    assert clock.calls, "the dynamic graph was not measured"
    assert (sum(e.calls for e in report_mod.entries()) > 0) is argus_runs
    notes = _notes()
    assert any("measured at the sizes this dynamic graph was compiled for" in n for n in notes), notes
    assert not any("not static" in n or "known only at run time" in n for n in notes), notes


def test_a_dynamic_decode_graph_that_writes_its_kv_cache_is_measured_and_stays_right(fresh_cache: Path) -> None:
    """A decode step at batch > 1 (dynamic=True, a StaticCache written in place by the RoPE-and-cache op) is measured
    like any dynamic graph: the cache-writing op keeps Argus's kernel (an op that writes in place is never swapped),
    the attention and the GEMMs around it go to the side the clock says, and the step matches eager. (Such graphs
    were kept unmeasured for a day: their wrong logits on the H200 came from the attention's fallback side, SDPA
    handed a float32 mask, fixed in ops/references.py.)"""
    import transformers
    from transformers import StaticCache

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=16, num_hidden_layers=1, vocab_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    tokens = torch.randint(0, 128, (2, 1))
    clock = Clock(2.0, 1.0)  # Inductor's side wins everywhere it is measured

    def step(fn, cache):
        pos = torch.tensor([3])
        return fn(input_ids=tokens, past_key_values=cache, cache_position=pos, position_ids=pos[None],
                  use_cache=True).logits

    with torch.no_grad(), measuring_with(clock, ("cpu",)):
        ref = step(model, StaticCache(config=cfg, max_cache_len=16))
        out = step(torch.compile(model, backend="argus", dynamic=True), StaticCache(config=cfg, max_cache_len=16))
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
    assert clock.calls, "the dynamic decode graph was not measured"
    notes = _notes()
    assert sum(n.startswith("swap-in: fallback") for n in notes) >= 3, notes  # the attention and the GEMMs around it
    assert any("writes an operand in place" in n for n in notes), notes  # the RoPE-and-cache op keeps its kernel
