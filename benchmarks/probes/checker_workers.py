"""Probe: how long the checker takes over the template plans of the four e2e models' signatures (traced on the meta
device at tokens 1 and 2048, proved for sm_90; no GPU needed), in one process and with proof workers, and whether the
verdicts are the same.

    ARGUS_CHECKER_WORKERS=0 python benchmarks/probes/checker_workers.py /tmp/v0.json
    ARGUS_CHECKER_WORKERS=2 python benchmarks/probes/checker_workers.py /tmp/v2.json && cmp /tmp/v0.json /tmp/v2.json
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
if "ARGUS_CACHE_DIR" not in os.environ:  # an empty cache of its own, gone at exit
    os.environ["ARGUS_CACHE_DIR"] = tempfile.mkdtemp(prefix="argus-probe-")
    atexit.register(shutil.rmtree, os.environ["ARGUS_CACHE_DIR"], ignore_errors=True)

from argus_inductor import ops  # noqa: E402
from argus_inductor.agent.trace import trace_config  # noqa: E402
from argus_inductor.config import Options  # noqa: E402
from argus_inductor.ops import entries  # noqa: E402
from benchmarks.e2e import LLAMA3_8B, MIXTRAL_8X7B, QWEN3_MOE, QWEN25_7B  # noqa: E402

MODELS = {"llama": {"model_type": "llama", **LLAMA3_8B}, "mixtral": {"model_type": "mixtral", **MIXTRAL_8X7B},
          "qwen3_moe": {"model_type": "qwen3_moe", **QWEN3_MOE}, "qwen2": {"model_type": "qwen2", **QWEN25_7B}}


def main() -> None:
    sigs = {}
    for cfg in MODELS.values():
        for s in trace_config(cfg, [1, 2048], "bfloat16", 4096, 1, Options.resolve({}).enabled_ops):
            s = getattr(s, "sig", s)
            sigs[s.key()] = dataclasses.replace(s, arch="sm_90")
    t0 = time.perf_counter()
    sent = ops.prove_ahead(list(sigs.values()), "cuda")
    out = {}
    for key, sig in sigs.items():
        spec = ops.spec_for(sig)
        pols = spec.policies(spec.template(sig, "cuda"), sig)
        v = entries.verify_plan(spec, sig, ops.library_kernels(spec, pols), pols, "cuda")
        for r in v["kernels"].values():
            r.pop("seconds", None)
        out[key] = v
    taken, left = entries.proofs_from_workers()
    print(f"{len(sigs)} signatures, workers {os.environ.get('ARGUS_CHECKER_WORKERS', 'auto')}: {sent} kernels sent, "
          f"{taken} verdicts from workers, {left} left; {time.perf_counter() - t0:.2f} s")
    Path(sys.argv[1]).write_text(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
