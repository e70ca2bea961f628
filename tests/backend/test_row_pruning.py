"""Rows no output reads, not computed (argus_inductor.graph.row_pruning): a prefill that returns its last position's
logits (logits_to_keep=1) runs its last layer's MLP or experts, output projection, attention queries and query
projection on that position only, and its logits equal eager's; where every row is kept, or the slice is not of
row-wise ops, the graph is left as it was."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx as fx

from argus_inductor.graph.row_pruning import prune_unread_rows
from argus_inductor.runtime import reporting as report_mod

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)


def _model(name: str, attn: str = "sdpa", optimize: bool = True) -> torch.nn.Module:
    if name == "llama":
        cfg, cls = transformers.LlamaConfig(**COMMON), transformers.LlamaForCausalLM
    elif name == "mixtral":
        cfg, cls = transformers.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2), \
            transformers.MixtralForCausalLM
    elif name == "deepseek_v3":  # a dense first layer, then an MoE layer with a grouped sigmoid router; MLA
        cfg = transformers.DeepseekV3Config(
            vocab_size=64, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
            first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
            n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=None, kv_lora_rank=16,
            qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, max_position_embeddings=64)
        cls = transformers.DeepseekV3ForCausalLM
    else:
        cfg = transformers.Qwen2MoeConfig(**COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                          shared_expert_intermediate_size=24)
        cls = transformers.Qwen2MoeForCausalLM
    cfg._attn_implementation = attn
    if name != "llama" and not optimize:
        cfg._experts_implementation = "grouped_mm"  # traced whole, as the H100's e2e models run it
    torch.manual_seed(0)
    model = cls(cfg).eval()
    if name != "llama" and optimize:
        import argus_inductor

        argus_inductor.optimize(model)  # the experts as one argus::moe call, as backend="argus" traces them
    return model


def _rows(v: Any) -> tuple[int, ...]:
    return tuple(int(d.node.hint) if isinstance(d, torch.SymInt) else int(d) for d in v.shape)


def _prune_in_graph(model: torch.nn.Module, tokens: torch.Tensor, keep: int, cache: bool = False) -> dict[str, Any]:
    """Trace `model` as torch.compile(dynamic=True) does, run the pass on the graph, and run both graphs on the
    traced inputs: the logits of each, and the (hinted) shapes of the layers' linear and attention calls."""
    seen: dict[str, Any] = {}

    def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        inputs = [x.node.hint if isinstance(x, torch.SymInt) else x for x in example_inputs]
        before = gm(*inputs)
        seen["matches"] = prune_unread_rows(gm.graph, 0)
        gm.graph.lint()
        gm.recompile()
        after = gm(*inputs)
        seen["before"], seen["after"] = before[-1 if cache else 0], after[-1 if cache else 0]  # the logits
        seen["outputs"] = list(zip(before, after))
        seen["shapes"] = [(str(n.target), _rows(n.meta["example_value"])) for n in gm.graph.nodes
                          if n.op == "call_function" and ("linear" in str(n.target) or "attention" in str(n.target)
                                                          or "moe" in str(n.target))]
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, dynamic=True)(input_ids=tokens, use_cache=cache, logits_to_keep=keep)
    return seen


@pytest.mark.parametrize("name", ["llama", "mixtral"])
def test_a_prefill_that_fills_the_kv_cache_still_computes_every_key_and_value(name: str) -> None:
    """With use_cache=True the graph also returns every layer's keys and values: those of the last layer stay
    whole (every position's), equal to the unpruned graph's, while its queries and MLP shrink."""
    seen = _prune_in_graph(_model(name), torch.randint(0, 64, (2, 9)), keep=1, cache=True)
    assert [m.kind for m in seen["matches"]] == ["rows"]
    assert len(seen["outputs"]) == 2 * COMMON["num_hidden_layers"] + 1  # k and v of each layer, then the logits
    for before, after in seen["outputs"]:
        assert before.shape == after.shape
        torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-6)
    assert seen["outputs"][-2][0].shape[-2] == 9  # the last layer's values: all 9 positions


