"""Probe: prefill GEMMs whose default 128x256 tiles fill less than one wave of the GPU (the k and v projections of
Llama-3-8B / Mixtral at 2048 rows: 64 tiles on 132 SMs), and the router's N=8 GEMM, at other tiles and through the
Gluon lowering, against cuBLAS on the same operands.

    python benchmarks/gemm_fewtiles.py [--out benchmarks/results]

Each output is checked against a float32 reference before it is timed (CUDA-graph median, L2 cold). Needs a GPU."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels import gemm  # noqa: E402
from argus_inductor.kernels.policies import gemm_policy  # noqa: E402
from benchmarks.sweep import bench, rel  # noqa: E402

SHAPES = [(2048, 1024, 4096), (4096, 1024, 4096), (2048, 4096, 4096), (2048, 8, 4096), (4096, 8, 4096)]


def candidates(m: int, n: int, k: int) -> dict[str, Policy]:
    out = {"default": gemm_policy(m, n, k, "cuda")}
    if n <= 16:
        for bm in (16, 32, 64):
            for bk in (128, 256):
                out[f"BM {bm} BN 16 BK {bk}"] = Policy.make(BM=bm, BN=16, BK=bk, num_warps=4, num_stages=4)
        return out
    for st in (3, 4):
        out[f"triton 128x128 persistent, {st} stages"] = Policy.make(
            BM=128, BN=128, BK=64, num_warps=8, num_stages=st, grid_order="grouped", group_m=8, persistent=True,
            tma=True)
    out["triton 128x128 a tile a program"] = Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=4,
                                                         grid_order="grouped", group_m=8, tma=True)
    for bm, bn, bk, st in ((128, 128, 64, 6), (128, 128, 128, 4), (128, 256, 64, 4), (64, 256, 64, 6)):
        out[f"gluon {bm}x{bn} BK {bk}, {st} slots"] = Policy.make(BM=bm, BN=bn, BK=bk, num_warps=bm // 16,
                                                                  num_stages=st, warp_specialize=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args = ap.parse_args()
    from argus_inductor.hopper.gemm import declines

    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()  # an nn.Linear weight, K-contiguous
        ref = a.float() @ b.float()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        extra = [(torch.randn_like(a), torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t(),
                  torch.empty_like(out)) for _ in range(3)]
        peer = bench(lambda: torch.matmul(a, b), [lambda x=x: torch.matmul(x[0], x[1]) for x in extra])
        print(f"M={m} N={n} K={k}: cuBLAS {peer * 1e3:.1f} us", flush=True)
        for name, pol in candidates(m, n, k).items():
            try:
                if pol.warp_specialize and (why := declines(pol, a, b, out, out)) is not None:
                    raise RuntimeError(f"the Gluon kernel declines: {why}")
                out.fill_(float("nan"))
                gemm(a, b, out=out, policy=pol)
                err = rel(out, ref)
                if not err < 1e-2:
                    raise RuntimeError(f"rel err {err:.2e}")
                t = bench(lambda pol=pol: gemm(a, b, out=out, policy=pol),
                          [lambda x=x, pol=pol: gemm(x[0], x[1], out=x[2], policy=pol) for x in extra])
            except Exception as e:  # a tile that does not fit is data, not a crash
                rows.append(dict(m=m, n=n, k=k, name=name, policy=pol.as_dict(), error=str(e)[:200]))
                print(f"    {name:40s} error: {str(e)[:120]}", flush=True)
                continue
            rows.append(dict(m=m, n=n, k=k, name=name, policy=pol.as_dict(), us=t * 1e3, cublas_us=peer * 1e3,
                             vs_cublas=peer / t, rel_err=err))
            print(f"    {name:40s} {t * 1e3:7.1f} us  {peer / t:.2f}x cuBLAS  rel err {err:.1e}", flush=True)
    meta = dict(date=str(datetime.date.today()), gpu=torch.cuda.get_device_name(), torch=torch.__version__)
    path = Path(args.out) / f"gemm-fewtiles-{datetime.date.today()}.json"
    path.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
