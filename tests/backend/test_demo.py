"""The demo as a newcomer reads it on a CPU: the report's times are marked as the Triton interpreter's, and the
demo ends with what to do next (the misses it recorded, the `argus warmup` command) and that CPU times say nothing
about speed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from argus_inductor import demo
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime.cache import KernelCache
from argus_inductor.specs import Problem, signature_for


def test_report_marks_interpreter_times(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report_mod.record_match("n0", "gemm", "linear")
    report_mod.record_call("n0", "gemm(K=8,N=8,M=5-8) float32/float32 cpu", "default (template policy)", 12.5)
    text = report_mod.report(file=open("/dev/null", "w"))
    assert "12.500 ms/call (Triton interpreter)" in text and report_mod.INTERPRETER_NOTE in text
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a GPU run: its times are its own, no note
    text = report_mod.report(file=open("/dev/null", "w"))
    assert "12.500 ms/call\n" in text + "\n" and "interpreter" not in text.lower()


def test_next_steps_name_the_misses_and_the_command(fresh_cache: Path) -> None:
    text = demo.next_steps(on_cpu=False)
    assert "every signature ran a cached kernel" in text and "warmup" not in text and "interpreter" not in text
    for m in (5, 9):
        KernelCache(fresh_cache).record_miss(signature_for(Problem("softmax", "", {"R": m, "C": 8}, "float32"), "cpu"))
    text = demo.next_steps(on_cpu=True)
    assert "2 signature(s) ran without a cached kernel" in text and "argus cache misses" in text
    assert re.search(r"^      \S*argus( |\S* -m argus_inductor\.cli )?warmup$", text, re.M), text
    assert "Triton interpreter" in text and "say nothing about speed" in text


@pytest.mark.slow
def test_the_demo_ends_with_the_next_step(fresh_cache: Path, capsys) -> None:
    """The demo itself, one layer (about 20 s on two busy cores: the compile and the interpreter)."""
    assert demo.main(["--layers", "1", "--tokens", "5", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    timed = [ln for ln in out.splitlines() if "kernel:" in ln and "ms/call" in ln]
    assert timed and all(ln.endswith("ms/call (Triton interpreter)") for ln in timed), timed
    assert report_mod.INTERPRETER_NOTE in out and "no measure of speed" in out
    tail = out[out.index("\nnext:"):]
    pending = [m for m in KernelCache(fresh_cache).misses() if not m["solved"]]
    assert pending and f"{len(pending)} signature(s) ran without a cached kernel" in tail
    assert "warmup" in tail and "say nothing about speed" in tail
