"""Probe (session 25): what a miss's "nearest solved signature" policy costs when it comes from another regime.

A cache warmed for 2048-row GEMMs (N = K = 4096, bf16) used to lend their 128x256 persistent tiles to every miss of
the family, a decode row included. Here each shape runs under its own template and under the lent policy, on the
same data (CUDA-graph medians, weights rotated so that each call reads them from memory). Since session 25 a miss
borrows only from an entry whose template is its own (argus_inductor.ops._same_template): the 3000-row GEMM still
borrows, the 1- and 16-row ones take their template.

    python benchmarks/nearest_regime_probe.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor import ops  # noqa: E402
from argus_inductor.kernels.gemm import gemm_epilogue  # noqa: E402
from argus_inductor.runtime.signature import Signature, make_signature  # noqa: E402
from benchmarks.sweep import bench, rel  # noqa: E402


def signature(m: int) -> Signature:
    x, w = torch.empty(m, 4096, dtype=torch.bfloat16), torch.empty(4096, 4096, dtype=torch.bfloat16)
    return make_signature("gemm", "", [x, w], {"N": 4096, "K": 4096}, {"M": m})


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("benchmarks/nearest_regime_probe.py needs a CUDA GPU")
    spec = ops.SPECS["gemm"]
    lent = spec.template(signature(2048), "cuda")
    for m in (1, 16, 3000):
        sig = signature(m)
        a = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * 4096 ** -0.5 for _ in range(6)]
        out = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ ws[0].float().t()
        times = {}
        for name, pol in (("own template", spec.template(sig, "cuda")), ("lent 2048-row policy", lent)):
            p = spec.policies(pol, sig)["gemm_epilogue"]

            def run(w: torch.Tensor, p=p) -> None:
                gemm_epilogue(a, w.t(), out.new_empty(1), out, policy=p)

            run(ws[0])
            err = rel(out, ref)
            times[name] = bench(lambda run=run: run(ws[0]), [lambda w=w, run=run: run(w) for w in ws[1:]])
            print(f"M={m}: {name} ({p.key()}): {times[name] * 1e3:.1f} us, rel err {err:.1e}", flush=True)
        print(f"M={m}: the lent policy takes {times['lent 2048-row policy'] / times['own template']:.2f}x the "
              f"template's time", flush=True)


if __name__ == "__main__":
    main()
