"""backend="argus" on real transformers models built from tiny configs with random weights: the matchers
find the GEMM, attention and MoE subgraphs, the rewritten graphs agree with eager, sizes do not
recompile per size, and without the interpreter the CPU gets Inductor's result exactly."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import argus_inductor
from argus_inductor.graph.experts import ArgusExperts
from argus_inductor.runtime import reporting as report_mod

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)


def _config(name: str) -> Any:
    if name == "llama":
        return transformers.LlamaConfig(**COMMON), "LlamaForCausalLM"
    if name == "mistral":
        return transformers.MistralConfig(**COMMON, sliding_window=None), "MistralForCausalLM"
    if name == "mixtral":
        return transformers.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2), "MixtralForCausalLM"
    if name == "qwen2_moe":
        return transformers.Qwen2MoeConfig(**COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                           shared_expert_intermediate_size=24), "Qwen2MoeForCausalLM"
    if name == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                           head_dim=8), "Qwen3MoeForCausalLM"
    if name == "deepseek_v3":  # one MoE layer (group-limited routing, a shared expert); MLA attention
        return transformers.DeepseekV3Config(
            vocab_size=64, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=1,
            first_k_dense_replace=0, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
            n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=None, kv_lora_rank=16,
            qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, max_position_embeddings=64), "DeepseekV3ForCausalLM"
    raise KeyError(name)


def build(name: str, attn: str = "sdpa", experts: str | None = None) -> torch.nn.Module:
    cfg, cls_name = _config(name)
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {cls_name}")
    cfg._attn_implementation = attn
    if experts is not None:
        cfg._experts_implementation = experts
    torch.manual_seed(0)
    return cls(cfg).eval()


def _two_layer_decoder(name: str) -> tuple[Any, torch.nn.Module]:
    """The config and model of `name` with two layers and SDPA attention, seeded: what the decode-step tests run."""
    cfg, cls_name = _config(name)
    cfg.num_hidden_layers = 2
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cfg, getattr(transformers, cls_name)(cfg).eval()


def _decode_logits(fn: Callable, cache: Any, tokens: torch.Tensor, at: int) -> torch.Tensor:
    """One decode step of `tokens` (batch, 1) at position `at` against a StaticCache: the logits."""
    pos = torch.tensor([at], device=tokens.device)
    with torch.no_grad():
        return fn(input_ids=tokens, past_key_values=cache, cache_position=pos, position_ids=pos[None],
                  use_cache=True).logits


def _logits(model: Callable, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens, use_cache=False).logits


# name, attention implementation, how many subgraphs of each kind Argus must take (at least). DeepSeek-V3's
# attention (MLA: query/key head dim 16, value head dim 8) is not one the attention kernel computes.
MODELS = [
    ("llama", "sdpa", {"gemm": 6, "attention": 1}),
    ("llama", "eager", {"gemm": 6, "attention": 1}),
    ("mistral", "sdpa", {"gemm": 6, "attention": 1}),
    ("mixtral", "sdpa", {"gemm": 5, "attention": 1, "moe": 1}),
    ("qwen2_moe", "sdpa", {"gemm": 7, "attention": 1, "moe": 1}),
    ("qwen3_moe", "eager", {"gemm": 5, "attention": 1, "moe": 1}),
    ("deepseek_v3", "sdpa", {"gemm": 6, "moe": 1}),
]
DENSE_MLP = ("llama", "mistral", "qwen2_moe", "deepseek_v3")  # a gated MLP outside the experts
# softmax routers and whether they renormalize the top-k weights (DeepSeek-V3's is a grouped sigmoid router)
SOFTMAX_ROUTERS = {"mixtral": "true", "qwen2_moe": "false", "qwen3_moe": "false"}


@pytest.mark.slow
@pytest.mark.parametrize("name,attn,kinds", MODELS, ids=[f"{m}-{a}" for m, a, _ in MODELS])
def test_model_matches_eager_and_argus_takes_its_subgraphs(name: str, attn: str, kinds: dict[str, int],
                                                           fresh_cache: Path) -> None:
    model = build(name, attn)
    tokens = torch.randint(0, 64, (2, 7))
    ref = _logits(model, tokens)
    out = _logits(torch.compile(model, backend="argus"), tokens)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    rows = report_mod.entries()
    found = {k: sum(e.op == k for e in rows) for k in ("gemm", "attention", "moe")}
    for k, n in kinds.items():
        assert found[k] >= n, (name, found)
    assert all(e.calls == 1 and e.source.startswith("default") for e in rows), [(e.op, e.source) for e in rows]
    text = report_mod.report()
    assert "residual" in text
    if name in DENSE_MLP:
        assert "silu*up" in text
    if "moe" in kinds:
        assert "moe[top2,silu]" in text
    if name in SOFTMAX_ROUTERS:  # softmax -> top-k [-> renormalize] is one router_topk launch
        assert any(e.graph_node.startswith("router ") for e in rows), text
        assert f"router_topk([14,4]; k=2, renorm={SOFTMAX_ROUTERS[name]})" in text, text


@pytest.mark.parametrize("name", ["llama", "mixtral", "deepseek_v3"])
def test_a_prefill_computes_its_rotary_tables_once(name: str, fresh_cache: Path) -> None:
    """These models rotate q and k by the cos and sin of cat(freqs, freqs). At a prefill length unknown at compile
    time (dynamic=True) or above DECODE_ROWS positions, both tables are one rotary_table launch, and the logits
    match eager; 7 positions known at compile time stay inline in Inductor's rotations."""
    model = build(name, "sdpa")
    for tokens, dynamic, taken in ((torch.randint(0, 64, (1, 20)), True, 1), (torch.randint(0, 64, (2, 7)), False, 0)):
        report_mod.clear()
        torch._dynamo.reset()
        out = _logits(torch.compile(model, backend="argus", dynamic=dynamic), tokens)
        torch.testing.assert_close(out, _logits(model, tokens), rtol=1e-4, atol=1e-4)
        tables = [e for e in report_mod.entries() if e.op == "rotary" and e.calls]  # Dynamo may trace twice
        assert [(e.graph_node.startswith("table emb"), e.calls) for e in tables] == [(True, 1)] * taken, \
            report_mod.report()
        if taken:
            assert tables[0].signature.startswith("rotary_table([") and tables[0].source.startswith("default")


