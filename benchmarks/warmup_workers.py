"""`argus warmup` with one worker and with one per GPU, into fresh cache directories: do both warm the same
signatures, is every file the workers wrote whole, and how much faster are several GPUs?

    python benchmarks/warmup_workers.py [--model llama] [--tokens 1,16,2048] [--workers 1,2] [--out DIR]

For each worker count, `argus warmup --config <the model's config> --workers N` runs in its own process against
an empty cache directory (the N workers of a run share that one directory, as users' machines do), and with
empty Triton and Inductor compile caches of its own, so that no run reuses an earlier run's compiles. Then each
directory is audited: every cache entry must read back whole (format, key and checksum, through the cache's own
reader), no temporary file of an interrupted write may be left, no entry may have been set aside as bad, and every
other JSON or JSON-lines file (misses, the agent's experience) must parse. The runs are compared signature by
signature: the keys each cache holds, the rows' outcomes, and whether they chose the same plan (timing noise may
pick a different plan of near-equal speed; that is reported, not failed). Writes
warmup-workers-<date>.{json,md} under --out and exits 1 when an audit or the comparison of keys fails, or a run
stored a signature untuned for want of the agent (then the runs did not do the same work).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.ops.plans import NO_AGENT  # noqa: E402
from argus_inductor.runtime.cache import KernelCache  # noqa: E402

# transformers' config fields of the models benchmarks/e2e.py builds (their dims, num_hidden_layers set here)
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-5},
    "qwen2": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
              "num_attention_heads": 28, "num_key_value_heads": 4, "rope_theta": 1e6,
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-6},
    "tiny": {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256},
}


def audit(root: Path) -> dict[str, Any]:
    """What one cache directory holds, and every sign of a lost or torn write in it."""
    cache = KernelCache(root)
    keys = cache.keys()
    plans: dict[str, str] = {}
    unreadable = []
    for k in keys:  # through the cache's reader: format, key, checksum (a bad entry it moves aside, as in use)
        e = cache.get(k)
        if e is None:
            unreadable.append(k)
        else:
            plans[k] = json.dumps(e.policy, sort_keys=True)
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    leftovers = sorted(str(p.relative_to(root)) for p in files if p.name.endswith(".tmp"))
    set_aside = sorted(str(p.relative_to(root)) for p in files if ".bad-" in p.name)
    broken: list[str] = []
    for p in files:
        if p.suffix not in (".json", ".jsonl") or ".bad-" in p.name:
            continue
        try:
            text = p.read_text()
            if p.suffix == ".json":
                json.loads(text)
            else:
                for line in text.splitlines():
                    if line.strip():
                        json.loads(line)
        except (OSError, ValueError) as e:
            broken.append(f"{p.relative_to(root)}: {type(e).__name__}: {str(e)[:120]}")
    return {"keys": keys, "plans": plans, "unreadable": unreadable, "leftover_tmp": leftovers,
            "set_aside": set_aside, "unparsable": broken, "files": len(files),
            "whole": not (unreadable or leftovers or set_aside or broken)}


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two audits: the keys only one holds, and of the shared keys how many chose the same plan."""
    ka, kb = set(a["keys"]), set(b["keys"])
    shared = sorted(ka & kb)
    same = [k for k in shared if a["plans"].get(k) == b["plans"].get(k)]
    return {"only_first": sorted(ka - kb), "only_second": sorted(kb - ka), "shared": len(shared),
            "same_plan": len(same), "same_keys": ka == kb}


def unsearched(rows: list[dict[str, Any]]) -> int:
    """Rows stored untuned because their process had no agent to search with (a fault of the run's setup, not a
    result: on two H200s on 2026-11-29 the workers stored every library signature so, and two workers looked 1.8x
    faster than one for the work they skipped)."""
    return sum(NO_AGENT in str(r.get("source", "")) for r in rows)


def with_repo_on_path() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH, for the processes it starts."""
    repo = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}


def prime_imports() -> float:
    """Import what every run imports once, untimed, in a process of its own: the first run would otherwise pay
    for writing the bytecode and reading the packages from disk that the later runs find ready (on the H200s on
    2026-11-29, with PYTHONPYCACHEPREFIX set, one worker took 151 s on a fresh machine and 115 s for the same work
    on one where an earlier call had written that bytecode). Returns the seconds it took."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, triton, argus_inductor.cli, argus_inductor.agent.warmup"],
                   check=False, env=with_repo_on_path())
    return time.perf_counter() - t