@pytest.mark.parametrize("name,attn", [("llama", "sdpa"), ("llama", "eager"), ("mixtral", "sdpa"),
                                       ("qwen2_moe", "sdpa")])
def test_the_last_layer_runs_on_the_kept_row_only_and_the_logits_do_not_change(name: str, attn: str) -> None:
    batch, seq = 3, 9
    seen = _prune_in_graph(_model(name, attn), torch.randint(0, 64, (batch, seq)), keep=1)
    torch.testing.assert_close(seen["after"], seen["before"], rtol=1e-5, atol=1e-6)
    assert seen["after"].shape == (batch, 1, 64)
    assert [m.kind for m in seen["matches"]] == ["rows"]
    shapes = seen["shapes"]
    linears = [s for t, s in shapes if "linear" in t and len(s) == 3 and s[-1] != 64]  # the layers', not lm_head's
    # the first layer whole; the last layer's q (and with it every projection after attention) on one row each
    full = [s for s in linears if s[1] == seq]
    one = [s for s in linears if s[1] == 1]
    assert full and one, shapes
    hidden, inter = COMMON["hidden_size"], COMMON["intermediate_size"]
    assert (batch, 1, hidden) in one  # the last layer's q or o projection
    if name == "llama":
        assert (batch, 1, inter) in one and (batch, seq, inter) in full  # the MLP's gate/up: last layer only
        assert sum(s[1] == seq and s[2] == inter for s in linears) == 2  # first layer's gate and up only
    else:  # the last layer's experts take one token a sequence
        moe = [s for t, s in shapes if "moe" in t]
        assert (batch * seq, hidden) in moe and (batch, hidden) in moe, moe
    if attn == "sdpa":
        attention = [s for t, s in shapes if "attention" in t]
        assert (batch, COMMON["num_attention_heads"], 1, hidden // COMMON["num_attention_heads"]) in attention


def test_deepseek_v3s_last_experts_take_one_token_a_sequence_behind_a_router_kept_whole() -> None:
    """DeepSeek-V3's grouped router (a scatter into a group mask, a gather) is not in the pass's vocabulary, so it
    runs on every token, and with it the attention before it; its top-k weights and ids (tokens of the batch
    merged into one dimension) are read by the pruned experts call through a split-slice-merge of that
    dimension."""
    batch, seq = 3, 9
    seen = _prune_in_graph(_model("deepseek_v3"), torch.randint(0, 64, (batch, seq)), keep=1)
    torch.testing.assert_close(seen["after"], seen["before"], rtol=1e-5, atol=1e-6)
    moe = [s for t, s in seen["shapes"] if "moe" in t]
    assert moe == [(batch, COMMON["hidden_size"])], seen["shapes"]
    assert [m.kind for m in seen["matches"]] == ["rows"] and "moe" in seen["matches"][0].nodes


def _compile_pruned(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[Any], fx.Graph]:
    """model(x) compiled through the pass alone: the output, the pass's matches and the rewritten graph."""
    seen: dict[str, Any] = {}

    def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen["matches"] = prune_unread_rows(gm.graph, 0)
        gm.graph.lint()
        gm.recompile()
        seen["graph"] = gm.graph
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=backend)(x)
    return out, seen["matches"], seen["graph"]


def test_every_row_kept_leaves_the_graph_as_it_was() -> None:
    seen = _prune_in_graph(_model("llama"), torch.randint(0, 64, (2, 6)), keep=0)  # logits_to_keep=0: all rows
    assert seen["matches"] == []
    torch.testing.assert_close(seen["after"], seen["before"], rtol=0, atol=0)


