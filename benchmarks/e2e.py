"""End to end on one GPU: Llama-3-8B and Mixtral-8x7B dims (2 layers each, random bf16 weights) under eager,
backend="inductor", mode="max-autotune" and backend="argus" (with mode="max-autotune", so that what Argus leaves
to Inductor is compiled as the max-autotune column compiles it: the comparison is of what Argus adds).

    python benchmarks/e2e.py [--models llama,mixtral] [--backends eager,inductor,max-autotune,argus]
                             [--budget-s 450] [--out DIR]
    python benchmarks/e2e.py --smoke      # tiny dims on the CPU (Argus kernels interpreted): checks the script
    python benchmarks/e2e.py --merge RUN.json RUN.json ... --tag T   # runs split across GPUs, as one table

For each model: outputs of every compiled backend against eager (bf16 tolerance: relative error of the
logits), prefill latency (batch 1 x 2048 tokens, batch 8 x 512) and per-token decode latency (batch 1
and 32, one token against a 1024-token static KV cache), with speed ratios against eager and against
max-autotune Inductor. Decode is timed two ways: "decode b=N" runs 8 steps back to back and waits once (a step's
host work overlaps the GPU work of the steps before it, so the row is mostly GPU time); "decode b=N synced" reads
each step's next tokens on the host before the next step, as a generation loop does between tokens, so every step
pays its host latency in full. Every phase is time-boxed: a phase that would start after the budget is spent
is recorded as skipped, so the whole run stays within --budget-s (default 450 s, for an 8-minute slot).
Writes e2e-<date>[-<tag>].json and .md under --out (default $OUT, else benchmarks/results/) and prints
the table last. With several GPUs, run one process a GPU (CUDA_VISIBLE_DEVICES, --phases, --backends, --tag) and
join their JSON with --merge: each model's cells come from the run that measured them. The first-call column is
what a user's install pays: where Python writes no bytecode (the lent GPU machines) the script compiles it and
restarts itself once reading it (benchmarks/bytecode.py). Needs a CUDA GPU and transformers (the demo's Llama-like
model is used without it).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import bytecode  # noqa: E402

if __name__ == "__main__" and not {"--merge", "--help", "-h", "--smoke"} & set(sys.argv):
    bytecode.reexec()  # the first-call column as a user's install pays it: reading compiled bytecode
SMOKE = "--smoke" in sys.argv
if SMOKE:  # before argus_inductor (and triton) are imported
    os.environ.setdefault("ARGUS_INTERPRET", "1")
    os.environ.setdefault("TRITON_INTERPRET", "1")

import argus_inductor  # noqa: E402  (registers backend="argus")

BACKENDS = ("eager", "inductor", "max-autotune", "argus")
ARGUS_MODE = "max-autotune"  # the torch.compile mode of the argus column (Inductor's own kernels tuned as the peer's)
# Argus variants for A/B runs (named in --backends, never run by default): Argus with Inductor's default mode for
# the rest of the graph (no coordinate-descent tuning of Inductor's kernels); Argus computing every row of the last
# layer (ARGUS_PRUNE_ROWS=0: the prefill's last layer on every position, not only the one whose logits it returns)
VARIANTS = {"argus-default-mode": {}, "argus-all-rows": {"options": {"mode": ARGUS_MODE, "prune_rows": False}}}
PREFILL_ONLY = ("argus-all-rows",)  # a decode step's rows are all read: pruning changes nothing there
PREFILL = ((1, 2048), (8, 512))
DECODE = (1, 32)
CONTEXT = 1024      # decode: tokens already in the KV cache
DECODE_STEPS = 8    # decode: tokens timed per measurement
TOL = 3e-2          # bf16: relative error of the logits (routing ties may flip an expert for a few tokens)
# A phase is started only when this many seconds of the budget are left (a compile of a 2-layer 8B-dims
# model takes tens of seconds; max-autotune benchmarks its GEMM choices and takes longer).
NEEDS = {"eager": 10, "inductor": 45, "argus": 45, "max-autotune": 90, "argus-default-mode": 45, "argus-all-rows": 45}

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, rope_theta=500000.0, max_position_embeddings=8192, rms_norm_eps=1e-5)
MIXTRAL_8X7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                    num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, rope_theta=1e6,
                    max_position_embeddings=8192, rms_norm_eps=1e-5)
# a Qwen3-MoE-style model (128 experts, top-8, head_dim 128, 4 key/value heads) and a dense model with q/k/v bias
# (Qwen2.5-7B's dims)
QWEN3_MOE = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                 num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                 norm_topk_prob=True, rope_theta=1e6, max_position_embeddings=8192, rms_norm_eps=1e-6)
QWEN25_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                 num_key_value_heads=4, rope_theta=1e6, max_position_embeddings=8192, rms_norm_eps=1e-6)
MODELS = ("llama", "mixtral", "qwen3_moe", "qwen2")
if SMOKE:
    PREFILL, DECODE, CONTEXT, DECODE_STEPS = ((1, 16), (2, 8)), (1, 2), 16, 2
    QWEN3_MOE = {**QWEN3_MOE, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                 "moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                 "num_experts": 8, "num_experts_per_tok": 2}
    QWEN25_7B = {**QWEN25_7B, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                 "num_attention_heads": 4, "num_key_value_heads": 2}
    LLAMA3_8B = {**LLAMA3_8B, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                 "num_attention_heads": 4, "num_key_value_heads": 2}
    MIXTRAL_8X7B = {**MIXTRAL_8X7B, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------ models


def build(name: str, layers: int, device: str) -> tuple[torch.nn.Module, str]:
    """The model with random bf16 weights, created on the GPU (no CPU init of billions of weights)."""
    try:
        import transformers
    except ImportError:
        transformers = None
    if transformers is None:
        if name != "llama":
            raise RuntimeError("transformers is not installed: only the demo's Llama-like model can be built")
        from argus_inductor.demo import TinyLlama

        with torch.device(device):
            m = TinyLlama(vocab=32000, dim=4096, layers=layers, heads=32, kv_heads=8, hidden=14336)
        return m.to(torch.bfloat16).eval(), "argus_inductor.demo.TinyLlama (transformers missing)"
    if name == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=layers, **LLAMA3_8B)
        cls = transformers.LlamaForCausalLM
    elif name == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(num_hidden_layers=layers, **QWEN3_MOE)
        cls = transformers.Qwen3MoeForCausalLM
    elif name == "qwen2":  # Qwen2's attention has q/k/v biases
        cfg = transformers.Qwen2Config(num_hidden_layers=layers, **QWEN25_7B)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.MixtralConfig(num_hidden_layers=layers, **MIXTRAL_8X7B)
        cls = transformers.MixtralForCausalLM
    cfg._attn_implementation = "sdpa"
    if name in ("mixtral", "qwen3_moe") and device == "cuda" and hasattr(torch, "_grouped_mm"):
        # torch's grouped GEMM for the experts: the peer, and a block Dynamo traces whole (the eager loop
        # breaks the graph for every compiler)
        cfg._experts_implementation = "grouped_mm"
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    torch.manual_seed(0)  # the same weights every run: a near-tied router choice flips (or not) alike run to run
    try:
        with torch.device(device):
            m = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    m = m.to(device=device, dtype=torch.bfloat16).eval()
    experts = getattr(m.config, "_experts_implementation", None)
    return m, f"transformers {transformers.__version__} {cls.__name__}" + (f" (experts: {experts})" if experts else "")


def is_hf(model: torch.nn.Module) -> bool:
    return hasattr(model, "config") and hasattr(model, "generation_config")


def prefill_fn(model: Callable, tokens: torch.Tensor, hf: bool) -> Callable[[], torch.Tensor]:
    if hf:
        return lambda: model(input_ids=tokens, use_cache=False, logits_to_keep=1).logits
    return lambda: model(tokens)[:, -1:]


class Decoder:
    """One decode step for `batch` sequences at position CONTEXT + i against a StaticCache (fixed shapes,
    so one compiled graph serves every step). The cache content does not change the work done."""

    def __init__(self, model: torch.nn.Module, batch: int, device: str) -> None:
        from transformers import StaticCache

        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=CONTEXT + DECODE_STEPS + 8)
        self.tokens = torch.randint(0, model.config.vocab_size, (batch, 1), device=device)
        self.positions = [torch.tensor([CONTEXT + i], device=device) for i in range(DECODE_STEPS)]

    def rewind(self) -> None:
        """Put the cache's write position back at 0. transformers 5's static layers write each step's keys at a
        counter of their own (cumulative_length), whatever cache_position says, and the cache holds
        CONTEXT + DECODE_STEPS + 8 positions: one backend's steps (at most 265) fit, four backends' did not, and
        the fourth indexed past the cache (a device-side assert in Inductor's bounds check; unchecked, a write out
        of bounds). Called before each backend's decode steps, outside the timed region."""
        for layer in getattr(self.cache, "layers", []):
            count = getattr(layer, "cumulative_length", None)
            if isinstance(count, torch.Tensor):
                count.zero_()
            elif isinstance(count, int):
                layer.cumulative_length = 0

    def step(self, fn: Callable, i: int) -> torch.Tensor:
        pos = self.positions[i % DECODE_STEPS]
        return fn(input_ids=self.tokens, past_key_values=self.cache, cache_position=pos, position_ids=pos[None],
                  use_cache=True).logits

    def steps(self, fn: Callable) -> Callable[[], None]:
        def run() -> None:
            for i in range(DECODE_STEPS):
                self.step(fn, i)
        return run

    def synced_steps(self, fn: Callable) -> Callable[[], None]:
        """The same steps, each followed by reading its next tokens on the host, as a generation loop does between
        tokens (transformers' generate() reads its stop condition from the device every step; a server hands each
        token to its detokenizer): no step's host work overlaps the GPU work of the step before it."""
        def run() -> None:
            for i in range(DECODE_STEPS):
                self.step(fn, i)[:, -1].argmax(-1).cpu()
        return run


