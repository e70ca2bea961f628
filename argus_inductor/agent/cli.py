"""`argus warmup`: find, verify and cache a kernel for each shape signature ahead of time, so a model's first call
finds them (the recorded misses, a model's config, or a shapes file).

    argus warmup                                   # the signatures recorded as misses (ARGUS_ON_MISS=default)
    argus warmup --config config.json --tokens 1,16,2048
    argus warmup --shapes shapes.json
    argus warmup --preset fast-kernels [--ops gemm,attention] --reference benchmarks/results/sweep-gemm-*.json

Without ARGUS_LLM_BASE_URL (or with --policy offline) the offline policy searches the template library; with
an endpoint (ARGUS_LLM_BASE_URL, ARGUS_LLM_MODEL, ARGUS_LLM_API_KEY) the LLM writes kernels and the offline
policy takes over if it fails.

--time-limit is for the whole run (tracing, library tuning and synthesis): each signature's search is cut to the
time left, none starts past the limit, and one still running at the limit is stopped; a new run resumes. On a
machine without a GPU the kernels run under the Triton interpreter (turned on for the run, as `argus bench` does),
and the "ms" it prints are the interpreter's wall clock: they rank plans, they say nothing about speed. The
fast-kernels preset is GPU-sized (4096 to 16384): without a GPU it is refused unless --force, and then runs until
--time-limit (600 s unless given). A recorded miss of other torch/Triton versions is warmed under this
environment's and stored under its key (the listing says which). Exit status: 0 when every signature has a
kernel, 1 when some failed or the time limit left some undone, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

# what `--shapes` reads (and `argus bench --shapes`): kept here as text so `--help` needs no torch;
# tests/agent/test_warmup_cli.py checks that the ops and dims below are specs.SPECS'
SHAPES_FORMAT = """\
The --shapes file: a JSON list of objects, one per shape, each naming its "op" and every dim the op takes:

  op          dims (all positive integers)     optional
  gemm        M N K                            "epilogue": "bias", "relu", "bias+silu", "bias+gelu+residual",
                                               "silu*up" (gated MLP), ...
  bmm         B M N K                          "epilogue"
  attention   Z H HK S T D                     "causal": true (H a multiple of HK: GQA)
  moe         T HD I E TOPK
  softmax     R C
  rmsnorm     R C
  layernorm   R C

Every entry may also give "dtype" (default: --dtype), "layouts" and "label". M, B, Z, S, T (the moe T) and R are
bucketed by powers of two (5 and 7 are one signature), the others are exact. Example shapes.json:

  [{"op": "gemm", "M": 16, "N": 4096, "K": 4096, "epilogue": "bias+silu"},
   {"op": "attention", "Z": 1, "H": 32, "HK": 8, "S": 2048, "T": 2048, "D": 128, "causal": true},
   {"op": "moe", "T": 64, "HD": 4096, "I": 14336, "E": 8, "TOPK": 2},
   {"op": "rmsnorm", "R": 2048, "C": 4096, "dtype": "float32"}]
