"""backend="argus" on the CPU: matched subgraphs run Argus kernels under the interpreter and agree
with eager; without the interpreter the backend is Inductor alone."""
from __future__ import annotations

import itertools
import logging
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import argus_inductor
from argus_inductor.config import Options
from argus_inductor.demo import TinyLlama
from argus_inductor.graph import rewrite
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime.signature import bucket, make_signature

from .graphs import capture

# a graph of Argus ops compiled for a pretend GPU: no launches recorded (inlining) and none timed (swap-in)
NO_DEVICE_WORK = {"inline": False, "swapin": "always"}


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(24, 40)
        self.fc2 = nn.Linear(40, 24, bias=False)
        self.w = nn.Parameter(torch.randn(24, 8))

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        y = torch.relu(self.fc2(h) @ self.w)
        q = y.view(x.shape[0], 2, -1, 4)
        a = F.scaled_dot_product_attention(q, q, q)
        return torch.bmm(a.flatten(0, 1), a.flatten(0, 1).transpose(1, 2)) + torch.addmm(
            torch.ones(8), y.reshape(-1, 8), torch.eye(8)).sum()


def test_compiled_model_matches_eager_and_runs_argus_kernels():
    torch._dynamo.reset()
    report_mod.clear()
    model = MLP().eval()
    x = torch.randn(3, 6, 24)
    with torch.no_grad():
        ref = model(x)
        out = torch.compile(model, backend="argus")(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    rows = report_mod.entries()
    kinds = sorted(e.op for e in rows)
    assert kinds.count("gemm") == 5 and kinds.count("attention") == 1, kinds
    fused = [e for e in rows if "->" in e.graph_node]
    assert len(fused) == 2 and all(e.source.startswith("default") for e in rows), rows
    assert {s.signature.split("(")[0] for s in fused} == {"gemm[bias+gelu]", "gemm[relu]"}
    assert all(e.calls == 1 for e in rows)


def test_llama_like_model_and_report_text(capsys):
    torch._dynamo.reset()
    report_mod.clear()
    model = TinyLlama(layers=1).eval()
    tokens = torch.randint(0, 256, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="argus")(tokens), model(tokens), rtol=1e-4, atol=1e-4)
    text = argus_inductor.report()
    assert "attention[causal,gqa2]" in text and "gemm[silu*up]" in text and "gemm[residual]" in text
    assert "gemm[bias]" in text


def test_without_the_interpreter_the_cpu_gets_inductor_alone(monkeypatch, caplog):
    torch._dynamo.reset()
    report_mod.clear()
    model = MLP().eval()
    x = torch.randn(2, 4, 24)
    with caplog.at_level(logging.WARNING, logger="argus_inductor"), torch.no_grad():
        out = torch.compile(model, backend="argus", options={"interpret": False})(x)
        ref = torch.compile(model, backend="inductor")(x)
    torch.testing.assert_close(out, ref)
    assert report_mod.entries() == []
    assert any("compiling with Inductor alone" in r.message for r in caplog.records)


def test_dynamic_batch_does_not_recompile_per_size():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 16)).eval()
    counts = {"n": 0}

    def counting(gm, ex, **kw):
        counts["n"] += 1
        return argus_inductor.argus_backend(gm, ex, **kw)

    compiled = torch.compile(model, backend=counting, dynamic=True)
    with torch.no_grad():
        for b in (3, 5, 9, 17):
            x = torch.randn(b, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert counts["n"] == 1


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown Argus option 'tiles'"):
        Options.resolve({"tiles": 3})
    with pytest.raises(ValueError, match="ARGUS_ON_MISS"):
        Options.resolve({"on_miss": "pray"})
    with pytest.raises(ValueError, match="unknown op kinds"):
        Options.resolve({"ops": "gemm,convolution"})
    assert Options.resolve({"argus_report": True}).report
    assert "scan" in Options.resolve({"ops": "all"}).enabled_ops


def test_on_miss_fallback_uses_aten():
    torch._dynamo.reset()
    report_mod.clear()
    model = nn.Linear(8, 8).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = torch.compile(model, backend="argus", options={"on_miss": "fallback"})(x)
    torch.testing.assert_close(out, model(x))
    assert all("ARGUS_ON_MISS=fallback" in e.source for e in report_mod.entries())


def test_matcher_leaves_masked_attention_and_inplace_activations_alone():
    def f(q, m):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=m)

    gm = torch.fx.symbolic_trace(f)
    assert rewrite(gm, ("gemm", "attention")) == []


