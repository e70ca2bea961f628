"""Where a compiled call's time goes: GPU work or host launch overhead.

For each KernelBench-format problem file, with fresh random inputs on the GPU, this times eager,
backend="inductor", backend="argus" with CUDA graphs off (the host path as it is) and on (inputs copied into
the graph's buffers at each replay, whatever their size), and with its ops inlined into Inductor's code
(argus_inductor.graph.inline) without and with CUDA graphs, in two ways:
- call: CUDA events around one call, median of --reps (what the KernelBench runner reports);
- gpu: the same call replayed from a CUDA graph (triton.testing.do_bench_cudagraph): GPU time alone.
call - gpu is the host cost that the GPU did not hide. It prints a table, and writes JSON with --out.

    python benchmarks/overhead.py benchmarks/kernelbench/problems/level1/05_gelu.py ... [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kernelbench.run import load_problem, time_call  # noqa: E402  (the runner's loading and timing, as it reports)


def _gpu_ms(fn: Any, inputs: list[Any]) -> float | None:
    import triton.testing

    try:
        return float(triton.testing.do_bench_cudagraph(lambda: fn(*inputs), rep=100, return_mode="median"))
    except Exception:
        return None


def measure(path: Path, reps: int, argus_options: dict[str, Any], profile: int = 0,
            profiled: str = "argus") -> dict[str, Any]:
    import torch

    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in mod.get_inputs()]
    def argus(inline: bool, graphs: bool) -> Any:
        extra = {"cudagraphs": graphs, "cudagraph_copy_mb": 1e9, "inline": inline}
        return torch.compile(model, backend="argus", options={**argus_options, **extra})

    fns = {"eager": model, "inductor": torch.compile(model, backend="inductor"),
           "argus": argus(False, False), "argus+graphs": argus(False, True),
           "argus+inline": argus(True, False), "argus+inline+graphs": argus(True, True)}
    row: dict[str, Any] = {"problem": path.stem}
    with torch.no_grad():
        ref = model(*inputs)
        for name, fn in fns.items():
            out = fn(*inputs)
            out = fn(*inputs)  # a CUDA graph records on the second call
            err = float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)) \
                if out.is_floating_point() else float((out != ref).any())
            call = time_call(fn, inputs, "cuda", 10, reps)
            gpu = _gpu_ms(fn, inputs) if not name.endswith("+graphs") else None
            row[name] = {"call_ms": call, "gpu_ms": gpu, "host_ms": None if gpu is None else max(0.0, call - gpu),
                         "rel_err": err}
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                fns[profiled](*inputs)
            torch.cuda.synchronize()
            prof.disable()
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(profile)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problems", nargs="+", help="KernelBench-format .py files")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--ops", default="all", help="ARGUS_OPS for backend=argus (default all)")
    ap.add_argument("--on-miss", default="default", choices=("synthesize", "default", "fallback"))
    ap.add_argument("--out", default=None, help="folder for overhead.json")
    ap.add_argument("--profile-variant", default="argus",
                    choices=("eager", "inductor", "argus", "argus+graphs", "argus+inline", "argus+inline+graphs"),
                    help="which variant --profile profiles (default argus)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also print the N most expensive functions (cProfile, own time) of 200 calls of the "
                         "--profile-variant")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a GPU (host overhead is measured against GPU time)")
    import argus_inductor  # noqa: F401

    rows = []
    names = ("eager", "inductor", "argus", "argus+graphs", "argus+inline", "argus+inline+graphs")
    print(f"{'problem':28} " + " ".join(f"{b + ' call/gpu':>22}" for b in names))
    for p in args.problems:
        try:
            row = measure(Path(p), args.reps, {"ops": args.ops, "on_miss": args.on_miss}, args.profile,
                          args.profile_variant)
        except Exception as e:
            print(f"{Path(p).stem:28} failed: {type(e).__name__}: {e}")
            continue
        rows.append(row)
        cells = []
        for b in names:
            r = row[b]
            gpu = f"{r['gpu_ms']:.3f}" if r["gpu_ms"] is not None else "-"
            cells.append(f"{r['call_ms']:>10.3f} / {gpu:>9}")
        print(f"{row['problem']:28} " + " ".join(cells), flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "argus_ops": args.ops, "on_miss": args.on_miss}
        (out / "overhead.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
