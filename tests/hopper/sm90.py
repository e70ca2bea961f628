"""Compile Gluon lowerings for sm_90 in a subprocess that does not interpret Triton kernels (this one does), and
check the Hopper instructions each compiled kernel is written with."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_REPORT = r'''
import json
out = {}
for name, k in compiled():
    ptx = k.asm["ptx"]
    out[name] = dict(shared=k.metadata.shared, wgmma="wgmma.mma_async" in ptx, tma="cp.async.bulk.tensor" in ptx,
                     mbarrier="mbarrier.try_wait" in ptx, setmaxnreg="setmaxnreg" in ptx)
print(json.dumps(out))
'''


def assert_compiles_with_hopper_instructions(build: str, count: int) -> None:
    """`build` is Python source defining `compiled()`, which yields (name, Triton compiled kernel) pairs: each of
    the `count` kernels must use wgmma, TMA, mbarrier waits and setmaxnreg, within 227 KB of shared memory."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ARGUS_INTERPRET")}
    proc = subprocess.run([sys.executable, "-c", build + _REPORT], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(reports) == count
    for name, r in reports.items():
        assert r["wgmma"] and r["tma"] and r["mbarrier"] and r["setmaxnreg"], (name, r)
        assert r["shared"] <= 227 * 1024, (name, r)
