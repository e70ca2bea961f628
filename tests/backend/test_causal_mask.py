"""A boolean mask the graph builds from sizes alone is run as is_causal only where z3 proves it is `kv <= q` at every
size: transformers' prefill masks (causal and-ed with an all-true packed-sequence term) are; a sliding window, a
shifted or strict diagonal, a mask read from an input, and a query length other than the key length are not."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from argus_inductor.graph.causal_mask import proves_causal, size_only
from argus_inductor.runtime import reporting as report_mod

transformers = pytest.importorskip("transformers")
SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def _sdpa_mask_verdict(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> tuple[bool, bool]:
    """Trace fn with dynamic shapes; (size_only, proves_causal) of its one SDPA call's mask."""
    seen: list[tuple[bool, bool]] = []

    def capture(gm: fx.GraphModule, example_inputs: list) -> Callable:
        (node,) = [n for n in gm.graph.nodes if n.target in SDPA]
        mask = node.kwargs["attn_mask"]
        q, k = node.args[0].meta["example_value"], node.args[1].meta["example_value"]
        seen.append((size_only(mask), proves_causal(mask, q.shape[-2], k.shape[-2])))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, dynamic=True)(*args)
    return seen[-1]


def _masked(make_mask: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable:
    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        qi = torch.arange(q.shape[2])
        ki = torch.arange(k.shape[2])
        mask = make_mask(qi[:, None], ki[None, :])[None, None].expand(q.shape[0], 1, -1, -1)
        return F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
    return fn


CASES = [
    ("causal", lambda q, k: k <= q, True),
    ("causal written q >= kv", lambda q, k: q >= k, True),
    ("strict diagonal", lambda q, k: k < q, False),
    ("shifted by one", lambda q, k: k <= q + 1, False),
    ("anti-causal", lambda q, k: k >= q, False),
    ("sliding window of 4", lambda q, k: (k <= q) & (k > q - 4), False),
    ("methods: k.le(q) & q.eq(q)", lambda q, k: k.le(q).__and__(q.__eq__(q)), True),
    ("methods: ~(k > q)", lambda q, k: (k.gt(q)).logical_not(), True),
]


@pytest.mark.parametrize("name,make,causal", CASES, ids=[c[0] for c in CASES])
def test_the_prover_accepts_only_the_causal_mask(name: str, make: Callable, causal: bool) -> None:
    x = torch.randn(2, 2, 7, 8)
    assert _sdpa_mask_verdict(_masked(make), x, x) == (True, causal), name


def test_a_key_length_other_than_the_query_length_is_not_causal() -> None:
    """kv <= q over 7 queries and 9 keys is a mask, but not SDPA's is_causal for those lengths (top-left aligned it
    would be the same; a cache offset would not): refused, as any query length != key length."""
    q, k = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 9, 8)
    assert _sdpa_mask_verdict(_masked(lambda q, k: k <= q), q, k) == (True, False)


def test_a_mask_read_from_an_input_is_not_a_function_of_sizes() -> None:
    def fn(q: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        i = torch.arange(q.shape[2])
        mask = (i[None, :] <= i[:, None])[None, None] & keep[:, None, None, :]
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    q = torch.randn(2, 2, 7, 8)
    assert _sdpa_mask_verdict(fn, q, torch.ones(2, 7, dtype=torch.bool)) == (False, False)


def _model(name: str, **extra: object) -> torch.nn.Module:
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    cfg = getattr(transformers, f"{name}Config")(**common, **extra)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return getattr(transformers, f"{name}ForCausalLM")(cfg).eval()


@pytest.mark.slow
@pytest.mark.parametrize("name,extra,causal", [("Llama", {}, True), ("Mistral", {"sliding_window": 4}, False)],
                         ids=["llama", "mistral-sliding-window"])
def test_transformers_prefill_masks(name: str, extra: dict, causal: bool, fresh_cache: Path) -> None:
    """Under dynamic=True transformers builds the prefill mask in the graph; Llama's is proved causal and runs the
    causal kernel, Mistral's sliding window (4 of 9 tokens) stays a mask. Both match eager at two sizes."""
    model = _model(name, **extra)
    compiled = torch.compile(model, backend="argus", dynamic=True)
    with torch.no_grad():
        for b, s in ((2, 9), (1, 11)):
            tokens = torch.randint(0, 64, (b, s))
            torch.testing.assert_close(compiled(tokens, use_cache=False).logits, model(tokens, use_cache=False).logits,
                                       rtol=1e-4, atol=1e-4)
    sigs = [e.signature for e in report_mod.entries() if e.op == "attention" and e.calls]
    assert sigs and all(("causal" in s and "mask" not in s) == causal for s in sigs), sigs


@pytest.mark.slow
def test_a_padded_batch_keeps_its_mask(fresh_cache: Path) -> None:
    """An attention_mask with padding is an input of the graph: the mask is not a function of sizes and stays."""
    model = _model("Llama")
    tokens = torch.randint(0, 64, (2, 9))
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, :3] = 0  # left padding of the second sequence
    compiled = torch.compile(model, backend="argus", dynamic=True)
    with torch.no_grad():
        out = compiled(tokens, attention_mask=keep, use_cache=False).logits
        ref = model(tokens, attention_mask=keep, use_cache=False).logits
    torch.testing.assert_close(out[0], ref[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out[1, 3:], ref[1, 3:], rtol=1e-4, atol=1e-4)  # padded rows' logits are unused
    sigs = [e.signature for e in report_mod.entries() if e.op == "attention" and e.calls]
    assert sigs and all("mask" in s for s in sigs), sigs
