"""Where the GPU time of an e2e workload goes, per backend: the kernels of one prefill call or one decode step
under torch.profiler, for the models and workloads of benchmarks/e2e.py.

    python benchmarks/e2e_profile.py [--model llama] [--backends argus,max-autotune]
                                     [--workloads "decode b=1,decode b=32,prefill 1x2048"] [--top 20]

A backend is one of e2e.py's (eager, inductor, max-autotune, argus, or an Argus variant such as
argus-all-rows) or BACKEND/MODE, which compiles with that
torch.compile mode (argus/reduce-overhead: Argus with CUDA graphs whatever its inlining). Argus's log lines
(what it rewrote, inlined, and whether a graph took CUDA graphs) are printed as they come.

For each backend and workload: the wall time per call (CUDA events, as e2e.py times it), the GPU time its
kernels took (their sum), the gap between the two (host time the GPU waited for), the CUDA runtime calls the host
made per call (a replayed CUDA graph is one cudaGraphLaunch; kernel launches, copies and syncs show what is not
captured), then the GPU time by kind
(GEMM, attention, other) and the heaviest kernels by GPU time per call. Writes e2e-profile-<model>-<date>.json
under --out (default $OUT, else benchmarks/results/). Needs a CUDA GPU and transformers.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e  # noqa: E402  (the models, the decode cache and the compile settings of the e2e table)

CALLS = 10  # profiled calls per workload (a decode call is e2e.DECODE_STEPS steps)
# the CUDA runtime and driver calls the host makes in a call: graph launches against kernel launches, copies, syncs
RUNTIME = re.compile(r"^(cuda|cu)[A-Z]")
KINDS = (("gemm", re.compile(r"gemm|nvjet|xmma|cutlass|_mm_|mm_|matmul|linear|gate_up|splitk", re.I)),
         ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|cudnn", re.I)))


def device_of(evt: Any) -> str:
    """'CPU' or 'CUDA': where a profiler event ran (its DeviceType's name)."""
    return str(getattr(evt, "device_type", "")).split(".")[-1]


def kind_of(kernel: str) -> str:
    """'gemm', 'attention' or 'other', from the kernel's name (cuBLAS, Inductor templates and Argus kernels)."""
    return next((k for k, pat in KINDS if pat.search(kernel)), "other")


def workloads(model: torch.nn.Module, names: list[str], device: str) -> dict[str, Callable[[Callable], Callable]]:
    """name -> (compiled model -> one call of the workload), for the e2e.py workloads asked for."""
    g = torch.Generator(device=device).manual_seed(0)
    out: dict[str, Callable[[Callable], Callable]] = {}
    for name in names:
        m = re.fullmatch(r"prefill (\d+)x(\d+)", name)
        if m:
            toks = torch.randint(0, model.config.vocab_size, (int(m[1]), int(m[2])), device=device, generator=g)
            out[name] = lambda fn, toks=toks: e2e.prefill_fn(fn, toks, True)
            continue
        m = re.fullmatch(r"decode b=(\d+)", name)
        if not m:
            raise SystemExit(f"unknown workload {name!r}: 'prefill BxS' or 'decode b=N'")
        dec = e2e.Decoder(model, int(m[1]), device)
        dec.step(model, 0)  # an eager step first, as e2e.py's reference does: the static cache initializes lazily

        def decode(fn: Callable, dec: Any = dec) -> Callable:
            dec.rewind()
            return dec.steps(fn)
        out[name] = decode
    return out


def compile_for(model: torch.nn.Module, spec: str) -> Callable:
    """e2e.py's compile of a backend, or BACKEND/MODE: that backend with torch.compile's `mode`."""
    if "/" not in spec:
        return e2e.compile_for(model, spec)
    backend, mode = spec.split("/", 1)
    torch._dynamo.reset()
    return torch.compile(model, backend="inductor" if backend == "max-autotune" else backend, mode=mode,
                         dynamic=True)


def profile_call(call: Callable[[], Any], per_call: int) -> dict[str, Any]:
    """Wall ms per call (median of CUDA events), then the kernels of CALLS calls under the profiler, each
    kernel's GPU time divided by CALLS * per_call (per_call: steps in one call, so decode reads per token)."""
    from torch.profiler import ProfilerActivity, profile

    wall = e2e.bench_ms(call, budget_s=5.0) / per_call
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    kernels: dict[str, dict[str, float]] = {}
    host: dict[str, dict[str, float]] = {}
    for evt in prof.key_averages():
        if device_of(evt) == "CPU" and RUNTIME.match(evt.key):
            h = host.setdefault(evt.key, {"us": 0.0, "count": 0.0})
            h["us"] += evt.self_cpu_time_total / CALLS
            h["count"] += evt.count / CALLS
        us = getattr(evt, "self_device_time_total", None)
        if us is None:
            us = getattr(evt, "self_cuda_time_total", 0.0)
        if not us or device_of(evt) != "CUDA":
            continue
        k = kernels.setdefault(evt.key, {"us": 0.0, "count": 0.0})
        k["us"] += us / (CALLS * per_call)
        k["count"] += evt.count / (CALLS * per_call)
    gpu_ms = sum(k["us"] for k in kernels.values()) / 1e3
    by_kind: dict[str, float] = {}
    for name, k in kernels.items():
        kind = kind_of(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + k["us"] / 1e3
    top = sorted(kernels.items(), key=lambda kv: -kv[1]["us"])
    runtime = sorted(host.items(), key=lambda kv: -kv[1]["count"])
    return {"wall_ms": wall, "gpu_ms": gpu_ms, "gap_ms": wall - gpu_ms,
            "runtime_calls": [{"name": n, **h} for n, h in runtime],
            "kernels_per_call": sum(k["count"] for k in kernels.values()),
            "by_kind_ms": by_kind, "kernels": [{"name": n, **k} for n, k in top]}


def timeline(call: Callable[[], Any], calls: int = 5, trace: str | None = None) -> dict[str, float]:
    """Where one call's latency goes, from the profiler's timeline of `calls` calls each from an idle GPU (medians,
    ms): host before the first launch (call start -> first cudaGraphLaunch or kernel launch; the input copies
    before a graph's launch count as host time here), launch -> the first kernel running, bubbles (GPU idle between
    the call's first kernel start and its last kernel end), the kernels' busy time, the whole span (call start ->
    last kernel end) and the host's return (call start -> call end). `trace`: a path for the Chrome trace."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for i in range(calls):
            torch.cuda.synchronize()
            with record_function(f"e2e_call_{i}"):
                call()
            torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    evs = list(prof.events())
    marks = sorted((e for e in evs if e.name.startswith("e2e_call_")), key=lambda e: e.time_range.start)
    dev = sorted((e for e in evs if device_of(e) == "CUDA"
                  and not e.name.startswith(("e2e_call_", "Memcpy", "Memset"))),  # kernels only
                 key=lambda e: e.time_range.start)
    launches = [e for e in evs if device_of(e) == "CPU"
                and re.match(r"^(cudaGraphLaunch|cudaLaunchKernel|cuLaunchKernel)", e.name)]
    parts: dict[str, list[float]] = {k: [] for k in ("host_pre", "launch_to_gpu", "bubbles", "busy", "span",
                                                     "host_return")}
    for i, m in enumerate(marks):
        t0 = m.time_range.start
        t_next = marks[i + 1].time_range.start if i + 1 < len(marks) else float("inf")
        ks = [e for e in dev if t0 <= e.time_range.start < t_next]
        ls = [e.time_range.start for e in launches if t0 <= e.time_range.start < t_next]
        if not ks or not ls:
            continue
        first, end = ks[0].time_range.start, max(e.time_range.end for e in ks)
        busy, cur_s, cur_e = 0.0, ks[0].time_range.start, ks[0].time_range.end
        for e in ks[1:]:
            if e.time_range.start > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = e.time_range.start, e.time_range.end
            else:
                cur_e = max(cur_e, e.time_range.end)
        busy += cur_e - cur_s
        parts["host_pre"].append((min(ls) - t0) / 1e3)
        parts["launch_to_gpu"].append((first - min(ls)) / 1e3)
        parts["bubbles"].append((end - first - busy) / 1e3)
        parts["busy"].append(busy / 1e3)
        parts["span"].append((end - t0) / 1e3)
        parts["host_return"].append((m.time_range.end - t0) / 1e3)
    return {k: sorted(v)[len(v) // 2] for k, v in parts.items() if v}


def render(rows: dict[str, dict[str, dict[str, Any]]], top: int) -> str:
    lines = []
    for wl, per_backend in rows.items():
        lines.append(f"\n## {wl}" + (" (per token)" if wl.startswith("decode") else ""))
        lines.append("| backend | wall ms | GPU ms | gap ms | kernels | gemm ms | attention ms | other ms |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for b, r in per_backend.items():
            if "error" in r:
                lines.append(f"| {b} | {r['error']} |")
                continue
            k = r["by_kind_ms"]
            lines.append(f"| {b} | {r['wall_ms']:.3f} | {r['gpu_ms']:.3f} | {r['gap_ms']:.3f} | "
                         f"{r['kernels_per_call']:.0f} | {k.get('gemm', 0):.3f} | {k.get('attention', 0):.3f} | "
                         f"{k.get('other', 0):.3f} |")
        for b, r in per_backend.items():
            if "timeline_ms" in r:
                lines.append(f"\n{b}, one call's timeline (ms, median): " +
                             ", ".join(f"{k} {v:.3f}" for k, v in r["timeline_ms"].items()))
        for b, r in per_backend.items():
            if "error" in r:
                continue
            calls = ", ".join(f"{h['name']} x{h['count']:.0f}" for h in r.get("runtime_calls", [])[:8])
            lines.append(f"\n{b}, host runtime calls per call: {calls or 'none recorded'}")
            lines.append(f"{b}, heaviest kernels (us per call, calls per call):")
            for k in r["kernels"][:top]:
                lines.append(f"  {k['us']:9.1f} us  x{k['count']:<5.1f} {kind_of(k['name']):9s} {k['name'][:110]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama", choices=("llama", "mixtral"))
    ap.add_argument("--backends", default="argus,max-autotune")
    ap.add_argument("--workloads", default="decode b=1,decode b=32,prefill 1x2048")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--top", type=int, default=20, help="kernels listed per backend and workload")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    ap.add_argument("--timeline", action="store_true",
                    help="also split each call's latency (a decode call: its steps back to back): host before launch, "
                         "launch -> GPU, bubbles, busy; writes the Chrome trace beside the JSON")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/e2e_profile.py needs a CUDA GPU", file=sys.stderr)
        return 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    known = (*e2e.BACKENDS, *e2e.VARIANTS)
    bad = [b for b in backends if b.split("/")[0] not in known]
    if bad:
        ap.error(f"unknown backend(s) {bad}: choose from {', '.join(known)}, optionally /MODE")
    logging.basicConfig(format="%(message)s")
    logging.getLogger("argus_inductor").setLevel(logging.INFO)
    model, how = e2e.build(args.model, args.layers, "cuda")
    wls = workloads(model, [w.strip() for w in args.workloads.split(",") if w.strip()], "cuda")
    rows: dict[str, dict[str, dict[str, Any]]] = {w: {} for w in wls}
    with torch.no_grad():
        for b in backends:
            fn = compile_for(model, b)
            for w, make in wls.items():
                t = time.perf_counter()
                try:
                    rows[w][b] = profile_call(make(fn), e2e.DECODE_STEPS if w.startswith("decode") else 1)
                    if args.timeline:
                        name = re.sub(r"[^A-Za-z0-9x-]", "", f"{b.replace('/', '-')}-{w.split()[-1]}")
                        trace = str(Path(args.out) / f"trace-{args.model}-{name}.json")
                        rows[w][b]["timeline_ms"] = timeline(make(fn), trace=trace)
                except Exception as e:
                    rows[w][b] = {"error": f"{type(e).__name__}: {e}"[:300]}
                e2e.log(f"{b} {w}: {rows[w][b].get('wall_ms', float('nan')):.3f} ms "
                        f"({time.perf_counter() - t:.0f}s incl. compile)")
            torch._dynamo.reset()
    meta = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "model": args.model, "layers": args.layers, "built_with": how,
            "calls_profiled": CALLS, **e2e.versions()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"e2e-profile-{args.model}-{meta['date']}.json"
    for per_backend in rows.values():
        for r in per_backend.values():
            r["kernels"] = r.get("kernels", [])[:60]
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"# {args.model}: {how}, {meta['gpu']}, torch {meta['torch']}")
    print(render(rows, args.top))
    e2e.log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