"""


def add_warmup_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "warmup", help="synthesize and cache kernels ahead of time",
        description=__doc__, epilog=SHAPES_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("what to warm up (default: --misses)")
    src.add_argument("--misses", action="store_true",
                     help="signatures earlier runs recorded as cache misses (GEMM/attention/MoE go to the agent; "
                          "conv, reductions, norms, pooling, scans, losses and elementwise chains to a policy "
                          "search on random operands of their shapes, where this machine has their device)")
    src.add_argument("--config", metavar="config.json",
                     help="a transformers model config: the model is traced on the meta device (no weights) and "
                          "every signature the backend makes for it is warmed (without transformers, or for a "
                          "model it cannot build, the shapes its dims predict)")
    src.add_argument("--tokens",
                     help="for --config: a prefill of one sequence of each count above 1, and for 1 a decode step "
                          "(default 1,16,2048)")
    src.add_argument("--context", type=int,
                     help="for --config: positions of the static KV cache a decode step attends over (default "
                          "4096)")
    src.add_argument("--batch", type=int, help="for --config: sequences per decode step (default 1)")
    src.add_argument("--shapes", metavar="shapes.json", help="a JSON list of shapes (the format is below)")
    src.add_argument("--preset", help="a named shape set: fast-kernels (GPU-sized: needs --force without a GPU)")
    src.add_argument("--ops", help="only these ops (comma-separated: gemm,attention,moe,...)")
    src.add_argument("--dtype", default="bfloat16", help="dtype of --config/--shapes/--preset entries")
    run = p.add_argument_group("how")
    run.add_argument("--cache-dir", help="the cache (default ARGUS_CACHE_DIR or ~/.cache/argus)")
    run.add_argument("--policy", choices=("auto", "offline", "llm"), default="auto",
                     help="auto: the LLM when ARGUS_LLM_BASE_URL is set, else offline")
    run.add_argument("--trials", type=int, help="trials per signature after the template baseline")
    run.add_argument("--seconds-per-signature", type=float, help="search time per signature")
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help="seconds for the whole run: searches are cut to the time left, none starts past it, one "
                          "running at the limit is stopped (a new run resumes)")
    run.add_argument("--workers", type=int, help="worker processes (default: one per visible GPU)")
    run.add_argument("--reference", action="append", default=[], metavar="sweep.json",
                     help="benchmarks/sweep.py output: time its best hand-set policy per shape next to ours")
    run.add_argument("--force", action="store_true",
                     help="synthesize again signatures already in the cache; without a GPU, also run a GPU-sized "
                          "preset (until --time-limit, 600 s unless given)")
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
    if not args.config:
        given = [f"--{k}" for k in ("tokens", "context", "batch") if getattr(args, k) is not None]
        if given:  # not silently ignored: they describe what a --config model is traced at
            raise ValueError(f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} with --config (the model "
                             "traced at those sizes)")
    else:
        args.tokens = "1,16,2048" if args.tokens is None else args.tokens
        args.context = 4096 if args.context is None else args.context
        args.batch = 1 if args.batch is None else args.batch
        try:
            tokens = [int(t) for t in str(args.tokens).split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"--tokens takes token counts separated by commas (e.g. 1,16,2048), got "
                             f"{args.tokens!r}") from None
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


CPU_PRESET_LIMIT_S = 600.0  # a GPU-sized preset forced onto the CPU without --time-limit stops here


def _agent_problem(sig: Any) -> bool:
    """Whether the agent synthesizes `sig` (shapes.from_misses takes it): an op of specs.SPECS with its dims. A
    library op of the same name (softmax) records its operands' shapes instead, and is tuned here."""
    from ..specs import problem_from_signature

    try:
        problem_from_signature(sig)
    except (KeyError, ValueError):
        return False
    return True


def _library_todo(args: argparse.Namespace, cache_root: Path, here: tuple[str, str, str]) -> list[Any]:
    """Recorded misses (and traced signatures) of the general op classes (conv, reductions, norms, ...:
    argus_inductor.ops.library), which the agent does not search: each one's signature, re-keyed to this
    environment's versions (warmup.rekey's reason)."""
    import torch

    from .. import ops
    from ..ops.library import LIBRARY
    from ..runtime.cache import KernelCache
    from ..runtime.signature import Signature, device_arch
    from .shapes import model_of

    cache = KernelCache(cache_root)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    todo = []
    if args.misses or not (args.config or args.shapes or args.preset):
        todo = [s for m in cache.misses() if not m.get("solved") and m["signature"].get("op") in LIBRARY
                and not _agent_problem(s := Signature.from_dict(m["signature"]))]
    # a traced model's (arch "meta"): of this machine's device, not yet cached (or all of them with --force)
    for sig in getattr(args, "traced_library", []):
        sig = replace(sig, arch=device_arch(device), device=model_of(device_arch(device)))
        if sig.op in LIBRARY and (args.force or not ops.entry_current(cache.get(replace(sig, versions=here).key()))):
            todo.append(sig)
    wanted = {o.strip() for o in args.ops.split(",")} if args.ops else None
    out, seen = [], set()
    for s in todo:
        if wanted is not None and s.op not in wanted:
            continue
        moved = replace(s, versions=here)
        if moved.key() in seen or (s.versions != here and not args.force and ops.entry_current(cache.get(
                moved.key()))):
            continue  # made here already (by a run that re-keyed it)
        seen.add(moved.key())
        out.append((moved, s.versions))
    return out


