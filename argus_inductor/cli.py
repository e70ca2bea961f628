"""The `argus` command line: verify, warmup, cache, bench, config (`argus COMMAND --help` for each).

    argus verify FILE.py [--shape M=200,N=136] [--policy BM=64,BN=64,num_warps=4] [--assume "H % HK == 0"]
                         [--kernel NAME] [--json] [--no-staging] [--timeout-ms N] [--budget-s S]
                         [--op attention [--causal] [--epilogue E]]

Parsing needs no torch (the package's heavy parts load when a command runs), so `--help` and usage errors come back
at once.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any


class UsageError(ValueError):
    """A mistake in what the user asked for: said in one message, exit status 2, never a traceback."""


def _pairs(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    """NAME=VALUE entries (comma-separated, the option repeatable) as a dict; a name given twice with two
    values is refused."""
    out: dict[str, Any] = {}
    for item in items or []:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise UsageError(f"{what} entries look like NAME=VALUE, got {part!r}")
            k, v = (x.strip() for x in part.split("=", 1))
            if not k.isidentifier():
                raise UsageError(f"{what} {part!r}: {k!r} is not a name")
            value = _value(v)
            if k in out and out[k] != value:
                raise UsageError(f"{what} gives {k} twice ({out[k]!r} and {value!r})")
            out[k] = value
    return out


def _value(v: str) -> Any:
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    try:
        return int(v)
    except ValueError:
        return v


def _shape_values(items: Sequence[str] | None) -> dict[str, int]:
    out = {}
    for k, v in _pairs(items, "--shape").items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise UsageError(f"--shape {k}={v}: {v!r} is not an integer (shape symbols take sizes, e.g. {k}=128)")
        if v < 1:
            raise UsageError(f"--shape {k}={v}: sizes are >= 1 (leave {k} out to prove every size)")
        out[k] = v
    return out


def _read_source(path: str) -> str:
    """The text of a DSL file, or a UsageError saying in words why it cannot be read."""
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    if p.is_dir():
        raise UsageError(f"{path} is a directory; give a .py file of DSL kernels")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path} ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path} is not UTF-8 text (byte {e.start}); give a .py file of DSL kernels") from None


def _listing(names: Any) -> str:
    names = sorted(names)
    return ", ".join(names) if names else "(none)"


def _check_names(kernels: dict[str, Any], wanted: Sequence[str] | None, shapes: dict[str, int],
                 policy: dict[str, Any], assumptions: Sequence[str], path: str) -> dict[str, Any]:
    """The kernels `--kernel` selects; a UsageError for a kernel, shape symbol, constexpr or assumption name that
    no selected kernel declares (naming what they do declare)."""
    import ast

    from .dsl.policy import LAUNCH_FIELDS

    if wanted:
        unknown = [n for n in dict.fromkeys(wanted) if n not in kernels]
        if unknown:
            raise UsageError(f"--kernel {', '.join(unknown)}: {path} defines no such kernel; it defines "
                             f"{_listing(kernels)}")
        kernels = {n: k for n, k in kernels.items() if n in wanted}
    symbols = {s for k in kernels.values() for s in k.ir.symbols}
    consts = {c.name for k in kernels.values() for c in k.ir.constexprs}
    int_tensors = {t.name for k in kernels.values() for t in k.ir.tensors if t.dtype_kind == "int"}
    which = f"kernel {_listing(kernels)}" if len(kernels) == 1 else f"kernels {_listing(kernels)}"
    bad = [n for n in shapes if n not in symbols]
    if bad:
        raise UsageError(f"--shape {', '.join(bad)}: not a shape symbol of {which}; its shape symbols: "
                         f"{_listing(symbols)}" + (f" (constexprs, for --policy: {_listing(consts)})"
                                                   if set(bad) & consts else ""))
    bad = [n for n in policy if n not in consts and n not in LAUNCH_FIELDS]
    if bad:
        raise UsageError(f"--policy {', '.join(bad)}: not a constexpr of {which} nor a launch setting; its "
                         f"constexprs: {_listing(consts)}; launch settings: {', '.join(LAUNCH_FIELDS)}"
                         + (f" (shape symbols, for --shape: {_listing(symbols)})" if set(bad) & symbols else ""))
    for n, v in policy.items():
        if n in consts and not isinstance(v, int):
            raise UsageError(f"--policy {n}={v}: constexpr values are integers (or true/false)")
    for text in assumptions:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as e:
            raise UsageError(f"--assume {text!r} is not a Python expression ({e.msg})") from None
        names = {x.id for x in ast.walk(tree) if isinstance(x, ast.Name)}
        bad = sorted(names - symbols - consts - int_tensors)
        if bad:
            raise UsageError(f"--assume {text!r}: {', '.join(bad)} is not a shape symbol, constexpr or integer "
                             f"tensor of {which} (shape symbols: {_listing(symbols)}; constexprs: "
                             f"{_listing(consts)}; integer tensors: {_listing(int_tensors)})")
    return kernels


def _verify(args: argparse.Namespace) -> int:
    from . import hopper  # noqa: F401  (registers the Gluon lowerings whose rings a policy may ask to prove)
    from .dsl import kernels_from_source
    from .dsl.errors import DSLError
    from .invariants import default_staging, verify_source

    try:
        if args.timeout_ms is not None and args.timeout_ms < 1:
            raise UsageError(f"--timeout-ms takes a positive number of milliseconds, got {args.timeout_ms}")
        shapes = _shape_values(args.shape)
        policy = _pairs(args.policy, "--policy")
        source = _read_source(args.file)
        if not source.strip():
            raise UsageError(f"{args.file} is empty; it should define at least one `@kernel def name(...):`")
        kernels = _check_names(kernels_from_source(source, args.file), args.kernel, shapes, policy,
                               args.assume or (), args.file)
        reads = _op_reads(args) if args.op else ()
        if reads and not any(r.output in {t.name for t in k.ir.tensors} for r in reads for k in kernels.values()):
            raise UsageError(f"no kernel of {args.file} has the tensor {reads[0].output} that {args.op}'s read set "
                             "names as its output: keep the op's parameter names")
        results = verify_source(source, args.file, policy or None, shapes or None, kernels=list(kernels),
                                assumptions=args.assume or (), timeout_ms=args.timeout_ms, budget_s=args.budget_s,
                                staging=None if args.no_staging else default_staging, reads=reads)
    except (DSLError, ValueError) as e:  # UsageError is a ValueError; so are the checker's refusals of a policy
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


def _columns(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell (the last one unpadded)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip() for r in rows]


def _op_reads(args: argparse.Namespace) -> tuple[Any, ...]:
    """The read sets `--op NAME [--causal] [--epilogue E]` checks the file's kernels against."""
    from .specs.reads import op_reads

    epilogue = ",".join(p for p in (args.epilogue or "", "causal" if args.causal else "") if p)
    try:
        return op_reads(args.op, epilogue)
    except KeyError as e:
        raise ValueError(str(e).strip("'\"")) from None


