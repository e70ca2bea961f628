"""`argus warmup --config` learns a model's signatures by tracing it on the meta device (agent/trace.py): they are
exactly the signatures the backend runs when the model is compiled and called (a prefill and a decode step), where
the signatures predicted from the config's dims were not (the projections before a residual add, the decode
attention's mask, the prefill's last layer on its last position)."""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from argus_inductor import ops
from argus_inductor.agent import cli, shapes
from argus_inductor.agent.trace import TraceError, trace_config
from argus_inductor.config import Options
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime.cache import KernelCache
from argus_inductor.runtime.signature import Signature

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)
CONFIGS = {"llama": dict(model_type="llama", **COMMON),
           "mixtral": dict(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2, **COMMON),
           "qwen2_moe": dict(model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                             shared_expert_intermediate_size=24, **COMMON)}
PREFILL, CONTEXT = 16, 24


def _run_compiled(config: dict, root: Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> set[str]:
    """The signatures the backend records as misses when the model of `config` (random weights; on the CPU under
    the interpreter) runs a prefill and a decode step compiled, as a user would call it."""
    from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

    opts = {"interpret": device == "cpu", "on_miss": "fallback", "cache_dir": str(root)}
    ops.forget_plans()
    report_mod.clear()
    cfg = AutoConfig.for_model(**config)
    cfg.num_hidden_layers = 2
    cfg._attn_implementation = "sdpa"
    if "num_local_experts" in config or "num_experts" in config:
        cfg._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(device=device, dtype=dtype).eval()
    one = torch.zeros(1, 1, dtype=torch.long, device=device)
    with torch.no_grad():
        torch._dynamo.reset()
        fn = torch.compile(model, backend="argus", dynamic=False, options=opts)
        fn(input_ids=torch.randint(0, 64, (1, PREFILL), device=device), use_cache=False, logits_to_keep=1)
        cache = StaticCache(config=cfg, max_cache_len=CONTEXT)
        pos = torch.tensor([CONTEXT - 1], device=device)
        model(input_ids=one, past_key_values=cache, cache_position=pos, position_ids=pos[None],
              use_cache=True)  # the cache's tensors come to exist in eager
        torch._dynamo.reset()
        fn = torch.compile(model, backend="argus", dynamic=False, options=opts)
        fn(input_ids=one, past_key_values=cache, cache_position=pos, position_ids=pos[None], use_cache=True)
    torch._dynamo.reset()
    return {Signature.from_dict(m["signature"]).key() for m in KernelCache(root).misses()}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_traced_signatures_are_the_ones_the_compiled_model_runs(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name]
    traced = trace_config(config, [1, PREFILL], "float32", CONTEXT, 1, ("gemm", "attention", "moe"))
    keys = {replace(s, arch="cpu").key() for s in traced}
    try:
        ran = _run_compiled(config, tmp_path / "cache")
    finally:
        ops.set_active_options(Options.resolve())
        ops.forget_plans()
    assert keys == ran, ([s.short() for s in traced], sorted(ran))
    epilogues = {(s.op, s.epilogue) for s in traced}
    assert ("gemm", "residual") in epilogues  # the output projection with its residual add
    assert any(op == "attention" and "mask" in e for op, e in epilogues)  # the decode step's masked attention
    if name != "llama":
        assert any(op == "moe" for op, _ in epilogues)
    # the config's dims predicted other signatures: no residual epilogue, no mask
    predicted = shapes.from_config(config, [1, PREFILL], "float32", CONTEXT, 1)
    assert not any(j.problem.epilogue == "residual" or "mask" in j.problem.epilogue for j in predicted)


def test_warmup_with_a_config_warms_the_traced_signatures(tmp_path: Path, capsys) -> None:
    """The CLI traces the config and hands the agent's ops to the search and the rest (norms, rotary tables) to the
    library's: after it, the traced signatures of this machine are in the cache."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIGS["llama"]))
    cache = tmp_path / "cache"
    rc = cli.main(["--config", str(cfg), "--tokens", "1", "--context", str(CONTEXT), "--dtype", "float32",
                   "--cache-dir", str(cache), "--policy", "offline", "--trials", "0", "--ops", "gemm,rms_norm_rounded"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "traced the model of" in err
    traced = trace_config(CONFIGS["llama"], [1], "float32", CONTEXT, 1, ("gemm", "attention", "moe"))
    want = {replace(s, arch="cpu").key() for s in traced if s.op in ("gemm", "rms_norm_rounded")}
    assert want and want <= {e.sig().key() for e in KernelCache(cache).entries()}


def test_an_untraceable_config_says_why_and_falls_back_to_the_predicted_shapes(tmp_path: Path, capsys) -> None:
    with pytest.raises(TraceError, match="config"):
        trace_config({"model_type": "no-such-model", "hidden_size": 32}, [1])
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "no-such-model", "hidden_size": 32, "num_attention_heads": 4,
                               "intermediate_size": 48}))
    parser = argparse.ArgumentParser()
    cli.add_warmup_parser(parser.add_subparsers(dest="command"))
    jobs = cli._jobs(parser.parse_args(["warmup", "--config", str(cfg), "--tokens", "4"]), tmp_path)
    assert "cannot trace the model" in capsys.readouterr().err
    assert jobs and all(j.source == "config" for j in jobs)


@pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("ARGUS_TEST_DEVICE") != "cuda",
                    reason="needs the H100 (ARGUS_TEST_DEVICE=cuda)")
def test_on_the_gpu_a_model_warmed_from_its_config_runs_from_the_cache_alone(tmp_path: Path, capsys) -> None:
    """`argus warmup --config` on the GPU, then the compiled bf16 model's prefill and decode step: no miss."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIGS["llama"]))
    cache = tmp_path / "cache"
    rc = cli.main(["--config", str(cfg), "--tokens", f"1,{PREFILL}", "--context", str(CONTEXT), "--cache-dir",
                   str(cache), "--policy", "offline", "--trials", "0"])
    assert rc == 0, capsys.readouterr().err
    try:
        missed = _run_compiled(CONFIGS["llama"], cache, "cuda", torch.bfloat16)
    finally:
        ops.set_active_options(Options.resolve())
        ops.forget_plans()
    assert not missed, missed


def test_a_model_without_sdpa_is_traced_with_its_eager_attention() -> None:
    """Gemma 2 has no SDPA attention in transformers: it is built with eager attention, as transformers itself
    would load it, and its GEMMs are traced (its soft-capped attention stays Inductor's)."""
    config = dict(model_type="gemma2", head_dim=8, **COMMON)
    sigs = trace_config(config, [1, PREFILL], "float32", CONTEXT, 1)
    assert ("gemm", "gelu_tanh*up") in {(s.op, s.epilogue) for s in sigs}