@pytest.mark.slow
def test_optimize_swaps_eager_experts_so_the_block_compiles_without_a_graph_break(fresh_cache: Path) -> None:
    model = build("mixtral", experts="eager")
    tokens = torch.randint(0, 64, (2, 5))
    ref = _logits(model, tokens)
    assert argus_inductor.optimize(model) is model
    assert isinstance(model.model.layers[0].mlp.experts, ArgusExperts)
    assert model.model.layers[0].mlp.experts.gate_up_proj is not None
    torch.testing.assert_close(_logits(model, tokens), ref, rtol=1e-4, atol=1e-4)
    out = _logits(torch.compile(model, backend="argus", fullgraph=True), tokens)  # fullgraph: no break allowed
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    moe = [e for e in report_mod.entries() if e.op == "moe" and not e.graph_node.startswith("router ")]
    assert len(moe) == 1 and "via optimize" in moe[0].graph_node and moe[0].source.startswith("default")


@pytest.mark.slow
def test_changing_batch_and_sequence_length_does_not_recompile_per_size(fresh_cache: Path) -> None:
    model = build("llama")
    calls = {"n": 0}

    def counting(gm, example_inputs, **kw):
        calls["n"] += 1
        return argus_inductor.argus_backend(gm, example_inputs, **kw)

    compiled = torch.compile(model, backend=counting)
    for b, s in ((1, 5), (2, 9), (3, 6)):
        tokens = torch.randint(0, 64, (b, s))
        torch.testing.assert_close(_logits(compiled, tokens), _logits(model, tokens), rtol=1e-4, atol=1e-4)
    assert calls["n"] <= 2, f"{calls['n']} compilations for 3 sizes"  # static first, then one dynamic graph
    attn = [e for e in report_mod.entries() if e.op == "attention"]
    assert sum(e.calls for e in attn) == 3 and len(attn) <= 2


