"""The swap-in's fallback sides (ops/references.py) compute what their op computes, on the device the tests run on
(the CPU here; the GPU under ARGUS_TEST_DEVICE=cuda), against float64 math on the CPU: a wrong reference is both a
wrong fallback and a wrong judge of the Argus plan in the swap-in's output check.

The attention rows with a float32 mask and bf16 q, k, v at a decode step are the case that went wrong on the H200
(torch 2.11): SDPA handed that mask went to cuDNN's attention and returned values off the math by 0.1 to 0.27."""
from __future__ import annotations

import math
import os

import pytest
import torch

from argus_inductor.ops import references

DEVICE = "cuda" if os.environ.get("ARGUS_TEST_DEVICE") == "cuda" and torch.cuda.is_available() else "cpu"
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


def _math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Attention in float64 on the CPU, grouped heads by repetition."""
    q, k, v = (t.double().cpu() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask.double().cpu()
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1 + s.shape[-1] - s.shape[-2]), -math.inf)
    return s.softmax(-1) @ v


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double().cpu() - ref).norm() / ref.norm())


def _decode_mask(z: int, live: int, slots: int) -> torch.Tensor:
    """A decode step's additive float mask over a static cache: 0 on the first `live` slots, -inf past them."""
    m = torch.full((z, 1, 1, slots), -math.inf, dtype=torch.float32)
    m[..., :live] = 0.0
    return m.to(DEVICE)


@pytest.mark.parametrize("z,heads,kv_heads,d,live,slots", [(1, 8, 2, 128, 1025, 1040), (32, 32, 8, 128, 1025, 1040),
                                                           (2, 4, 4, 64, 70, 96)])
def test_attention_with_a_mask_matches_the_math_with_grouped_heads(z, heads, kv_heads, d, live, slots) -> None:
    torch.manual_seed(0)
    q = torch.randn(z, heads, 1, d, device=DEVICE, dtype=DTYPE)
    k = torch.randn(z, kv_heads, slots, d, device=DEVICE, dtype=DTYPE)
    v = torch.randn(z, kv_heads, slots, d, device=DEVICE, dtype=DTYPE)
    mask = _decode_mask(z, live, slots)
    out = references.attention_mask(q, k, v, mask, None)
    assert out.shape == q.shape
    assert _rel(out, _math(q, k, v, mask, False)) < 2e-2


@pytest.mark.parametrize("heads,kv_heads,d", [(8, 2, 128), (8, 8, 64), (4, 2, 320)])
def test_causal_attention_matches_the_math_with_grouped_heads(heads, kv_heads, d) -> None:
    torch.manual_seed(0)
    q = torch.randn(2, heads, 48, d, device=DEVICE, dtype=DTYPE)
    k = torch.randn(2, kv_heads, 48, d, device=DEVICE, dtype=DTYPE)
    v = torch.randn(2, kv_heads, 48, d, device=DEVICE, dtype=DTYPE)
    out = references.attention(q, k, v, True, None)
    assert _rel(out, _math(q, k, v, None, True)) < 2e-2


def test_with_a_mask_sdpa_gets_it_in_the_query_dtype_and_no_grouped_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback side with a mask calls SDPA as transformers does (key/value heads repeated, enable_gqa off), the
    mask in q's dtype: the float32 mask that cuDNN's attention got wrong on the H200 cannot go wrong on the CPU, so
    this row pins the call's form."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append((q.shape[1], k.shape[1], kw.get("enable_gqa", False), kw["attn_mask"].dtype))
        return real(q, k, v, **kw)

    monkeypatch.setattr(references.F, "scaled_dot_product_attention", spy)
    q, k = torch.randn(1, 8, 1, 16, dtype=torch.bfloat16), torch.randn(1, 2, 40, 16, dtype=torch.bfloat16)
    references.attention_mask(q, k, k.clone(), torch.zeros(1, 1, 1, 40), None)
    references.attention_mask(q, k, k.clone(), torch.ones(1, 1, 1, 40, dtype=torch.bool), None)
    assert calls == [(8, 8, False, torch.bfloat16), (8, 8, False, torch.bool)]


def test_the_ops_own_fallback_hands_sdpa_the_mask_the_same_way(fresh_cache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where argus::attention_mask itself falls back (ARGUS_ON_MISS=fallback on a miss, a device Argus does not run
    on), it runs the same reference: the float32 mask reaches SDPA in q's dtype, and the output is right."""
    from argus_inductor import ops
    from argus_inductor.config import Options

    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append(kw["attn_mask"].dtype)
        return real(q, k, v, **kw)

    monkeypatch.setattr(references.F, "scaled_dot_product_attention", spy)
    ops.set_active_options(Options.resolve({"interpret": True, "on_miss": "fallback"}))
    ops.forget_plans()
    try:
        torch.manual_seed(0)
        q = torch.randn(1, 4, 1, 16, dtype=torch.bfloat16)
        k, v = torch.randn(1, 2, 24, 16, dtype=torch.bfloat16), torch.randn(1, 2, 24, 16, dtype=torch.bfloat16)
        mask = torch.zeros(1, 1, 1, 24)
        mask[..., 20:] = -math.inf
        out = torch.ops.argus.attention_mask(q, k, v, mask, None, "g0:t")
    finally:
        ops.set_active_options(Options.resolve())
        ops.forget_plans()
    assert calls == [torch.bfloat16]
    assert _rel(out, _math(q, k, v, mask, False)) < 2e-2
