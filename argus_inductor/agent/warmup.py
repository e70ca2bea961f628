"""`argus warmup`: fill the kernel cache ahead of time.

Jobs (shapes.py) are deduplicated by signature key; those already in the cache are skipped (so a run that was
interrupted resumes where it stopped). A recorded signature (a miss, a traced model's) made under other torch,
Triton or Argus versions than this environment's is re-keyed to this environment's versions: the kernel is made,
searched and timed here, so it is stored under the key this environment looks up, never under a key whose versions
its entry contradicts. One worker per visible GPU takes jobs from a shared queue (a single GPU, or the CPU with the
Triton interpreter already enabled here, runs in this process); each job is one synthesize() call writing its cache
entry, trail and experience, or one library signature's policy search (library_row). A progress line counts
jobs; a table at the end says, per signature, where its kernel came from and its speed against the peer (and, with
--reference, against the best hand-set policy of benchmarks/sweep.py, timed in the same process on the same
inputs).

A time limit is for the whole run: each job's search budget is cut to the time left (and to its share of it), no
job starts past the limit, and a job still running at the limit is stopped there (an alarm signal in this process
and in each worker; the parent ends workers that overrun it); what was not done is listed, and a new run resumes.
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from .shapes import Job

HANDSET_TARGET = 0.95
STOPPED = "stopped at the time limit"
NOT_STARTED = "not started (time limit)"
NOT_FINISHED = "not finished (time limit; its worker was ended)"
GRACE_S = 10.0  # how long past the limit the parent waits for a worker to stop itself before ending it


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
    started: float | None = None   # time.time() the run began (the time limit counts from it); None: warmup()'s call

    def deadline(self) -> float | None:
        if not self.time_limit:
            return None
        return (self.started if self.started is not None else time.time()) + self.time_limit


# ---- the time limit -------------------------------------------------------------------------------------

class TimeLimit(BaseException):
    """Raised in the running job when the run's time limit passes. A BaseException, like KeyboardInterrupt, so
    that no `except Exception` on the way records it as the job's failure."""


_ALARM = threading.local()


@contextlib.contextmanager
def hard_deadline(deadline: float | None) -> Iterator[None]:
    """Raise TimeLimit in this thread at `deadline` (time.time()): a SIGALRM timer, so it needs the main thread
    of a POSIX process; elsewhere, and inside another hard_deadline, it does nothing (the soft checks between jobs
    remain). Callers catch TimeLimit around the whole block: it may fire at any statement."""
    usable = (deadline is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread() and not getattr(_ALARM, "on", False))
    if not usable:
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise TimeLimit()

    old = signal.signal(signal.SIGALRM, fire)
    _ALARM.on = True
    try:
        left = deadline - time.time()  # type: ignore[operator]
        if left <= 0:
            raise TimeLimit()
        signal.setitimer(signal.ITIMER_REAL, left)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        _ALARM.on = False


def time_left(deadline: float | None) -> float:
    return math.inf if deadline is None else deadline - time.time()


# ---- one job ------------------------------------------------------------------------------------------

def _budget(opts: WarmupOptions, target: str, deadline: float | None, remaining: int, workers: int) -> Any:
    """The job's search budget: the target's default (or --trials / --seconds-per-signature), cut to the job's
    share of the time left (its own, and the later jobs' of its worker) and never past the time left."""
    from .loop import Budget

    b = Budget.for_target(target)
    if opts.trials is not None:
        b = replace(b, trials=opts.trials)
    if opts.seconds_per_signature is not None:
        b = replace(b, seconds=opts.seconds_per_signature)
    if deadline is not None:
        left = max(0.0, time_left(deadline))
        share = left / max(1, math.ceil(remaining / max(1, workers)))
        b = replace(b, seconds=min(b.seconds, left, max(share * 0.8, min(3.0, left))))
    return b


