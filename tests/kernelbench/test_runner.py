"""The KernelBench-format runner (benchmarks/kernelbench/run.py) on a few of our problems at small sizes, Argus
kernels interpreted, plus a problem that crashes the child process and one that hangs past its time-out."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "benchmarks" / "kernelbench" / "run.py"
PROBLEMS = REPO / "benchmarks" / "kernelbench" / "problems"

CRASH = '''import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.abort()  # the child dies without writing a result


def get_inputs() -> list:
    return [torch.randn(4)]


def get_init_inputs() -> list:
    return []
'''

HANG = CRASH.replace("os.abort()  # the child dies without writing a result", "return x").replace(
    "def get_init_inputs() -> list:\n    return []", "def get_init_inputs() -> list:\n    import time\n\n"
    "    time.sleep(600)\n    return []")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ARGUS_KB_FULL"}
    env.update(ARGUS_INTERPRET="1", TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    return env


def _run(problems: Path, out: Path, *extra: str, timeout: int = 240,
         tmp: Path | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """The runner's table; `tmp`: its temporary folder (TMPDIR)."""
    cmd = [sys.executable, str(RUNNER), str(problems), "--out", str(out), "--name", "kb", "--device", "cpu",
           "--warmup", "0", "--reps", "1", *extra]
    env = _env() if tmp is None else {**_env(), "TMPDIR": str(tmp)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((out / "kb.json").read_text())


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    d = tmp_path_factory.mktemp("problems")
    (d / "level1").mkdir()
    (d / "level2").mkdir()
    for rel in ("level1/01_square_matmul.py", "level1/02_batched_matmul.py", "level1/05_gelu.py",
                "level1/20_conv2d_3x3.py", "level2/01_gemm_scale_gelu_sum.py"):
        shutil.copy(PROBLEMS / rel, d / rel)
    (d / "level1" / "09_crash.py").write_text(CRASH)
    out = tmp_path_factory.mktemp("out")
    proc, data = _run(d, out, "--trials", "2", "--timeout", "150")
    return proc, data, out


def _rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["problem"]: r for r in data["rows"]}


def test_rows_and_correctness(small_run: tuple) -> None:
    _, data, _ = small_run
    rows = _rows(data)
    assert set(rows) == {"01_square_matmul", "02_batched_matmul", "05_gelu", "20_conv2d_3x3", "01_gemm_scale_gelu_sum",
                         "09_crash"}
    for name in ("01_square_matmul", "02_batched_matmul", "05_gelu", "20_conv2d_3x3", "01_gemm_scale_gelu_sum"):
        r = rows[name]
        assert r["status"] == "ok", r
        assert r["level"] == (2 if name.startswith("01_gemm") else 1)
        for b in ("eager", "inductor", "argus"):
            assert r["backends"][b]["correct"], (name, b, r["backends"][b])
            assert r["backends"][b]["ms"] > 0
        assert r["speedup"]["argus_vs_eager"] > 0


def test_coverage(small_run: tuple) -> None:
    _, data, _ = small_run
    rows = _rows(data)
    for name, op in (("01_square_matmul", "argus::linear"), ("02_batched_matmul", "argus::bmm"),
                     ("20_conv2d_3x3", "argus::conv"),
                     ("01_gemm_scale_gelu_sum", "argus::linear_chain")):  # the GEMM with its scale/add/GELU epilogue
        assert rows[name]["coverage"] == pytest.approx(1.0), rows[name]
        assert op in rows[name]["argus_ops"] and rows[name]["argus_ran"]
    # a standalone activation: no FLOPs to cover (FlopCounterMode counts none), but a synthesized Argus kernel ran
    assert rows["05_gelu"]["coverage"] is None and rows["05_gelu"]["argus_ran"]
    assert "argus::pointwise" in rows["05_gelu"]["argus_ops"]
    assert data["summary"]["argus_ran_share"] == pytest.approx(5 / 6)


def test_crash_recorded_and_summary(small_run: tuple) -> None:
    proc, data, out = small_run
    crash = _rows(data)["09_crash"]
    assert crash["status"] == "crash" and crash["backends"] == {}
    assert "code" in crash["error"]
    s = data["summary"]
    assert s["problems"] == 6 and s["status"] == {"ok": 5, "crash": 1}
    for key in ("inductor_vs_eager", "argus_vs_eager", "argus_vs_inductor"):
        assert s[key]["fast_0"] == pytest.approx(5 / 6)  # the crashed problem counts as incorrect
        assert s[key]["fast_0"] >= s[key]["fast_1"] >= s[key]["fast_2"]
        assert s[key]["geomean"] > 0
    assert s["correct_argus"] == pytest.approx(5 / 6)
    md = (out / "kb.md").read_text()
    assert "| 01_square_matmul | 1 | ok |" in md and "| 09_crash | 1 | crash |" in md and "fast_1" in md
    assert data["meta"]["interpret"] and not data["meta"]["full_sizes"]
    assert ".png" in proc.stdout or "matplotlib is not installed" in proc.stdout