@pytest.mark.slow
def test_without_the_interpreter_a_moe_model_gets_exactly_inductor(fresh_cache: Path) -> None:
    model = build("mixtral")
    tokens = torch.randint(0, 64, (2, 7))
    out = _logits(torch.compile(model, backend="argus", options={"interpret": False}), tokens)
    torch._dynamo.reset()
    ref = _logits(torch.compile(model, backend="inductor"), tokens)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert report_mod.entries() == []


@pytest.mark.slow
@pytest.mark.parametrize("experts", [None, "grouped_mm"])
def test_every_layers_experts_block_is_taken_under_dynamic_shapes(experts: str | None, fresh_cache: Path) -> None:
    """Under dynamic=True Dynamo computes T * top_k once, inside the first layer's experts block, and the next
    layer reuses it: that shared size must not make the first block look as if it had two outputs."""
    cfg, _ = _config("mixtral")
    cfg.num_hidden_layers = 2
    cfg._attn_implementation = "sdpa"
    if experts is not None:
        cfg._experts_implementation = experts
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(cfg).eval()
    tokens = torch.randint(0, 64, (1, 9))
    ref = _logits(model, tokens)
    out = _logits(torch.compile(model, backend="argus", dynamic=True), tokens)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    moe = {e.graph_node.split(".mlp")[0][-8:] for e in report_mod.entries()
           if e.op == "moe" and e.calls and not e.graph_node.startswith("router ")}
    assert moe == {"layers.0", "layers.1"}, moe


@pytest.mark.slow
def test_every_layers_attention_is_taken_in_a_static_cache_decode_step(fresh_cache: Path) -> None:
    """A decode step against transformers' StaticCache under dynamic=True: the first layer's cache is filled inside
    the graph, so its key/value sizes trace as SymInts that guards pin to constants (the other layers' are ints).
    Taken for unknown sizes, they left layer 0's attention to aten (on the H100: cuDNN behind a repeat_kv copy of
    the whole cache, 0.43 ms of a 1.49 ms Llama decode step at batch 32)."""
    from transformers import StaticCache

    cfg, model = _two_layer_decoder("llama")
    cache = StaticCache(config=cfg, max_cache_len=24)
    tokens = torch.randint(0, 64, (2, 1))
    _decode_logits(model, cache, tokens, 0)  # the cache's tensors come to exist in eager, as in a generate() loop
    compiled = torch.compile(model, backend="argus", dynamic=True)
    for at in (1, 2):
        out = _decode_logits(compiled, cache, tokens, at)
        ref = _decode_logits(model, cache, tokens, at)  # the same slot written again with the same keys
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    taken = {e.graph_node for e in report_mod.entries() if e.op == "attention" and e.calls}
    assert len(taken) == 2, taken


