"""Probe: two ways of writing a GEMV (M = 1, an nn.Linear weight read along K) in plain Triton, over a grid of tiles,
against cuBLAS, max-autotune's Inductor kernel and Argus's template, at Llama-3-8B's and Mixtral's decode linears.
"elem" keeps the products per K lane across the K loop and sums them once after it; "red" sums across K in every
step. Every candidate is checked against float32 first; weights rotate so that each call reads them from memory.

    python benchmarks/gemv_probe.py      # prints the fastest per shape, writes $OUT/gemv-probe.json

What it found set kernels/policies.py's gemv_policy tile (benchmarks/results/gemv-probe-h100-2026-11-24.log; that
run's "argus-now" row is the template before the change).
"""
from __future__ import annotations

import itertools
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.kernels import gemm  # noqa: E402
from argus_inductor.kernels.policies import gemm_policy, gemv_policy  # noqa: E402

SHAPES = [(14336, 4096), (4096, 14336), (4096, 4096), (6144, 4096), (128256, 4096), (32000, 4096)]


@triton.jit
def gemv_elem(A, W, C, N, K, BN: tl.constexpr, BK: tl.constexpr):
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN, BK), tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(A + rk).to(tl.float32)
        w = tl.load(W + rn[:, None].to(tl.int64) * K + rk[None, :], mask=(rn < N)[:, None], other=0.0)
        acc += w.to(tl.float32) * a[None, :]
    tl.store(C + rn, tl.sum(acc, 1), mask=rn < N)


@triton.jit
def gemv_red(A, W, C, N, K, BN: tl.constexpr, BK: tl.constexpr):
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN,), tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(A + rk).to(tl.float32)
        w = tl.load(W + rn[:, None].to(tl.int64) * K + rk[None, :], mask=(rn < N)[:, None], other=0.0)
        acc += tl.sum(w.to(tl.float32) * a[None, :], 1)
    tl.store(C + rn, acc, mask=rn < N)


def bench(fns: list[Callable[[], object]]) -> float:
    """CUDA-graph median ms of one call, the calls (one per weight copy) run in turn."""
    for f in fns:
        f()
    torch.cuda.synchronize()

    def run() -> None:
        for f in fns:
            f()

    return float(triton.testing.do_bench_cudagraph(run, rep=50, return_mode="median")) / len(fns)


def tiles(name: str, k: int) -> list[tuple[int, int, int]]:
    out = []
    for bn, bk, nw in itertools.product((1, 2, 4, 8, 16, 32), (256, 512, 1024, 2048, 4096), (4, 8)):
        if not 2048 <= bn * bk <= 16384 or k % bk:  # the probe kernels do not mask K
            continue
        if (name == "red" and (bn < 4 or bk > 1024)) or (name == "elem" and (bn > 16 or bk < 512)):
            continue
        out.append((bn, bk, nw))
    return out


def probe(n: int, k: int) -> dict[str, float]:
    ncopy = max(1, min(8, math.ceil(400e6 / (2 * n * k))))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ncopy)]
    xs = [torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(ncopy)]
    outs = [torch.empty(1, n, device="cuda", dtype=torch.bfloat16) for _ in range(ncopy)]
    ref = xs[0].float() @ ws[0].float().t()
    ops = list(zip(xs, ws, outs))

    def err(o: torch.Tensor) -> float:
        return float((o.float() - ref).norm() / ref.norm())

    res = {"cublas": bench([lambda x=x, w=w: torch.matmul(x, w.t()) for x, w, _ in ops])}
    torch._dynamo.reset()
    lin = torch.compile(lambda x, w: F.linear(x, w), mode="max-autotune-no-cudagraphs")
    if err(lin(xs[0], ws[0])) < 1e-2:
        res["inductor-max-autotune"] = bench([lambda x=x, w=w: lin(x, w) for x, w, _ in ops])
    pol = gemv_policy(1, n, "cuda", k) or gemm_policy(1, n, k, "cuda")
    res["argus " + pol.key()] = bench([lambda x=x, w=w, o=o: gemm(x, w.t(), out=o, policy=pol) for x, w, o in ops])
    for kern, name in ((gemv_elem, "elem"), (gemv_red, "red")):
        for bn, bk, nw in tiles(name, k):
            grid = (triton.cdiv(n, bn),)

            def call(x, w, o, kern=kern, grid=grid, bn=bn, bk=bk, nw=nw):
                kern[grid](x, w, o, n, k, BN=bn, BK=bk, num_warps=nw, num_stages=1)

            call(*ops[0])
            if not err(outs[0]) < 1e-2:
                print(f"  {name} BN={bn} BK={bk} w={nw}: wrong (rel err {err(outs[0]):.1e})")
                continue
            res[f"{name} BN={bn} BK={bk} w={nw}"] = bench([lambda op=op, call=call: call(*op) for op in ops])
    return res


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("benchmarks/gemv_probe.py needs a CUDA GPU")
    rows = []
    for n, k in SHAPES:
        res = probe(n, k)
        gb = 2 * n * k / 1e9
        best = sorted(res.items(), key=lambda kv: kv[1])
        print(f"N={n} K={k} ({gb * 1e3:.0f} MB):", flush=True)
        for name, t in best[:8] + [kv for kv in best[8:] if not kv[0].startswith(("elem", "red"))]:
            print(f"   {t * 1e3:8.1f} us  {gb / t:5.2f} TB/s  {name}")
        rows.append(dict(n=n, k=k, times_ms=res))
        torch.cuda.empty_cache()
    out = Path(os.environ.get("OUT", "."))
    (out / "gemv-probe.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                                                         triton=triton.__version__, rows=rows), indent=1))


if __name__ == "__main__":
    main()
