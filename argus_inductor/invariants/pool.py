"""Proofs in worker processes: the checker's proofs of many kernels at once, beside the caller's own work.

The checker proves one kernel at a time in a process (z3's Python API shares one context, api._Z3), and most of its
time is Python building z3 terms, which holds the GIL: proofs on threads would take turns with the backend's own
compiles. A `ProofPool` runs them in `python -m argus_inductor.invariants.worker` processes instead (subprocesses,
not multiprocessing: a spawned multiprocessing child imports the user's __main__ again, and a forked one would copy a
process that may hold a CUDA context). A job names a kernel by the module that defines it and its name
(`Kernel.module`, a package or user module the worker imports as the caller did) and carries a digest of the
kernel's source: a worker whose kernel reads differently refuses the job, and the caller proves it itself. Only such
kernels go to the pool; a kernel read from text (an agent's, a cache entry's) is proved in the caller's process.

The pool starts its workers at the first job and stops them after `idle_s` without one (each holds an imported
torch, about 250 MB), and at exit. A worker that dies fails its job (the caller proves the kernel itself) and is
started again for the next one. What a worker returns is `VerificationResult.to_json()`, the same JSON the caller
would have stored: the verdict of the same checker on the same kernel, policy, shapes, assumptions, read sets and
budget.
"""
from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dsl.policy import Policy
from ..dsl.runtime import Kernel
from .readsets import ReadSet

IDLE_S = 30.0


def source_digest(kernel: Kernel) -> str:
    return hashlib.sha256(kernel.ir.source.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class ProofJob:
    """One `verify(kernel, policy, shapes, assumptions=..., budget_s=..., reads=...)` call, as data."""

    module: str
    name: str
    digest: str                              # of the kernel's source, as the caller read it
    policy: tuple[tuple[str, Any], ...]      # Policy.as_dict(), sorted
    shapes: tuple[tuple[str, int], ...]
    assumptions: tuple[str, ...]
    budget_s: float
    reads: tuple[ReadSet, ...]

    def as_json(self) -> str:
        d = dataclasses.asdict(self)
        d["reads"] = [dataclasses.asdict(r) for r in self.reads]
        return json.dumps(d)

    @staticmethod
    def from_json(text: str) -> ProofJob:
        d = json.loads(text)
        reads = tuple(ReadSet(r["output"], tuple(r["facts"]), tuple((a, b) for a, b in r["reduce"]), r["op"])
                      for r in d["reads"])
        return ProofJob(d["module"], d["name"], d["digest"], tuple((k, v) for k, v in d["policy"]),
                        tuple((k, int(v)) for k, v in d["shapes"]), tuple(d["assumptions"]), float(d["budget_s"]),
                        reads)


def job_for(kernel: Kernel, policy: Policy, shapes: Mapping[str, int], assumptions: Sequence[str], budget_s: float,
            reads: Sequence[ReadSet]) -> ProofJob | None:
    """The job that proves `kernel` as verify would here; None where a worker could not import the same kernel (it
    was read from text, not defined in a module)."""
    if not kernel.module:
        return None
    return ProofJob(kernel.module, kernel.name, source_digest(kernel), tuple(sorted(policy.as_dict().items())),
                    tuple(sorted((k, int(v)) for k, v in shapes.items())), tuple(assumptions), float(budget_s),
                    tuple(reads))


class _Worker:
    """One worker process and the thread that feeds it jobs from the pool's queue."""

    def __init__(self, pool: ProofPool) -> None:
        self.pool = pool
        self.proc: subprocess.Popen[str] | None = None
        self.thread = threading.Thread(target=self._serve, name="argus-proof-feeder", daemon=True)
        self.thread.start()

    def _start(self) -> subprocess.Popen[str]:
        root = str(Path(__file__).resolve().parents[2])  # the folder argus_inductor is imported from
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *(p for p in sys.path if p)]),
               "CUDA_VISIBLE_DEVICES": ""}  # the checker needs no GPU
        trace = os.environ.get("ARGUS_VERIFY_TRACE") not in (None, "", "0")  # the checker's trace: to our stderr
        return subprocess.Popen([sys.executable, "-m", "argus_inductor.invariants.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=None if trace else subprocess.DEVNULL, text=True,
                                env=env, bufsize=1)

    def _serve(self) -> None:
        while True:
            try:
                item = self.pool.jobs.get(timeout=self.pool.idle_s)
            except queue.Empty:
                self.stop()  # idle: give the memory back; the next job starts a new process
                continue
            if item is None:
                self.stop()
                return
            job, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = self._start()
                assert self.proc.stdin is not None and self.proc.stdout is not None
                self.proc.stdin.write(job.as_json() + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError("the proof worker exited")
                reply = json.loads(line)
            except Exception as e:  # the worker is gone or out of step: a new one for the next job
                self.stop()
                fut.set_exception(e)
                continue
            if "error" in reply:  # a job this worker cannot prove; the worker itself is fine
                fut.set_exception(RuntimeError(reply["error"]))
            else:
                fut.set_result(reply["result"])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:
            proc.kill()


class ProofPool:
    """`workers` processes proving jobs in the order they come (submit)."""

    def __init__(self, workers: int, idle_s: float = IDLE_S) -> None:
        if workers < 1:
            raise ValueError("a proof pool needs at least one worker")
        self.idle_s = idle_s
        self.jobs: queue.Queue[tuple[ProofJob, Future[dict[str, Any]]] | None] = queue.Queue()
        self.workers = [_Worker(self) for _ in range(workers)]

    def submit(self, job: ProofJob) -> Future[dict[str, Any]]:
        fut: Future[dict[str, Any]] = Future()
        self.jobs.put((job, fut))
        return fut

    def close(self) -> None:
        """Stop the workers now (a proof in flight fails: nobody waits for it at exit)."""
        for _ in self.workers:
            self.jobs.put(None)
        for w in self.workers:
            proc = w.proc
            if proc is not None:
                proc.kill()
        for w in self.workers:
            w.thread.join(timeout=5)


_POOL: list[ProofPool] = []
_POOL_LOCK = threading.Lock()


def shared_pool(workers: int) -> ProofPool | None:
    """The process's pool (started with `workers` processes at its first use; None for fewer than 2: proving in
    the caller is as fast then)."""
    if workers < 2:
        return None
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ProofPool(workers))
            atexit.register(_close)
        return _POOL[0]


def _close() -> None:
    with _POOL_LOCK:
        for p in _POOL:
            p.close()
        _POOL.clear()


def wait(fut: Future[dict[str, Any]], timeout_s: float) -> dict[str, Any] | None:
    """A job's result, or None where no worker has started it yet (it is taken back: the caller, idle otherwise,
    proves the kernel itself), its worker failed, or it took longer than `timeout_s` from now."""
    if fut.cancel():
        return None
    try:
        return fut.result(timeout=timeout_s)
    except Exception:
        fut.cancel()
        return None


__all__ = ["ProofJob", "ProofPool", "job_for", "shared_pool", "source_digest", "wait"]
