"""scripts/demo.sh and scripts/setup.sh as a newcomer runs them: setting up .venv says what it does (a line per
step, pip's own output, a heartbeat while pip runs), is silent once .venv is up to date, fails promptly when pip
fails, and the demo starts with a line that says what it is doing. A fake interpreter stands in for Python and pip
(no network, seconds)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/usr/bin/env bash
# a stand-in interpreter: makes a venv of itself, installs like a slow pip, runs the demo by echoing its arguments
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0;;
  "-m pip") echo "Collecting $*"; sleep "${FAKE_PIP_S:-0}"
            if [ -n "${FAKE_PIP_FAIL:-}" ]; then echo "ERROR: no matching distribution"; exit 1; fi
            echo "Successfully installed ${@: -1}"; exit 0;;
  "-m argus_inductor.demo") echo "demo ran with: ${*:3}"; exit 0;;
esac
if [ "$1" = "--version" ]; then echo "Python 3.11.7"; fi
"""


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The scripts and pyproject.toml of a fresh clone, without .venv."""
    (tmp_path / "scripts").mkdir()
    for name in ("setup.sh", "demo.sh", "test.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return tmp_path


def _run(clone: Path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    e = {**os.environ, "PYTHON": str(clone / "fake-python"), "SETUP_HEARTBEAT_S": "0.2", "FAKE_PIP_S": "0.5", **env}
    t0 = time.time()
    proc = subprocess.run(["bash", *argv], cwd=clone, env=e, capture_output=True, text=True, timeout=60)
    return proc, time.time() - t0


def test_the_demo_says_what_it_sets_up_and_is_quiet_once_set_up(clone: Path) -> None:
    proc, _ = _run(clone, "scripts/demo.sh", "--layers", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()

    def at(text: str) -> int:
        return next(i for i, ln in enumerate(lines) if text in ln)

    assert at("setting up .venv") < at("installing torch, triton and Argus") < at("torch==2.13.0") \
        < at(".venv is ready") < at("demo: compiling a small Llama-style model") < at("demo ran with: --layers 1")
    assert "first run: a few minutes" in proc.stdout
    assert any("still installing" in ln for ln in lines)  # the heartbeat while pip runs
    assert "--progress-bar off" in proc.stdout  # pip's own output, without bars: the output is not a terminal
    again, took = _run(clone, "scripts/demo.sh")
    assert again.returncode == 0 and "setup:" not in again.stdout and "demo ran with:" in again.stdout
    assert took < 5


def test_setup_fails_promptly_when_pip_fails(clone: Path) -> None:
    proc, took = _run(clone, "scripts/setup.sh", FAKE_PIP_FAIL="1", SETUP_HEARTBEAT_S="30")
    assert proc.returncode != 0 and "ERROR: no matching distribution" in proc.stdout
    assert took < 10  # the heartbeat (sleeping 30 s) does not hold the output open
    assert not (clone / ".venv" / ".argus-setup").exists()  # the next run tries again