def _cache(args: argparse.Namespace) -> int:
    import dataclasses
    import shutil

    from .runtime.cache import KernelCache
    from .runtime.signature import Signature, current_versions, labels, version_text

    cache = KernelCache(args.cache_dir)
    if args.action == "clear":
        if not args.yes:
            print(f"argus cache clear: this deletes {cache.root}; add --yes to do it", file=sys.stderr)
            return 2
        if cache.root.exists():
            shutil.rmtree(cache.root)
        print(f"cleared {cache.root}")
        return 0
    if cache.root.exists() and not cache.root.is_dir():
        print(f"argus cache: {cache.root} is not a folder", file=sys.stderr)
        return 2
    here = current_versions()
    if args.action == "misses":
        rows = cache.misses()
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"{len(rows)} missed signature(s) in {cache.misses_file}")
        sigs = [Signature.from_dict(m["signature"]) for m in rows]
        lines = []
        for m, sig, label in zip(rows, sigs, labels(sigs, here)):
            status = "solved" if m["solved"] else "pending"
            if not m["solved"] and sig.versions != here and cache.get(dataclasses.replace(sig, versions=here).key()):
                status = "solved here"  # warmed under this environment's versions (argus warmup re-keys them)
            lines.append([status, f"x{m['count']}", label])
        print("\n".join(_columns(lines)))
        if any(s.versions != here for s in sigs):
            print(f"[made under ...]: recorded under other versions than this environment's ({version_text(here)}); "
                  "`argus warmup` makes them under this environment's and stores them under its keys ('solved here')")
        return 0
    entries = cache.entries()
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2, default=str))
        return 0
    print(f"{len(entries)} kernel(s) in {cache.root}")
    sigs = [e.sig() for e in entries]
    lines = [["origin", "status", "time", "signature"]] if entries else []
    cpu = False
    for e, sig, label in zip(entries, sigs, labels(sigs, here)):
        ms = e.timings.get("ms")
        t = f"{ms:.4f} ms" if isinstance(ms, (int, float)) else "not timed"
        if isinstance(ms, (int, float)) and sig.arch == "cpu":
            t += "*"
            cpu = True
        status = e.verification.get("status", "verified" if e.verification.get("ok") else "?")
        lines.append([e.origin, status, t, label])
    print("\n".join(_columns(lines)))
    if cpu:
        print("* the Triton interpreter's wall clock on the CPU: it ranks plans of one signature, it says nothing "
              "about speed")
    if any(s.versions != here for s in sigs):
        print(f"[made under ...]: versions other than this environment's ({version_text(here)}); this environment "
              "does not look those entries up")
    return 0


