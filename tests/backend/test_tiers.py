"""The background swap-in (runtime/tiers.py, issue 39 item 4): a graph whose signatures have no verdict yet runs
Inductor's code from its first call, and Argus's kernels are measured in a background thread; later calls run what
the measurement chose. Under the interpreter with a fake clock (graph/swapin.measuring_with), real threads, real
Inductor compiles."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import argus_inductor
from argus_inductor.graph.swapin import PENDING, measuring_with
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime import tiers

from .test_swapin import Clock


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(32, 48)
        self.down = torch.nn.Linear(48, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _compiled(clock: Clock, **options):
    model = MLP().eval()  # its parameters require grad: the background must compile for inference as this thread
    f = torch.compile(model, backend="argus", options={"ops": "gemm", **options})
    return model, f


def _argus_calls() -> int:
    return sum(e.calls for e in report_mod.entries())


@pytest.mark.parametrize("argus_ms, fallback_ms, replaced", [(1.0, 2.0, True), (2.0, 1.0, False)])
def test_first_call_runs_inductors_code_and_the_measured_winner_follows(fresh_cache: Path, argus_ms, fallback_ms,
                                                                        replaced) -> None:
    clock = Clock(argus_ms, fallback_ms)
    x = torch.randn(8, 32)
    with measuring_with(clock, ("cpu",)), torch.no_grad():
        model, f = _compiled(clock)
        out = f(x)  # the first tier: no Argus op, nothing timed during the compile
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
        sources = {e.source for e in report_mod.entries()}
        assert sources == {PENDING}, sources
        assert argus_inductor.settle(timeout=600)
        assert clock.calls, "the background measured nothing"
        t = _tiers_of(f)
        before = _argus_calls()
        out = f(x)
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert t and t[0].error is None and t[0].replaced is replaced
    assert (_argus_calls() > before) is replaced  # the second tier runs Argus's kernels where they won
    notes = [n for e in report_mod.entries() for n in e.notes]
    assert any(n.startswith("swap-in: " + ("argus" if replaced else "fallback")) for n in notes), notes
    phases = report_mod.phases()
    assert any(k.startswith("background: swap-in") for k in phases), phases


def test_a_stored_verdict_is_applied_at_once_with_no_background(fresh_cache: Path) -> None:
    x = torch.randn(8, 32)
    with measuring_with(Clock(1.0, 2.0), ("cpu",)), torch.no_grad():
        _, f = _compiled(Clock(1.0, 2.0))
        f(x)
        assert argus_inductor.settle(timeout=600)
    assert len(_created) == 1
    _created.clear()
    torch._dynamo.reset()
    report_mod.clear()
    clock = Clock(RuntimeError("must not time"), RuntimeError("must not time"))
    with measuring_with(clock, ("cpu",)), torch.no_grad():
        model, f = _compiled(clock)
        torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
        assert not tiers.pending() and not _tiers_of(f)
    assert clock.calls == [] and _argus_calls() > 0  # the stored verdicts (argus) ran on the first call


def test_background_off_measures_while_compiling(fresh_cache: Path) -> None:
    clock = Clock(1.0, 2.0)
    x = torch.randn(8, 32)
    report_mod.clear_phases()
    with measuring_with(clock, ("cpu",)), torch.no_grad():
        model, f = _compiled(clock, swapin_background=False)
        torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
        assert clock.calls and not tiers.pending() and not _created
    assert _argus_calls() > 0 and not any(k.startswith("background:") for k in report_mod.phases())


def test_a_failing_background_keeps_the_first_tier(fresh_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = tiers.Tiered(lambda x: x + 1, lambda: (_ for _ in ()).throw(RuntimeError("no compiler")), name="g")
    assert t(1) == 2
    assert t.wait(60)
    assert t(1) == 2 and not t.replaced and isinstance(t.error, RuntimeError)
    assert "background swap-in of g failed (RuntimeError: no compiler)" in caplog.text


def test_the_second_tier_replaces_the_first_and_none_keeps_it() -> None:
    t = tiers.Tiered(lambda x: ("first", x), lambda: lambda x: ("second", x))
    assert t(1) == ("first", 1) and t.wait(60) and t(2) == ("second", 2) and t.replaced
    keep = tiers.Tiered(lambda x: ("first", x), lambda: None)
    keep(0)
    assert keep.wait(60) and keep(3) == ("first", 3) and not keep.replaced and keep.error is None


def test_the_background_starts_at_the_second_call_and_settle_waits_for_it() -> None:
    """Not at the end of the first call, whose caller's next steps (a device sync, say) would wait for the
    interpreter lock the build holds through Triton's native compiles; settle() starts what a call asked for."""
    gate = threading.Event()
    started = threading.Event()

    def build():
        started.set()
        gate.wait(60)
        return lambda: "second"

    t = tiers.Tiered(lambda: "first", build)
    assert t() == "first" and not started.wait(0.3)  # the first call: nothing runs beside its caller
    assert t in tiers.pending()
    assert t() == "first" and started.wait(60)       # the second call starts the build
    assert t() == "first" and not argus_inductor.settle(timeout=0.1)  # still building: calls run the first tier
    gate.set()
    assert argus_inductor.settle(timeout=60) and t() == "second"
    once = tiers.Tiered(lambda: "first", lambda: lambda: "second")
    assert once() == "first" and argus_inductor.settle(timeout=60) and once() == "second"  # settle() starts it
    never = tiers.Tiered(lambda: "first", lambda: lambda: "second")
    assert never not in tiers.pending() and argus_inductor.settle(timeout=60)  # never called: nothing to build