def test_signature_buckets_dynamic_dims():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 4096, 4097)] == \
        ["1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "2049-4096", "4097-8192"]


def test_gpu_models_with_cpu_side_tensors_are_judged_by_their_accelerator(monkeypatch):
    from argus_inductor import backend as backend_mod

    seen = []
    monkeypatch.setattr(backend_mod, "target_for", lambda d, o: seen.append(d.type) or "cuda")
    monkeypatch.setattr(backend_mod, "rewrite", lambda gm, ops, **kw: [])
    monkeypatch.setattr("torch._inductor.compile_fx.compile_fx", lambda gm, ex, config_patches=None: gm)
    gm = torch.fx.symbolic_trace(nn.Linear(2, 2))
    fake_cuda = torch.empty(1, device="meta")
    backend_mod.argus_backend(gm, [torch.ones(1), fake_cuda])
    assert seen == ["meta"]


@pytest.mark.parametrize("options,mode,graphs", [({}, None, True), ({"cudagraphs": False}, None, False),
                                                 ({}, "default", False), ({"cudagraphs": False}, "reduce-overhead",
                                                                          True)])
def test_cuda_graphs_are_asked_of_inductor_on_a_gpu(monkeypatch, options, mode, graphs) -> None:
    """On a GPU the backend asks Inductor for CUDA graphs unless ARGUS_CUDAGRAPHS=0 or mode="default" says no
    (what Inductor does with the request is Inductor's; the capture itself is tested on the device)."""
    import torch._inductor.compile_fx as cfx

    from argus_inductor import backend

    seen = {}

    def fake_compile_fx(gm, example_inputs, config_patches=None):
        seen.update(config_patches or {})
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", fake_compile_fx)
    monkeypatch.setattr(backend, "_devices", lambda inputs: {torch.device("cuda", 0)})
    monkeypatch.setattr(backend, "target_for", lambda device, opts=None: "cuda")
    options = {**options, **NO_DEVICE_WORK}
    gm, example = capture(F.linear, torch.randn(2, 4), torch.randn(4, 4))
    backend.argus_backend(gm, list(example), mode=mode, options=options)
    assert seen.get("triton.cudagraphs") is graphs, seen
    seen.clear()  # a graph with no Argus op in it is Inductor's alone: no graphs where Inductor's mode has none
    backend.argus_backend(torch.fx.symbolic_trace(nn.Linear(4, 4)), [torch.randn(2, 4)], mode=mode, options=options)
    assert seen.get("triton.cudagraphs") is (mode == "reduce-overhead"), seen


def test_mode_gives_the_rest_of_the_graph_inductors_options_for_it(monkeypatch) -> None:
    """mode="max-autotune" compiles what Argus leaves as Inductor's max-autotune would (its own kernels
    coordinate-descent tuned); a mode Inductor does not know is a clear error, not a KeyError from inside it."""
    import torch._inductor.compile_fx as cfx

    from argus_inductor import backend

    seen: list[dict] = []
    monkeypatch.setattr(cfx, "compile_fx", lambda gm, ex, config_patches=None: seen.append(config_patches) or gm)
    gm = torch.fx.symbolic_trace(nn.Linear(4, 4))
    backend.argus_backend(gm, [torch.randn(2, 4)], mode="max-autotune")
    assert seen[-1]["max_autotune"] is True and seen[-1]["coordinate_descent_tuning"] is True
    backend.argus_backend(gm, [torch.randn(2, 4)])
    assert "coordinate_descent_tuning" not in seen[-1]
    with pytest.raises(ValueError, match="unknown mode 'fastest'.*max-autotune"):
        backend.argus_backend(gm, [torch.randn(2, 4)], mode="fastest")


@pytest.mark.parametrize("mode,inlined,graphs", [(None, "all", False), ("max-autotune", "all", True),
                                                 ("reduce-overhead", "all", True), (None, "some", True),
                                                 (None, "all, then Inductor fails on them", True)])
def test_a_graph_whose_ops_were_all_inlined_takes_cuda_graphs_as_inductor_does(monkeypatch, mode, inlined,
                                                                                graphs) -> None:
    """With every Argus op inlined (ARGUS_INLINE) no Argus Python runs per call, so the backend asks for CUDA
    graphs only where `mode` does, as backend="inductor" would; with an op left (dynamic sizes, a host function
    that reads values) the per-op launch cost is back and graphs stay on, as they do when Inductor cannot compile
    the inlined launches and the backend compiles the graph with its ops."""
    import torch._inductor.compile_fx as cfx

    from argus_inductor import backend
    from argus_inductor.graph import inline

    calls = []  # the config of each compile_fx call; the last is the one that compiled

    def fake_compile_fx(gm, ex, config_patches=None):
        calls.append(dict(config_patches))
        if inlined.endswith("fails on them") and len(calls) == 1:
            raise RuntimeError("a launch Inductor cannot take")
        return gm

    monkeypatch.setattr(cfx, "compile_fx", fake_compile_fx)
    monkeypatch.setattr(backend, "_devices", lambda inputs: {torch.device("cuda", 0)})
    monkeypatch.setattr(backend, "target_for", lambda device, opts=None: "cuda")

    def fake_inline(gm, devices=None, example_inputs=None):  # the inliner's count, without a GPU to record on
        ops_ = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith("argus.")]
        return len(ops_) if inlined.startswith("all") else len(ops_) - 1

    monkeypatch.setattr(inline, "inline_ops", fake_inline)
    x, w, w2 = torch.randn(3, 8), torch.randn(6, 8), torch.randn(5, 6)
    gm, example = capture(lambda x, w, w2: F.linear(F.linear(x, w).relu(), w2), x, w, w2)
    backend.argus_backend(gm, list(example), mode=mode, options={"ops": "gemm", "cudagraph_copy_mb": 1e9})
    assert calls[-1].get("triton.cudagraphs") is graphs, calls
    assert len(calls) == (2 if inlined.endswith("fails on them") else 1)


