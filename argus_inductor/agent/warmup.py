"""`argus warmup`: fill the kernel cache ahead of time.

Jobs (shapes.py) are deduplicated by signature key; those already in the cache are skipped (so a run that was
interrupted resumes where it stopped). One worker per visible GPU takes jobs from a shared queue (a single GPU,
or the CPU with the Triton interpreter already enabled here, runs in this process); each job is one
synthesize() call writing its cache entry, trail and experience. A progress line counts jobs; a table at the
end says, per signature, where its kernel came from and its speed against the peer (and, with --reference,
against the best hand-set policy of benchmarks/sweep.py, timed in the same process on the same inputs).
"""
from __future__ import annotations

import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from .shapes import Job

HANDSET_TARGET = 0.95


@dataclass
class WarmupOptions:
    cache_root: Path
    policy: str = "auto"
    trials: int | None = None
    seconds_per_signature: float | None = None
    time_limit: float | None = None
    workers: int | None = None
    reference: list[str] = field(default_factory=list)
    force: bool = False
    seed: int | None = None
    verbose: bool = False


# ---- one job ------------------------------------------------------------------------------------------

def _budget(opts: WarmupOptions, target: str, deadline: float | None, remaining: int, workers: int) -> Any:
    from .loop import Budget

    b = Budget.for_target(target)
    if opts.trials is not None:
        b = replace(b, trials=opts.trials)
    if opts.seconds_per_signature is not None:
        b = replace(b, seconds=opts.seconds_per_signature)
    if deadline is not None:
        share = (deadline - time.time()) / max(1.0, remaining / max(1, workers))
        b = replace(b, seconds=max(3.0, min(b.seconds, share * 0.8)))
    return b


