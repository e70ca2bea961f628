"""Probe: where the first call of a compiled model spends its time (Dynamo's trace, Argus's rewrite and plans, the
DSL kernels' lowering and Triton compiles, Inductor's compile and tuning, CUDA-graph capture), by cProfile over
that first call. e2e.py reports the first call's seconds; this says what they are.

    python benchmarks/probes/compile_time.py [--model llama] [--workload b=1 | 1x2048] [--backend argus] [--top 60]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import e2e  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama")
    ap.add_argument("--workload", default="b=1", help="b=N (one decode step of N sequences) or BxS (a prefill)")
    ap.add_argument("--backend", default="argus", help="argus, max-autotune or inductor")
    ap.add_argument("--top", type=int, default=60)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/probes/compile_time.py needs a CUDA GPU")
    model, how = e2e.build(args.model, 2, "cuda")
    print(how, flush=True)
    with torch.no_grad():
        if args.workload.startswith("b="):
            dec = e2e.Decoder(model, int(args.workload[2:]), "cuda")
            dec.step(model, 0)  # the static cache initializes lazily
            dec.rewind()
            fn = e2e.compile_for(model, args.backend)

            def call() -> object:
                return dec.step(fn, 1)
        else:
            b, s = (int(x) for x in args.workload.split("x"))
            toks = torch.randint(0, model.config.vocab_size, (b, s), device="cuda")
            fn = e2e.compile_for(model, args.backend)
            call = e2e.prefill_fn(fn, toks, True)
        pr = cProfile.Profile()
        t = time.perf_counter()
        pr.enable()
        call()
        torch.cuda.synchronize()
        pr.disable()
        first = time.perf_counter() - t
        t = time.perf_counter()
        call()
        torch.cuda.synchronize()
        second = time.perf_counter() - t
    print(f"{args.backend} {args.model} {args.workload}: first call {first:.1f} s, second {second * 1e3:.1f} ms",
          flush=True)
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats(key).print_stats(args.top)
        print(f"---- by {key}\n{buf.getvalue()}", flush=True)


if __name__ == "__main__":
    main()