def _gpu_preset_refused(args: argparse.Namespace, arch: str) -> bool:
    """A GPU-sized preset on a machine without a GPU: said before anything starts; refused without --force (True),
    else run until the time limit (600 s unless given)."""
    from .shapes import PRESETS

    if not args.preset or arch != "cpu" or args.preset not in PRESETS:
        return False
    p = PRESETS[args.preset]()
    if not p.gpu:
        return False
    big = max(int(v) for e in p.entries for k, v in e.items() if isinstance(v, int) and not isinstance(v, bool))
    what = (f"argus warmup: the {p.name} preset ({p.doc}) is meant for a GPU: its shapes reach {big}, and this "
            "machine has none; under the Triton interpreter one such kernel takes hours")
    if not args.force:
        print(f"{what}. Not starting it: give --force to run it here anyway (stopped at --time-limit, "
              f"{CPU_PRESET_LIMIT_S:.0f} s unless given), or --shapes with small shapes (`argus warmup --help`)",
              file=sys.stderr)
        return True
    if args.time_limit is None:
        args.time_limit = CPU_PRESET_LIMIT_S
    print(f"{what}. --force: running it on the CPU until the time limit ({args.time_limit:.0f} s)", file=sys.stderr)
    return False


def _usage_problem(args: argparse.Namespace) -> str | None:
    for name, v in (("--time-limit", args.time_limit), ("--seconds-per-signature", args.seconds_per_signature)):
        if v is not None and not v > 0:
            return f"{name} takes a positive number of seconds, got {v:g}"
    if args.trials is not None and args.trials < 0:
        return f"--trials takes a number >= 0, got {args.trials}"
    if args.workers is not None and args.workers < 1:
        return f"--workers takes a number >= 1, got {args.workers}"
    for ref in args.reference:
        if not Path(ref).is_file():
            return f"no reference file {ref}"
    from ..ops.library import LIBRARY
    from ..specs import SPECS
    from ..specs.base import DTYPES

    if args.dtype not in DTYPES:
        return f"--dtype {args.dtype}: not one of {', '.join(DTYPES)}"
    if args.ops:
        unknown = [o.strip() for o in args.ops.split(",") if o.strip() not in SPECS and o.strip() not in LIBRARY]
        if unknown:
            return (f"--ops {', '.join(unknown)}: no such op; the agent's: {', '.join(SPECS)}; the library's: "
                    f"{', '.join(sorted(LIBRARY))}")
    return None


