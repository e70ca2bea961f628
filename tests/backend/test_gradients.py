"""A model called outside torch.no_grad() (parameters require grad by default): backend="argus" compiles it, the
forward and backward match eager's, and nothing fails to compile. Argus's ops have no backward, so a graph that needs
gradients is left to Inductor, and the log says so once; the same model under torch.no_grad() takes Argus's ops."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import argus_inductor  # noqa: F401  (registers backend="argus")
from argus_inductor.runtime import reporting as report_mod

transformers = pytest.importorskip("transformers")


class Attention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(a.transpose(1, 2).reshape(b, s, d))


def _mixtral() -> nn.Module:
    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     num_local_experts=4, num_experts_per_tok=2)
    cfg._attn_implementation = "sdpa"
    return transformers.MixtralForCausalLM(cfg)


def _check_grads(model: nn.Module, make_input, caplog) -> None:
    torch.manual_seed(0)
    x = make_input()
    ref_out = model(x)
    ref_out = ref_out.logits if hasattr(ref_out, "logits") else ref_out
    ref_out.float().square().mean().backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="argus")
    with caplog.at_level(logging.WARNING, logger="argus_inductor"):
        for _ in range(2):  # the second call takes the compiled graph's steady path
            model.zero_grad(set_to_none=True)
            out = compiled(x)
            out = out.logits if hasattr(out, "logits") else out
            torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
            out.float().square().mean().backward()
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == ref.keys()
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.parametrize("case", ["mlp", "attention", "moe"])
def test_a_model_with_gradients_compiles_and_matches_eager(case: str, fresh_cache, caplog, monkeypatch) -> None:
    from argus_inductor import backend

    monkeypatch.setattr(backend, "_SAID", set())  # the log line is said once a process: once a test here
    if case == "mlp":  # the model, verbatim
        model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
        make = lambda: torch.randn(8, 64)  # noqa: E731
    elif case == "attention":
        model = Attention()
        make = lambda: torch.randn(2, 8, 32)  # noqa: E731
    else:
        model = _mixtral()
        make = lambda: torch.randint(0, 64, (2, 8))  # noqa: E731
    _check_grads(model, make, caplog)
    assert "needs gradients" in caplog.text
    assert not any(e.calls for e in report_mod.entries()), "no Argus op ran in a graph that needs gradients"


def test_the_same_model_under_no_grad_takes_argus_ops(fresh_cache) -> None:
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
    x = torch.randn(8, 64)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="argus")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert any(e.calls for e in report_mod.entries())
