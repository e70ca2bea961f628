"""`argus bench`: the cached kernels against PyTorch, on fresh random inputs.

    argus bench                       # every kernel in the cache made for this machine's device
    argus bench gemm softmax          # only entries whose signature contains one of these texts
    argus bench --json                # the rows as JSON
    argus bench --shapes shapes.json  # these shapes (as `argus warmup --shapes` reads them): the cached kernel,
                                      # else the plan the backend would run on a miss (the template default)

Per cache entry (ARGUS_CACHE_DIR, or --cache-dir) whose device is this machine's: its kernels (the entry's DSL
source, read again by the frontend) run on fresh random inputs of the signature's shape and are compared with the
op's PyTorch reference (relative error against the op's tolerance); then they are timed against the fastest
PyTorch peer of the op (cuBLAS, SDPA's backends, grouped_mm, ...) on the same inputs, both the same way (a CUDA-
graph median, operands rotated so that each call reads them from memory), and the ratio printed. Entries for
another device are skipped and counted. On a machine without a GPU the CPU entries run under the Triton
interpreter, which `argus bench` turns on for itself as `argus warmup` does (ARGUS_INTERPRET=1 for the run): their
results are checked, their times (the interpreter's wall clock) only rank plans, and no peer is timed. An entry of
an op this command cannot build inputs for is listed as skipped. Exit status: 0 when every entry it ran matched
its reference, 1 when one did not or failed to run, 2 on a usage error (an unreadable cache folder, nothing to
benchmark).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="benchmark the cached kernels against their PyTorch reference",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("filters", nargs="*", metavar="TEXT",
                   help="only entries whose signature (as `argus cache` lists it) contains one of these")
    p.add_argument("--shapes", metavar="shapes.json",
                   help="benchmark these shapes instead of the cache's entries: each one's cached kernel, or the "
                        "template default the backend runs on a cache miss (not stored)")
    p.add_argument("--cache-dir", help="the cache (default ARGUS_CACHE_DIR or ~/.cache/argus)")
    p.add_argument("--limit", type=int, help="benchmark at most this many entries")
    p.add_argument("--rep-ms", type=int, default=40, help="GPU time each measurement repeats for (default 40)")
    p.add_argument("--seed", type=int, help="seed of the random inputs (default: a fresh one per entry)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.set_defaults(func=run_bench)
    return p


def bench_entry(entry: Any, rep_ms: int = 40, seed: int | None = None) -> dict[str, Any]:
    """One row: the entry's result against its reference, its time, the fastest peer's time. Never raises for a
    kernel that fails; the row says why ("failed", with the error)."""
    from ..ops.library import LIBRARY
    from ..runtime.signature import Signature
    from ..specs import plan_from_policy, problem_from_signature, spec
    from .evaluate import Candidate, Evaluator, rel_error
    from .launch import kernels_of
    from .loop import device_for

    sig = Signature.from_dict(entry.signature)
    row: dict[str, Any] = {"signature": sig.short(), "key": sig.key(), "origin": entry.origin}
    try:
        device, target = device_for(sig, None)
        try:
            problem = problem_from_signature(sig, device)  # an op of the agent's (its dims, its dtype)
        except (KeyError, ValueError):
            if sig.op in LIBRARY:  # a general op class (its signature names every dim of every operand)
                return _bench_library(entry, sig, device, target, rep_ms, seed, row)
            row.update(status="skipped", error=f"no benchmark for op '{sig.op}' here")
            return row
        op = spec(sig.op)
        kernels, policies = kernels_of(entry, device)
        cand = Candidate(plan_from_policy(problem, entry.policy), kernels, entry.dsl_source, entry.origin)
        ev = Evaluator(op, problem, target, dict(sig.dynamic_dims), seed=seed, rep_ms=rep_ms)
        row["seed"] = ev.seed
        bad = ev.test(cand, policies)
        inputs, ref = ev.inputs()
        if bad is not None:
            row.update(status="wrong" if bad.status == "wrong" else "failed", error=bad.message,
                       rel_err=bad.rel_err)
            return row
        row["rel_err"], _ = rel_error(op.run(problem, kernels, policies, inputs), ref)
        row["tolerance"] = op.tolerance(problem, target)
        row["ms"], row["method"] = ev.time(cand, policies)
        peer = ev.peer()
        if peer is not None:
            row["peer"], row["peer_ms"] = peer
            row["speed_vs_peer"] = peer[1] / row["ms"] if row["ms"] else None
        row["status"] = "ok"
    except Exception as e:  # one entry that cannot run must not end the benchmark
        row.update(status="failed", error=f"{type(e).__name__}: {e}"[:300])
    return row


def _bench_library(entry: Any, sig: Any, device: str, target: str, rep_ms: int, seed: int | None,
                   row: dict[str, Any]) -> dict[str, Any]:
    """A general op class's entry (conv, reductions, norms, ...: library_ops): its plan on random operands of the
    signature's shapes against torch's own op, which is also the peer it is timed against (eager: the op as the
    model wrote it, several launches where the library kernel is one)."""
    import random

    import torch

    from .. import ops
    from ..ops.library import example_operands, launcher
    from ..runtime import timing as bench
    from .evaluate import rel_error
    from .tune import agrees, tolerance

    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    row["seed"] = seed
    plan = ops.plan_from_entry(ops.spec_for(sig), sig, entry, "cache", "")
    first = example_operands(sig, device, seed)
    size = sum(t.numel() * t.element_size() for t in first[0] if isinstance(t, torch.Tensor))
    copies = bench.rotation(size) if target != "interpret" else 0
    more = [example_operands(sig, device, seed + 1 + i) for i in range(copies)]
    runs = [launcher(sig, *operands) for operands in [first, *more]]
    out = runs[0][0](plan, target)
    ref = runs[0][1]()
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        row["rel_err"], _ = rel_error(out, ref)
        row["tolerance"] = tolerance(out)
    ok, why = agrees(out, ref, row.get("tolerance", 0.0))
    if not ok:
        row.update(status="wrong", error=f"{why} (seed {seed})")
        return row
    mine = [lambda run=run: run(plan, target) for run, _ in runs]
    theirs = [ref_fn for _, ref_fn in runs]
    for f in mine[1:] + theirs:
        f()
    row["ms"], row["method"] = bench.time_ms(mine, target, rep_ms)
    if target != "interpret":
        row["peer"] = "torch eager"
        row["peer_ms"], _ = bench.time_ms(theirs, target, rep_ms, row["method"])
        row["speed_vs_peer"] = row["peer_ms"] / row["ms"] if row["ms"] else None
    row["status"] = "ok"
    return row


def _shape_entries(path: str, cache: Any, arch: str) -> list[Any]:
    """One entry a distinct signature of the shapes file on this machine's device: the cached one, else the
    backend's template default (built and proven here, not stored), its origin "default"."""
    from .. import ops
    from .shapes import from_shapes_file

    out: dict[str, Any] = {}
    for job in from_shapes_file(path):
        sig = job.signature_on(arch)
        if sig.key() not in out:
            out[sig.key()] = cache.get(sig.key()) or ops.make_entry(sig, None, origin="default")
    return list(out.values())