def test_a_call_waits_for_a_background_timing_and_the_other_way_round() -> None:
    """A background timing and a call of a tiered graph never run on the device at once (device_turn)."""
    inside = threading.Event()
    release = threading.Event()
    log: list[str] = []

    def timing():
        with tiers.device_turn():
            inside.set()
            release.wait(60)
            log.append("timing done")

    t = tiers.Tiered(lambda: log.append("call"), lambda: None)
    t.wait(60)  # settled at once (None): calls no longer take the turn...
    t2 = tiers.Tiered(lambda: log.append("call"), lambda: time.sleep(0.5))
    th = threading.Thread(target=timing)
    th.start()
    assert inside.wait(60)
    caller = threading.Thread(target=t2)
    caller.start()
    time.sleep(0.2)
    assert log == []  # ...but a pending one waits for the timing
    release.set()
    caller.join(60)
    th.join(60)
    assert log == ["timing done", "call"]
    assert argus_inductor.settle(timeout=60)


def _tiers_of(f) -> list[tiers.Tiered]:
    """The Tiered callables the backend made in this test."""
    return list(_created)


_created: list[tiers.Tiered] = []
_orig_init = tiers.Tiered.__init__


def _tracking_init(self, *a, **k) -> None:
    _orig_init(self, *a, **k)
    _created.append(self)


@pytest.fixture(autouse=True)
def _track(monkeypatch: pytest.MonkeyPatch):
    _created.clear()
    monkeypatch.setattr(tiers.Tiered, "__init__", _tracking_init)
    yield
    assert tiers.settle(timeout=600)


