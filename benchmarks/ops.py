"""Our kernels against the vendor peers, same process, same inputs.

    python benchmarks/ops.py [--ops gemm,attention,moe] [--quick] [--out benchmarks/results]

For each op and shape: median time (triton.testing.do_bench), TFLOP/s or TB/s, ours/peer speed ratio
(peer time / our time: >1 means we are faster), and max relative error against a float32 reference.
Writes JSON and a Markdown table under --out and prints the table last. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.kernels import attention, gemm, moe_expert_step  # noqa: E402
from argus_inductor.kernels.policies import attention_policy, gemm_policy, moe_policies  # noqa: E402

GEMM_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
GEMM_M = [1, 16, 128, 4096]
ATTN = [  # (batch, q heads, kv heads, seq q, seq kv, head dim, causal)
    (4, 32, 32, 4096, 4096, 128, True), (4, 32, 32, 4096, 4096, 128, False), (16, 32, 32, 1024, 1024, 128, True),
    (1, 32, 32, 16384, 16384, 128, True), (8, 16, 16, 2048, 2048, 64, False), (4, 32, 8, 4096, 4096, 128, True),
    (32, 32, 8, 1, 8192, 128, False),
]
ATTN_ROUNDS = 3  # attention: ours and the peers timed in turn this many times, median each
MOE = [(t, *cfg) for cfg in ((4096, 14336, 8, 2), (2048, 768, 128, 8)) for t in (1, 64, 4096)]
# --regimes: shapes nobody tuned for (issue 39): a column GEMV (N = 1), K far larger than M and N (split-K), tiny and
# odd sizes, a batched matmul; attention at head dims 64/256 and with few query rows; MoE at 1 token an expert
GEMM_REGIMES = [(2048, 1, 262144), (256, 256, 524288), (7, 13, 17), (127, 255, 513), (1000, 1000, 1000),
                (1, 128256, 4096)]
ATTN_REGIMES = [(16, 32, 32, 1024, 1024, 64, True), (8, 16, 16, 512, 512, 256, True), (32, 32, 8, 4, 4096, 128, False)]
MOE_REGIMES = [(8, 4096, 14336, 8, 2), (16, 2048, 768, 128, 8)]


L2_BYTES = 50 * 2**20


def bench(fn, bytes_per_call: int = 0, make=None) -> float:
    """Median ms per call by CUDA-graph replay (host launch overhead out of ours and the peer's number alike).

    When one call's operands would sit in L2 (< 2x its size), `make()` builds more independent copies of
    the call and the graph runs them in turn, so every call reads from device memory.
    """
    fns = [fn]
    if make is not None and 0 < bytes_per_call < 2 * L2_BYTES:
        fns += [make() for _ in range(min(7, math.ceil(2 * L2_BYTES / bytes_per_call)))]
    return graph_median(fns)


def graph_median(fns: list, rep: int = 100) -> float:
    """Median ms per call of `fns` (the same call on different operands), one CUDA graph running each in turn."""
    import triton.testing

    for f in fns:
        f()
    torch.cuda.synchronize()

    def run_all():
        for f in fns:
            f()

    return float(triton.testing.do_bench_cudagraph(run_all, rep=rep, return_mode="median")) / len(fns)


def bench_events(fn) -> float:
    """Median ms by CUDA events. Used for attention: SDPA's cuDNN and flash paths ran several times slower
    under CUDA-graph capture on the H100 (benchmarks/results/sweep-attention-2026-11-22.json), and these
    kernels run for milliseconds, so launch overhead does not matter."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def ceilings() -> dict[str, float]:
    """This card's two ceilings, measured in this run: a device-to-device copy's TB/s (bytes read plus written) and
    a bf16 8192^3 torch.mm's TFLOP/s on random data. The copy is timed by CUDA events, not graph replay: captured in
    a CUDA graph, a copy of 512 MiB or more becomes a memcpy node that the copy engines run, at 2.77 TB/s on the
    H200 against 4.25 by events (256 MiB: 4.24 either way; probe of 2026-11-29, NOTES.md), and the roofline would
    then put the GEMVs at 140% of it."""
    src = torch.randn(2**29, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = min(bench_events(lambda: dst.copy_(src)) for _ in range(3))
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    mm_ms = bench(lambda: torch.mm(a, b))
    return {"copy_tbps": round(2 * 2**30 / copy_ms / 1e9, 3), "bf16_tflops": round(2 * 8192**3 / mm_ms / 1e9, 1)}


def roofline(rows: list[dict], ceil: dict[str, float]) -> None:
    """Each row's distance to the roofline: the bound time (its bytes at the copy rate, or its FLOPs at the bf16
    rate, whichever is longer) over our time."""
    for r in rows:
        if "flops" not in r or "bytes" not in r:
            continue
        bytes_ms = r["bytes"] / (ceil["copy_tbps"] * 1e9)  # its bytes at the copy rate
        flops_ms = r["flops"] / (ceil["bf16_tflops"] * 1e9)  # its FLOPs at the bf16 rate
        r["roof_frac"] = max(bytes_ms, flops_ms) / r["ours_ms"]
        r["bound"] = "bytes" if bytes_ms > flops_ms else "tensor cores"


def same_bytes_copies(rows: list[dict]) -> None:
    """Each memory-bound row against a device copy that moves the same bytes (half read, half written), timed the
    same way as ours (CUDA-graph replay, rotated copies where they would sit in L2): the large copy's rate is not
    reachable by a kernel that moves 32 MB, since the launch, the ramp to full bandwidth and the last wave's tail
    are a larger share of a short kernel. `of_same_copy` says how close the row is to what a copy of its size gets."""
    times: dict[int, float] = {}
    for r in rows:
        if r.get("bound") != "bytes" or not 0 < r.get("bytes", 0) <= 2**30:
            continue
        n = r["bytes"] // 4  # bf16 elements a side
        if n not in times:
            def pair() -> tuple[torch.Tensor, torch.Tensor]:
                return torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.empty(n, device="cuda",
                                                                                        dtype=torch.bfloat16)

            def make():
                src, dst = pair()
                return lambda: dst.copy_(src)
            src, dst = pair()
            times[n] = bench(lambda: dst.copy_(src), 4 * n, make)
        r["copy_same_ms"] = times[n]
        r["of_same_copy"] = times[n] / r["ours_ms"]


def run_gemm(rows: list[dict], quick: bool, regimes: bool = False) -> None:
    shapes = [(m, n, k) for m in GEMM_M for n, k in GEMM_NK] + [(8192, 8192, 8192)]
    if quick:
        shapes = shapes[::3]
    if regimes:
        shapes = GEMM_REGIMES
    for m, n, k in shapes:
        pol = gemm_policy(m, n, k, "cuda", gluon=True)  # as the backend's bf16 template: ops.gemm._gemm_template
        byts = 2 * (m * k + n * k + m * n)

        def operands():
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()  # weights as nn.Linear stores them
            return a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def ours_call():
            a, b, out = operands()
            return lambda: gemm(a, b, out=out, policy=pol)

        def peer_call():
            a, b, _ = operands()
            return lambda: torch.matmul(a, b)

        a, b, out = operands()
        out.fill_(float("nan"))
        gemm(a, b, out=out, policy=pol)
        err = rel(out, a.float() @ b.float())
        ours = bench(lambda: gemm(a, b, out=out, policy=pol), byts, ours_call)
        peer = bench(lambda: torch.matmul(a, b), byts, peer_call)
        flops = 2 * m * n * k
        rows.append(dict(op="gemm-regime" if regimes else "gemm", shape=f"M={m} N={n} K={k}", ours_ms=ours,
                         peer="cuBLAS", peer_ms=peer, ratio=peer / ours, tflops=flops / ours / 1e9,
                         tbps=byts / ours / 1e9, rel_err=err, policy=pol.key(), flops=flops, bytes=byts))
        print(rows[-1], flush=True)


def run_attention(rows: list[dict], quick: bool, regimes: bool = False) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shapes = ATTN_REGIMES if regimes else ATTN[::2] if quick else ATTN
    for z, h, hk, s, t, d, causal in shapes:
        q = torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(z, hk, t, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(z, hk, t, d, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(q)
        pol = attention_policy(s, d, "cuda")

        def ours_fn():
            return attention(q, k, v, causal, out=out, policy=pol)

        ours_fn()
        ke, ve = k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1)
        sample = slice(0, 1)
        ref = F.scaled_dot_product_attention(q[sample].float(), ke[sample].float(), ve[sample].float(),
                                              is_causal=causal)
        err = rel(out[sample], ref)
        fns = {"ours": ours_fn}
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def peer_fn(be=be):
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=h != hk)
            try:
                peer_fn()
                fns[name] = peer_fn
            except RuntimeError as e:
                print(f"  {name} unavailable: {str(e).splitlines()[0]}")
        # ours and the peers take turns, ATTN_ROUNDS times, and each keeps its median: the card's clock drifts by
        # up to 10-15% between runs of this script, and timing ours and the peers back to back once let that
        # drift land on one side of the ratio
        times: dict[str, list[float]] = {n: [] for n in fns}
        for _ in range(ATTN_ROUNDS):
            for name, fn in fns.items():
                times[name].append(bench_events(fn))
        ours = statistics.median(times.pop("ours"))
        peers = {name: statistics.median(ts) for name, ts in times.items()}
        best = min(peers, key=peers.get) if peers else None
        flops = 4 * z * h * s * t * d * (0.5 if causal and s == t else 1.0)
        byts = 2 * (2 * z * h * s * d + 2 * z * hk * t * d)
        rows.append(dict(op="attention-regime" if regimes else "attention",
                         shape=f"Z={z} H={h}/{hk} S={s} T={t} D={d}{' causal' if causal else ''}",
                         ours_ms=ours, peer=f"SDPA {best}" if best else "none", peer_ms=peers.get(best, math.nan),
                         ratio=peers.get(best, math.nan) / ours, tflops=flops / ours / 1e9, tbps=byts / ours / 1e9,
                         rel_err=err, policy=pol.key(), peers=peers, flops=flops, bytes=byts))
        print(rows[-1], flush=True)


def run_moe(rows: list[dict], quick: bool, regimes: bool = False) -> None:
    shapes = MOE_REGIMES if regimes else MOE[::2] if quick else MOE
    for t, hd, inter, e, topk in shapes:
        x = torch.randn(t, hd, device="cuda", dtype=torch.bfloat16)
        w1 = torch.randn(e, 2 * inter, hd, device="cuda", dtype=torch.bfloat16) * hd**-0.5
        w2 = torch.randn(e, hd, inter, device="cuda", dtype=torch.bfloat16) * inter**-0.5
        tw, ti = torch.topk(torch.softmax(torch.randn(t, e, device="cuda"), -1), topk)
        tw = tw.to(torch.bfloat16)
        # what the backend's default plan and the agent start from (bf16: the Gluon gate-up where it takes the shape)
        up, down = moe_policies(t, topk, e, "cuda", gluon=True)
        ours = bench(lambda: moe_expert_step(x, w1, w2, tw, ti, policy_up=up, policy_down=down))
        y = moe_expert_step(x, w1, w2, tw, ti, policy_up=up, policy_down=down)
        ref = eager_moe(x.float(), w1.float(), w2.float(), tw.float(), ti)
        err = rel(y, ref)
        peers = {"eager loop": bench_events(lambda: eager_moe(x, w1, w2, tw, ti))}
        if hasattr(torch, "_grouped_mm"):
            try:
                grouped_moe(x, w1, w2, tw, ti)
                peers["grouped_mm"] = bench(lambda: grouped_moe(x, w1, w2, tw, ti))
            except RuntimeError as ex:
                print(f"  grouped_mm unavailable: {str(ex).splitlines()[0]}")
        best = "grouped_mm" if "grouped_mm" in peers else "eager loop"
        flops = 2 * t * topk * (2 * inter * hd + hd * inter)
        # the bytes bound: each expert a token picks reads its weights once (at 1-64 tokens, the selected experts')
        picked = int(torch.unique(ti).numel())
        byts = picked * 3 * inter * hd * 2 + 2 * 2 * t * hd
        rows.append(dict(op="moe-regime" if regimes else "moe", shape=f"T={t} H={hd} I={inter} E={e} k={topk}",
                         ours_ms=ours, peer=best, peer_ms=peers[best], ratio=peers[best] / ours,
                         tflops=flops / ours / 1e9, tbps=byts / ours / 1e9, rel_err=err,
                         policy=f"up {up.key()}; down {down.key()}", peers=peers, flops=flops, bytes=byts,
                         experts_read=picked))
        print(rows[-1], flush=True)


def eager_moe(x, w1, w2, tw, ti):
    inter = w1.shape[1] // 2
    y = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        rows, slot = (ti == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        h = F.silu(xe @ w1[e, :inter].t()) * (xe @ w1[e, inter:].t())
        y.index_add_(0, rows, (tw[rows, slot, None] * (h @ w2[e].t())).to(y.dtype))
    return y


def grouped_moe(x, w1, w2, tw, ti):
    """The peer: tokens sorted by expert, torch._grouped_mm for both projections."""
    topk = ti.shape[1]
    flat = ti.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(w1.shape[0], dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x[order // topk]
    gu = torch._grouped_mm(xs, w1.transpose(1, 2), offs=offs)
    inter = w1.shape[1] // 2
    h = F.silu(gu[:, :inter]) * gu[:, inter:]
    yd = torch._grouped_mm(h, w2.transpose(1, 2), offs=offs)
    yd = yd * tw.reshape(-1)[order, None]
    y = torch.zeros_like(x)
    y.index_add_(0, order // topk, yd)
    return y


def table(rows: list[dict]) -> str:
    out = ["| op | shape | ours ms | peer | peer ms | ours/peer speed | TFLOP/s | TB/s | of roofline | "
           "of a copy of its bytes | rel err |",
           "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        roof = f"{r['roof_frac']:.0%} ({r['bound']})" if "roof_frac" in r else "-"
        same = f"{r['of_same_copy']:.0%} ({r['copy_same_ms'] * 1e3:.1f} us)" if "of_same_copy" in r else "-"
        out.append(f"| {r['op']} | {r['shape']} | {r['ours_ms']:.4f} | {r['peer']} | {r['peer_ms']:.4f} | "
                   f"{r['ratio']:.2f}x | {r['tflops']:.1f} | {r['tbps']:.2f} | {roof} | {same} | "
                   f"{r['rel_err']:.1e} |")
    for op in dict.fromkeys(r["op"] for r in rows):
        rs = [r["ratio"] for r in rows if r["op"] == op and r["ratio"] == r["ratio"]]
        if rs:
            gm = math.exp(sum(math.log(x) for x in rs) / len(rs))
            out.append(f"\n{op}: geometric mean ours/peer speed = {gm:.3f}x over {len(rs)} shapes")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="gemm,attention,moe", help="comma-separated subset of gemm,attention,moe")
    ap.add_argument("--quick", action="store_true", help="a third of the shapes")
    ap.add_argument("--regimes", action="store_true",
                    help="also the shapes nobody tuned for: column GEMV, huge K, tiny and odd sizes, head dims 64/256, "
                         "few query rows, MoE at 1 token an expert")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"),
                    help="output folder (default: $OUT if set, else benchmarks/results)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/ops.py needs a CUDA GPU (no GPU is visible)")
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = set(ops) - {"gemm", "attention", "moe"}
    if bad:
        sys.exit(f"unknown op(s): {', '.join(sorted(bad))}")
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    rows: list[dict] = []
    ceil = ceilings()
    print(f"ceilings measured: {ceil}", flush=True)
    for op in ops:
        {"gemm": run_gemm, "attention": run_attention, "moe": run_moe}[op](rows, args.quick)
        if args.regimes:
            {"gemm": run_gemm, "attention": run_attention, "moe": run_moe}[op](rows, args.quick, regimes=True)
    roofline(rows, ceil)
    same_bytes_copies(rows)
    import triton

    meta = dict(device=torch.cuda.get_device_name(), **ceil, torch=torch.__version__, triton=triton.__version__,
                python=platform.python_version(), date=datetime.datetime.now().isoformat(timespec="seconds"),
                command=" ".join(["python", "benchmarks/ops.py", *sys.argv[1:]]))
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.date.today().isoformat()
    (outdir / f"ops-{stamp}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    md = f"# ops benchmark\n\n{json.dumps(meta)}\n\n{table(rows)}\n"
    (outdir / f"ops-{stamp}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
