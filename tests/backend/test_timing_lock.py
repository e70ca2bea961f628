"""The timing lock shared between processes on one GPU (runtime/timing.py): a timing holds it exclusively; other GPU
work (a compile's first runs, with the KernelBench runner's --isolate-timing) holds it shared, so compiles run side by
side but never during another process's timing; a process waiting to time keeps new shared holders out (the gate),
and processes that time from inside their own shared hold neither deadlock nor lose it. Checked with real processes
and non-blocking probes of the lock files, never with timings."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from argus_inductor.runtime.timing import exclusive, shared

PROBE = """
import fcntl, sys
f = open(sys.argv[1], "a")
try:
    fcntl.flock(f, (fcntl.LOCK_EX if sys.argv[2] == "ex" else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("held")
"""


def _probe(path: str, how: str) -> str:
    """Whether another process could take `path` now (ex: exclusively, sh: shared), without waiting."""
    return subprocess.run([sys.executable, "-c", PROBE, path, how], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def _wait_for(cond, what: str, limit_s: float = 60.0) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_shared_holders_coexist_and_keep_a_timing_out(tmp_path: Path) -> None:
    lock = str(tmp_path / "gpu.lock")
    with shared(lock):
        assert (_probe(lock, "sh"), _probe(lock, "ex")) == ("free", "held")
        with exclusive(lock):  # this process's own timing, inside its shared hold
            assert (_probe(lock, "sh"), _probe(lock, "ex")) == ("held", "held")
            with shared(lock):  # GPU work inside its own timing: already alone, no self-deadlock
                pass
        assert (_probe(lock, "sh"), _probe(lock, "ex")) == ("free", "held")  # shared again
    assert _probe(lock, "ex") == "free"


WAITER = """
import sys
from pathlib import Path
from argus_inductor.runtime.timing import exclusive, shared
lock, mark, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if mode == "time":
    with exclusive(lock):
        mark.write_text("timed")
else:  # a compile that times its own candidates inside its shared hold
    with shared(lock):
        Path(str(mark) + ".in").write_text("in")
        while not Path(sys.argv[4]).exists():
            pass
        with exclusive(lock):
            mark.write_text("timed")
"""


def _start(*args: str) -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])
    return subprocess.Popen([sys.executable, "-c", WAITER, *args], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_waiting_timing_keeps_new_compiles_out_until_it_has_run(tmp_path: Path) -> None:
    lock, mark = str(tmp_path / "gpu.lock"), tmp_path / "timed"
    with shared(lock):  # a compile in flight
        p = _start(lock, str(mark), "time")
        _wait_for(lambda: _probe(lock + ".gate", "ex") == "held", "the timing process to wait at the gate")
        assert not mark.exists()  # it waits for the compile in flight
        # a new compile would have to pass the gate now: it waits behind the timing (no starvation)
        assert _probe(lock + ".gate", "ex") == "held"
    assert p.wait(timeout=60) == 0, p.stderr.read()
    assert mark.read_text() == "timed"
    assert _probe(lock, "ex") == "free" and _probe(lock + ".gate", "ex") == "free"


def test_two_compiles_that_time_inside_their_shared_holds_do_not_deadlock(tmp_path: Path) -> None:
    lock, go = str(tmp_path / "gpu.lock"), tmp_path / "go"
    marks = [tmp_path / "a", tmp_path / "b"]
    procs = [_start(lock, str(m), "compile", str(go)) for m in marks]
    _wait_for(lambda: all(Path(str(m) + ".in").exists() for m in marks), "both compiles to hold the lock shared")
    assert _probe(lock, "ex") == "held"
    go.write_text("go")  # both now ask to time while each holds the lock shared
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    assert [m.read_text() for m in marks] == ["timed", "timed"]
