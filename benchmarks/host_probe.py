"""Probe: where the host time of one compiled prefill call goes (e2e.py times each call from an idle GPU, so host
work before the CUDA graph's launch is part of the latency it reports).

    python benchmarks/host_probe.py [--model llama] [--workload 1x2048 | b=1] [--backends argus,inductor]

Per backend: the event-timed wall ms (as e2e.py), the host ms until the call returns, and cProfile's top functions
by cumulative time over 20 calls. A workload `b=N` is one decode step of N sequences (e2e.Decoder): its host ms
against its wall ms says whether back-to-back steps are bound by the host (e2e.py's decode rows run steps without
synchronizing, so a step costs the larger of the two).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import e2e  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama")
    ap.add_argument("--workload", default="1x2048")
    ap.add_argument("--backends", default="argus")
    ap.add_argument("--top", type=int, default=45)
    args = ap.parse_args()
    model, how = e2e.build(args.model, 2, "cuda")
    decode = args.workload.startswith("b=")
    if decode:
        dec = e2e.Decoder(model, int(args.workload[2:]), "cuda")
        with torch.no_grad():
            dec.step(model, 0)  # the static cache initializes lazily
    else:
        b, s = (int(x) for x in args.workload.split("x"))
        toks = torch.randint(0, model.config.vocab_size, (b, s), device="cuda")
    print(how, flush=True)
    with torch.no_grad():
        for backend in args.backends.split(","):
            fn = e2e.compile_for(model, backend)
            if decode:
                dec.rewind()
                call = lambda fn=fn: dec.step(fn, 1)  # noqa: E731
            else:
                call = e2e.prefill_fn(fn, toks, True)
            t = time.perf_counter()
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            print(f"{backend}: compiled and warm in {time.perf_counter() - t:.1f}s", flush=True)
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
            pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(args.top)
            print(f"{backend}: wall {wall:.3f} ms (events), host until return {hosts[len(hosts) // 2]:.3f} ms "
                  f"(median of 20, min {hosts[0]:.3f})", flush=True)
            print(buf.getvalue(), flush=True)


if __name__ == "__main__":
    main()
