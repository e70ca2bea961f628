"""The `argus` command line.

    argus verify FILE.py [--shape M=200,N=136] [--policy BM=64,BN=64,num_warps=4] [--assume "H % HK == 0"]
                         [--kernel NAME] [--json] [--no-staging] [--timeout-ms N] [--budget-s S]
                         [--op attention [--causal] [--epilogue E]]

Exit status: 0 when every kernel is proven, 1 when a violation is found, 2 on a usage or DSL error.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any


def _pairs(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"{what} entries look like NAME=VALUE, got {part!r}")
            k, v = (x.strip() for x in part.split("=", 1))
            out[k] = _value(v)
    return out


def _value(v: str) -> Any:
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    try:
        return int(v)
    except ValueError:
        return v


def _verify(args: argparse.Namespace) -> int:
    from .dsl.errors import DSLError
    from .invariants import default_staging, verify_file

    try:
        shapes = {k: int(v) for k, v in _pairs(args.shape, "--shape").items()}
        policy = _pairs(args.policy, "--policy")
        reads = _op_reads(args) if args.op else ()
        if reads and not any(r.output in {t.name for t in k.ir.tensors} for r in reads for k in _kernels(args.file)):
            raise ValueError(f"no kernel of {args.file} has the tensor {reads[0].output} that {args.op}'s read set "
                             "names as its output: keep the op's parameter names")
        results = verify_file(args.file, policy or None, shapes or None, kernels=args.kernel or None,
                              assumptions=args.assume or (), timeout_ms=args.timeout_ms, budget_s=args.budget_s,
                              staging=None if args.no_staging else default_staging, reads=reads)
    except (DSLError, ValueError, OSError) as e:
        print(f"argus verify: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"file": args.file, "ok": all(r.ok for r in results),
                          "proved": all(r.proved for r in results),
                          "results": [r.to_json() for r in results]}, indent=2, default=str))
    else:
        for r in results:
            print(r.text())
    if not all(r.ok for r in results):
        return 1
    return 0 if all(r.proved for r in results) else 3


def _op_reads(args: argparse.Namespace) -> tuple[Any, ...]:
    """The read sets `--op NAME [--causal] [--epilogue E]` checks the file's kernels against."""
    from .agent.opspecs.reads import op_reads

    epilogue = ",".join(p for p in (args.epilogue or "", "causal" if args.causal else "") if p)
    try:
        return op_reads(args.op, epilogue)
    except KeyError as e:
        raise ValueError(str(e).strip("'\"")) from None


def _kernels(path: str) -> list[Any]:
    from .dsl.runtime import kernels_from_source

    with open(path) as f:
        return list(kernels_from_source(f.read(), path).values())


def _cache(args: argparse.Namespace) -> int:
    import shutil

    from .cache import KernelCache
    from .signature import Signature

    cache = KernelCache(args.cache_dir)
    if args.action == "clear":
        if not args.yes:
            print(f"argus cache clear: this deletes {cache.root}; add --yes to do it", file=sys.stderr)
            return 2
        if cache.root.exists():
            shutil.rmtree(cache.root)
        print(f"cleared {cache.root}")
        return 0
    if args.action == "misses":
        rows = cache.misses()
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"{len(rows)} missed signature(s) in {cache.misses_file}")
        for m in rows:
            sig = Signature.from_dict(m["signature"]).short()
            print(f"  {'solved ' if m['solved'] else 'pending'}  x{m['count']:<5} {sig}")
        return 0
    entries = cache.entries()
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2, default=str))
        return 0
    print(f"{len(entries)} kernel(s) in {cache.root}")
    for e in entries:
        ms = e.timings.get("ms")
        t = f"{ms:.4f} ms" if isinstance(ms, (int, float)) else "not timed"
        status = e.verification.get("status", "verified" if e.verification.get("ok") else "?")
        print(f"  {e.sig().short():<70} {e.origin:<11} {status:<12} {t}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argus", description="Argus Inductor: verified tile kernels for PyTorch.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="prove the data-flow invariants of every kernel in a DSL source file",
                       description="Read FILE.py with the DSL frontend (the file is never executed) and prove "
                                   "each kernel's tag assertions and kernel-wide obligations with z3. Exit status: "
                                   "0 proved, 1 a violation (with its counterexample), 2 unreadable input, 3 no "
                                   "violation found but something left undecided (not proved).")
    v.add_argument("file", metavar="FILE.py")
    v.add_argument("--shape", action="append", metavar="M=..,N=..",
                   help="concrete shape symbols (others stay symbolic, >= 1)")
    v.add_argument("--policy", action="append", metavar="BM=..,num_warps=..",
                   help="constexpr values and launch settings (kernel defaults otherwise)")
    v.add_argument("--assume", action="append", metavar="EXPR",
                   help="a precondition over shape symbols, constexprs or integer tensors, e.g. 'H %% HK == 0'")
    v.add_argument("--kernel", action="append", metavar="NAME", help="check only these kernels")
    v.add_argument("--json", action="store_true", help="print the results as JSON")
    v.add_argument("--no-staging", action="store_true", help="skip the pipelined-buffer obligations")
    v.add_argument("--timeout-ms", type=int, default=None, help="z3 time limit per obligation")
    v.add_argument("--op", default=None, metavar="NAME",
                   help="check each kernel against the read set of this op (attention, gemm, bmm, moe, moe_down, "
                        "softmax, rmsnorm, layernorm, reduce): what every output element must read")
    v.add_argument("--causal", action="store_true", help="with --op attention: the causal variant (keys t <= s)")
    v.add_argument("--epilogue", default=None, metavar="E", help="with --op: the variant, e.g. bias+silu, gqa4, mask")
    v.add_argument("--budget-s", type=float, default=None,
                   help="time limit of each kernel's whole verification (default 60); past it: NOT PROVED: budget")
    v.set_defaults(func=_verify)
    from .agent.cli import add_warmup_parser
    add_warmup_parser(sub)
    c = sub.add_parser("cache", help="list the cached kernels, the recorded misses, or clear the cache",
                       description="Inspect or clear the kernel cache (ARGUS_CACHE_DIR, default ~/.cache/argus).")
    c.add_argument("action", nargs="?", choices=["list", "misses", "clear"], default="list",
                   help="list cached kernels (default), list signatures that ran without one, or delete all")
    c.add_argument("--cache-dir", default=None, help="the cache folder (default: ARGUS_CACHE_DIR)")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.add_argument("--yes", action="store_true", help="confirm `clear`")
    c.set_defaults(func=_cache)
    from .agent.cache_bench import add_bench_parser
    add_bench_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
