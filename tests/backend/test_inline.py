"""Argus ops inlined as Triton launches (argus_inductor.graph.inline): each op node with static operands is run once at
compile time on random operands of its metadata, and replaced by run_inlined, which re-issues the recorded
allocations, copies and launches on the node's own operands. Here (no GPU) the kernels run under the interpreter
and the rewritten graph runs as it is; on a GPU Inductor traces run_inlined into its own code. Every inlined
graph must give eager's result on fresh inputs, whatever the values the compile-time run used."""
from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.nn.functional as F

from argus_inductor import backend, ops
from argus_inductor.config import Options
from argus_inductor.graph import inline, operands, rewrite
from argus_inductor.kernels.rotary import rotate_half
from argus_inductor.runtime import reporting

from .graphs import capture
from .test_library_ops import CASES, CHAINS, KINDS
from .test_replay import _fresh

CPU = ("cpu",)
# these graphs run on CPU tensors under the interpreter; on the GPU, benchmarks/kernelbench/run.py and
# benchmarks/e2e.py check inlined graphs that Inductor compiled against eager
pytestmark = pytest.mark.skipif(os.environ.get("ARGUS_TEST_DEVICE", "cpu") != "cpu",
                                reason="CPU tensors under the Triton interpreter")


def _argus_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith("argus.")]


def _inlined_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is inline.run_inlined]


def _check_inlined(fn, args, kinds, tol: float = 1e-4) -> torch.fx.GraphModule:
    gm, _ = capture(fn, *args)
    rewrite(gm, kinds)
    matched = len(_argus_nodes(gm))
    assert matched, "the case has Argus ops"
    assert inline.inline_ops(gm, CPU) == matched
    assert not _argus_nodes(gm) and len(_inlined_nodes(gm)) == matched
    assert sum("inlined into Inductor's code" in n for e in reporting.entries() for n in e.notes) == matched
    with torch.no_grad():
        for _ in range(2):
            fresh = [_fresh(t) for t in args]
            out, ref = gm(*fresh), fn(*fresh)
            out = out if isinstance(out, (tuple, list)) else (out,)
            ref = ref if isinstance(ref, (tuple, list)) else (ref,)
            for o, r in zip(out, ref):
                torch.testing.assert_close(o, r, rtol=tol, atol=tol)
    return gm


@pytest.mark.parametrize("case", ["conv2d+relu", "conv_transpose2d", "sum_dims_keepdim", "layer_norm",
                                  "cross_entropy", "standalone_swish_scale", "broadcast_operands",
                                  "linear_epilogue"])
def test_library_ops_inline_and_match_eager(case: str, fresh_cache) -> None:
    fn, args, _ = CASES.get(case) or CHAINS[case]
    _check_inlined(fn, args, (*KINDS, "gemm", "pointwise"))


def test_gemm_attention_and_moe_inline_and_match_eager(fresh_cache) -> None:
    """A linear with a bias, attention over q, k, v sliced from one projection (launch arguments at offsets
    inside an operand: passed as flat views from their first element), and a MoE block whose routing ids were
    zeros at compile time."""
    def block(x, w, b, wqkv):
        h = F.linear(x, w, b).relu()
        qkv = (h @ wqkv.t()).view(2, 5, 3, 2, 16).permute(2, 0, 3, 1, 4)
        # a small scale keeps the logits moderate: at the default (1/4 here) unit-scale operands make logits of
        # ~50, where the softmax turned float32 summation-order differences into 2e-3 relative error (once in CI)
        return F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True, scale=0.02)

    _check_inlined(block, (torch.randn(2, 5, 20), torch.randn(24, 20), torch.randn(24), torch.randn(96, 24)),
                   ("gemm", "attention"))

    t, hd, inter, e, k = 6, 32, 16, 5, 2
    w1, w2 = torch.randn(e, 2 * inter, hd) * 0.2, torch.randn(e, hd, inter) * 0.2

    def moe(x, scores, w1, w2):
        tw, ti = torch.topk(torch.softmax(scores, -1), k)
        return torch.ops.argus.moe(x, tw, ti, w1, w2, "inline-moe")

    x, scores = torch.randn(t, hd), torch.randn(t, e)
    gm, graph_inputs = capture(moe, x, scores, w1, w2)
    position = {id(a): i for i, a in enumerate((x, scores, w1, w2))}
    assert inline.inline_ops(gm, CPU) == 1
    with torch.no_grad():
        for _ in range(2):
            x, scores = torch.randn(t, hd), torch.randn(t, e)
            tw, ti = torch.topk(torch.softmax(scores, -1), k)
            out = gm(*[(x, scores, w1, w2)[position[id(a)]] for a in graph_inputs])[0]
            torch.testing.assert_close(out, ops.moe_reference(x, tw, ti, w1, w2), rtol=1e-4, atol=1e-4)


