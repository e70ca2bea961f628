"""Probe: where the host time of one compiled prefill call goes (e2e.py times each call from an idle GPU, so host
work before the CUDA graph's launch is part of the latency it reports).

    python benchmarks/host_probe.py [--model llama] [--workload 1x2048 | b=1] [--backends argus,inductor]

Per backend: the event-timed wall ms (as e2e.py), the host ms until the call returns, the host ms spent in each
layer of the call (--split, below), and cProfile's top functions by cumulative time over 20 calls. A workload
`b=N` is one decode step of N sequences (e2e.Decoder): its host ms against its wall ms says whether back-to-back
steps are bound by the host (e2e.py's decode rows run steps without synchronizing, so a step costs the larger
of the two).

--split stamps the host clock as the call enters and leaves each layer: the callable the backend returned
(before it: Dynamo's guards and the model's own Python), each CUDA-graph runner Inductor made (before it:
AOTAutograd's wrappers and the generated `call`), and each CUDA graph's replay (before it: the runner's input
copies and checks: the small inputs' packed copy is stamped too, and the outputs' copies after it); medians over 50
calls from an idle GPU.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import e2e  # noqa: E402

STAMPS: list[tuple[str, float]] = []


def _stamped(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        STAMPS.append((name + " in", time.perf_counter()))
        try:
            return fn(*args, **kwargs)
        finally:
            STAMPS.append((name + " out", time.perf_counter()))
    return run


def split_compile(model: torch.nn.Module, backend: str) -> Callable[..., Any]:
    """e2e.compile_for's compile, with the backend's callable and Inductor's CUDA-graph runners stamped."""
    from torch._inductor import compile_fx as cfx
    from torch._inductor import list_mode_options

    from argus_inductor.backend import argus_backend
    from argus_inductor.runtime import cuda_graphs

    original = cfx.cudagraphify
    if not getattr(original, "stamped", False):
        def cudagraphify(*args: Any, **kwargs: Any) -> Any:
            return _stamped("runner", original(*args, **kwargs))
        cudagraphify.stamped = True  # type: ignore[attr-defined]
        cfx.cudagraphify = cudagraphify
        replay = torch.cuda.CUDAGraph.replay
        torch.cuda.CUDAGraph.replay = _stamped("replay", replay)  # type: ignore[method-assign]
        cuda_graphs.GraphReplay.__call__ = _stamped("runner", cuda_graphs.GraphReplay.__call__)  # type: ignore
        cuda_graphs.PackedCopy.copy = _stamped("input copy", cuda_graphs.PackedCopy.copy)  # type: ignore
        cuda_graphs._fresh_copy = _stamped("output copy", cuda_graphs._fresh_copy)
    if backend.startswith("argus"):
        mode = e2e.argus_kwargs(backend).get("mode")
    else:
        mode = "max-autotune" if backend == "max-autotune" else None

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        if backend.startswith("argus"):
            return _stamped("backend", argus_backend(gm, example_inputs, mode=mode))
        patches = dict(list_mode_options(mode)) if mode else {}
        return _stamped("backend", cfx.compile_fx(gm, example_inputs, config_patches=patches))

    torch._dynamo.reset()
    return torch.compile(model, backend=compiler, dynamic=True)


def split_report(call: Callable[[], Any], reps: int = 50) -> str:
    """Median host ms from the call's start to each stamp, and between consecutive stamps."""
    rows: dict[str, list[float]] = {}
    for _ in range(reps):
        torch.cuda.synchronize()
        STAMPS.clear()
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        seen: dict[str, int] = {}
        for name, t in STAMPS:
            seen[name] = seen.get(name, 0) + 1
            key = f"{name} #{seen[name]}" if seen[name] > 1 else name
            rows.setdefault(key, []).append((t - t0) * 1e3)
        rows.setdefault("call returns", []).append((t1 - t0) * 1e3)
    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
    order = sorted(med, key=med.get)
    lines, prev = [], 0.0
    for k in order:
        lines.append(f"  {med[k]:7.3f} ms  (+{med[k] - prev:6.3f})  {k}")
        prev = med[k]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama")
    ap.add_argument("--workload", default="1x2048", help="BxS or b=N, or several comma-separated (warmed in order)")
    ap.add_argument("--backends", default="argus")
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--split", action="store_true", help="stamp the host clock at each layer of the call")
    args = ap.parse_args()
    model, how = e2e.build(args.model, 2, "cuda")
    calls: dict[str, Callable[[Callable], Callable[[], Any]]] = {}
    for wl in args.workload.split(","):  # several: compiled and warmed in this order, as e2e.py runs them
        if wl.startswith("b="):
            dec = e2e.Decoder(model, int(wl[2:]), "cuda")
            with torch.no_grad():
                dec.step(model, 0)  # the static cache initializes lazily

            def decode(fn: Callable, dec: Any = dec) -> Callable[[], Any]:
                dec.rewind()
                return lambda: dec.step(fn, 1)
            calls[wl] = decode
        else:
            b, s = (int(x) for x in wl.split("x"))
            toks = torch.randint(0, model.config.vocab_size, (b, s), device="cuda")
            calls[wl] = lambda fn, toks=toks: e2e.prefill_fn(fn, toks, True)
    print(how, flush=True)
    with torch.no_grad():
        for backend in args.backends.split(","):
            fn = split_compile(model, backend) if args.split else e2e.compile_for(model, backend)
            t = time.perf_counter()
            for make in calls.values():
                for _ in range(3):
                    make(fn)()
            torch.cuda.synchronize()
            print(f"{backend}: compiled and warm in {time.perf_counter() - t:.1f}s", flush=True)
            for wl, make in calls.items():
                call = make(fn)
                report(f"{backend} {wl}", call, args.top, args.split)


def report(name: str, call: Callable[[], Any], top: int, split: bool) -> None:
    """Wall ms (events), host ms until return, cProfile's top functions and (split) the host split of `call`."""
    wall = e2e.bench_ms(call, budget_s=5.0)
    hosts = []
    for _ in range(20):
        torch.cuda.synchronize()
        t = time.perf_counter()
        call()
        hosts.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
    hosts.sort()
    pr = cProfile.Profile()
    torch.cuda.synchronize()
    pr.enable()
    for _ in range(20):
        call()
        torch.cuda.synchronize()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(top)
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(top)  # where the time itself is spent
    print(f"{name}: wall {wall:.3f} ms (events), host until return {hosts[len(hosts) // 2]:.3f} ms "
          f"(median of 20, min {hosts[0]:.3f})", flush=True)
    print(buf.getvalue(), flush=True)
    if split:
        print(f"{name}: host ms from the call's start (median of 50):\n{split_report(call)}", flush=True)


if __name__ == "__main__":
    main()