@pytest.mark.parametrize("copy_mb,graphs", [(256.0, True), (0.01, False)])
def test_no_cuda_graph_when_the_replay_would_copy_large_inputs(monkeypatch, copy_mb, graphs) -> None:
    """A 64 KB user input is copied into the graph's buffers at each replay: over ARGUS_CUDAGRAPH_COPY_MB the
    backend asks for no graph. Parameters and static addresses are never counted."""
    import torch._inductor.compile_fx as cfx

    from argus_inductor import backend

    seen = {}
    monkeypatch.setattr(cfx, "compile_fx", lambda gm, ex, config_patches=None: seen.update(config_patches) or gm)
    monkeypatch.setattr(backend, "_devices", lambda inputs: {torch.device("cuda", 0)})
    monkeypatch.setattr(backend, "target_for", lambda device, opts=None: "cuda")
    x = torch.randn(128, 128)
    gm, example = capture(F.linear, x, torch.randn(4, 128))
    backend.argus_backend(gm, list(example), options={"cudagraph_copy_mb": copy_mb, **NO_DEVICE_WORK})
    assert seen.get("triton.cudagraphs") is graphs, seen
    static = torch.randn(1024, 1024)
    torch._dynamo.mark_static_address(static)
    assert backend.copied_input_bytes([x, nn.Parameter(torch.randn(512, 512)), static, 3]) == 128 * 128 * 4


def test_attention_fallback_returns_the_layout_its_fake_promises():
    """SDPA returns q's layout (a transposed (B, S, H, D) view stays transposed); the Argus ops' fakes promise a
    contiguous output, so the aten fallback must copy, or Inductor's stride assertion fails (it did, on the H100,
    when a masked Llama prefill's kernel fell back)."""
    torch._dynamo.reset()
    report_mod.clear()
    q = torch.randn(2, 9, 4, 16).transpose(1, 2)  # (Z, H, S, D) with S-major strides, as a model's q is
    k = torch.randn(2, 9, 4, 16).transpose(1, 2)
    mask = torch.rand(2, 1, 9, 9) > 0.3
    mask[..., 0] = True

    def f(q, k, m):
        return F.scaled_dot_product_attention(q, k, k, attn_mask=m) * 2

    with torch.no_grad():
        out = torch.compile(f, backend="argus", options={"on_miss": "fallback"})(q, k, mask)
    torch.testing.assert_close(out, f(q, k, mask))
    direct = torch.ops.argus.attention_mask(q, k, k, mask, None, "test")
    assert direct.is_contiguous()