def test_the_graphs_own_inputs_are_recorded_on_rather_than_random_copies(fresh_cache, monkeypatch) -> None:
    """Given the graph's example inputs, the compile-time run takes them as they are (a model's weights are not
    copied); only operands made inside the graph get random stand-ins."""
    fn, args = (lambda x, w, b: F.linear(x, w, b).relu()), (torch.randn(5, 12), torch.randn(7, 12), torch.randn(7))
    made = []
    real = operands.random_like
    monkeypatch.setattr(operands, "random_like", lambda t: made.append(tuple(t.shape)) or real(t))
    gm, graph_inputs = capture(fn, *args)
    rewrite(gm, ("gemm",))
    assert inline.inline_ops(gm, CPU, graph_inputs) == 1 and made == []
    gm, _ = capture(fn, *args)
    rewrite(gm, ("gemm",))
    assert inline.inline_ops(gm, CPU) == 1 and sorted(made) == [(5, 12), (7,), (7, 12)]
    fresh = [_fresh(a) for a in args]
    torch.testing.assert_close(gm(*fresh)[0], fn(*fresh), rtol=1e-4, atol=1e-4)


def test_dynamic_sizes_and_the_aten_fallback_keep_their_ops(fresh_cache, monkeypatch) -> None:
    """An op whose operands have symbolic sizes, and one that ran the aten op (no plan on a miss), are not
    inlined: they stay ops and still give eager's result."""
    fn, args = (lambda x, w: F.linear(x, w).relu()), (torch.randn(6, 17), torch.randn(9, 17))
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    x = args[0].clone()
    torch._dynamo.mark_dynamic(x, 0)
    torch.compile(fn, backend=keep, fullgraph=True)(x, args[1])
    gm = graphs[0]
    rewrite(gm, ("gemm",))
    assert _argus_nodes(gm) and inline.inline_ops(gm, CPU) == 0 and _argus_nodes(gm)

    monkeypatch.setenv("ARGUS_ON_MISS", "fallback")
    ops.set_active_options(Options.resolve())
    gm, _ = capture(fn, *args)
    rewrite(gm, ("gemm",))
    assert inline.inline_ops(gm, CPU) == 0 and _argus_nodes(gm)
    fresh = [_fresh(a) for a in args]
    torch.testing.assert_close(gm(*fresh)[0], fn(*fresh))


def _inlined_swish_on_the_cpu(monkeypatch, caplog) -> tuple:
    """Inline Argus launches on the CPU as on a GPU, compile the standalone swish chain with pointwise ops only, run
    it once (warnings captured) and check it against eager: (fn, args, compiled)."""
    monkeypatch.setattr(backend, "INLINE_TARGETS", {"cuda", "hip", "interpret"})
    monkeypatch.setattr(inline, "GPUS", CPU)
    fn, args, _ = CHAINS["standalone_swish_scale"]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="argus", options={"ops": "pointwise", "inline": True, "cudagraphs": False})
    with caplog.at_level(logging.WARNING, logger="argus_inductor"):
        out = compiled(*args)
    torch.testing.assert_close(out, fn(*args))
    return fn, args, compiled


def test_the_backend_falls_back_to_ops_when_inductor_cannot_take_the_launches(fresh_cache, monkeypatch,
                                                                                caplog) -> None:
    """Here Inductor's CPU code cannot launch interpreted Triton kernels, as a GPU compile could fail on a launch:
    the backend then compiles the graph with its Argus ops (as with ARGUS_INLINE=0), says so once, and gives eager's
    result."""
    recorded = []
    real = inline.record_node
    monkeypatch.setattr(inline, "record_node",
                        lambda node, devices, known: recorded.append(node.name) or real(node, devices, known))
    fn, args, compiled = _inlined_swish_on_the_cpu(monkeypatch, caplog)
    assert recorded, "the op was recorded for inlining"
    assert "could not compile the inlined Argus launches" in caplog.text
    fresh = _fresh(args[0])
    torch.testing.assert_close(compiled(fresh), fn(fresh))