# ----------------------------------------------------------------------------------------- timing


def bench_ms(fn: Callable[[], Any], budget_s: float = 20.0) -> float:
    """Median ms of fn (CUDA events around each call, after warm-up), within about budget_s."""
    if SMOKE:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    t_end = time.perf_counter() + budget_s
    while len(times) < 30 and (len(times) < 5 or time.perf_counter() < t_end):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def host_ms(fn: Callable[[], Any], reps: int = 3) -> float:
    """Median ms until fn returns, from an idle GPU, without waiting for its work: the host's part. Decode steps run
    back to back, so where it is at or above a step's GPU time the row measures the host (Python of Dynamo, the
    compiled graph's wrappers, the CUDA-graph replay, the model's own code), not the kernels."""
    times = []
    for _ in range(1 if SMOKE else reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def judge(out: torch.Tensor, ref: torch.Tensor, moe: bool) -> dict[str, Any]:
    """Relative error of the logits against eager, overall and per sequence. A dense model must have every
    sequence within TOL. In an MoE model a bf16 rounding difference before a router can flip a near-tied expert
    choice for a token, and that sequence's logits then differ wholesale (measured on the H100: one sequence of
    eight at 0.66, the other seven at 0.017-0.035, while the MoE op itself matched a float32 reference to 2.4e-3
    on the same shapes); so there the median sequence must be within TOL and at most a quarter of them off."""
    a, b = out.float().flatten(0, -2), ref.float().flatten(0, -2)
    per = ((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-12)).tolist()
    off = [i for i, e in enumerate(per) if e >= TOL]
    median = sorted(per)[len(per) // 2]
    ok = median < TOL and len(off) <= len(per) // 4 if moe else not off
    return {"rel_err": rel_err(out, ref), "median_row_err": median, "rows_off": off, "rows": len(per), "ok": ok}


def compile_for(model: torch.nn.Module, backend: str) -> Callable:
    """dynamic=True for every compiler alike: one graph for both prefill shapes and one for both decode
    batch sizes (four static compiles per backend would not fit the time box)."""
    if backend == "eager":
        return model
    torch._dynamo.reset()
    if backend == "inductor":
        return torch.compile(model, backend="inductor", dynamic=True)
    if backend == "max-autotune":
        return torch.compile(model, backend="inductor", mode="max-autotune", dynamic=True)
    return torch.compile(model, backend="argus", dynamic=True, **argus_kwargs(backend))


def argus_kwargs(backend: str) -> dict[str, Any]:
    """torch.compile's keyword arguments (mode, options) for the argus column or one of its VARIANTS."""
    return VARIANTS[backend] if backend in VARIANTS else {"mode": ARGUS_MODE}


# ------------------------------------------------------------------------------------------- run


def run_model(name: str, backends: list[str], layers: int, deadline: float, device: str,
              phases: tuple[str, ...] = ("prefill", "decode"), decode: tuple[int, ...] = DECODE) -> dict[str, Any]:
    res: dict[str, Any] = {"model": name, "layers": layers, "results": {}, "notes": []}
    t0 = time.perf_counter()
    model, how = build(name, layers, device)
    res["built_with"] = how
    res["params_b"] = round(sum(p.numel() for p in model.parameters()) / 1e9, 3)
    log(f"{name}: {how}, {res['params_b']}B parameters, built in {time.perf_counter() - t0:.1f}s")
    hf = is_hf(model)
    moe = name in ("mixtral", "qwen3_moe")  # routed: the MoE rule of judge()
    g = torch.Generator(device=device).manual_seed(0)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    vocab = model.config.vocab_size if hf else model.embed.num_embeddings
    prompts = {f"prefill {b}x{s}": torch.randint(0, vocab, (b, s), device=device, generator=g) for b, s in PREFILL
               if "prefill" in phases}
    refs: dict[str, torch.Tensor] = {}
    decoders: dict[int, Any] = {}
    if hf and "decode" in phases:
        try:
            decoders = {b: Decoder(model, b, device) for b in decode}
        except Exception as e:  # an older/newer transformers without this StaticCache
            res["notes"].append(f"decode skipped: {type(e).__name__}: {e}")
    with torch.no_grad():
        for key, toks in prompts.items():
            refs[key] = prefill_fn(model, toks, hf)()
        for b, dec in decoders.items():
            refs[f"decode b={b}"] = dec.step(model, 0)
        # Argus and its comparison first: what the time box cuts, if anything, is a variant or plain Inductor.
        order = sorted(backends, key=lambda b: ("eager", "argus", "max-autotune", *VARIANTS, "inductor").index(b))
        broken = ""
        for backend in order:
            left = deadline - time.perf_counter()
            row: dict[str, Any] = {}
            res["results"][backend] = row
            if broken:  # a device-side assert poisons the process's CUDA context: nothing more can run in it
                row["skipped"] = broken
                continue
            if left < NEEDS[backend]:
                row["skipped"] = f"time box ({left:.0f}s left of the budget, needs ~{NEEDS[backend]}s)"
                log(f"{name} {backend}: {row['skipped']}")
                continue
            try:
                argus_inductor.runtime.reporting.clear()
                fn = compile_for(model, backend)
                for key, toks in prompts.items():
                    if time.perf_counter() > deadline:
                        row[key] = {"skipped": "time box"}
                        continue
                    call = prefill_fn(fn, toks, hf)
                    t = time.perf_counter()
                    out = call()
                    sync()
                    first = time.perf_counter() - t
                    argus_inductor.settle()  # a background swap-in (runtime/tiers.py) decides before the timing
                    err = judge(out, refs[key], moe)
                    ms = bench_ms(call, budget_s=min(15.0, max(2.0, deadline - time.perf_counter())))
                    row[key] = {"ms": ms, **err, "first_call_s": round(first, 2)}
                    log(f"{name} {backend} {key}: {ms:.3f} ms (first call {first:.1f}s incl. compile), "
                        f"rel err {err['rel_err']:.2e}{_offs(err)}")
                for b, dec in decoders.items() if backend not in PREFILL_ONLY else ():
                    key = f"decode b={b}"
                    dec.rewind()
                    if time.perf_counter() > deadline:
                        row[key] = {"skipped": "time box"}
                        continue
                    t = time.perf_counter()
                    out = dec.step(fn, 0)
                    sync()
                    first = time.perf_counter() - t
                    argus_inductor.settle()
                    err = judge(out, refs[key], moe)
                    ms = bench_ms(dec.steps(fn), budget_s=min(15.0, max(2.0, deadline - time.perf_counter())))
                    ms /= DECODE_STEPS
                    host = host_ms(dec.steps(fn)) / DECODE_STEPS
                    row[key] = {"ms": ms, "host_ms": host, **err, "first_call_s": round(first, 2)}
                    log(f"{name} {backend} {key}: {ms:.3f} ms/token (host {host:.3f}; first call {first:.1f}s), "
                        f"rel err {err['rel_err']:.2e}{_offs(err)}")
                    synced = bench_ms(dec.synced_steps(fn), budget_s=min(5.0, max(1.0, deadline - time.perf_counter())))
                    row[f"{key} synced"] = {"ms": synced / DECODE_STEPS, **err}
                    log(f"{name} {backend} {key} synced: {synced / DECODE_STEPS:.3f} ms/token")
                if backend == "argus":
                    row["argus_report"] = argus_inductor.report()
            except KeyboardInterrupt:  # Ctrl-C, or `timeout -s INT`: keep what was measured, run nothing more
                row["error"] = "interrupted"
                res["notes"].append(f"interrupted during {backend}: the backends after it were not run")
                res["interrupted"] = True
                log(f"{name} {backend}: interrupted")
                break
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"
                row["traceback"] = traceback.format_exc(limit=8)
                log(f"{name} {backend}: FAILED {row['error']}")
                if "device-side assert" in str(e):
                    broken = f"not run: {backend}'s device-side assert left the CUDA context unusable"
                    res["notes"].append(f"{backend} hit a device-side assert; the backends after it were not run")
            finally:
                torch._dynamo.reset()
    del model, decoders
    if device == "cuda":
        try:
            torch.cuda.empty_cache()
        except Exception as e:  # a broken CUDA context (see above): keep what was measured before it broke
            res["notes"].append(f"the CUDA context is unusable after this model ({type(e).__name__}); later "
                                "models in this process cannot run")
    return res


def _offs(c: dict[str, Any]) -> str:
    """', 1 of 8 sequences off' where some sequences' logits are beyond TOL (see judge)."""
    off = c.get("rows_off") or []
    return f", {len(off)} of {c['rows']} sequences off" if off else ""


def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """b's time / a's time: > 1 means a is faster; no speed for a wrong answer (a's MISMATCH)."""
    if not a or not b or "ms" not in a or "ms" not in b or not a["ms"]:
        return "-"
    if not a.get("ok", True):
        return "wrong answer"
    return f"{b['ms'] / a['ms']:.2f}x"


def table(results: list[dict[str, Any]], backends: list[str], decode: tuple[int, ...] = DECODE) -> str:
    lines = []
    for r in results:
        lines.append(f"### {r['model']} ({r['layers']} layers, {r.get('params_b', '?')}B parameters; "
                     f"{r.get('built_with', '')})\n")
        variants = [b for b in backends if b in VARIANTS]  # each also against max-autotune (e.g. all rows)
        head = "| workload | " + " | ".join(f"{b} ms" for b in backends) + \
               " | argus vs eager | argus vs max-autotune | " + \
               "".join(f"{v} vs max-autotune | " for v in variants) + "argus rel. err | first call s (" + \
               " / ".join(b for b in backends if b != "eager") + ") |"
        lines += [head, "|" + "---|" * (len(backends) + 5 + len(variants))]
        prefill = [f"prefill {b}x{s}" for b, s in PREFILL]
        prefill += sorted({k for row in r["results"].values() for k in row
                           if k.startswith("prefill ") and k not in prefill})  # a merged run's other shapes
        keys = prefill + [f"decode b={b}" for b in decode] + [f"decode b={b} synced" for b in decode]
        for key in keys:
            cells = []
            for b in backends:
                row = r["results"].get(b, {})
                c = row.get(key) if isinstance(row.get(key), dict) else None
                if "error" in row:
                    cells.append("error")
                elif "skipped" in row or (c and "skipped" in c):
                    cells.append("skipped")
                elif c is None:
                    cells.append("-")
                else:
                    cells.append(f"{c['ms']:.3f}" + ("" if c["ok"] else " (MISMATCH)") + _offs(c))
            arg, eager, ma = (_cell(r, b, key) for b in ("argus", "eager", "max-autotune"))
            err = f"{arg['rel_err']:.1e}" if arg and "rel_err" in arg else "-"
            firsts = []
            for b in backends:
                c = _cell(r, b, key)
                if b != "eager":
                    firsts.append(f"{c['first_call_s']:.1f}" if c and "first_call_s" in c else "-")
            per_variant = "".join(f"{ratio(_cell(r, v, key), ma)} | " for v in variants)
            lines.append(f"| {key}{' (per token)' if key.startswith('decode') else ''} | " + " | ".join(cells) +
                         f" | {ratio(arg, eager)} | {ratio(arg, ma)} | {per_variant}{err} | {' / '.join(firsts)} |")
        for b in backends:
            row = r["results"].get(b, {})
            if "error" in row:
                lines.append(f"\n{b}: {row['error']}")
            if "skipped" in row:
                lines.append(f"\n{b}: skipped ({row['skipped']})")
        lines += [f"\nnote: {n}" for n in r.get("notes", [])]
        lines.append("")
    return "\n".join(lines)


def _cell(result: dict[str, Any], backend: str, key: str) -> dict[str, Any] | None:
    c = result["results"].get(backend, {}).get(key)
    return c if isinstance(c, dict) else None


def versions() -> dict[str, str | None]:
    """The transformers and Triton versions of this run (None where one is not installed)."""
    out: dict[str, str | None] = {}
    for name in ("transformers", "triton"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    return out


def _measured(cell: Any) -> bool:
    return isinstance(cell, dict) and "ms" in cell


def merge(docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], tuple[int, ...]]:
    """Several runs' JSON documents (e2e-*.json) as one set of results: each model (by name and layers) gets, for
    each backend and workload, the cell of the run that measured it, so runs split across GPUs (prefill on one,
    decode on another; max-autotune in one process, Argus in another) make one table. Eager is the reference each
    run checks against: the first run's measurement is kept. A workload two runs both measured for one backend
    other than eager is an error (which number would the table show?). Returns the results, the backends in table
    order and the decode batch sizes."""
    order = ("eager", "argus", "max-autotune", *VARIANTS, "inductor")
    models: dict[tuple[str, int], dict[str, Any]] = {}
    for doc in docs:
        for r in doc["results"]:
            into = models.setdefault((r["model"], r["layers"]), {
                "model": r["model"], "layers": r["layers"], "results": {}, "notes": [],
                **{k: r[k] for k in ("built_with", "params_b") if k in r}})
            into["notes"] += [n for n in r.get("notes", []) if n not in into["notes"]]
            for backend, row in r["results"].items():
                have = into["results"].setdefault(backend, {})
                for key, cell in row.items():
                    if key in ("skipped", "error", "traceback") or not isinstance(cell, dict):
                        if key == "argus_report" and key in have:
                            have[key] += "\n" + str(cell)
                        elif key not in have:
                            have[key] = cell
                        continue
                    if _measured(have.get(key)) and _measured(cell):
                        if backend == "eager":
                            continue
                        raise ValueError(f"{r['model']} {backend} {key}: measured by two of the runs merged")
                    if not _measured(have.get(key)):
                        have[key] = cell
    for m in models.values():  # a row some run measured is not "skipped" because another run's time box was
        for row in m["results"].values():
            if any(_measured(c) for c in row.values()):
                row.pop("skipped", None)
    backends = sorted({b for m in models.values() for b in m["results"]}, key=order.index)
    decode = sorted({int(k.split("=")[1].split()[0]) for m in models.values() for row in m["results"].values()
                     for k in row if k.startswith("decode b=")})
    return list(models.values()), backends, tuple(decode) or DECODE


def write(results: list[dict[str, Any]], backends: list[str], decode: tuple[int, ...], meta: dict[str, Any],
          out: Path, stamp: str) -> Path:
    """The JSON and the Markdown table of `results` under `out` as e2e-<stamp>.{json,md}; the table's path."""
    md = (f"# End to end: eager, Inductor, max-autotune, Argus ({meta['gpu']}, {stamp})\n\n"
          f"torch {meta['torch']}, transformers {meta['transformers']}, random bf16 weights; median ms per call "
          f"(prefill, last-token logits) or per token (decode, {meta['decode_context']}-token static KV cache); "
          f"ratios are the other's time / Argus's time (> 1: Argus faster); argus is backend=\"argus\", "
          f"mode=\"{meta['argus_mode']}\" (what Argus leaves to Inductor compiled as the max-autotune column's). "
          f"MISMATCH: a sequence's relative error of the logits against eager at {meta['tolerance_rel']:g} or above "
          f"(the MoE models, Mixtral and Qwen3-MoE: the median sequence's, or more than a quarter of them; a bf16 "
          f"rounding difference before a router can flip a near-tied expert for one sequence, listed as 'sequences "
          f"off').\n\n" + table(results, backends, decode))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"e2e-{stamp}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    (out / f"e2e-{stamp}.md").write_text(md)
    print(md)
    return out / f"e2e-{stamp}.md"


def merge_files(paths: list[str], out: Path, tag: str) -> int:
    """`--merge`: the runs in `paths` as one table (merge), written as e2e-<first run's date>-<tag>.{json,md}."""
    docs = []
    for p in paths:
        try:
            docs.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError) as e:
            print(f"e2e.py --merge: cannot read {p} ({e})", file=sys.stderr)
            return 2
    try:
        results, backends, decode = merge(docs)
    except (KeyError, TypeError, ValueError) as e:
        print(f"e2e.py --merge: {e}", file=sys.stderr)
        return 2
    metas = [d.get("meta", {}) for d in docs]
    meta = {**metas[0], "merged_from": [Path(p).name for p in paths],
            "gpu": ", ".join(dict.fromkeys(str(m.get("gpu")) for m in metas)),
            "wall_s": [m.get("wall_s") for m in metas]}
    for key in ("transformers", "decode_context", "argus_mode", "tolerance_rel", "torch"):
        meta.setdefault(key, None)
    stamp = str(metas[0].get("date", datetime.date.today().isoformat()))[:10] + (f"-{tag}" if tag else "-merged")
    write(results, backends, decode, meta, out, stamp)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="llama,mixtral", help=f"comma-separated from {', '.join(MODELS)}")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget for the whole run")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    ap.add_argument("--phases", default="prefill,decode",
                    help="which workloads to run: prefill, decode or both (e.g. max-autotune's decode alone, when "
                         "its prefill autotuning would take the whole time box)")
    ap.add_argument("--decode-batches", default=None,
                    help=f"decode batch sizes, comma-separated (default {','.join(map(str, DECODE))})")
    ap.add_argument("--smoke", action="store_true", help="tiny dims on the CPU: checks the script, times nothing")
    ap.add_argument("--tag", default="", help="appended to the output files' names (e2e-DATE-TAG.json/.md), so "
                                              "that runs of one day (on two GPUs at once, say) keep their own files")
    ap.add_argument("--merge", nargs="+", metavar="RUN.json",
                    help="run nothing: join these runs' JSON (split across GPUs by phase or backend) into one "
                         "table, e2e-<date>-<tag>.{json,md} under --out")
    args = ap.parse_args(argv)
    if args.tag and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.tag):
        ap.error(f"--tag takes letters, digits, '.', '_' and '-' (it names files), not {args.tag!r}")
    if args.merge:
        return merge_files(args.merge, Path(args.out), args.tag)
    decode = DECODE
    if args.decode_batches:
        try:
            decode = tuple(int(b) for b in args.decode_batches.split(",") if b.strip())
        except ValueError:
            ap.error(f"--decode-batches takes integers, not {args.decode_batches!r}")
        if not decode or min(decode) < 1:
            ap.error(f"--decode-batches takes positive batch sizes, not {args.decode_batches!r}")
    if not args.smoke and not torch.cuda.is_available():
        print("benchmarks/e2e.py needs a CUDA GPU", file=sys.stderr)
        return 2
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in backends if b not in BACKENDS and b not in VARIANTS]
    bad += [m for m in models if m not in MODELS]
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    bad += [p for p in phases if p not in ("prefill", "decode")]
    if bad or not phases:
        ap.error(f"unknown model/backend/phase {bad or args.phases!r}")
    if "eager" not in backends:
        backends = ["eager", *backends]
    start = time.perf_counter()
    device = "cpu" if args.smoke else "cuda"
    if args.smoke:
        backends = [b for b in backends if b != "max-autotune"]
    results = []
    for i, name in enumerate(models):
        # each model gets an equal share of what is left
        share = (args.budget_s - (time.perf_counter() - start)) / (len(models) - i)
        deadline = time.perf_counter() + share
        try:
            results.append(run_model(name, backends, args.layers, deadline, device, phases, decode))
            if results[-1].get("interrupted"):
                break
        except KeyboardInterrupt:  # while the model was built or its references run
            results.append({"model": name, "layers": args.layers, "results": {}, "notes": ["interrupted"]})
            break
        except Exception as e:
            log(f"{name}: FAILED {type(e).__name__}: {e}")
            results.append({"model": name, "layers": args.layers, "results": {},
                            "notes": [f"failed: {type(e).__name__}: {e}", traceback.format_exc(limit=8)]})
    stamp = datetime.date.today().isoformat() + ("-smoke" if args.smoke else "") + (f"-{args.tag}" if args.tag else "")
    meta = {"date": stamp, "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)",
            "torch": torch.__version__,
            "python": platform.python_version(), "argus_inductor": argus_inductor.__version__,
            "wall_s": round(time.perf_counter() - start, 1), "tolerance_rel": TOL, "argus_mode": ARGUS_MODE,
            "decode_context": CONTEXT,
            "first_call_bytecode": "compiled ahead into a prefix (this Python writes none)"
            if os.environ.get("PYTHONPYCACHEPREFIX") else "none (this Python writes none)" if bytecode.writes_none()
            else "written by Python at import"}
    meta.update(versions())
    out = Path(args.out)
    write(results, backends, decode, meta, out, stamp)
    log(f"wrote {out / f'e2e-{stamp}.json'} and .md in {meta['wall_s']}s")
    ok = all(not isinstance(c, dict) or c.get("ok", True) for r in results for row in r["results"].values()
             for c in (row.values() if isinstance(row, dict) else []))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