def run_one(job: Job, device: str, opts: WarmupOptions, deadline: float | None = None, remaining: int = 1,
            workers: int = 1, handset: dict[Any, Any] | None = None) -> dict[str, Any]:
    """Synthesize one job on `device`; always returns a table row (failures included)."""
    from .loop import SynthesisError, synthesize

    t0 = time.time()
    prob = replace(job.problem, device=device)
    row: dict[str, Any] = {"signature": prob.short(), "label": job.label, "job": job.source}
    try:
        from .loop import arch_of

        arch = "cpu" if device == "cpu" else arch_of(device)
        sig = job.signature_on(arch)
        row.update(signature=sig.short(), key=sig.key())
        target = "interpret" if device == "cpu" else "cuda"
        budget = _budget(opts, target, deadline, remaining, workers)
        say = (lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if opts.verbose else None
        res = synthesize(sig if job.signature is not None else prob, policy=opts.policy, budget=budget,
                         cache_root=opts.cache_root, device=None if device == "cpu" else device, origin="warmup",
                         seed=opts.seed, progress=say)
        t = res.timings
        row.update(source=f"{res.policy}/{res.origin}", plan=res.plan.describe(), ms=t.get("ms"),
                   peer=t.get("peer"), peer_ms=t.get("peer_ms"), speed_vs_peer=t.get("speed_vs_peer"),
                   speed_vs_default=t.get("speed_vs_default"), reward_source=t.get("reward_source"),
                   trials=t.get("trials"))
        row["seconds"] = round(time.time() - t0, 1)
        if handset:
            t1 = time.time()
            try:
                row.update(_compare_handset(res, handset))
            except Exception as e:  # the comparison is a report, never a failure of the warm-up
                row["handset_error"] = f"{type(e).__name__}: {e}"[:200]
            row["compare_seconds"] = round(time.time() - t1, 1)
    except SynthesisError as e:
        row.update(source="failed", error=str(e))
    except Exception as e:  # one bad job must not end the warm-up
        row.update(source="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4))
    row.setdefault("seconds", round(time.time() - t0, 1))
    return row


def _compare_handset(res: Any, table: dict[Any, Any]) -> dict[str, Any]:
    """Time the winner and the hand-set policy back to back on the same inputs (a fresh evaluator), best of two
    interleaved rounds each (the card's state drifts between measurements)."""
    from ..specs import spec
    from . import handset
    from .evaluate import Candidate, Evaluator
    from .synthesizer import from_template

    ref = handset.lookup(table, res.problem)
    if ref is None:
        return {}
    op = spec(res.problem.op)
    plan = handset.as_plan(res.problem, ref["policy"])
    ev = Evaluator(op, res.problem, "interpret" if res.problem.device == "cpu" else "cuda",
                   dict(res.signature.dynamic_dims))
    hs_cand = from_template(op, res.problem, plan)
    hs = ev.evaluate(hs_cand, timed=False)
    if not hs.ok:
        return {"handset": plan.describe(), "handset_error": hs.message[:200]}
    ours_cand = Candidate(res.plan, res.kernels, res.dsl_source, res.origin)
    hs_pols = op.policies(res.problem, plan, hs_cand.kernels)
    ours, theirs = [], []
    for _ in range(2):
        ours.append(ev.time(ours_cand, res.policies)[0])
        theirs.append(ev.time(hs_cand, hs_pols)[0])
    o, t = min(ours), min(theirs)
    return {"handset": plan.describe(), "handset_ms": t, "ms_vs_handset": o, "vs_handset": t / o if o else None}


# ---- workers --------------------------------------------------------------------------------------------

def _worker(device: str, jobs: Any, results: Any, opts: WarmupOptions, deadline: float | None, workers: int,
            reference: list[str]) -> None:
    """A worker process: one GPU (or the CPU), jobs from the queue until None."""
    import torch

    from . import handset

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    table = handset.load(reference) if reference else None
    while True:
        item = jobs.get()
        if item is None:
            return
        try:
            remaining = jobs.qsize() + 1
        except NotImplementedError:  # pragma: no cover - macOS
            remaining = 1
        row = run_one(Job.from_json(item), device, opts, deadline, remaining, workers, table)
        if deadline is not None:  # hand-set comparisons are a report: they do not eat the synthesis time
            deadline += row.get("compare_seconds", 0.0)
        results.put(row)


class Progress:
    """One status line (rewritten in place on a terminal, one line per job otherwise)."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total, self.done, self.out, self.t0 = total, 0, out, time.time()
        self.tty = out.isatty()

    def step(self, row: dict[str, Any]) -> None:
        self.done += 1
        el = time.time() - self.t0
        eta = el / self.done * (self.total - self.done)
        width = 24
        fill = int(width * self.done / max(1, self.total))
        bar = "#" * fill + "." * (width - fill)
        what = f"{row.get('signature', '?')}: {row.get('source')}"
        if row.get("speed_vs_peer"):
            what += f" {row['speed_vs_peer']:.2f}x peer"
        line = f"[{bar}] {self.done}/{self.total} {el:5.0f}s eta {eta:5.0f}s  {what}"
        if self.tty:
            self.out.write("\r\x1b[2K" + line[:200])
            if self.done == self.total:
                self.out.write("\n")
        else:
            self.out.write(line + "\n")
        self.out.flush()


def _arch_here() -> tuple[str, int]:
    import torch

    from ..runtime.signature import device_arch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return device_arch(torch.device("cuda", 0)), torch.cuda.device_count()
    return "cpu", 0


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def warmup(jobs: list[Job], opts: WarmupOptions, out: TextIO | None = None) -> list[dict[str, Any]]:
    """Run the jobs; returns one row per distinct signature (skipped ones included). Progress goes to `out`
    (standard error by default)."""
    from .. import ops
    from .store import open_cache

    out = out if out is not None else sys.stderr

    arch, ngpu = _arch_here()
    cache = open_cache(opts.cache_root)
    rows: list[dict[str, Any]] = []
    todo: list[Job] = []
    seen: set[str] = set()
    for job in jobs:
        try:
            sig = job.signature_on(arch)
        except (ValueError, KeyError) as e:
            rows.append({"signature": job.problem.short(), "source": "failed", "error": str(e), "job": job.source})
            continue
        key = sig.key()
        if key in seen:
            continue
        seen.add(key)
        if job.signature is not None and sig.arch != arch:
            rows.append({"signature": sig.short(), "key": key, "source": f"skipped (recorded on {sig.arch})",
                         "job": job.source})
            continue
        e = None if opts.force else cache.get(key)
        if ops.entry_current(e):  # one the checker rejects, or an older checker proved, is made again
            t = e.timings if e is not None else {}
            rows.append({"signature": sig.short(), "key": key, "source": "cache (already there)", "job": job.source,
                         "ms": t.get("ms"), "peer": t.get("peer"), "speed_vs_peer": t.get("speed_vs_peer"),
                         "plan": _plan_text(t.get("plan"))})
            continue
        todo.append(job)
    if not todo:
        return rows
    deadline = time.time() + opts.time_limit if opts.time_limit else None
    progress = Progress(len(todo), out)
    nworkers = max(1, min(opts.workers or max(ngpu, 1), len(todo), max(ngpu, 1)))
    in_process = (arch == "cpu" and interpreting()) or (arch != "cpu" and nworkers == 1)
    if in_process:
        from . import handset

        table = handset.load(opts.reference) if opts.reference else None
        device = "cpu" if arch == "cpu" else "cuda:0"
        for i, job in enumerate(todo):
            row = run_one(job, device, opts, deadline, len(todo) - i, 1, table)
            if deadline is not None:
                deadline += row.get("compare_seconds", 0.0)
            rows.append(row)
            progress.step(row)
        return rows
    rows += _spawn(todo, opts, arch, nworkers, deadline, progress)
    return rows


def _spawn(todo: list[Job], opts: WarmupOptions, arch: str, nworkers: int, deadline: float | None,
           progress: Progress) -> list[dict[str, Any]]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    jobs, results = ctx.Queue(), ctx.Queue()
    for job in todo:
        jobs.put(job.to_json())
    devices = ["cpu"] if arch == "cpu" else [f"cuda:{i}" for i in range(nworkers)]
    for _ in devices:
        jobs.put(None)
    saved = {k: os.environ.get(k) for k in ("ARGUS_INTERPRET", "TRITON_INTERPRET")}
    if arch == "cpu":  # the child must enable the interpreter before it imports triton
        os.environ["ARGUS_INTERPRET"] = os.environ["TRITON_INTERPRET"] = "1"
    procs = []
    try:
        for dev in devices:
            p = ctx.Process(target=_worker, args=(dev, jobs, results, opts, deadline, len(devices), opts.reference),
                            daemon=True)
            p.start()
            procs.append(p)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    rows = []
    try:
        while len(rows) < len(todo):
            try:
                row = results.get(timeout=5.0)
            except Exception:  # queue.Empty: check the workers are alive
                if not any(p.is_alive() for p in procs):
                    break
                continue
            rows.append(row)
            progress.step(row)
    finally:
        for p in procs:
            p.join(timeout=5.0)
            if p.is_alive():
                p.terminate()
    done = {r.get("signature") for r in rows}
    for job in todo:
        if job.problem.short() not in done and len(rows) < len(todo):
            rows.append({"signature": job.problem.short(), "source": "failed", "error": "worker died"})
    return rows


# ---- the table ----------------------------------------------------------------------------------------------

def _plan_text(plan: Any) -> str:
    if isinstance(plan, dict) and "knobs" in plan:
        from ..specs.plan import Plan

        try:
            return Plan.from_json(plan).describe()
        except (ValueError, TypeError):
            return ""
    return ""


def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec)


def _short_plan(text: str) -> str:
    """The knobs that usually differ, compactly: 'BM=16 BN=32 BK=256 w4 s5 persistent grouped'."""
    keep = ("BM", "BN", "BK", "BR", "BC", "SPLIT_K")
    parts = []
    for p in (text or "").replace(";", ",").replace("(", ",").replace(")", "").split(","):
        k, _, v = p.strip().partition("=")
        if k in keep:
            parts.append(f"{k}={v}")
        elif k in ("num_warps", "num_stages"):
            parts.append(f"{k[4]}{v}")
        elif (k, v) in (("persistent", "True"), ("grid_order", "grouped")):
            parts.append(v if k == "grid_order" else k)
    return " ".join(parts)


def table(rows: list[dict[str, Any]]) -> str:
    has_ref = any("vs_handset" in r for r in rows)
    head = "| signature | source | plan | ms | peer | vs peer |" + (" vs hand-set |" if has_ref else "") + \
        " trials | s |"
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        src = r.get("source", "")
        if src == "failed":
            src = "failed: " + str(r.get("error", ""))[:80].replace("|", "/").replace("\n", " ")
        cells = [r.get("signature", ""), src, _short_plan(r.get("plan", "")), _fmt(r.get("ms"), ".4f"),
                 str(r.get("peer") or "-"), _fmt(r.get("speed_vs_peer"), ".2f") + ("x" if r.get("speed_vs_peer")
                                                                                    else "")]
        if has_ref:
            cells.append(_fmt(r.get("vs_handset"), ".3f"))
        cells += [str(r.get("trials") or "-"), _fmt(r.get("seconds"), ".0f")]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append(summary(rows))
    return "\n".join(out)


def _gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summary(rows: list[dict[str, Any]]) -> str:
    made = [r for r in rows if r.get("source") not in ("failed",) and not str(r.get("source", "")).startswith(
        ("cache", "skipped"))]
    failed = [r for r in rows if r.get("source") == "failed"]
    cached = [r for r in rows if str(r.get("source", "")).startswith("cache")]
    synth = sum(float(r.get("seconds") or 0) for r in made + failed)
    comp = sum(float(r.get("compare_seconds") or 0) for r in rows)
    lines = [f"{len(made)} synthesized, {len(cached)} already cached, {len(failed)} failed; synthesis "
             f"{synth:.0f} s in total" + (f" (hand-set comparisons, not counted: {comp:.0f} s)" if comp else "")]
    ops: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        ops.setdefault(str(r.get("signature", "?")).split("(")[0].split("[")[0], []).append(r)
    for op, rs in ops.items():
        peer = [r["speed_vs_peer"] for r in rs if r.get("speed_vs_peer")]
        hs = [r["vs_handset"] for r in rs if r.get("vs_handset")]
        parts = [f"{op}:"]
        if peer:
            parts.append(f"geomean vs peer {_gmean(peer):.3f}x over {len(peer)}")
        if hs:
            ok = sum(1 for x in hs if x >= HANDSET_TARGET)
            parts.append(f"vs hand-set: geomean {_gmean(hs):.3f}, min {min(hs):.3f}, {ok}/{len(hs)} >= "
                         f"{HANDSET_TARGET:.2f}")
        if len(parts) > 1:
            lines.append(" ".join(parts))
    return "\n".join(lines)
