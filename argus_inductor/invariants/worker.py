"""A proof worker (invariants/pool.py): reads one ProofJob a line on stdin, writes one JSON line on stdout, the
verdict `{"result": VerificationResult.to_json()}` or `{"error": why}` where it cannot prove the job here.

    python -m argus_inductor.invariants.worker
"""
from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from ..dsl.runtime import Kernel
from .api import verify
from .pool import ProofJob, source_digest


def prove(job: ProofJob) -> dict[str, Any]:
    """The verdict on `job`; {"error": ...} where the kernel it names is not the caller's."""
    try:
        kernel = getattr(importlib.import_module(job.module), job.name)
    except (ImportError, AttributeError) as e:
        return {"error": f"cannot import {job.module}.{job.name} ({type(e).__name__}: {e})"}
    if not isinstance(kernel, Kernel) or source_digest(kernel) != job.digest:
        return {"error": f"{job.module}.{job.name} is not the kernel the caller read"}
    r = verify(kernel, dict(job.policy), dict(job.shapes), assumptions=list(job.assumptions), budget_s=job.budget_s,
               reads=list(job.reads))
    return {"result": r.to_json()}


def main() -> None:
    replies = sys.stdout
    sys.stdout = sys.stderr  # anything else printed (a warning, a trace) stays out of the replies
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = prove(ProofJob.from_json(line))
        except Exception as e:  # one bad job fails, the worker goes on
            reply = {"error": f"{type(e).__name__}: {e}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