def test_a_slice_of_ops_whose_rows_mix_or_are_read_whole_is_left_alone() -> None:
    """cumsum along the sliced dimension makes a row depend on the rows before it: nothing above it shrinks. A
    tensor also returned whole, or updated in place where another op reads it whole, keeps every row."""
    class Mixing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(16, 16)
            self.b = torch.nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.cumsum(self.a(x), dim=1))[:, -1:]

    class RowWise(Mixing):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.nn.functional.silu(self.a(x)) * 2)[:, -1:]

    class AlsoWhole(Mixing):  # the sliced tensor is returned whole too: nothing to save
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.b(torch.relu(self.a(x)))
            return y, y[:, -1:]

    class InPlace(Mixing):  # relu in place on a's output, which the sum reads whole after it
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.a(x)
            y = self.b(torch.nn.functional.relu(h, inplace=True))
            return y[:, -1:], h.sum()

    for cls, pruned in ((Mixing, [1]), (RowWise, [2]), (AlsoWhole, []), (InPlace, [1])):
        torch.manual_seed(0)
        model = cls().eval()
        x = torch.randn(2, 8, 16)
        with torch.no_grad():
            ref = model(x)  # before: the in-place relu's model updates its own intermediate, not x
        out, matches, _ = _compile_pruned(model, x)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        got = [len(m.nodes) for m in matches]
        # Mixing: only b (after the cumsum) shrinks; RowWise: a and b both; AlsoWhole nothing; InPlace b, reading
        # its row of the relu run whole (in place on the last row only, the sum would read un-relu'd rows)
        assert got == pruned, (cls.__name__, matches)


class Encoder(torch.nn.Module):
    """One bidirectional attention layer (no mask) and an MLP, pooled at one position: x[:, pos] of the output."""

    def __init__(self, pos: int, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.pos, self.heads = pos, heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.o = torch.nn.Linear(dim, dim)
        self.up = torch.nn.Linear(dim, 2 * dim)
        self.down = torch.nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        h = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = h + self.down(torch.nn.functional.gelu(self.up(torch.nn.functional.layer_norm(h, (d,)))))
        return h[:, self.pos]


@pytest.mark.parametrize("pos", [0, 3, -1])
def test_a_pooled_position_runs_the_layer_on_that_position_only(pos: int) -> None:
    """x[:, i] (an int index: the row's dimension dropped) is a kept row like x[:, i:i+1]: the output projection,
    the MLP and the attention's queries run on it, at any position of a bidirectional attention. The fused qkv
    projection stays whole: its k and v parts are read at every position (chunk is not in the vocabulary)."""
    torch.manual_seed(0)
    model = Encoder(pos).eval()
    x = torch.randn(2, 8, 32)
    out, matches, graph = _compile_pruned(model, x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
    assert out.shape == (2, 32)
    assert [m.kind for m in matches] == ["rows"]
    assert len(matches[0].nodes) == 4  # down, up, o, and the attention
    attention = [tuple(n.meta["example_value"].shape) for n in graph.nodes
                 if n.op == "call_function" and "attention" in str(n.target)]
    assert attention == [(2, 4, 1, 8)], attention


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "mixtral"])
def test_backend_argus_prefill_of_the_last_logits_matches_eager(name: str, fresh_cache: Path) -> None:
    """The whole backend under the interpreter (ARGUS_INTERPRET=1, the tests' setting): the pruned rows reach
    the matchers, whose kernels run on them, and the report says what was pruned; with ARGUS_PRUNE_ROWS off the
    same logits come from the whole last layer. Mixtral's experts are traced as transformers runs them (grouped_mm)
    and become an argus::moe call in the backend before the rows are pruned through it."""
    model = _model(name, optimize=False)
    tokens = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        ref = model(input_ids=tokens, use_cache=False, logits_to_keep=1).logits
        for prune in (True, False):
            report_mod.clear()
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="argus", dynamic=True, options={"prune_rows": prune})
            out = compiled(input_ids=tokens, use_cache=False, logits_to_keep=1).logits
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
            rows = [e for e in report_mod.entries() if e.op == "rows"]
            assert bool(rows) == prune, report_mod.report()  # (Dynamo may trace the graph twice)
            for e in rows:
                assert e.source.startswith("graph rewrite") and "on the 1 row(s) of dim 1" in e.signature
                assert len(e.graph_node.split(", ")) >= 5  # q, attention, o, and the MLP's or experts' calls
                assert name == "llama" or "moe" in e.graph_node, e.graph_node