def test_a_second_tier_that_fails_its_first_call_gives_the_call_to_the_first(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(x):
        raise RuntimeError("launch failed")

    t = tiers.Tiered(lambda x: ("first", x), lambda: broken, name="g")
    t(0)
    assert t.wait(60) and t.replaced
    assert t(1) == ("first", 1) and not t.replaced and isinstance(t.error, RuntimeError)
    assert t(2) == ("first", 2)
    assert "measured graph of g failed on its first call (RuntimeError: launch failed)" in caplog.text


def test_the_background_lets_go_of_what_it_built_from() -> None:
    """The graph and the first call's inputs the build closes over are not kept alive once it has run."""
    import gc
    import weakref

    class Big:
        pass

    big = Big()
    ref = weakref.ref(big)
    t = tiers.Tiered(lambda: None, lambda b=big: None)
    del big
    t()
    assert t.wait(60)
    gc.collect()
    assert ref() is None


def test_an_exiting_process_stops_the_background_after_its_step(tmp_path: Path) -> None:
    """A program that ends while a background swap-in is still measuring exits after the step in flight, without
    finishing the rest and without a traceback."""
    import subprocess
    import sys

    code = (
        "import atexit, time\n"
        "steps = []\n"
        "atexit.register(lambda: print('steps', len(steps), flush=True))  # runs last: after tiers' own\n"
        "import torch\n"
        "from argus_inductor.runtime import tiers\n"
        "def build():\n"
        "    for i in range(300):\n"
        "        if tiers.closing():\n"
        "            return None\n"
        "        steps.append(i)\n"
        "        time.sleep(0.1)\n"
        "    return None\n"
        "t = tiers.Tiered(lambda: 0, build)\n"
        "t()\n"
        "t()\n"
        "time.sleep(0.35)\n"
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - t0
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    steps = int(proc.stdout.split()[-1])
    assert 2 <= steps < 100 and took < 25, (steps, took)  # 300 steps would take 30 s


@pytest.mark.parametrize("argus_ms, fallback_ms", [(1.0, 2.0), (2.0, 1.0)])
def test_a_small_llama_goes_through_both_tiers(fresh_cache: Path, argus_ms, fallback_ms) -> None:
    """Attention, GEMMs (some decided together), norms and the embedding: all pending on the first call, which runs
    Inductor's code; after settle() each runs the side the clock made faster, and the model still matches eager."""
    from argus_inductor.demo import TinyLlama

    torch.manual_seed(0)
    model = TinyLlama(layers=1).eval()
    tokens = torch.randint(0, model.embed.num_embeddings, (1, 8))
    with measuring_with(Clock(argus_ms, fallback_ms), ("cpu",)), torch.no_grad():
        ref = model(tokens)
        f = torch.compile(model, backend="argus", options={"ops": "all"})
        torch.testing.assert_close(f(tokens), ref, rtol=1e-4, atol=1e-4)
        kinds = {e.op for e in report_mod.entries()}
        assert {"attention", "gemm"} <= kinds and {e.source for e in report_mod.entries()} == {PENDING}
        assert argus_inductor.settle(timeout=900)
        torch.testing.assert_close(f(tokens), ref, rtol=1e-4, atol=1e-4)
    won = argus_ms < fallback_ms
    assert all((e.calls > 0) is won for e in report_mod.entries()), [(e.op, e.calls) for e in report_mod.entries()]
    assert _created and _created[0].replaced is won and _created[0].error is None


@pytest.mark.parametrize("argus_ms, fallback_ms", [(1.0, 2.0), (2.0, 1.0)])
def test_the_model_runs_on_its_thread_while_the_background_works(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 argus_ms, fallback_ms) -> None:
    """The background never traces with torch.fx: a trace patches nn.Module.__call__ and sets a flag for the whole
    process, and a torch.compile'd call on another thread meanwhile fails (on the H200: 'Detected that you are
    using FX to symbolically trace a dynamo-optimized function'). Its Inductor compiles run on the thread that calls
    the model, inside a call; calls keep matching eager throughout, on both sides of the verdict."""
    traced_on: list[str] = []
    orig = torch.fx.Tracer.trace

    def trace(self, *a, **k):
        traced_on.append(threading.current_thread().name)
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.fx.Tracer, "trace", trace)
    clock = Clock(argus_ms, fallback_ms)
    x = torch.randn(8, 32)
    with measuring_with(clock, ("cpu",)), torch.no_grad():
        model, f = _compiled(clock)
        ref = model(x)
        torch.testing.assert_close(f(x), ref, rtol=1e-4, atol=1e-4)
        calls = 0
        deadline = time.monotonic() + 600
        while tiers.pending() and time.monotonic() < deadline:
            torch.testing.assert_close(f(x), ref, rtol=1e-4, atol=1e-4)  # the second call starts the background
            calls += 1
        assert not tiers.pending()
        torch.testing.assert_close(f(x), ref, rtol=1e-4, atol=1e-4)
    assert calls >= 2 and clock.calls, (calls, clock.calls)
    t = _tiers_of(f)
    assert t and t[0].error is None and t[0].replaced is (argus_ms < fallback_ms)
    assert traced_on and not [n for n in traced_on if n.startswith("argus-tier")], traced_on
    phases = report_mod.phases()
    assert any(k.startswith("background: swap-in: fallback compile") for k in phases), phases  # run by a call


def test_a_compile_handed_over_at_exit_stops_the_background_quietly(tmp_path: Path) -> None:
    """A background waiting for a caller to run its compile, in a program that never calls again, stops at exit:
    no traceback, no warning, no hang."""
    import subprocess
    import sys

    code = (
        "import time\n"
        "from argus_inductor.runtime import tiers\n"
        "asked = []\n"
        "def build():\n"
        "    asked.append(1)\n"
        "    return tiers.on_caller(lambda: (lambda: 'second'))\n"
        "t = tiers.Tiered(lambda: 'first', build, name='g')\n"
        "t(); t()\n"
        "while not asked:\n"
        "    time.sleep(0.01)\n"
        "time.sleep(0.2)\n"
        "print('jobs', tiers.handed_over(), flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "failed" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["jobs", "1"]  # it was waiting for a caller when the program ended


def test_a_handed_over_compile_runs_at_the_next_call_or_in_settle() -> None:
    ran_on: list[str] = []

    def build():
        return tiers.on_caller(lambda: ran_on.append(threading.current_thread().name) or (lambda: "second"))

    t = tiers.Tiered(lambda: "first", build)
    t()
    t()  # starts the build, which hands its compile over
    deadline = time.monotonic() + 60
    while not tiers.handed_over() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert t() == "first" and ran_on == [threading.current_thread().name]  # this call ran it, then its own work
    assert argus_inductor.settle(timeout=60) and t() == "second"
    s = tiers.Tiered(lambda: "first", build)
    s()
    assert argus_inductor.settle(timeout=60) and s() == "second" and len(ran_on) == 2  # settle() ran this one


def test_a_handed_over_compile_waits_while_the_caller_captures_a_cuda_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program that records its compiled model into a CUDA graph of its own: a compile's device work cannot be
    captured, so a call made during the capture leaves the handed-over compile to the next call outside it."""
    ran: list[str] = []
    t = tiers.Tiered(lambda: "first", lambda: tiers.on_caller(lambda: ran.append("compile") or (lambda: "second")))
    t()
    t()
    deadline = time.monotonic() + 60
    while not tiers.handed_over() and time.monotonic() < deadline:
        time.sleep(0.01)
    monkeypatch.setattr(tiers, "_capturing", lambda: True)
    assert t() == "first" and ran == [] and tiers.handed_over() == 1
    monkeypatch.setattr(tiers, "_capturing", lambda: False)
    assert t() == "first" and ran == ["compile"]
    assert argus_inductor.settle(timeout=60) and t() == "second"


def test_ctrl_c_during_a_handed_over_compile_reaches_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    """A KeyboardInterrupt in the compile a call runs for the background is the caller's (not swallowed into the
    background's failure); the background stops quietly and the first tier stays."""
    def compile_():
        raise KeyboardInterrupt

    t = tiers.Tiered(lambda: "first", lambda: tiers.on_caller(compile_), name="g")
    t()
    t()
    deadline = time.monotonic() + 60
    while not tiers.handed_over() and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(KeyboardInterrupt):
        t()
    assert argus_inductor.settle(timeout=60) and t() == "first" and not t.replaced
    assert isinstance(t.error, tiers.Closing) and "background swap-in of g failed" not in caplog.text
