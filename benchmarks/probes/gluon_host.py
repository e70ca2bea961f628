"""Host cost of the Gluon lowerings' launches (argus_inductor.hopper) beside their GPU time and their peers'.

For attention and GEMM shapes the Gluon kernels take, on the GPU, this measures:
- host_us: the median wall time of one call issued on an idle GPU (the Python of the launch: the lowering's
  checks, four or three tensor descriptors, Triton's argument binding), ours and the peer's (SDPA cuDNN, cuBLAS);
- events_ms: CUDA events around back-to-back calls (triton.testing.do_bench), what benchmarks/ops.py reports for
  attention: where host_us exceeds the GPU time this is host-bound;
- graph_ms: the same call replayed from a CUDA graph (do_bench_cudagraph): GPU time alone, what a compiled model
  with CUDA graphs (the backend's default on a GPU) pays per call.

    python benchmarks/probes/gluon_host.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus_inductor.kernels import attention, gemm  # noqa: E402
from argus_inductor.kernels.policies import attention_policy, gemm_policy  # noqa: E402

ATTN = [(4, 32, 32, 4096, 128, True), (16, 32, 32, 1024, 128, True), (8, 16, 16, 2048, 64, False),
        (1, 32, 8, 2048, 128, True), (8, 32, 8, 1024, 128, True)]
GEMM = [(128, 4096, 4096), (128, 14336, 4096), (64, 6144, 4096)]


def host_us(fn, reps: int = 60) -> float:
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def measure(ours, peer) -> dict[str, float]:
    import triton.testing

    return dict(ours_host_us=host_us(ours), peer_host_us=host_us(peer),
                ours_events_ms=triton.testing.do_bench(ours, warmup=25, rep=100),
                peer_events_ms=triton.testing.do_bench(peer, warmup=25, rep=100),
                ours_graph_ms=triton.testing.do_bench_cudagraph(ours, rep=100))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parents[1] / "results"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/probes/gluon_host.py needs a CUDA GPU")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for z, h, hk, s, d, causal in ATTN:
        q = torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(z, hk, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        pol = attention_policy(s, d, "cuda")

        def cudnn(q=q, k=k, v=v, causal=causal, gqa=h != hk):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        rows.append(dict(op="attention", shape=f"Z={z} H={h}/{hk} S={s} D={d}{' causal' if causal else ''}",
                         **measure(lambda: attention(q, k, v, causal, out=out, policy=pol), cudnn)))
        print(rows[-1], flush=True)
    for m, n, k in GEMM:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        pol = gemm_policy(m, n, k, "cuda", gluon=True)
        rows.append(dict(op="gemm", shape=f"M={m} N={n} K={k}",
                         **measure(lambda: gemm(a, b, out=c, policy=pol), lambda: torch.matmul(a, b))))
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                command="python benchmarks/probes/gluon_host.py")
    (out / "gluon-host-overhead.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print("| op | shape | ours host us | peer host us | ours events ms | ours graph ms | peer events ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['op']} | {r['shape']} | {r['ours_host_us']:.0f} | {r['peer_host_us']:.0f} | "
              f"{r['ours_events_ms']:.4f} | {r['ours_graph_ms']:.4f} | {r['peer_events_ms']:.4f} |")


if __name__ == "__main__":
    main()
