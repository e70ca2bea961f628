"""benchmarks/bytecode.py: first calls read compiled bytecode where Python writes none (PYTHONDONTWRITEBYTECODE, as on
the lent GPU machines), as a user's install does; where Python writes its own, nothing is done."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import BENCHMARKS, load


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "argus_kb_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("VALUE = 7\n")
    return pkg


def test_child_processes_read_bytecode_where_python_writes_none(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bytecode = load("bytecode")
    pkg = _package(tmp_path)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert bytecode.env(packages=(), extra=(pkg,)) == {}
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = bytecode.env(packages=(), extra=(pkg,))
    assert set(env) == {"PYTHONPYCACHEPREFIX"}
    code = ("import importlib.util, os, argus_kb_probe_pkg as m; "
            "print(m.VALUE, os.path.exists(importlib.util.cache_from_source(m.__file__)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path), **env}).stdout.split()
    assert out == ["7", "True"]  # the child finds the bytecode where it looks for it
    assert not (pkg / "__pycache__").exists()  # and nothing was written beside the sources


def test_the_prefix_goes_when_the_process_that_made_it_exits(tmp_path: Path) -> None:
    """A prefix holds about 200 MB of bytecode: the process that compiled it removes it at exit (a test run left
    three a run in /tmp until the disk was full)."""
    pkg = _package(tmp_path)
    code = (f"import sys; sys.path.insert(0, {str(BENCHMARKS.parent)!r}); from pathlib import Path; "
            "from benchmarks import bytecode; "
            f"p = bytecode.env(packages=(), extra=(Path({str(pkg)!r}),))['PYTHONPYCACHEPREFIX']; "
            "print(p, Path(p).is_dir())")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    prefix, existed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                     check=True, env=env).stdout.split()
    assert existed == "True" and not Path(prefix).exists()


def test_a_script_restarts_itself_once_to_read_bytecode(tmp_path: Path) -> None:
    """benchmarks/e2e.py's first calls are made in its own process: it compiles the bytecode and restarts itself
    reading it, once (the restarted process has the prefix and goes on)."""
    pkg = _package(tmp_path)
    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS.parent)!r})\n"
        "from pathlib import Path\n"
        "from benchmarks import bytecode\n"
        "print('start', bool(os.environ.get('PYTHONPYCACHEPREFIX')), sys.argv[1:], flush=True)\n"
        f"bytecode.reexec(packages=(), extra=(Path({str(pkg)!r}),))\n"
        "import argus_kb_probe_pkg as m, importlib.util\n"
        "print('run', m.VALUE, os.path.exists(importlib.util.cache_from_source(m.__file__)), flush=True)\n"
        "print(os.environ['PYTHONPYCACHEPREFIX'], flush=True)\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    out = subprocess.run([sys.executable, str(script), "--flag"], capture_output=True, text=True, timeout=120,
                         check=True, env=env).stdout.splitlines()
    assert out[:3] == ["start False ['--flag']", "start True ['--flag']", "run 7 True"]
    assert not (pkg / "__pycache__").exists()
    assert not Path(out[3]).exists()  # the restarted process removed the prefix at its exit