@pytest.mark.parametrize("name", ["llama", "mixtral"])
def test_decode_projections_of_one_input_fuse_into_one_launch(name: str, fresh_cache: Path) -> None:
    """A batch-1 decode step (its one row known at compile time): each layer's q, k and v projections become one
    argus.linear_cat whose kernel (gemv_cat) runs under the interpreter, the norms between Argus GEMMs Argus's, the
    first one with the embedding, and the logits match eager; the batch-2 step after it (rows now symbolic) keeps
    them three GEMMs and Inductor's norms, and matches too."""
    from transformers import StaticCache

    cfg, model = _two_layer_decoder(name)
    for batch, fused in ((1, True), (2, False)):
        report_mod.clear()
        cache = StaticCache(config=cfg, max_cache_len=24)
        tokens = torch.randint(0, 64, (batch, 1))
        _decode_logits(model, cache, tokens, 0)
        compiled = torch.compile(model, backend="argus", dynamic=True)
        out = _decode_logits(compiled, cache, tokens, 1)
        ref = _decode_logits(model, cache, tokens, 1)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        cats = [e for e in report_mod.entries() if " + " in e.graph_node and e.calls]
        assert len(cats) == (2 if fused else 0), [(e.graph_node, e.source) for e in report_mod.entries()]
        if fused:
            assert all(not e.source.startswith("fallback") and "cat32/16/16" in e.signature for e in cats), \
                [(e.source, e.signature) for e in cats]
        # the RMSNorms between Argus GEMMs at one row are Argus's rms_norm_rounded (Llama: after each o_proj and
        # down_proj; Mixtral: after each o_proj, its MoE output being added in Inductor's kernel)
        norms = [e for e in report_mod.entries() if e.graph_node.startswith("rms_norm ") and e.calls]
        want = {"llama": 4, "mixtral": 2}[name] if fused else 0
        assert len(norms) == want, [(e.graph_node, e.source) for e in report_mod.entries()]
        # and the first layer's norm of the embedding's rows is one launch with the embedding
        firsts = [e for e in report_mod.entries() if e.graph_node.startswith("embedding_rms_norm ") and e.calls]
        assert len(firsts) == (1 if fused else 0), [(e.graph_node, e.source) for e in report_mod.entries()]
        assert all(not e.source.startswith("fallback") for e in norms + firsts), \
            [(e.source, e.signature) for e in norms + firsts]
        # one position's rotary tables stay in Inductor's rotations (a launch would cost more than they do)
        assert not [e for e in report_mod.entries() if e.op == "rotary"], [e.graph_node for e in report_mod.entries()]


@pytest.mark.parametrize("name,batch", [("llama", 1), ("mixtral", 1), ("llama", 3)])
def test_a_decode_steps_rotation_and_cache_write_are_one_op(name: str, batch: int, fresh_cache: Path) -> None:
    """Each layer's q and k rotation and its two StaticCache writes become one argus::rope_cache call, its kernel
    run under the interpreter: over several steps the logits, and the caches the steps wrote, match eager's."""
    from transformers import StaticCache

    cfg, model = _two_layer_decoder(name)
    tokens = torch.randint(0, 64, (batch, 1))
    mine, theirs = StaticCache(config=cfg, max_cache_len=24), StaticCache(config=cfg, max_cache_len=24)
    _decode_logits(model, mine, tokens, 0)
    _decode_logits(model, theirs, tokens, 0)
    compiled = torch.compile(model, backend="argus", dynamic=True)
    for at in (1, 2, 3):
        torch.testing.assert_close(_decode_logits(compiled, mine, tokens, at), _decode_logits(model, theirs, tokens, at),
                                   rtol=1e-4, atol=1e-4)
    for a, b in zip(mine.layers, theirs.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=1e-5, atol=1e-5)
        assert int(a.cumulative_length) == int(b.cumulative_length) == 4
        assert a.keys[:, :, 4:].abs().sum() == 0, "a position past the steps was written"
    ropes = [e for e in report_mod.entries() if e.op == "rope" and e.calls]
    assert len(ropes) == 2 and all(e.source.startswith("default") for e in ropes), \
        [(e.graph_node, e.source) for e in report_mod.entries()]