def _config(args: argparse.Namespace) -> int:
    from . import config

    if args.markdown:
        sys.stdout.write(config.table_markdown())
        return 0
    try:
        values = {s.env: config.env(s.env) for s in config.SETTINGS}
    except ValueError as e:
        print(f"argus config: {e}", file=sys.stderr)
        return 2
    for group, title in config.GROUPS.items():
        print(f"{title}:")
        for s in config.SETTINGS:
            if s.group == group:
                where = "set" if os.environ.get(s.env, "").strip() else "default"
                shown = str(values[s.env])
                if s.env == "ARGUS_CHECKER_WORKERS" and shown == "auto":  # what auto comes to on this machine
                    shown = f"auto ({config.checker_workers('auto')} here)"
                print(f"  {s.env:<26} {shown:<20} ({where})  {s.meaning}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argus", description="Argus Inductor: verified tile kernels for PyTorch.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="prove the data-flow invariants of every kernel in a DSL source file",
                       description="Read FILE.py with the DSL frontend (the file is never executed) and prove "
                                   "each kernel's tag assertions and kernel-wide obligations with z3. Exit status: "
                                   "0 proved, 1 a violation (with its counterexample), 2 a usage error (a file that "
                                   "cannot be read, or a --kernel, --shape, --policy or --assume name no selected "
                                   "kernel declares: the message lists what they do declare), 3 no violation found "
                                   "but something left undecided (not proved).")
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
    g = sub.add_parser("config", help="show every ARGUS_* setting, its value here and what it means",
                       description="Every setting: the environment variable, its value in this environment (or its "
                                   "default) and its meaning. Backend settings are also torch.compile options.")
    g.add_argument("--markdown", action="store_true", help="print the table README.md carries")
    g.set_defaults(func=_config)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("bench", "warmup"):
            from .agent.cli import interpreter_without_gpu
            from .agent.warmup import set_up

            why = interpreter_without_gpu(args.command)
            if why is not None:
                print(f"argus {args.command}: {why}", file=sys.stderr)
                return 2
            set_up()
        return int(args.func(args))
    except BrokenPipeError:  # `argus cache | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("argus: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
