"""`argus warmup`: the command-line face of warmup.py (hooked into argus_inductor/cli.py).

    argus warmup                                   # the signatures recorded as misses (ARGUS_ON_MISS=default)
    argus warmup --config config.json --tokens 1,16,2048
    argus warmup --shapes shapes.json
    argus warmup --preset fast-kernels [--ops gemm,attention] --reference benchmarks/results/sweep-gemm-*.json

Without ARGUS_LLM_BASE_URL (or with --policy offline) the offline policy searches the template library; with
an endpoint (ARGUS_LLM_BASE_URL, ARGUS_LLM_MODEL, ARGUS_LLM_API_KEY) the LLM writes kernels and the offline
policy takes over if it fails. Exit status: 0 when every signature has a kernel, 1 when some failed, 2 on a
usage error.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any


def add_warmup_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "warmup", help="synthesize and cache kernels ahead of time",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("what to warm up (default: --misses)")
    src.add_argument("--misses", action="store_true",
                     help="signatures earlier runs recorded as cache misses (GEMM/attention/MoE go to the agent; "
                          "conv, reductions, norms, pooling, scans, losses and elementwise chains to a policy "
                          "search on random operands of their shapes, where this machine has their device)")
    src.add_argument("--config", metavar="config.json",
                     help="a transformers model config: the model is traced on the meta device (no weights) and "
                          "every signature the backend makes for it is warmed (without transformers, or for a "
                          "model it cannot build, the shapes its dims predict)")
    src.add_argument("--tokens", default="1,16,2048",
                     help="for --config: a prefill of one sequence of each count above 1, and for 1 a decode step "
                          "(default 1,16,2048)")
    src.add_argument("--context", type=int, default=4096,
                     help="for --config: positions of the static KV cache a decode step attends over")
    src.add_argument("--batch", type=int, default=1, help="sequences per decode step for --config")
    src.add_argument("--shapes", metavar="shapes.json", help="a JSON list of shapes (see agent/shapes.py)")
    src.add_argument("--preset", help="a named shape set: fast-kernels")
    src.add_argument("--ops", help="only these ops (comma-separated: gemm,attention,moe,...)")
    src.add_argument("--dtype", default="bfloat16", help="dtype of --config/--shapes/--preset entries")
    run = p.add_argument_group("how")
    run.add_argument("--cache-dir", help="the cache (default ARGUS_CACHE_DIR or ~/.cache/argus)")
    run.add_argument("--policy", choices=("auto", "offline", "llm"), default="auto",
                     help="auto: the LLM when ARGUS_LLM_BASE_URL is set, else offline")
    run.add_argument("--trials", type=int, help="trials per signature after the template baseline")
    run.add_argument("--seconds-per-signature", type=float, help="search time per signature")
    run.add_argument("--time-limit", type=float, help="seconds for the whole run (shared out over the signatures)")
    run.add_argument("--workers", type=int, help="worker processes (default: one per visible GPU)")
    run.add_argument("--reference", action="append", default=[], metavar="sweep.json",
                     help="benchmarks/sweep.py output: time its best hand-set policy per shape next to ours")
    run.add_argument("--force", action="store_true", help="synthesize again signatures already in the cache")
    run.add_argument("--seed", type=int, help="random seed of the search")
    run.add_argument("--table-out", metavar="FILE.md", help="also write the final table here")
    run.add_argument("--json-out", metavar="FILE.json", help="write every row as JSON here")
    run.add_argument("-v", "--verbose", action="store_true", help="print every trial")
    p.set_defaults(func=run_warmup)
    return p


def _jobs(args: argparse.Namespace, cache_root: Path) -> list[Any]:
    from . import shapes
    from .store import open_cache

    jobs = []
    ops = {o.strip() for o in args.ops.split(",")} if args.ops else None
    args.traced_library = []
    if args.config:
        tokens = [int(t) for t in str(args.tokens).split(",") if t.strip()]
        if not tokens or min(tokens) < 1 or args.context < 1 or args.batch < 1:
            raise ValueError("--tokens, --context and --batch take positive numbers")
        cfg = shapes.read_config(args.config)
        from ..config import Options
        from .trace import TraceError, trace_config

        try:
            traced = trace_config(cfg, tokens, args.dtype, args.context, args.batch,
                                  Options.resolve({}).enabled_ops)
        except TraceError as e:
            print(f"argus warmup: cannot trace the model of {args.config} ({e}); warming the shapes its dims "
                  "predict instead (shapes.from_config)", file=sys.stderr)
            jobs += shapes.from_config(cfg, tokens, args.dtype, args.context, args.batch)
        else:
            found, args.traced_library = shapes.from_traced(traced)
            print(f"argus warmup: traced the model of {args.config}: {len(traced)} signature(s) of Argus ops",
                  file=sys.stderr)
            jobs += found
    if args.shapes:
        jobs += shapes.from_shapes_file(args.shapes, args.dtype)
    if args.preset:
        jobs += shapes.from_preset(args.preset, args.dtype)
    if args.misses or not (args.config or args.shapes or args.preset):
        jobs += shapes.from_misses(open_cache(cache_root).misses())
    if ops is not None:
        jobs = [j for j in jobs if j.problem.op in ops]
    return jobs


def _warm_library_misses(args: argparse.Namespace, cache_root: Path) -> int:
    """Recorded misses of the general op classes (conv, reductions, norms, ...: argus_inductor.ops.library) are
    not searched by the agent. Where this machine has the signature's device (or ARGUS_INTERPRET=1 for a CPU
    signature), each is tuned by the policy search on random operands of its shapes (ops.tune_library);
    otherwise, or when tuning finds nothing, it is stored with its template policy. Either way the entry carries
    the invariant checker's verdict, so the next run is a cache hit with a proven kernel. Returns how many were
    stored."""
    import torch

    from .. import ops
    from ..ops.library import LIBRARY, example_operands, launcher
    from ..runtime.cache import KernelCache
    from ..runtime.signature import Signature, device_arch

    cache = KernelCache(cache_root)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    todo = []
    if args.misses or not (args.config or args.shapes or args.preset):
        todo = [Signature.from_dict(m["signature"]) for m in cache.misses()
                if not m.get("solved") and m["signature"].get("op") in LIBRARY]
    # a traced model's (arch "meta"): of this machine's device, not yet cached (or all of them with --force)
    for sig in getattr(args, "traced_library", []):
        sig = replace(sig, arch=device_arch(device))
        if sig.op in LIBRARY and (args.force or not ops.entry_current(cache.get(sig.key()))):
            todo.append(sig)
    wanted = {o.strip() for o in args.ops.split(",")} if args.ops else None
    todo = [s for s in todo if wanted is None or s.op in wanted]
    target = ops.target_for(device)
    for i, sig in enumerate(todo, 1):
        how = "template policy"
        entry = None
        if target is not None and sig.arch == device_arch(device):
            try:
                run_plan, reference = launcher(sig, *example_operands(sig, device))
                entry, how = ops.tune_library(ops.spec_for(sig), sig, target, run_plan, reference, cache)
            except Exception as e:  # operands this signature cannot be built from: the template still serves
                how = f"not tuned ({type(e).__name__}: {e})"
            if entry is None:
                how = f"template policy ({how})"
        if entry is None:
            entry = ops.warm(sig, cache=cache)
        print(f"argus warmup: [{i}/{len(todo)}] {sig.short()}: {how}, "
              f"{entry.verification.get('status', 'not verified')}", file=sys.stderr)
    return len(todo)


def run_warmup(args: argparse.Namespace) -> int:
    from .shapes import ShapesError
    from .store import default_root
    from .warmup import WarmupOptions, table, warmup

    root = Path(args.cache_dir) if args.cache_dir else default_root()
    try:
        jobs = _jobs(args, root)
    except (ShapesError, ValueError, OSError) as e:
        print(f"argus warmup: {e}", file=sys.stderr)
        return 2
    library = _warm_library_misses(args, root)
    if not jobs:
        if not library:
            print("argus warmup: nothing to do (no recorded misses; give --config, --shapes or --preset)",
                  file=sys.stderr)
        return 0
    for ref in args.reference:
        if not Path(ref).is_file():
            print(f"argus warmup: no reference file {ref}", file=sys.stderr)
            return 2
    opts = WarmupOptions(cache_root=root, policy=args.policy, trials=args.trials,
                         seconds_per_signature=args.seconds_per_signature, time_limit=args.time_limit,
                         workers=args.workers, reference=list(args.reference), force=args.force, seed=args.seed,
                         verbose=args.verbose)
    print(f"argus warmup: {len(jobs)} job(s), cache {root}", file=sys.stderr)
    t0 = time.time()
    try:
        rows = warmup(jobs, opts)
    except KeyboardInterrupt:
        print("\nargus warmup: interrupted; finished signatures are cached, a new run resumes", file=sys.stderr)
        return 130
    text = table(rows) + f"\nwall time of this run: {time.time() - t0:.0f} s"
    print(text)
    if args.table_out:
        Path(args.table_out).write_text(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any(r.get("source") == "failed" for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    """Run `argus warmup` on its own: python -m argus_inductor.agent.cli [options]."""
    parser = argparse.ArgumentParser(prog="argus")
    sub = parser.add_subparsers(dest="command", required=True)
    add_warmup_parser(sub)
    args = parser.parse_args(["warmup", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