def run_warmup(config: Path, tokens: str, workers: int, cache: Path, extra: list[str], log: Path) -> dict[str, Any]:
    """One `argus warmup` process; its wall time, exit status and rows."""
    rows_file = cache.parent / f"{cache.name}-rows.json"
    cmd = [sys.executable, "-c", "import sys; from argus_inductor.cli import main; sys.exit(main())", "warmup",
           "--config", str(config), "--tokens", tokens, "--workers", str(workers), "--cache-dir", str(cache),
           "--json-out", str(rows_file), *extra]
    # Each run compiles from nothing: its own empty Triton and Inductor caches. A run that found the kernels an
    # earlier run compiled would skip most of its compile time, and the later run would look faster for it (on
    # the H200 on 2026-11-29, one worker took 240 s cold and 186 s after two runs had filled these caches).
    env = {**with_repo_on_path(), "TRITON_CACHE_DIR": str(cache.parent / f"{cache.name}-triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(cache.parent / f"{cache.name}-inductor")}
    t = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    wall = time.perf_counter() - t
    rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    sources: dict[str, int] = {}
    for r in rows:
        sources[str(r.get("source"))] = sources.get(str(r.get("source")), 0) + 1
    return {"workers": workers, "rc": rc, "wall_s": round(wall, 1), "rows": len(rows), "sources": sources,
            "unsearched": unsearched(rows), "log_tail": log.read_text()[-2000:]}


def table(runs: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> str:
    lines = ["| workers | wall s | speed-up | exit | rows | outcomes | entries | whole |",
             "| ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    base = runs[0]["wall_s"]
    for r in runs:
        a = r["audit"]
        whole = "yes" if a["whole"] else (f"no: {len(a['unreadable'])} unreadable, {len(a['leftover_tmp'])} "
                                          f"temporary, {len(a['set_aside'])} set aside, "
                                          f"{len(a['unparsable'])} unparsable")
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["sources"].items()))
        lines.append(f"| {r['workers']} | {r['wall_s']:.1f} | {base / r['wall_s']:.2f}x | {r['rc']} | {r['rows']} | "
                     f"{outcomes} | {len(a['keys'])} | {whole} |")
    for r in runs:
        if r.get("unsearched"):
            lines.append("")
            lines.append(f"**{r['workers']} worker(s): {r['unsearched']} signature(s) stored untuned** ({NO_AGENT}): "
                         "the runs did not do the same work, and their wall times are not comparable.")
    for c in comparisons:
        lines.append("")
        lines.append(f"{c['first']} worker(s) against {c['second']}: {c['shared']} signatures in both caches, "
                     f"{len(c['only_first'])} only in the first, {len(c['only_second'])} only in the second; "
                     f"{c['same_plan']} of {c['shared']} chose the same plan.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama", choices=sorted(CONFIGS))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", default="1,16,2048", help="argus warmup --tokens")
    ap.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated (the first is the "
                                                     "baseline of the speed-up)")
    ap.add_argument("--trials", type=int, default=6, help="argus warmup --trials (per signature)")
    ap.add_argument("--seconds-per-signature", type=float, default=8.0)
    ap.add_argument("--time-limit", type=float, default=None, help="argus warmup --time-limit, per run")
    ap.add_argument("--work-dir", default=None, help="where the caches are made (default: a new temporary one)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    try:
        counts = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        ap.error(f"--workers takes integers, not {args.workers!r}")
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        ap.error(f"--workers takes distinct positive counts, not {args.workers!r}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="argus-warmup-workers-"))
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"{args.model}.json"
    config.write_text(json.dumps({**CONFIGS[args.model], "num_hidden_layers": args.layers}))
    extra = ["--trials", str(args.trials), "--seconds-per-signature", str(args.seconds_per_signature)]
    if args.time_limit:
        extra += ["--time-limit", str(args.time_limit)]
    print(f"[{time.strftime('%H:%M:%S')}] imports primed, untimed, in {prime_imports():.1f} s", flush=True)
    runs = []
    for n in counts:
        cache = work / f"cache-w{n}"
        if cache.exists() and any(cache.iterdir()):
            ap.error(f"{cache} is not empty: give a fresh --work-dir")
        print(f"[{time.strftime('%H:%M:%S')}] argus warmup --workers {n} into {cache}", flush=True)
        r = run_warmup(config, args.tokens, n, cache, extra, work / f"warmup-w{n}.log")
        r["audit"] = audit(cache)
        print(f"[{time.strftime('%H:%M:%S')}]   {r['wall_s']} s, exit {r['rc']}, {r['rows']} rows, "
              f"{len(r['audit']['keys'])} entries, whole: {r['audit']['whole']}", flush=True)
        runs.append(r)
    comparisons = [{"first": runs[0]["workers"], "second": r["workers"], **compare(runs[0]["audit"], r["audit"])}
                   for r in runs[1:]]
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    stamp = datetime.date.today().isoformat() + (f"-{args.tag}" if args.tag else "")
    meta = {"date": stamp, "gpus": gpus or ["none (Triton interpreter)"], "torch": torch.__version__,
            "python": platform.python_version(), "model": args.model, "layers": args.layers,
            "tokens": args.tokens, "warmup_args": extra,
            "command": "python benchmarks/warmup_workers.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    md = (f"# `argus warmup` with {' and '.join(map(str, counts))} worker(s) ({', '.join(meta['gpus'])}, {stamp})\n\n"
          f"`argus warmup --config` of {args.model}'s dims ({args.layers} layers), --tokens {args.tokens}, "
          f"{' '.join(extra)}; each run into its own empty cache directory, which its workers share, with empty "
          f"Triton and Inductor compile caches of its own. "
          f"Speed-up: the first run's wall time over this one's. Whole: every entry reads back through the "
          f"cache's reader, no temporary file is left, none was set aside, every JSON file parses.\n\n"
          + table(runs, comparisons) + "\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"warmup-workers-{stamp}.json").write_text(json.dumps({"meta": meta, "runs": runs,
                                                                  "comparisons": comparisons}, indent=1))
    (out / f"warmup-workers-{stamp}.md").write_text(md)
    print(md)
    ok = all(r["audit"]["whole"] and not r["unsearched"] for r in runs) and all(c["same_keys"] for c in comparisons)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
