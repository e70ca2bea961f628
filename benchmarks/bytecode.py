"""Compiled bytecode for the benchmarks' first-call columns, where this Python writes none.

Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, as on the lent GPU machines) every process compiles each
module it imports from source, and a first call imports hundreds (on the H200, Argus's first call compiled 352
source files, 1.5 s, and Inductor's 162, 0.5 s). A user's install has bytecode: pip compiles it at install, and Python
writes it at the first import. So a benchmark that reports first calls compiles the packages' bytecode once into a
prefix its processes read (PYTHONPYCACHEPREFIX): `env()` for child processes (benchmarks/kernelbench/run.py's
first-call processes), `reexec()` for a script whose own process makes the first calls (benchmarks/e2e.py).
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# what a first call imports
PACKAGES = ("torch", "triton", "sympy", "jinja2", "numpy", "z3", "transformers")
_PREFIX: dict[str, str] = {}  # the process's bytecode prefix, once made
# names the prefix a restarted process (reexec) owns and removes at its exit; its children only read it
_OWNER = "_ARGUS_BYTECODE_OWNED"  # internal: a handshake with the restarted process, no setting


def writes_none() -> bool:
    """Whether this Python writes no bytecode of its own."""
    return bool(sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE"))


def env(packages: tuple[str, ...] = PACKAGES, extra: tuple[Path, ...] = (REPO / "argus_inductor",)) -> dict[str, str]:
    """The environment a process needs to read compiled bytecode of `packages` and `extra` (directories), compiled
    once a process into a prefix (about 200 MB, removed at the process's exit); empty where Python writes bytecode
    itself."""
    if not writes_none():
        return {}
    if not _PREFIX:
        import importlib.util

        prefix = tempfile.mkdtemp(prefix="argus-bytecode-")
        atexit.register(shutil.rmtree, prefix, ignore_errors=True)
        dirs = [str(d) for d in extra]
        for name in packages:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                dirs += list(spec.submodule_search_locations)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *dirs],
                       env={**os.environ, "PYTHONPYCACHEPREFIX": prefix}, capture_output=True, timeout=900)
        _PREFIX["PYTHONPYCACHEPREFIX"] = prefix
    return dict(_PREFIX)


def reexec(argv: list[str] | None = None, packages: tuple[str, ...] = PACKAGES,
           extra: tuple[Path, ...] = (REPO / "argus_inductor",)) -> None:
    """Where this Python writes no bytecode and reads none from a prefix, compile it (env()) and replace this process
    with the same command (`argv`, default sys.argv) reading it; otherwise return. Call it before the first call a
    script times."""
    owned = os.environ.pop(_OWNER, None)
    if owned and owned == os.environ.get("PYTHONPYCACHEPREFIX"):  # the restarted process: the prefix goes with it
        atexit.register(shutil.rmtree, owned, ignore_errors=True)
    if os.environ.get("PYTHONPYCACHEPREFIX") or not writes_none():
        return
    prefix = env(packages, extra)
    print(f"bytecode compiled into {prefix['PYTHONPYCACHEPREFIX']}; restarting to read it", file=sys.stderr, flush=True)
    # (execve runs no exit handlers: the restarted process removes the prefix at its own exit)
    os.execve(sys.executable, [sys.executable, *(sys.argv if argv is None else argv)],
              {**os.environ, **prefix, _OWNER: prefix["PYTHONPYCACHEPREFIX"]})
