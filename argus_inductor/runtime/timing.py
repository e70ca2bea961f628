"""Timing, one method for every measurement Argus makes (the agent's trials, the policy search, the measured
swap-in, `argus bench`) and the benchmarks: CUDA-graph replay on the GPU over rotated copies of the operands, so L2
holds none of them between calls and host launch overhead is out of both sides' numbers; a host clock under the
interpreter, where the number only ranks plans relative to each other. Processes sharing a GPU take turns through a
file lock (exclusive); their other GPU work can hold it shared, so that no timing overlaps it."""
from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import config

CUDAGRAPH = "cudagraph median"
DO_BENCH = "do_bench median"
LONG = "events, median of 3 (calls of 10 ms or more)"
WALL = "interpreter wall clock (min of 2)"
LONG_MS = 10.0  # a call this long is timed three times: launch overhead is noise there, device time is not


_HELD: dict[str, int] = {}        # lock file -> how deeply this process holds it
_HELD_LOCK = threading.Lock()
_WAITED = [0.0]                   # seconds this process has spent waiting for the timing lock


def waited_s() -> float:
    """Seconds this process has waited for other processes' timing (searches leave it out of their budget)."""
    return _WAITED[0]


_LOCK_PATH: list[str] = [""]  # the active options' tune_lock (set_lock), over ARGUS_TUNE_LOCK


def set_lock(path: str) -> None:
    """The file processes sharing a GPU lock while they time, as the backend's options name it ("" for none)."""
    _LOCK_PATH[0] = path or ""


def timing_lock() -> str | None:
    """The file that processes sharing a GPU lock while they time (the active options' tune_lock, else
    ARGUS_TUNE_LOCK), or None."""
    return _LOCK_PATH[0] or config.env("ARGUS_TUNE_LOCK") or None


_SHARED: dict[str, Any] = {}     # lock file -> the open file this process holds it shared through


def _flock(f: Any, how: int) -> float:
    """flock(f, how), returning the seconds it waited."""
    import fcntl

    t0 = time.perf_counter()
    fcntl.flock(f, how)
    return time.perf_counter() - t0


def _through_gate(path: str, f: Any, how: int) -> float:
    """Take `how` on `f` after passing the gate file beside `path`: a process waiting for the lock exclusively holds
    the gate, so no new shared holder slips in ahead of it (flock alone lets shared holders starve a waiting one)."""
    import fcntl

    with open(path + ".gate", "a") as gate:
        waited = _flock(gate, fcntl.LOCK_EX)
        try:
            waited += _flock(f, how)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
    return waited


@contextlib.contextmanager
def exclusive(lock: str | None = None) -> Iterator[None]:
    """Hold the file lock `lock` (default: timing_lock()) so that processes timing on one GPU take turns, and no
    process that holds it shared (`shared`: a compile's GPU work) runs meanwhile. Re-entrant within a process: a
    search timing inside a benchmark's locked phase does not wait on itself; inside this process's own `shared` it
    lets the shared hold go while it waits (two such waiters never deadlock) and takes it back after."""
    path = lock or timing_lock()
    if not path:
        yield
        return
    import fcntl

    with _HELD_LOCK:
        depth = _HELD.get(path, 0)
        _HELD[path] = depth + 1
    try:
        if depth:
            yield
            return
        held = _SHARED.get(path)
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_UN)
        try:
            with open(path, "a") as f:
                _WAITED[0] += _through_gate(path, f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
        finally:
            if held is not None:
                _WAITED[0] += _through_gate(path, held, fcntl.LOCK_SH)
    finally:
        with _HELD_LOCK:
            _HELD[path] -= 1


@contextlib.contextmanager
def shared(lock: str | None = None) -> Iterator[None]:
    """Hold the lock `lock` (default: timing_lock()) shared: any number of processes at once, but never while one
    holds it exclusively. For GPU work that is not a timing but would disturb one (a compile's first runs, its
    autotuning): with it, no timing shares the GPU with another process's work. Not re-entrant; `exclusive` inside
    it is (see there)."""
    path = lock or timing_lock()
    with _HELD_LOCK:
        inside = _HELD.get(path, 0) > 0  # within this process's own exclusive hold: already alone
    if not path or path in _SHARED or inside:
        yield
        return
    import fcntl

    f = open(path, "a")
    try:
        _WAITED[0] += _through_gate(path, f, fcntl.LOCK_SH)
        _SHARED[path] = f
        try:
            yield
        finally:
            del _SHARED[path]
            fcntl.flock(f, fcntl.LOCK_UN)
    finally:
        f.close()


def time_ms(fns: list[Callable[[], Any]], target: str, rep_ms: int = 40,
            method: str | None = None) -> tuple[float, str]:
    """(milliseconds per call, method). fns: the same call on independent copies of the operands, run in turn so L2
    holds none of them (as benchmarks/sweep.py times); each has already run once. method: force one (a peer is
    timed the way our kernel was); None picks CUDA-graph replay and falls back to plain launches when the calls
    cannot be captured."""
    n = len(fns)

    def run_all() -> None:
        for f in fns:
            f()

    if target == "interpret":
        best = math.inf
        for _ in range(2):
            t0 = time.perf_counter()
            fns[0]()
            best = min(best, (time.perf_counter() - t0) * 1e3)
        return best, WALL
    from . import tiers

    # a background swap-in's timing takes the device from the model's calls first, then the other processes' turn
    # (the order every holder of both takes them in)
    with tiers.device_turn() if tiers.in_background() else contextlib.nullcontext(), exclusive():
        return _time_gpu(run_all, n, rep_ms, method)


def _time_gpu(run_all: Callable[[], None], n: int, rep_ms: int, method: str | None) -> tuple[float, str]:
    import torch
    import triton.testing

    torch.cuda.synchronize()
    if method in (None, LONG):  # one call first: a long one is timed three times, not for rep_ms of replays
        times = [_events(run_all) / n]
        if method == LONG or times[0] >= LONG_MS:
            times += [_events(run_all) / n for _ in range(2)]
            return sorted(times)[1], LONG
    if method in (None, CUDAGRAPH):
        try:
            return graph_ms(run_all, rep_ms) / n, CUDAGRAPH
        except Exception:
            if method == CUDAGRAPH:
                raise
            torch.cuda.synchronize()
    return float(triton.testing.do_bench(run_all, warmup=10, rep=rep_ms, return_mode="median")) / n, DO_BENCH


def graph_ms(fn: Callable[[], None], rep_ms: int, retries: int = 10) -> float:
    """Milliseconds of one `fn()` by CUDA-graph replay (device time, no host launch latency): captured once to
    estimate it, again as enough calls to fill `rep_ms`, that graph replayed `retries` times, the median. Captured
    in the thread-local mode, so another thread's CUDA work meanwhile (the model's, while a background swap-in
    times) neither fails nor invalidates the capture."""
    import statistics

    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()  # warm, on the capture stream
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            fn()
        torch.cuda.synchronize()
        estimate = _events(graph.replay)
        repeat = max(1, int(rep_ms / estimate)) if estimate > 0 else 1000
        del graph
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            for _ in range(repeat):
                fn()
        torch.cuda.synchronize()
        times = [_events(graph.replay) / repeat for _ in range(retries)]
    del graph
    return float(statistics.median(times))


def _events(fn: Callable[[], None]) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


def rotation(operand_bytes: int, limit: int = 100 * 2**20, most: int = 7) -> int:
    """How many extra copies of the operands keep L2 (50-60 MB on Hopper) from holding them between calls."""
    if operand_bytes <= 0 or operand_bytes >= limit:
        return 0
    return min(most, math.ceil(limit / operand_bytes))