@pytest.mark.parametrize("masked", [False, True])
def test_attention_writes_the_layout_its_transpose_reads(fresh_cache, masked):
    """transformers hands attention's output to the output projection as o.transpose(1, 2).contiguous(): the
    matcher asks the op for (Z, S, H, D) memory then, so that transpose is contiguous and the compiled graph makes no
    copy between the op and the projection (Inductor's clone kernel, a 16 MB copy a layer at Llama-3-8B's 1x2048
    prefill). The kernels and the aten fallback write that layout alike, and agree with SDPA."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    q = torch.randn(2, 16, 4, 16).transpose(1, 2)  # (Z, H, S, D) in (Z, S, H, D) memory, as a model's q is
    k, v = (torch.randn(2, 16, 2, 16).transpose(1, 2) for _ in range(2))
    w = torch.randn(32, 64)
    mask = torch.rand(2, 1, 16, 16) > 0.3 if masked else None
    if masked:
        mask[..., 0] = True

    def f(q, k, v):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not masked, enable_gqa=True)
        return F.linear(o.transpose(1, 2).contiguous().view(2, 16, 64), w)

    gm, _ = capture(f, q, k, v)
    rewrite(gm, ("attention",))
    (node,) = [n for n in gm.graph.nodes if n.target in (torch.ops.argus.attention.default,
                                                          torch.ops.argus.attention_mask.default)]
    assert node.args[-1] is True
    torch._dynamo.reset()
    report_mod.clear()
    with torch.no_grad():
        out, code = run_and_get_code(torch.compile(f, backend="argus"), q, k, v)
    torch.testing.assert_close(out, f(q, k, v), rtol=1e-4, atol=1e-4)
    kernels = [line for src in code for line in src.splitlines() if "async_compile." in line and " = " in line]
    assert not [kn for kn in kernels if "clone" in kn], kernels
    assert report_mod.entries() and all(e.calls for e in report_mod.entries())
    for on_miss in ("default", "fallback"):  # a kernel and the aten fallback: the same layout and values
        argus_inductor.ops.set_active_options(Options.resolve({"on_miss": on_miss}))
        direct = (torch.ops.argus.attention_mask(q, k, v, mask, None, "direct", True) if masked else
                  torch.ops.argus.attention(q, k, v, True, None, "direct", True))
        assert direct.transpose(1, 2).is_contiguous()
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not masked, enable_gqa=True)
        torch.testing.assert_close(direct, ref, rtol=1e-4, atol=1e-4)


def test_a_bool_mask_is_converted_in_the_graph_once(fresh_cache, monkeypatch):
    """A bool mask reaches the attention ops as the additive float mask the kernels read, converted by one
    torch.where in the graph that every op of that mask shares (Inductor fuses it into the kernel that builds the
    mask), so the op launches no conversion of its own; the compiled function still agrees with eager, hidden keys
    and all."""
    from argus_inductor import ops

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    valid = torch.tensor([3, 8])  # a padded batch: the first sequence's keys 3..7 are hidden

    def f(q, k, v, valid):
        mask = (torch.arange(8)[None, :] < valid[:, None])[:, None, None, :]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return F.scaled_dot_product_attention(o, k, v, attn_mask=mask, enable_gqa=True)

    gm, _ = capture(f, q, k, v, valid)
    rewrite(gm, ("attention",))
    attn = [n for n in gm.graph.nodes if n.target is torch.ops.argus.attention_mask.default]
    assert len(attn) == 2
    (conv,) = {n.args[3] for n in attn}
    assert conv.target is torch.where and conv.args[1:] == (0.0, -math.inf)  # a hidden key: -inf, as SDPA
    assert conv.args[0].meta["example_value"].dtype == torch.bool
    seen = []
    real = ops.attention.mask_operand
    monkeypatch.setattr(ops.attention, "mask_operand", lambda m, *a: seen.append(m.dtype) or real(m, *a))
    torch._dynamo.reset()
    report_mod.clear()
    with torch.no_grad():
        out = torch.compile(f, backend="argus")(q, k, v, valid)
    torch.testing.assert_close(out, f(q, k, v, valid), rtol=1e-4, atol=1e-4)
    assert seen and set(seen) == {torch.float32}, seen
    assert all(not e.source.startswith("fallback") for e in report_mod.entries() if e.calls)


def test_decode_attention_splits_the_cache_where_the_heads_are_few(fresh_cache, monkeypatch):
    """A decode step (one query token) of one sequence against a long cache: the op runs split-KV decode
    (attention_decode_part over chunks, attention_decode_merge), proven with the plan (its verification lists both
    kernels), and matches SDPA with the cache's key mask."""
    import sys

    from argus_inductor import ops

    attn_mod = sys.modules["argus_inductor.kernels.attention"]
    monkeypatch.setattr(attn_mod, "SPLIT_MIN_KEYS", 16)  # the interpreter's small cache: chunks of 16 keys
    monkeypatch.setattr(attn_mod, "SPLIT_TARGET_PROGRAMS", 8)
    ran = []
    real = ops.attention.attention_decode_split
    monkeypatch.setattr(ops.attention, "attention_decode_split", lambda *a, **kw: ran.append(real(*a, **kw)) or ran[-1])
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 64, 16), torch.randn(1, 2, 64, 16)
    mask = torch.arange(64)[None, None, None, :] < 40  # a static cache filled to 40 keys
    report_mod.record_match("split-decode", "attention", "sdpa")  # as the matcher does before the op runs
    out = torch.ops.argus.attention_mask(q, k, v, mask, None, "split-decode")
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert ran == [4]
    entry = next(e for e in report_mod.entries() if e.calls)
    assert not entry.source.startswith("fallback"), entry.source
    assert any("split-KV decode: 4 chunks of 16 keys" in n for n in entry.notes), entry.notes
    sig = make_signature("attention", "gqa2,mask", [q, k, v], {"H": 4, "HK": 2, "D": 16},
                             {"Z": 1, "S": 1, "T": 64})
    spec = ops.spec_for(sig)
    for target in ("interpret", "cuda"):  # the plan's kernels and the split-KV ones, at each target's template
        pols = spec.policies(spec.template(sig, target), sig)
        res = ops.verify_plan(spec, sig, ops.library_kernels(spec, pols), pols, target)
        assert {"attention_decode_part (split-KV)", "attention_decode_merge (split-KV)"} <= set(res["kernels"])
        assert res["status"] == "verified", res