def _call_args(call: str) -> list[str]:
    """The arguments of a call in Inductor's generated code (the text after its opening parenthesis): its commas
    outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in call:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()]


def _operand(code: str, op: str, i: int) -> list[str]:
    """The buffer behind the i-th operand of each torch.ops.argus.<op> call in `code` (a view's base buffer)."""
    calls = [c.split(f"argus.{op}.default(", 1)[1] for c in code.splitlines() if f"argus.{op}.default(" in c]
    return [re.sub(r"reinterpret_tensor\((\w+),.*", r"\1", _call_args(c)[i]) for c in calls]


def test_the_moe_op_reads_the_routers_packed_ids_with_no_cast_before_it(fresh_cache: Path) -> None:
    """router_topk returns the top-k weights and experts packed in one float32 tensor; the experts op takes the
    packed ids as they are (moe_route reads float ids), so no cast of the ids runs between the two launches (a
    2 us kernel a layer at Mixtral's decode on the H100). The logits match eager."""
    from torch._inductor.utils import run_and_get_code

    model = build("mixtral")
    tokens = torch.randint(0, 64, (2, 5))
    ref = _logits(model, tokens)
    out, code = run_and_get_code(lambda: _logits(torch.compile(model, backend="argus"), tokens))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    text = "\n".join(code)
    alias = dict(re.findall(r"^\s*(buf\d+) = (buf\d+)\s*$", text, re.M))  # Inductor renames an op's result

    def base(buf: str) -> str:
        while buf in alias:
            buf = alias[buf]
        return buf

    routers = [line.split("=", 1)[0].strip() for line in text.splitlines()
               if "argus.library.default('router_topk'" in line]
    ids = [base(b) for b in _operand(text, "moe", 2)]
    assert routers and ids == routers, (routers, ids)


def test_a_decode_step_computes_its_rotary_tables_and_mask_once_for_every_layer(fresh_cache: Path) -> None:
    """The rotary tables and the attention mask a decode step computes once in the graph reach every layer's
    rope_cache and attention_mask op as one buffer: the ops take their operands' layout as it is (flexible layout),
    so Inductor does not compute an unrealized table again for each op (a kernel a layer and table on the GPU)."""
    from torch._inductor.utils import run_and_get_code
    from transformers import StaticCache

    cfg, model = _two_layer_decoder("llama")
    tokens = torch.randint(0, 64, (1, 1))
    mine, theirs = StaticCache(config=cfg, max_cache_len=24), StaticCache(config=cfg, max_cache_len=24)
    _decode_logits(model, mine, tokens, 0)
    _decode_logits(model, theirs, tokens, 0)
    compiled = torch.compile(model, backend="argus", dynamic=True)
    out, code = run_and_get_code(lambda: _decode_logits(compiled, mine, tokens, 1))
    torch.testing.assert_close(out, _decode_logits(model, theirs, tokens, 1), rtol=1e-4, atol=1e-4)
    text = "\n".join(code)

    cos, sin, mask = (_operand(text, "rope_cache", 3), _operand(text, "rope_cache", 4),
                      _operand(text, "attention_mask", 3))
    assert len(cos) == len(mask) == 2, text
    assert len(set(cos)) == len(set(sin)) == len(set(mask)) == 1, (cos, sin, mask)


@pytest.mark.skipif(os.environ.get("ARGUS_TEST_DEVICE", "cpu") != "cuda" or not torch.cuda.is_available(),
                    reason="needs the GPU (ARGUS_TEST_DEVICE=cuda): Inductor compiles the inlined launches there")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_decode_steps_cache_write_on_the_gpu_matches_eager(dynamic: bool, fresh_cache: Path) -> None:
    """On the GPU, rope_cache's launch inlined into Inductor's code (static shapes: the caches are written by a
    user-defined Triton kernel Inductor reinplaces) or called as an op (dynamic shapes): over several steps, with
    CUDA-graph replays, the logits and the caches match eager's."""
    from transformers import StaticCache

    cfg, model = _two_layer_decoder("llama")
    model = model.cuda()
    tokens = torch.randint(0, 64, (1, 1), device="cuda")
    mine, theirs = StaticCache(config=cfg, max_cache_len=24), StaticCache(config=cfg, max_cache_len=24)
    _decode_logits(model, mine, tokens, 0)
    _decode_logits(model, theirs, tokens, 0)
    compiled = torch.compile(model, backend="argus", dynamic=dynamic)
    for at in range(1, 6):
        torch.testing.assert_close(_decode_logits(compiled, mine, tokens, at), _decode_logits(model, theirs, tokens, at),
                                   rtol=2e-3, atol=2e-3)
    for a, b in zip(mine.layers, theirs.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-4)
    ropes = [e for e in report_mod.entries() if e.op == "rope" and e.calls]
    assert len(ropes) == 2, [(e.graph_node, e.source) for e in report_mod.entries()]
