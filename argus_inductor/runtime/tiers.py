"""Compiled code that is replaced once better code is ready (tiered compilation).

The measured swap-in (graph/swapin.py) decides each Argus op signature by timing it against Inductor's code. Done
while the backend compiles, that work (the checker, Argus's Triton compiles, Inductor's compile of the fallback
alone, the timing) is all on the first call. A `Tiered` callable runs the first tier (Inductor's code for every
signature not yet decided) from the first call on, and from the second call (or `settle()`) builds the second tier in
a background thread; when the second tier is ready, later calls run it. What each tier runs is correct on its
own, so a call never waits for the background, except for the device: a background timing and a call of a tiered
graph never run on the GPU at once (`device_turn`), so neither slows the other's kernels and the verdict is not
skewed by the model's own work. One Inductor compile runs at a time in the process (`COMPILE_LOCK`: the backend's
whole compile, and each of the background's Inductor compiles, since Inductor's configuration is process-wide; a
new compile of the model waits for at most one of the background's, not for its whole build). The checker proves
one kernel at a time (invariants.api), as z3's Python API shares one context.

The background never traces a graph itself: Inductor's compile traces with torch.fx, which while it traces patches
nn.Module.__call__ and sets a flag for the whole process, and a torch.compile'd call on any other thread at that
moment fails ("Detected that you are using FX to symbolically trace a dynamo-optimized function"; seen on the H200
when the background compiled while the model ran). So the background hands each Inductor compile (`on_caller`) to
the next call of a tiered graph, which runs it on its own thread before its own work, as Inductor compiles a graph
on the calling thread; `settle()` runs them too. The rest of the build (Argus's plans, the checker, Triton's
compiles, the timing) stays in the background.

A second tier whose build fails, or which fails its first call, leaves the first in place for good (the call is
run again by the first tier; a warning says why). The background lets go of the graph and the first call's inputs
once it has run. `settle()` waits for every background tier in the process (a benchmark calls it before it times;
`argus_inductor.settle`). At exit the background work still pending stops after the step it is in.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

log = logging.getLogger("argus_inductor")
T = TypeVar("T")

COMPILE_LOCK = threading.RLock()  # one Inductor compile at a time in this process: the backend's, the background's
_DEVICE = threading.Lock()        # a call of a tiered graph, or a background timing: never both at once
_PENDING: set[Tiered] = set()   # building a second tier
_ARMED: set[Tiered] = set()     # called once: the build starts at the next call, or at settle()
_PENDING_LOCK = threading.Lock()
_CLOSING = threading.Event()
_LOCAL = threading.local()        # .background: this thread builds a second tier (or runs a job of one)
_JOBS: deque[_Job] = deque()    # the background's compiles, for the next caller of a tiered graph (on_caller)
_JOBS_LOCK = threading.Lock()


class Closing(BaseException):
    """The process is exiting: the background's build stops here (a BaseException, so no `except Exception` on
    the way takes it for the failure of a step and decides from what is left)."""


def closing() -> bool:
    """Whether the process is exiting: background work stops at its next step."""
    return _CLOSING.is_set()


def in_background() -> bool:
    """Whether the calling thread is building a second tier, or running a compile the background handed to it."""
    return getattr(_LOCAL, "background", False)


class _Job:
    def __init__(self, fn: Callable[[], Any], state: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        self.fn, self.state = fn, state
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


def on_caller(fn: Callable[[], T]) -> T:
    """`fn()` (an Inductor compile: it traces with torch.fx), run where no other thread's compiled call can meet its
    trace: from the background, on the thread that next calls a tiered graph (before that call's own work) or
    waits in settle(), under the compiling thread's state; the background waits for it. Called on any other
    thread, `fn` runs there. Raises `Closing` where the process exits before a caller took it."""
    if not getattr(_LOCAL, "background", False) or getattr(_LOCAL, "serving", False):
        return fn()
    job = _Job(fn, getattr(_LOCAL, "state", contextlib.nullcontext))
    with _JOBS_LOCK:
        _JOBS.append(job)
    while not job.done.wait(0.02):
        if _CLOSING.is_set():
            with _JOBS_LOCK:
                if job in _JOBS:  # not taken: nobody will run it
                    _JOBS.remove(job)
                    raise Closing()
    if job.error is not None:
        raise job.error
    return job.result


def handed_over() -> int:
    """How many compiles the background has handed over that no caller has taken yet."""
    return len(_JOBS)


def serve() -> None:
    """Run the compiles the background handed over (on_caller), here and now; a tiered graph's call and settle()
    do it first thing. Not while this thread captures a CUDA graph (a program recording its compiled model into a
    graph of its own): a compile's device work cannot be captured, so the jobs wait for a call outside it."""
    if _JOBS and _capturing():
        return
    while _JOBS:
        with _JOBS_LOCK:
            if not _JOBS:
                return
            job = _JOBS.popleft()
        was = getattr(_LOCAL, "background", False), getattr(_LOCAL, "serving", False)
        _LOCAL.background = _LOCAL.serving = True  # its phases are the background's, not this call's
        try:
            import torch

            with job.state(), torch._guards.tracing(None):  # its own compile, in no trace of this thread's
                job.result = job.fn()
        except Exception as e:  # the background's to handle: it keeps the first tier
            job.error = e
        except BaseException:  # Ctrl-C in the caller's call: the caller gets it, the background stops quietly
            job.error = Closing()
            raise
        finally:
            _LOCAL.background, _LOCAL.serving = was
            job.done.set()


@contextlib.contextmanager
def device_turn() -> Iterator[None]:
    """Hold the device against calls of tiered graphs (a background timing): the calls queued before it finish
    first (the device is synchronized on entry and on exit), and no call starts until it is done."""
    with _DEVICE:
        _synchronize()
        try:
            yield
        finally:
            _synchronize()


def _capturing() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class Tiered:
    """A compiled graph that runs `first` until `build()` (run in a background thread from the second call, or from
    settle()) returns the second tier; None from `build`, or an exception, keeps `first` for good.

    `state`: a context manager factory the background enters around `build` (the compiling thread's grad mode,
    inference mode and current device, which are per thread)."""

    def __init__(self, first: Callable[..., Any], build: Callable[[], Callable[..., Any] | None],
                 state: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
                 name: str = "graph") -> None:
        self._fn = first
        self._first: Callable[..., Any] | None = first  # kept until the second tier's first call has run
        self._trial = False                               # the second tier has not been called yet
        self._trial_lock = threading.Lock()
        self._build: Callable[[], Callable[..., Any] | None] | None = build
        self._state = state
        self.name = name
        self._started = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.replaced = False           # the second tier runs
        self.error: BaseException | None = None
        self.seconds: float | None = None  # the background's wall time

    def __call__(self, *args: Any) -> Any:
        if _JOBS:
            serve()
        if self._done.is_set():
            if self._trial:
                return self._first_of_second(args)
            return self._fn(*args)
        with _DEVICE:  # the first tier until the second is settled (and has had its first call, below)
            out = (self._first or self._fn)(*args)
        if not self._started.is_set():
            # not at the end of the first call: the build holds the interpreter lock through long native calls
            # (Triton's compiles), which would keep the caller's first-call work after this (a device sync, the
            # next line of the program) waiting. A program that calls once never pays for it.
            with _PENDING_LOCK:
                armed = self in _ARMED
                _ARMED.add(self)
            if armed:
                self.start()
        return out

    def _first_of_second(self, args: tuple[Any, ...]) -> Any:
        """The second tier's first call: where it fails, the first tier (which ran these graphs' calls before) takes
        the call and stays; the failure is logged once. A graph that writes its inputs in place and failed part way
        has written them once: such writes in a compiled graph are cache updates, which the first tier writes
        again with the same values."""
        with self._trial_lock:
            if not self._trial:
                return self._fn(*args)
            try:
                out = self._fn(*args)
            except Exception as e:
                self._fn, self.replaced, self.error = self._first, False, e
                log.warning("argus: the measured graph of %s failed on its first call (%s: %s); Inductor's code "
                            "stays", self.name, type(e).__name__, _first_line(e))
                out = self._fn(*args)
            self._trial = False
            self._first = None
            return out

    def start(self) -> None:
        """Start building the second tier (once; the second call or settle() does it)."""
        with _PENDING_LOCK:
            if self._started.is_set():
                return
            self._started.set()
            _ARMED.discard(self)
            if _CLOSING.is_set():
                self._done.set()
                return
            _PENDING.add(self)
        self._thread = threading.Thread(target=self._run, name=f"argus-tier-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        _LOCAL.background = True
        _LOCAL.state = self._state
        try:
            if not _CLOSING.is_set() and self._build is not None:
                with self._state():  # its Inductor compiles take COMPILE_LOCK each, not the whole build
                    second = self._build()
                if second is not None:
                    self._trial = True
                    self._fn = second
                    self.replaced = True
        except BaseException as e:  # noqa: BLE001  (the first tier is correct: it stays)
            self.error = e
            if not isinstance(e, Closing):
                log.warning("argus: the background swap-in of %s failed (%s: %s); Inductor's code stays", self.name,
                            type(e).__name__, _first_line(e))
        finally:
            self._build = None  # what it held (the graph, the first call's inputs) is not kept alive
            if not self._trial:
                self._first = None
            self.seconds = time.perf_counter() - t0
            self._done.set()
            with _PENDING_LOCK:
                _PENDING.discard(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the second tier (started if it was not yet), running the compiles it hands over; whether it is
        settled."""
        self.start()
        return _wait_serving(self._done, None if timeout is None else time.monotonic() + timeout)


def _wait_serving(done: threading.Event, deadline: float | None) -> bool:
    while True:
        serve()
        step = 0.02 if deadline is None else min(0.02, max(0.0, deadline - time.monotonic()))
        if done.wait(step):
            serve()
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def pending() -> list[Tiered]:
    """The tiered graphs whose second tier is being built, or will be at their next call."""
    with _PENDING_LOCK:
        return list(_PENDING | _ARMED)


def settle(timeout: float | None = None) -> bool:
    """Build every second tier of this process that a call has asked for (starting those that wait for their second
    call) and wait until each is built (or has failed, keeping its first tier); False where `timeout` seconds passed
    first. A graph never called has nothing to build."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _PENDING_LOCK:
            armed = list(_ARMED)
        for t in armed:
            t.start()
        left = pending()
        if not left:
            return True
        for t in left:
            if not _wait_serving(t._done, deadline):
                return False


def _at_exit() -> None:
    _CLOSING.set()
    with _PENDING_LOCK:
        _ARMED.clear()
    for t in pending():
        if t._thread is not None:
            t._thread.join()


atexit.register(_at_exit)

__all__ = ["COMPILE_LOCK", "Closing", "Tiered", "closing", "device_turn", "handed_over", "in_background",
           "on_caller", "pending", "serve", "settle"]