def run_one(job: Job, device: str, opts: WarmupOptions, deadline: float | None = None, remaining: int = 1,
            workers: int = 1, handset: dict[Any, Any] | None = None) -> dict[str, Any]:
    """Synthesize one job on `device`; always returns a table row (failures, and a stop at the time limit,
    included)."""
    from .loop import SynthesisError, synthesize

    t0 = time.time()
    prob = replace(job.problem, device=device)
    row: dict[str, Any] = {"signature": prob.short(), "label": job.label, "job": job.source}
    try:
        from .loop import arch_of

        arch = "cpu" if device == "cpu" else arch_of(device)
        sig = job.signature_on(arch)
        row.update(signature=sig.short(), key=sig.key(), sig=sig.as_dict())
        target = "interpret" if device == "cpu" else "cuda"
        budget = _budget(opts, target, deadline, remaining, workers)
        row["budget_seconds"] = round(budget.seconds, 1)
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
    except TimeLimit:
        row.update(source=STOPPED)
    except SynthesisError as e:
        row.update(source="failed", error=str(e))
    except Exception as e:  # one bad job must not end the warm-up
        row.update(source="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4))
    row.setdefault("seconds", round(time.time() - t0, 1))
    if job.rekeyed_from:
        row["rekeyed_from"] = job.rekeyed_from
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


# ---- one library signature ------------------------------------------------------------------------------

def library_row(sig: Any, recorded: Any, cache_root: Path, deadline: float | None, device: str,
                progress: Progress | None = None) -> dict[str, Any]:
    """Warm one library signature (conv, reductions, norms, ...: argus_inductor.ops.library, which the agent does not
    search) on `device`: where it is of the device's arch (or the CPU's with the interpreter), tuned by the policy
    search on random operands of its shapes (ops.tune_library); otherwise, or when tuning finds nothing, stored with
    its template policy. Either way the entry carries the invariant checker's verdict, so the next run is a cache hit
    with a proven kernel. `recorded`: the versions it was recorded under (re-keyed to this environment's). Always
    returns a table row."""
    import torch

    from .. import ops
    from ..ops.library import example_operands, launcher
    from ..runtime.cache import KernelCache
    from ..runtime.signature import device_arch, version_text

    cache = KernelCache(cache_root)
    dev = torch.device(device)
    target = ops.target_for(dev)
    row = _library_base(sig)
    if recorded != sig.versions:
        row["rekeyed_from"] = version_text(recorded, sig.versions)
    t0 = time.time()
    try:
        if time_left(deadline) <= 0:
            row["source"] = NOT_STARTED
            return row
        if progress is not None:
            progress.start(sig.short())
        how, entry = "template policy", None
        if target is not None and sig.arch == device_arch(dev):
            try:
                run_plan, reference = launcher(sig, *example_operands(sig, dev))
                entry, how = ops.tune_library(ops.spec_for(sig), sig, target, run_plan, reference, cache)
            except Exception as e:  # operands this signature cannot be built from: the template serves
                how = f"not tuned ({type(e).__name__}: {e})"
            if entry is None:
                how = f"template policy ({how})"
        if entry is None:
            entry = ops.warm(sig, cache=cache)
        row.update(source=f"library: {how}, {entry.verification.get('status', 'not verified')}",
                   ms=entry.timings.get("ms"), seconds=round(time.time() - t0, 1))
    except TimeLimit:
        row.update(source=STOPPED, seconds=round(time.time() - t0, 1))
    except Exception as e:  # one signature that cannot be warmed must not end the run
        row.update(source="failed", error=f"{type(e).__name__}: {e}", seconds=round(time.time() - t0, 1))
    return row


def _library_item(sig: Any, recorded: Any) -> dict[str, Any]:
    """A library signature as a queue item for the workers (pickled by the queue: plain data)."""
    return {"library": sig.as_dict(), "recorded": list(recorded) if recorded is not None else None}


def _library_from_item(item: dict[str, Any]) -> tuple[Any, Any]:
    from ..runtime.signature import Signature

    recorded = item.get("recorded")
    return Signature.from_dict(item["library"]), tuple(recorded) if recorded is not None else None


def _library_base(sig: Any) -> dict[str, Any]:
    """A library signature's table row before its outcome."""
    return {"signature": sig.short(), "key": sig.key(), "sig": sig.as_dict(), "job": "misses"}


def _library_not_done(sig: Any, source: str, error: str = "") -> dict[str, Any]:
    row = {**_library_base(sig), "source": source}
    return {**row, "error": error} if error else row


def set_up() -> None:
    """What importing the package sets up for a program, which the `argus` command (whose root import loads no
    torch) does itself once the interpreter is decided, and each warmup worker process at its start: the Gluon
    lowerings registered with the DSL and the agent handed to the ops (it tunes a library op's recorded miss)."""
    import importlib

    from .. import hopper, ops

    del hopper  # imported for what importing it registers

    ops.install_agent(lambda: importlib.import_module("argus_inductor.agent"))


# ---- workers --------------------------------------------------------------------------------------------

def _worker(device: str, jobs: Any, results: Any, opts: WarmupOptions, deadline: float | None, workers: int,
            reference: list[str]) -> None:
    """A worker process: one GPU (or the CPU), (index, job) pairs from the queue until None; it stops its own
    job at the deadline and starts none past it."""
    import torch

    from . import handset
    from .loop import arch_of

    # a spawned process imports the package before torch, so nothing handed the agent to the ops: without this, its
    # library signatures got their template policy, untuned ("no agent installed"), which made a 2-GPU run look
    # 1.8x faster than one worker on the H200 (2026-11-29)
    set_up()
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    table = handset.load(reference) if reference else None
    while True:
        item = jobs.get()
        if item is None:
            return
        index, job_json = item
        if "library" in job_json:  # a library signature: tuned on this worker's device
            sig, recorded = _library_from_item(job_json)
            try:
                with hard_deadline(deadline):
                    row = library_row(sig, recorded, opts.cache_root, deadline, device)
            except TimeLimit:  # fired between the row's end and the timer's reset
                row = _library_not_done(sig, STOPPED)
            results.put({**row, "index": index})
            continue
        job = Job.from_json(job_json)
        arch = "cpu" if device == "cpu" else arch_of(device)
        if time_left(deadline) <= 0:
            results.put({**not_started(job, arch), "index": index})
            continue
        try:
            remaining = jobs.qsize() + 1
        except NotImplementedError:  # pragma: no cover - macOS
            remaining = 1
        try:
            with hard_deadline(deadline):
                row = run_one(job, device, opts, deadline, remaining, workers, table)
        except TimeLimit:  # fired between the job's end and the timer's reset
            row = {**not_started(job, arch), "source": STOPPED}
        results.put({**row, "index": index})


def not_started(job: Job, arch: str | None = None) -> dict[str, Any]:
    """The row of a job the time limit left undone: its signature on `arch` (the recorded one without it)."""
    row = {"signature": job.problem.short(), "source": NOT_STARTED, "job": job.source, "label": job.label}
    if job.signature is not None or arch is not None:
        try:
            sig = job.signature_on(arch or "cpu")
        except (ValueError, KeyError):
            return row
        row.update(signature=sig.short(), key=sig.key(), sig=sig.as_dict())
    if job.rekeyed_from:
        row["rekeyed_from"] = job.rekeyed_from
    return row


class Progress:
    """Numbered progress over every job of a run (library tuning and agent jobs alike, one count): a line when a
    job starts and when it ends (rewritten in place on a terminal)."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total, self.done, self.out, self.t0 = total, 0, out, time.time()
        self.tty = out.isatty()

    def _write(self, line: str, final: bool) -> None:
        if self.tty:
            self.out.write("\r\x1b[2K" + line[:200] + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def start(self, what: str, budget: float | None = None) -> None:
        el = time.time() - self.t0
        extra = f" (search budget {budget:.0f} s)" if budget is not None and math.isfinite(budget) else ""
        self._write(f"[{self.done + 1}/{self.total}] {el:5.0f}s  {what} ...{extra}", False)

    def step(self, row: dict[str, Any]) -> None:
        self.done += 1
        el = time.time() - self.t0
        eta = el / self.done * (self.total - self.done)
        what = f"{row.get('signature', '?')}: {row.get('source')}"
        if row.get("speed_vs_peer"):
            what += f" {row['speed_vs_peer']:.2f}x peer"
        self._write(f"[{self.done}/{self.total}] {el:5.0f}s eta {eta:5.0f}s  {what}", self.done == self.total)


def arch_here() -> tuple[str, int]:
    import torch

    from ..runtime.signature import device_arch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return device_arch(torch.device("cuda", 0)), torch.cuda.device_count()
    return "cpu", 0


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def rekey(jobs: list[Job], here: tuple[str, str, str]) -> tuple[list[Job], dict[str, int]]:
    """Recorded signatures made under other versions than `here` (this environment's), moved to `here`'s: what
    is made now is made by this torch and Triton, so it belongs under this environment's key. Returns the jobs and
    how many were moved, by the versions they were recorded under."""
    from ..runtime.signature import Signature, version_text

    out, moved = [], {}
    for job in jobs:
        if job.signature is not None:
            sig = Signature.from_dict(job.signature)
            if sig.versions != here:
                was = version_text(sig.versions, here)
                moved[was] = moved.get(was, 0) + 1
                job = replace(job, signature=replace(sig, versions=here).as_dict(), rekeyed_from=was)
        out.append(job)
    return out, moved


def plan(jobs: list[Job], opts: WarmupOptions, arch: str) -> tuple[list[dict[str, Any]], list[Job]]:
    """Rows for the jobs there is nothing to do for (already cached, recorded on another device, unreadable) and
    the jobs to run, one per signature."""
    from .. import ops
    from .store import open_cache

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
        base = {"signature": sig.short(), "key": key, "sig": sig.as_dict(), "job": job.source}
        if job.signature is not None and sig.arch != arch:
            rows.append({**base, "source": f"skipped (recorded on {sig.arch})"})
            continue
        e = None if opts.force else cache.get(key)
        if ops.entry_current(e):  # one the checker rejects, or an older checker proved, is made again
            t = e.timings if e is not None else {}
            rows.append({**base, "source": "cache (already there)", "ms": t.get("ms"), "peer": t.get("peer"),
                         "speed_vs_peer": t.get("speed_vs_peer"), "plan": _plan_text(t.get("plan"))})
            continue
        todo.append(job)
    return rows, todo


def say_rekeyed(moved: dict[str, int], here: tuple[str, str, str], out: TextIO) -> None:
    """One line per set of versions recorded signatures were re-keyed from (rekey)."""
    from ..runtime.signature import version_text

    for was, n in moved.items():
        print(f"argus warmup: {n} recorded signature(s) were made under {was}; this environment has "
              f"{version_text(here)}: they are made here under this environment's versions and stored under its "
              "keys (the table marks them 'recorded under ...')", file=out)


def warmup(jobs: list[Job], opts: WarmupOptions, out: TextIO | None = None,
           progress: Progress | None = None) -> list[dict[str, Any]]:
    """Run the jobs; returns one row per distinct signature (skipped ones included). Progress goes to `out`
    (standard error by default), or to `progress` (a run that counts other work too). Recorded signatures of
    other versions are re-keyed to this environment's (rekey), said on `out`."""
    from ..runtime.signature import current_versions

    out = out if out is not None else sys.stderr
    arch, _ = arch_here()
    here = current_versions()
    jobs, moved = rekey(jobs, here)
    say_rekeyed(moved, here, out)
    rows, todo = plan(jobs, opts, arch)
    return rows + run_planned(todo, opts, progress if progress is not None else Progress(len(todo), out))


def run_planned(todo: list[Job], opts: WarmupOptions, progress: Progress,
                library: Sequence[tuple[Any, Any]] = ()) -> list[dict[str, Any]]:
    """Run the library signatures (library_row: (signature, the versions it was recorded under)) and the jobs plan()
    left to do, in this process or in one worker process per GPU (the workers take both from one queue), within the
    time limit; one row each, the library's first, in order."""
    if not todo and not library:
        return []
    opts = opts if opts.started is not None else replace(opts, started=time.time())
    arch, ngpu = arch_here()
    deadline = opts.deadline()
    nworkers = max(1, min(opts.workers or max(ngpu, 1), len(todo) + len(library), max(ngpu, 1)))
    in_process = (arch == "cpu" and interpreting()) or (arch != "cpu" and nworkers == 1)
    if not in_process:
        return _spawn(todo, opts, arch, nworkers, deadline, progress, library)
    from . import handset

    table = handset.load(opts.reference) if opts.reference else None
    device = "cpu" if arch == "cpu" else "cuda:0"
    target = "interpret" if arch == "cpu" else "cuda"
    done: list[dict[str, Any]] = []
    for sig, recorded in library:
        row = library_row(sig, recorded, opts.cache_root, deadline, device, progress)
        done.append(row)
        progress.step(row)
    agent: list[dict[str, Any]] = []
    try:
        with hard_deadline(deadline):
            for i, job in enumerate(todo):
                if time_left(deadline) <= 0:
                    break
                budget = _budget(opts, target, deadline, len(todo) - i, 1).seconds
                progress.start(not_started(job, arch)["signature"], budget)
                row = run_one(job, device, opts, deadline, len(todo) - i, 1, table)
                agent.append(row)
                progress.step(row)
    except TimeLimit:  # between two jobs, or as one ended
        pass
    for job in todo[len(agent):]:
        row = not_started(job, arch)
        agent.append(row)
        progress.step(row)
    return done + agent


def _spawn(todo: list[Job], opts: WarmupOptions, arch: str, nworkers: int, deadline: float | None,
           progress: Progress, library: Sequence[tuple[Any, Any]] = ()) -> list[dict[str, Any]]:
    import multiprocessing as mp
    import queue

    ctx = mp.get_context("spawn")
    jobs, results = ctx.Queue(), ctx.Queue()
    items: list[tuple[Any, ...]] = [("library", sig, recorded) for sig, recorded in library] + \
        [("agent", job) for job in todo]
    for i, item in enumerate(items):  # the library's first: short, and each needs a GPU as the agent's jobs do
        jobs.put((i, _library_item(item[1], item[2]) if item[0] == "library" else item[1].to_json()))
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
    got: dict[int, dict[str, Any]] = {}
    try:
        while len(got) < len(items):
            if time_left(deadline) < -GRACE_S:  # a worker that did not stop itself at the limit
                break
            try:
                row = results.get(timeout=min(5.0, max(0.1, time_left(deadline) + GRACE_S)))
            except queue.Empty:  # check the workers are alive
                if not any(p.is_alive() for p in procs):
                    break
                continue
            got[int(row.pop("index"))] = row
            progress.step(row)
    finally:
        for p in procs:
            p.join(timeout=1.0 if time_left(deadline) < 0 else 5.0)
            if p.is_alive():
                p.terminate()
    rows = []
    for i, item in enumerate(items):
        if i not in got:
            over = time_left(deadline) <= 0
            if item[0] == "library":
                row = _library_not_done(item[1], NOT_FINISHED) if over else \
                    _library_not_done(item[1], "failed", "worker died")
            else:
                row = not_started(item[1], arch)
                row.update(source=NOT_FINISHED) if over else row.update(source="failed", error="worker died")
            progress.step(row)
            got[i] = row
        rows.append(got[i])
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


INTERPRETER_NOTE = ("ms on the CPU: the Triton interpreter's wall clock; it ranks plans of one signature, it says "
                    "nothing about speed")


def _labels(rows: list[dict[str, Any]]) -> list[str]:
    """Each row's signature as the listing prints it: runtime.signature.labels (what tells apart signatures that
    print alike, versions that differ from this environment's) for rows that carry their signature."""
    with_sig = [i for i, r in enumerate(rows) if isinstance(r.get("sig"), dict)]
    out = [str(r.get("signature", "")) for r in rows]
    if with_sig:
        from ..runtime.signature import Signature, current_versions, labels

        sigs = [Signature.from_dict(rows[i]["sig"]) for i in with_sig]
        for i, text in zip(with_sig, labels(sigs, current_versions())):
            out[i] = text
    return out


def _on_cpu(r: dict[str, Any]) -> bool:
    sig = r.get("sig")
    return (sig.get("arch") == "cpu") if isinstance(sig, dict) else str(r.get("signature", "")).endswith(" cpu")


def table(rows: list[dict[str, Any]]) -> str:
    has_ref = any("vs_handset" in r for r in rows)
    cpu = any(_on_cpu(r) and r.get("ms") is not None for r in rows)
    ms = "ms (interpreter)" if cpu else "ms"
    head = f"| signature | source | plan | {ms} | peer | vs peer |" + (" vs hand-set |" if has_ref else "") + \
        " trials | s |"
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r, label in zip(rows, _labels(rows)):
        src = r.get("source", "")
        if src == "failed":
            src = "failed: " + str(r.get("error", ""))[:80].replace("|", "/").replace("\n", " ")
        if r.get("rekeyed_from"):
            src += f" (recorded under {r['rekeyed_from']})"
        cells = [label.replace("|", "/"), src, _short_plan(r.get("plan", "")), _fmt(r.get("ms"), ".4f"),
                 str(r.get("peer") or "-"), _fmt(r.get("speed_vs_peer"), ".2f") + ("x" if r.get("speed_vs_peer")
                                                                                    else "")]
        if has_ref:
            cells.append(_fmt(r.get("vs_handset"), ".3f"))
        cells += [str(r.get("trials") or "-"), _fmt(r.get("seconds"), ".0f")]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append(summary(rows))
    if cpu:
        out.append(INTERPRETER_NOTE)
    return "\n".join(out)


def _gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summary(rows: list[dict[str, Any]]) -> str:
    undone = [r for r in rows if r.get("source") in (STOPPED, NOT_STARTED, NOT_FINISHED)]
    made = [r for r in rows if r.get("source") not in ("failed",) and r not in undone and not str(
        r.get("source", "")).startswith(("cache", "skipped"))]
    failed = [r for r in rows if r.get("source") == "failed"]
    cached = [r for r in rows if str(r.get("source", "")).startswith("cache")]
    synth = sum(float(r.get("seconds") or 0) for r in made + failed)
    comp = sum(float(r.get("compare_seconds") or 0) for r in rows)
    lines = [f"{len(made)} synthesized, {len(cached)} already cached, {len(failed)} failed"
             + (f", {len(undone)} not done (time limit: a new run resumes)" if undone else "")
             + f"; synthesis {synth:.0f} s in total" + (f" (hand-set comparisons: {comp:.0f} s)" if comp else "")]
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