def test_a_restart_dynamo_asks_for_is_not_taken_for_a_failure_to_inline(fresh_cache, monkeypatch, caplog) -> None:
    """Inductor raises TensorifyScalarRestartAnalysis to have Dynamo trace again with a Python float specialized.
    That is not a launch Inductor cannot compile: the backend lets it through, Dynamo retraces and calls the backend
    again, and the launches are inlined then (taken for a failure, Llama's decode step lost its inlining on the
    H200). Here the first compile of the inlined graph asks for the restart."""
    import importlib

    from torch._dynamo.exc import TensorifyScalarRestartAnalysis

    fx_module = importlib.import_module("torch._inductor.compile_fx")  # the backend imports compile_fx from it
    calls = []
    real = fx_module.compile_fx

    def compile_fx(*a, **kw):  # Inductor calls it again from inside, with more keywords
        calls.append(a[0])
        if len(calls) == 1:
            raise TensorifyScalarRestartAnalysis
        return real(*a, **kw)

    monkeypatch.setattr(fx_module, "compile_fx", compile_fx)
    _inlined_swish_on_the_cpu(monkeypatch, caplog)
    assert len(calls) >= 2, "Dynamo traced again and called the backend again"
    # the compile after the restart may still give the launches up here (Inductor's CPU code cannot launch
    # interpreted kernels, the test above); what must not happen is the restart itself taken for that failure
    assert "TensorifyScalarRestartAnalysis" not in caplog.text


def _rope_step(q, k, v, cos, sin, keys, values, index):
    """transformers' decode step of one layer: q and k rotated, the rotated k and the v written into the cache."""
    q_embed = q * cos + rotate_half(q) * sin
    keys.index_copy_(2, index, k * cos + rotate_half(k) * sin)
    values.index_copy_(2, index, v)
    return q_embed


def test_an_op_that_writes_a_cache_is_recorded_on_stand_ins_not_the_models_cache(fresh_cache) -> None:
    """rope_cache writes the KV cache, a graph input: the compile-time run records on a stand-in of it, so the
    model's cache is left as it was; the inlined launches then write the caller's cache as eager does."""
    z, h, hk, d, length = 2, 4, 2, 8, 6
    proj = torch.randn(z, 1, (h + 2 * hk) * d)
    q = proj[..., :h * d].view(z, 1, h, d).transpose(1, 2)
    k = proj[..., h * d:(h + hk) * d].view(z, 1, hk, d).transpose(1, 2)
    v = proj[..., (h + hk) * d:].view(z, 1, hk, d).transpose(1, 2)
    ang = torch.randn(1, 1, 1, d // 2)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    keys, values, index = torch.randn(z, hk, length, d), torch.randn(z, hk, length, d), torch.tensor([3])
    args = (q, k, v, cos, sin, keys, values, index)
    gm, graph_inputs = capture(_rope_step, *args)
    rewrite(gm, ("attention",))
    assert [str(n.target) for n in _argus_nodes(gm)] == ["argus.rope_cache.default"]
    keys.normal_()  # capture's run wrote position 3 as a recording on these tensors would: make that one differ
    values.normal_()
    before = keys.clone(), values.clone()
    assert inline.inline_ops(gm, CPU, graph_inputs) == 1
    assert torch.equal(keys, before[0]) and torch.equal(values, before[1]), "the recording wrote the real cache"
    position = {id(a): i for i, a in enumerate(args)}
    for at in (0, 5):
        index = torch.tensor([at])
        mine = [a.clone() if i in (5, 6) else a for i, a in enumerate((*args[:7], index))]
        theirs = [a.clone() if i in (5, 6) else a for i, a in enumerate((*args[:7], index))]
        out = gm(*[mine[position[id(a)]] if id(a) in position else index for a in graph_inputs])[0]
        ref = _rope_step(*theirs)
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(mine[5], theirs[5], rtol=1e-6, atol=1e-6)
        assert torch.equal(mine[6], theirs[6])