def test_hang_times_out_and_run_goes_on(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir()
    (d / "a_hang.py").write_text(HANG)
    shutil.copy(PROBLEMS / "level1" / "07_softmax.py", d / "b_softmax.py")
    _, data = _run(d, tmp_path / "out", "--backends", "eager", "--trials", "1", "--timeout", "12")
    rows = _rows(data)
    assert rows["a_hang"]["status"] == "timeout" and "12" in rows["a_hang"]["error"]
    assert rows["b_softmax"]["status"] == "ok" and rows["b_softmax"]["backends"]["eager"]["correct"]


def test_bad_path_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "nope")], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    proc = subprocess.run([sys.executable, str(RUNNER), str(tmp_path)], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 2 and "no KernelBench-format .py files" in proc.stderr


def test_merge_makes_one_table_from_parts(small_run: tuple, tmp_path: Path) -> None:
    _, data, out = small_run
    proc = subprocess.run([sys.executable, str(RUNNER), "--merge", str(out / "kb.json"), str(out / "kb.json"),
                           "--out", str(tmp_path), "--name", "all"], capture_output=True, text=True, env=_env(),
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["meta"]["merged_from"] == ["kb.json", "kb.json"]
    # a later file's row for the same problem replaces the earlier one (a re-run), so no problem counts twice
    assert len(merged["rows"]) == len(data["rows"]) and merged["summary"]["problems"] == data["summary"]["problems"]
    assert merged["summary"]["correct_argus"] == pytest.approx(data["summary"]["correct_argus"])
    assert "| 01_square_matmul | 1 | ok |" in (tmp_path / "all.md").read_text()
    rerun = dict(data, rows=[dict(data["rows"][0], status="crash", backends={})])
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    subprocess.run([sys.executable, str(RUNNER), "--merge", str(out / "kb.json"), str(tmp_path / "rerun.json"),
                    "--out", str(tmp_path), "--name", "again"], check=True, env=_env(), timeout=120, cwd=REPO)
    again = json.loads((tmp_path / "again.json").read_text())
    first = next(r for r in again["rows"] if r["path"] == data["rows"][0]["path"])
    assert first["status"] == "crash" and len(again["rows"]) == len(data["rows"])


def test_first_calls_and_levels_are_in_the_table(small_run: tuple) -> None:
    """Each backend's first call (compile included) is timed, where Argus's went is recorded, and the summary gives
    the first-call ratio and each level's argus/inductor geometric mean, minimum and count below 0.90x."""
    _, data, out = small_run
    row = _rows(data)["01_square_matmul"]
    assert row["backends"]["inductor"]["first_call_s"] > 0 and row["backends"]["argus"]["first_call_s"] > 0
    assert "graph rewrite" in row["argus_compile_phases"] and "inductor" in row["argus_compile_phases"]
    # each matched subgraph carries what the swap-in said of it (on a GPU its verdict with both times; here, under
    # the interpreter, that it was not measured) and the background's seconds after the first call (none here)
    assert row["argus_entries"] and all(any(n.startswith("swap-in not measured (the Triton interpreter")
                                            for n in e["swapin"]) for e in row["argus_entries"])
    assert (row["backends"]["argus"].get("settle_s") or 0) < 0.1
    s = data["summary"]
    assert s["first_call_argus_vs_inductor_median"] > 0
    assert set(s["by_level"]) == {"1", "2"} and s["by_level"]["1"]["n"] == 5
    md = (out / "kb.md").read_text()
    assert "| level | problems | timed | argus/inductor geomean | min | below 0.90x |" in md
    assert "First call (compile included), argus / inductor's default mode: median" in md


OOM_ONCE = '''import os

import torch
import torch.nn as nn

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oom.mark")


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not os.path.exists(MARK):  # out of memory beside the other jobs, the first time
            open(MARK, "w").close()
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
        return x * 2


def get_inputs() -> list:
    return [torch.randn(4)]


def get_init_inputs() -> list:
    return []
'''


def test_an_out_of_memory_beside_other_jobs_is_run_again_alone(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir()
    (d / "a_oom_once.py").write_text(OOM_ONCE)
    shutil.copy(PROBLEMS / "level1" / "07_softmax.py", d / "b_softmax.py")
    proc, data = _run(d, tmp_path / "out", "--backends", "eager", "--trials", "1", "--jobs", "2")
    rows = _rows(data)
    assert rows["a_oom_once"]["status"] == "ok" and rows["a_oom_once"]["retried_alone"], rows["a_oom_once"]
    assert "(run again alone)" in proc.stdout
    assert rows["b_softmax"]["status"] == "ok" and not rows["b_softmax"].get("retried_alone")


HOLD = '''import sys, time
sys.path.insert(0, {runner_dir!r})
from run import gpu_memory
with gpu_memory({pool!r}, 100, 60):
    print("held", flush=True)
    time.sleep(3)
'''


def test_device_memory_is_admitted_by_estimate(tmp_path: Path) -> None:
    """A job whose memory would not fit beside the ones admitted waits for them; one larger than the whole budget
    runs once nothing else is held; a job that died holds nothing."""
    sys.path.insert(0, str(RUNNER.parent))
    try:
        from run import gpu_memory  # the runner's module: benchmarks/kernelbench/run.py
    finally:
        sys.path.pop(0)
    import time

    pool = str(tmp_path / "pool.json")
    child = subprocess.Popen([sys.executable, "-c", HOLD.format(runner_dir=str(RUNNER.parent), pool=pool)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    with gpu_memory(pool, 100, 60):  # 60 + 60 > 100: waits for the child's release
        waited = time.monotonic() - t0
    child.wait(timeout=30)
    assert waited > 1.5, waited
    t0 = time.monotonic()
    with gpu_memory(pool, 100, 500):  # larger than the budget: admitted alone, at once
        assert time.monotonic() - t0 < 1.0
    (tmp_path / "pool.json").write_text(json.dumps({"999999": 90}))  # a job that died without releasing
    t0 = time.monotonic()
    with gpu_memory(pool, 100, 60):
        assert time.monotonic() - t0 < 1.0


LOCK_PROBE = '''import fcntl, os
import torch
import torch.nn as nn

OUT = {out!r}


@torch._dynamo.disable
def probe() -> None:
    """Whether another process could time now: the timing lock taken exclusively, without waiting, from a new open
    file (this process's own shared hold conflicts with it as another process's would)."""
    with open(os.environ["ARGUS_TUNE_LOCK"], "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
            state = "free"
        except BlockingIOError:
            state = "held"
    with open(OUT, "a") as log:
        log.write(state + "\\n")


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probe()
        return x * 2


def get_inputs() -> list:
    return [torch.randn(4)]


def get_init_inputs() -> list:
    return []
'''


@pytest.mark.parametrize("isolate", [False, True], ids=["overlapping", "isolated"])
def test_isolated_timing_holds_the_lock_shared_while_a_job_compiles(tmp_path: Path, isolate: bool) -> None:
    """With --isolate-timing the first call of each compiled backend (its compile and first runs) holds the timing
    lock shared, so no other job can time meanwhile; without it, nothing is held then. Later trials and the timing
    hold it exclusively either way."""
    d = tmp_path / "p"
    d.mkdir()
    log = tmp_path / "states"
    (d / "a_probe.py").write_text(LOCK_PROBE.format(out=str(log)))
    shutil.copy(PROBLEMS / "level1" / "07_softmax.py", d / "b_softmax.py")
    extra = ["--backends", "eager,inductor", "--trials", "1", "--jobs", "2"] + (["--isolate-timing"] if isolate
                                                                                  else [])
    proc, data = _run(d, tmp_path / "out", *extra)
    rows = _rows(data)
    assert rows["a_probe"]["status"] == "ok" and rows["b_softmax"]["status"] == "ok", rows
    assert data["meta"]["isolate_timing"] is isolate
    assert rows["a_probe"]["backends"]["inductor"]["first_call_waited_s"] >= 0
    # the forward runs as eager's reference (timing slot: held), then as inductor's first call (the compile slot)
    states = log.read_text().split()
    assert states[0] == "held" and states[1] == ("held" if isolate else "free"), states


@pytest.mark.parametrize("flag", ["--first-call", "--first-call-after", "--first-call-only"])
def test_first_calls_each_in_a_process_of_their_own(tmp_path: Path, flag: str) -> None:
    """--first-call times each backend's first call in a fresh process with empty caches; --first-call-after does
    it once every problem has run, one at a time, with nothing beside it. The table says which, and Argus's
    background seconds after its first call are recorded (none under the interpreter)."""
    d = tmp_path / "problems" / "level1"
    d.mkdir(parents=True)
    shutil.copy(PROBLEMS / "level1" / "60_leaky_relu.py", d / "60_leaky_relu.py")
    (tmp_path / "tmp").mkdir()
    proc, data = _run(tmp_path / "problems", tmp_path / "out", flag, "--trials", "1", "--jobs", "2",
                      tmp=tmp_path / "tmp")
    # nothing left behind in the temporary folder: the turn lock, the first-call caches and, where Python writes no
    # bytecode, the 200 MB of compiled bytecode the first calls read are removed when the run ends
    assert not list((tmp_path / "tmp").glob("argus-*")), list((tmp_path / "tmp").iterdir())
    (row,) = data["rows"]
    assert row["status"] == ("first calls only" if flag == "--first-call-only" else "ok")
    assert row["backends"]["argus"]["first_call_s"] > 0 and row["backends"]["inductor"]["first_call_s"] > 0
    assert row["backends"]["argus"]["settle_s"] < 0.1
    after = flag != "--first-call"
    only = flag == "--first-call-only"
    assert data["meta"]["first_call"] == ("alone, first calls only" if only else "after the run, alone" if after
                                          else "own process, beside other jobs")
    assert row["first_call_isolated"] == ("after the run, one at a time" if after else True)
    assert ("first call alone [1/1] 60_leaky_relu" in proc.stdout) is after
    assert ("correct" in row["backends"]["argus"]) is not only  # --first-call-only: no trials, no timing
    assert data["summary"]["first_call_argus_vs_inductor_median"] > 0
