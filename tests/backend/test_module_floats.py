"""Floats read from nn.Module attributes become constants of an Argus graph (argus_inductor.graph.module_floats):
Dynamo traces again with them specialized and guarded, so the compiled graph takes no scalar tensor for them and a
changed value recompiles; floats passed as arguments stay inputs. Runs the kernels under the interpreter."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from argus_inductor.backend import argus_backend
from argus_inductor.runtime import reporting as report_mod

transformers = pytest.importorskip("transformers")


def _scalar_inputs(example_inputs: list[Any]) -> int:
    """How many 0-d CPU float64 tensors (Dynamo's form of an unspecialized Python float) a graph takes."""
    return sum(isinstance(x, torch.Tensor) and x.dim() == 0 and x.device.type == "cpu" and x.dtype == torch.float64
               for x in example_inputs)


def _recording(calls: list[int]) -> Callable[..., Any]:
    """argus_backend, noting how many float scalars each graph it is handed takes (a restart hands it two)."""
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        calls.append(_scalar_inputs(example_inputs))
        return argus_backend(gm, example_inputs)
    return backend


def _llama() -> tuple[Any, torch.nn.Module]:
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cfg, transformers.LlamaForCausalLM(cfg).eval()


def _logits(fn: Callable, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return fn(tokens, use_cache=False).logits


def test_module_floats_are_constants_and_a_changed_one_recompiles(fresh_cache: Path) -> None:
    _, model = _llama()
    tokens = torch.randint(0, 64, (2, 5))
    calls: list[int] = []
    compiled = torch.compile(model, backend=_recording(calls), dynamic=True)
    torch.testing.assert_close(_logits(compiled, tokens), _logits(model, tokens), rtol=1e-4, atol=1e-4)
    # Dynamo first passed the norms' eps (and the rotary scaling) as scalar tensors; the graph compiled takes none
    assert calls[0] >= 5 and calls[-1] == 0, calls
    # the value is guarded: a new eps is compiled again, never run with the old one baked in
    before = _logits(compiled, tokens)
    model.model.norm.variance_epsilon = 4.0
    ref = _logits(model, tokens)
    assert (ref - before).abs().max() > 1e-2  # the change is visible in the logits
    torch.testing.assert_close(_logits(compiled, tokens), ref, rtol=1e-4, atol=1e-4)


def test_the_option_off_leaves_module_floats_inputs(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARGUS_SPECIALIZE_FLOATS", "0")
    _, model = _llama()
    tokens = torch.randint(0, 64, (1, 4))
    calls: list[int] = []
    compiled = torch.compile(model, backend=_recording(calls), dynamic=True)
    torch.testing.assert_close(_logits(compiled, tokens), _logits(model, tokens), rtol=1e-4, atol=1e-4)
    assert calls[-1] > 0, calls


class _Scaled(torch.nn.Module):
    """A linear layer whose output is scaled by an argument and shifted by a float attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 24)
        self.shift = 0.25

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return self.proj(x) * scale + self.shift


def _scaled(calls: list[int]) -> tuple[_Scaled, Callable[..., torch.Tensor], torch.Tensor]:
    """A seeded _Scaled, its compile (noting each graph's float scalars in `calls`) and an input."""
    torch.manual_seed(0)
    model = _Scaled().eval()
    return model, torch.compile(model, backend=_recording(calls), dynamic=True), torch.randn(4, 16)


def test_a_float_argument_stays_an_input_and_does_not_recompile(fresh_cache: Path) -> None:
    calls: list[int] = []
    model, compiled, x = _scaled(calls)
    with torch.no_grad():
        for scale in (0.5, 0.75, 1.5):
            torch.testing.assert_close(compiled(x, scale), model(x, scale), rtol=1e-5, atol=1e-5)
    # one restart for the attribute, then one graph that takes the argument as its only float
    assert calls[-1] == 1 and len(calls) == 2, calls
    assert any(e.op == "gemm" and e.calls == 3 for e in report_mod.entries()), report_mod.report()


def test_an_attribute_the_model_changes_as_it_runs_recompiles_once(fresh_cache: Path) -> None:
    """A float attribute seen with a new value after it was made a constant stays an input from then on: one
    recompile, not one per value (Dynamo would give up on the frame after its recompile limit)."""
    calls: list[int] = []
    model, compiled, x = _scaled(calls)
    with torch.no_grad():
        for shift in (0.25, 0.5, 0.75, 1.0, 1.25):
            model.shift = shift
            torch.testing.assert_close(compiled(x, 0.5), model(x, 0.5), rtol=1e-5, atol=1e-5)
    # the first compile (a restart: two calls), then one more with the shift an input beside the scale
    assert calls == [2, 1, 2], calls


def test_a_restarted_trace_reports_each_subgraph_once(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trace Dynamo makes records its matches; the ones of a trace it restarted are dropped (they were
    reported twice, once never called), whichever restart it was: Argus's for the module floats, or Inductor's."""
    for specialize in ("1", "0"):
        monkeypatch.setenv("ARGUS_SPECIALIZE_FLOATS", specialize)
        report_mod.clear()
        torch._dynamo.reset()
        _, model = _llama()
        calls: list[int] = []
        _logits(torch.compile(model, backend=_recording(calls), dynamic=True), torch.randint(0, 64, (1, 3)))
        assert len(calls) == 2, (specialize, calls)  # one restart either way
        rows = [(e.op, e.graph_node) for e in report_mod.entries()]
        assert len(rows) == len(set(rows)) and all(e.calls == 1 for e in report_mod.entries()), report_mod.report()


def test_a_module_float_is_guarded_by_an_equality_on_the_attribute(fresh_cache: Path) -> None:
    """The retrace builds the attribute as a constant with Dynamo's CONSTANT_MATCH guard (`L['self'].shift ==
    0.25`, checked in C++), not as a specialized symbol of the shape environment, whose guard in torch 2.11 is
    Python that rebuilds the float as a tensor and reads it back on every call."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    calls: list[int] = []
    model, compiled, x = _scaled(calls)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, 0.5), model(x, 0.5), rtol=1e-5, atol=1e-5)
    parts = [p for entry in _debug_get_cache_entry_list(_Scaled.forward.__code__)
             for p in entry.guard_manager.code_parts]
    assert "L['self'].shift == 0.25" in parts, [p for p in parts if "shift" in p]
    # the names are dropped when the frame's compile ends: another frame's `L['self'].shift` is its own
    from argus_inductor.graph import module_floats
    assert not module_floats._CONSTANT