def run_warmup(args: argparse.Namespace) -> int:
    from ..runtime.signature import current_versions, version_text
    from .shapes import ShapesError
    from .store import default_root
    from .warmup import (
        INTERPRETER_NOTE,
        NOT_FINISHED,
        NOT_STARTED,
        STOPPED,
        Progress,
        TimeLimit,
        WarmupOptions,
        arch_here,
        hard_deadline,
        not_started,
        plan,
        rekey,
        run_planned,
        say_rekeyed,
        table,
    )

    t0 = time.time()
    problem = _usage_problem(args)
    if problem:
        print(f"argus warmup: {problem}", file=sys.stderr)
        return 2
    root = Path(args.cache_dir) if args.cache_dir else default_root()
    arch, _ = arch_here()
    if _gpu_preset_refused(args, arch):
        return 2
    opts = WarmupOptions(cache_root=root, policy=args.policy, trials=args.trials,
                         seconds_per_signature=args.seconds_per_signature, time_limit=args.time_limit,
                         workers=args.workers, reference=list(args.reference), force=args.force, seed=args.seed,
                         verbose=args.verbose, started=t0)
    deadline = opts.deadline()
    here = current_versions()
    rows: list[dict[str, Any]] = []
    todo: list[Any] = []
    try:
        with hard_deadline(deadline):
            try:
                jobs = _jobs(args, root)
            except (ShapesError, ValueError, OSError) as e:
                print(f"argus warmup: {e}", file=sys.stderr)
                return 2
            library = _library_todo(args, root, here)
            jobs, moved = rekey(jobs, here)
            for _, recorded in library:
                if recorded != here:
                    was = version_text(recorded, here)
                    moved[was] = moved.get(was, 0) + 1
            say_rekeyed(moved, here, sys.stderr)
            rows, todo = plan(jobs, opts, arch)
            if not todo and not library and not rows:
                print("argus warmup: nothing to do (no recorded misses; give --config, --shapes or --preset)",
                      file=sys.stderr)
                return 0
            print(f"argus warmup: {len(library) + len(todo)} job(s) to run, {len(rows)} with nothing to do; cache "
                  f"{root}" + (f"; time limit {args.time_limit:g} s for the whole run" if args.time_limit else ""),
                  file=sys.stderr)
            progress = Progress(len(library) + len(todo), sys.stderr)
            rows += run_planned(todo, opts, progress, library=library)
    except TimeLimit:  # between two steps: whatever is not in the table was not done
        if not rows:
            print("argus warmup: the time limit passed before any job could start", file=sys.stderr)
            return 1
        listed = {r.get("key") for r in rows}
        rows += [r for r in (not_started(j, arch) for j in todo) if r.get("key") not in listed]
    except KeyboardInterrupt:
        print("\nargus warmup: interrupted; finished signatures are cached, a new run resumes", file=sys.stderr)
        return 130
    text = table(rows) + f"\nwall time of this run: {time.time() - t0:.0f} s"
    if arch == "cpu" and INTERPRETER_NOTE not in text:
        text += f"\n{INTERPRETER_NOTE}"
    print(text)
    if args.table_out:
        Path(args.table_out).write_text(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, default=str))
    undone = (STOPPED, NOT_STARTED, NOT_FINISHED)
    return 1 if any(r.get("source") == "failed" or r.get("source") in undone for r in rows) else 0


def interpreter_without_gpu(command: str) -> str | None:
    """One rule for `argus bench` and `argus warmup` on a machine without a GPU: the Argus kernels run under the
    Triton interpreter, which the command turns on for itself (as ARGUS_INTERPRET=1 would) and says so. Returns why
    it cannot (Triton already imported in this process without the interpreter), else None."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    if "triton.language" in sys.modules:
        return ("this machine has no GPU and Triton is already loaded without its interpreter: start with "
                "ARGUS_INTERPRET=1")
    os.environ["ARGUS_INTERPRET"] = os.environ["TRITON_INTERPRET"] = "1"
    print(f"argus {command}: no GPU here: Argus kernels run under the Triton interpreter (ARGUS_INTERPRET=1 for this "
          "run); its times rank plans, they say nothing about speed", file=sys.stderr)
    return None


def main(argv: list[str] | None = None) -> int:
    """Run `argus warmup` on its own: python -m argus_inductor.agent.cli [options]."""
    parser = argparse.ArgumentParser(prog="argus")
    sub = parser.add_subparsers(dest="command", required=True)
    add_warmup_parser(sub)
    args = parser.parse_args(["warmup", *(argv if argv is not None else sys.argv[1:])])
    why = interpreter_without_gpu("warmup")
    if why is not None:
        print(f"argus warmup: {why}", file=sys.stderr)
        return 2
    from .warmup import set_up

    set_up()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