def test_inductor_cache_keys_carry_the_argus_code(fresh_cache, monkeypatch):
    """Inductor's FX-graph cache keys a graph by its code, not by the Argus ops' schemas: code cached under one
    version of the ops (a call with keyword arguments the op no longer had) came back under another and failed at
    run time. The backend tags the key with a hash of argus_inductor's sources: the same code hits the cache, other
    code (a changed tag) compiles afresh."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache as fresh_inductor_cache

    from argus_inductor import backend
    from argus_inductor.graph import pipeline as matchers_mod

    assert backend.code_tag() == backend.code_tag() and len(backend.code_tag()) == 16
    w = torch.randn(24, 40)

    def f(x):
        return F.linear(x, w).relu()

    x = torch.randn(5, 40)
    hits = []
    with fresh_inductor_cache(), torch._inductor.config.patch(fx_graph_cache=True):
        for tag in ("a" * 16, "a" * 16, "b" * 16):
            monkeypatch.setattr(backend, "code_tag", lambda tag=tag: tag)
            monkeypatch.setattr(matchers_mod, "GRAPH_IDS", itertools.count())  # node ids as in a fresh process
            torch._dynamo.reset()
            counters.clear()
            with torch.no_grad():
                out = torch.compile(f, backend="argus")(x)
            torch.testing.assert_close(out, f(x), rtol=1e-4, atol=1e-4)
            hits.append((counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]))
    assert hits[0] == (0, 1) and hits[1] == (1, 0) and hits[2] == (0, 1), hits
