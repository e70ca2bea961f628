"""Probe: why does the bf16 GEMM template run 127 x 255 x 513 at 0.14x cuBLAS (50.5 us against 6.9 us on the H200,
ops-regimes-h200-2026-11-29.md) when 8 programs of 64 x 64 tiles over 5 K steps is a few microseconds of work?

Each row times the template's policy and a few others on the shape and on its aligned neighbours (each of M, N, K
rounded to a multiple of 16 in turn), against torch.matmul on the same operands, with ops.py's CUDA-graph method.
A row slow only where K is odd says the rows of A and B (K-contiguous, as nn.Linear stores a weight) are not
16-byte aligned, so no vector or asynchronous copies; slow everywhere says the policy (few programs, deep stages).

Found without a GPU (argus_inductor.dsl.precompile, the template compiled for sm_90 as launched, B the transpose of a
K-contiguous weight; tests/dsl/test_precompile.py): at K = 513 every global load is one element (128 a thread a K
step), no cp.async copy is issued whatever num_stages asks (32 KB of shared memory, against a 128 KB 4-stage ring of
16-byte copies at K = 512), and the loads hold 255 registers a thread against 130. So each of the 8 programs waits on
its loads step by step. What the GPU rows are for: how much of the 0.14x that costs, and whether more programs
(smaller tiles, split-K) hide it.

    python benchmarks/probes/odd_gemm.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels.gemm import gemm  # noqa: E402
from argus_inductor.kernels.policies import gemm_policy  # noqa: E402
from benchmarks.ops import bench, rel  # noqa: E402

SHAPES = [(127, 255, 513), (128, 256, 512), (127, 255, 512), (128, 256, 513), (127, 256, 512), (128, 255, 512),
          (1000, 1000, 1000), (1024, 1024, 1024)]
OTHERS = {
    "32x32x64 s3 w4": Policy.make(BM=32, BN=32, BK=64, num_warps=4, num_stages=3),
    "64x64x64 s3 w4": Policy.make(BM=64, BN=64, BK=64, num_warps=4, num_stages=3),
    "64x64x128 s2 w4": Policy.make(BM=64, BN=64, BK=128, num_warps=4, num_stages=2),
    "64x64x64 split-K 4": Policy.make(BM=64, BN=64, BK=64, SPLIT_K=4, num_warps=4, num_stages=3),
}


def row(m: int, n: int, k: int) -> str:
    def operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        return a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    byts = 2 * (m * k + n * k + m * n)
    a, b, out = operands()
    want = a.float() @ b.float()
    def make_peer() -> object:
        x, y, _ = operands()
        return lambda: torch.matmul(x, y)
    peer = bench(lambda: torch.matmul(a, b), byts, make_peer)
    cells = [f"{m}x{n}x{k}", f"cuBLAS {peer * 1e3:.1f} us"]
    for name, pol in {"template": gemm_policy(m, n, k, "cuda", gluon=True), **OTHERS}.items():
        out.fill_(float("nan"))
        try:
            gemm(a, b, out=out, policy=pol)
            err = rel(out, want)

            def make(p: Policy = pol) -> object:
                x, y, o = operands()
                return lambda: gemm(x, y, out=o, policy=p)
            ours = bench(lambda p=pol: gemm(a, b, out=out, policy=p), byts, make)
            cells.append(f"{name} {ours * 1e3:.1f} us ({peer / ours:.2f}x, err {err:.1e})")
        except Exception as e:  # a policy the shape cannot take is a finding too
            cells.append(f"{name} failed ({type(e).__name__}: {str(e)[:80]})")
    return " | ".join(cells)


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("odd_gemm.py times kernels on a GPU; none is visible")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; template policy: "
          f"{gemm_policy(127, 255, 513, 'cuda', gluon=True).key()}", flush=True)
    for m, n, k in SHAPES:
        print(row(m, n, k), flush=True)


if __name__ == "__main__":
    main()
