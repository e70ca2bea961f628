"""The package's own DSL kernels are read into their IR at their first use, not at import (dsl.runtime.kernel): the
first call of a compiled model imports them but, with the background swap-in, runs none. Every one of them still
reads cleanly (here), and a kernel of a user's module is read at decoration (tests/dsl/test_errors.py)."""
from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import argus_inductor
from argus_inductor.dsl.runtime import Kernel


def _package_kernels() -> list[Kernel]:
    found: dict[int, Kernel] = {}
    for info in pkgutil.walk_packages(argus_inductor.__path__, "argus_inductor."):
        if info.name.startswith(("argus_inductor.vllm_plugin", "argus_inductor.hopper")):
            continue  # vLLM is not installed here; the Gluon lowerings hold no DSL kernels
        mod = importlib.import_module(info.name)
        for value in vars(mod).values():
            if isinstance(value, Kernel):
                found[id(value)] = value
    return list(found.values())


def test_every_kernel_of_the_package_reads() -> None:
    kernels = _package_kernels()
    assert len(kernels) >= 40, len(kernels)
    for k in kernels:
        assert k.ir.name == k.name and k.is_read


def test_importing_the_backends_path_reads_no_kernel() -> None:
    code = ("import gc, argus_inductor.backend, argus_inductor.graph.pipeline, argus_inductor.graph.swapin\n"
            "from argus_inductor.dsl.runtime import Kernel\n"
            "ks = [o for o in gc.get_objects() if isinstance(o, Kernel)]\n"
            "print(len(ks), sum(k.is_read for k in ks))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    total, read = map(int, out.stdout.split())
    assert total >= 40 and read == 0, (total, read)


def test_a_kernel_is_read_once_by_whichever_thread_comes_first() -> None:
    import threading

    calls = []

    def read():
        calls.append(1)
        return _package_kernels()[0].ir

    k = Kernel(read=read, name=_package_kernels()[0].name)
    threads = [threading.Thread(target=lambda: k.ir) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and k.is_read