def _selected(entries: list[Any], filters: list[str]) -> list[Any]:
    from ..runtime.signature import Signature

    if not filters:
        return entries
    return [e for e in entries if any(f in Signature.from_dict(e.signature).short() for f in filters)]


def _here_arch() -> str:
    import torch

    from ..dsl.runtime import interpret_requested
    from ..runtime.signature import device_arch

    if torch.cuda.is_available() and not interpret_requested():
        return device_arch(torch.device("cuda", torch.cuda.current_device()))
    return "cpu"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table: ours, the peer, the ratio (> 1: ours faster)."""
    def num(v: Any, spec: str) -> str:
        return format(v, spec) if isinstance(v, (int, float)) else "-"

    out = ["| signature | origin | status | rel. err | ms | peer | peer ms | speed vs peer |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['speed_vs_peer']:.3f}x" if isinstance(r.get("speed_vs_peer"), float) else "-"
        out.append(f"| {r['signature']} | {r['origin']} | {r['status']} | {num(r.get('rel_err'), '.1e')} | "
                   f"{num(r.get('ms'), '.4f')} | {r.get('peer', '-')} | {num(r.get('peer_ms'), '.4f')} | {ratio} |")
    return "\n".join(out)


def run_bench(args: argparse.Namespace) -> int:
    from ..runtime.cache import KernelCache
    from ..runtime.signature import Signature

    if args.limit is not None and args.limit < 1:
        print("argus bench: --limit takes a positive number", file=sys.stderr)
        return 2
    if args.rep_ms < 1:
        print("argus bench: --rep-ms takes a positive number of milliseconds", file=sys.stderr)
        return 2
    cache = KernelCache(args.cache_dir)
    if not cache.root.is_dir() and not args.shapes:
        print(f"argus bench: no cache at {cache.root} (fill one with `argus warmup`, or compile a model with "
              f"backend=\"argus\")", file=sys.stderr)
        return 2
    from ..dsl.runtime import interpret_requested
    from .loop import interpreting

    arch = _here_arch()
    if arch == "cpu" and not (interpret_requested() or interpreting()):  # as loop.device_for asks
        print("argus bench: this machine has no GPU and the Triton interpreter is off in this process (`argus bench` "
              "turns it on for itself; from Python, start with ARGUS_INTERPRET=1)", file=sys.stderr)
        return 2
    if args.shapes:
        try:
            entries = _shape_entries(args.shapes, cache, arch)
        except Exception as e:  # an unreadable file, a shape no op takes
            print(f"argus bench: {e}", file=sys.stderr)
            return 2
    else:
        entries = cache.entries()
    chosen = _selected(entries, args.filters)
    here = [e for e in chosen if Signature.from_dict(e.signature).arch == arch]
    elsewhere = len(chosen) - len(here)
    if args.limit is not None:
        here = here[:args.limit]
    if not here:
        what = f" matching {' or '.join(repr(f) for f in args.filters)}" if args.filters else ""
        print(f"argus bench: no cached kernel{what} for this machine's device ({arch}) in {cache.root}"
              + (f"; {elsewhere} for other devices" if elsewhere else "")
              + ("; CPU entries run under the interpreter: start with ARGUS_INTERPRET=1" if arch != "cpu" and
                 elsewhere else ""), file=sys.stderr)
        return 2
    rows = []
    t0 = time.perf_counter()
    for i, entry in enumerate(here, 1):
        print(f"[{i}/{len(here)}] {Signature.from_dict(entry.signature).short()} ...", file=sys.stderr, flush=True)
        rows.append(bench_entry(entry, args.rep_ms, args.seed))
        r = rows[-1]
        if r["status"] != "ok":  # wrong, failed or skipped: why
            print(f"      {r['status']}: {r.get('error', '')}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(table(rows))
        ok = sum(r["status"] == "ok" for r in rows)
        skipped = sum(r["status"] == "skipped" for r in rows)
        note = f"{ok} of {len(rows) - skipped} match their reference; {time.perf_counter() - t0:.1f} s"
        if skipped:
            note += f"; {skipped} skipped (an op this command cannot build inputs for)"
        if elsewhere:
            note += f"; {elsewhere} entr{'y' if elsewhere == 1 else 'ies'} for other devices skipped"
        if arch == "cpu":
            note += "; times are the Triton interpreter's wall clock (they rank plans only; no peers timed)"
        print(f"\n{note}")
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1


__all__ = ["add_bench_parser", "bench_entry", "run_bench", "table"]
