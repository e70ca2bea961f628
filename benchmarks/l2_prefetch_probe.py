"""Probe: does pulling a decode GEMV's weight into L2 while the step's latency-bound kernels run (attention, a norm)
make the GEMV after them faster? A decode b=1 step streams its weights at about 3 TB/s in its GEMVs, and between
them runs about 16 us a layer of kernels that read almost nothing (the norms, the rotation, split-KV attention):
the memory bus idles there. This probe puts an L2 prefetch of the next GEMV's weight in front of that window and
times the chain as one CUDA graph against the chain without it, at Llama-3-8B's shapes (one token):

* o: split-KV attention over a 1040-key cache (kernels.attention, the decode template) then the o projection
  (4096 x 4096) as the backend runs it at one row (the GEMV template);
* gate_up: the RMSNorm (kernels.rms_rounded) then the gated MLP's first half (2 x 14336 x 4096), of whose weights
  only the first `--mb` MB can be prefetched (L2 holds 50 MB);
* lm_head: the final RMSNorm then the 128256 x 4096 LM head, the first `--mb` MB prefetched.

Prefetches (plain Triton, inline PTX): `prefetch.global.L2::evict_last` a line (128 bytes) or a sector (32 bytes)
a thread, and `cp.async.bulk.prefetch.L2.global` of a 4 KB or 16 KB run a thread (sm_90). Each is timed in front of
the window on the stream (what a kernel of Inductor's stream can do) and, as a bound, on a second stream of the
same graph beside the window. Weights and caches rotate over copies, so every chain reads them from memory. Each
GEMV's output is checked against float32 torch first.

    python benchmarks/l2_prefetch_probe.py [--mb 24]    # prints the rows, writes $OUT/l2-prefetch-probe.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels.attention import attention  # noqa: E402
from argus_inductor.kernels.gemm import gemm  # noqa: E402
from argus_inductor.kernels.gemm_residual import gate_up  # noqa: E402
from argus_inductor.kernels.policies import gemv_policy  # noqa: E402
from argus_inductor.kernels.rms_rounded import rms_norm_rounded  # noqa: E402
from benchmarks.sweep import graph_us, rel  # noqa: E402

K = 4096
EPS = 1e-5


@triton.jit
def prefetch_lines(base, nbytes, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)) * STRIDE
    offs = tl.minimum(offs, nbytes - 1)
    tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0;", "=r,l", [base + offs],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_bulk(base, nbytes, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    offs = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)) * CHUNK
    offs = tl.minimum(offs, nbytes - CHUNK)
    size = tl.full([BLOCK], CHUNK, tl.int32)
    tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0;", "=r,l,r",
                              [base + offs, size], dtype=tl.int32, is_pure=False, pack=1)


def prefetcher(kind: str) -> Callable[[torch.Tensor, int], None]:
    """A launch that asks L2 for the first `nbytes` of `w` (one thread a line, a sector or a bulk run)."""
    block = 256

    def run(w: torch.Tensor, nbytes: int) -> None:
        flat = w.view(-1).view(torch.uint8)
        nbytes = min(nbytes, flat.numel())
        if kind in ("line", "sector"):
            stride = 128 if kind == "line" else 32
            grid = (triton.cdiv(nbytes, stride * block),)
            COMPILED[kind] = prefetch_lines[grid](flat, nbytes, STRIDE=stride, BLOCK=block, num_warps=block // 32)
        else:
            chunk = 4096 if kind == "bulk4k" else 16384
            nbytes -= nbytes % chunk
            grid = (triton.cdiv(nbytes, chunk * block),)
            COMPILED[kind] = prefetch_bulk[grid](flat, nbytes, CHUNK=chunk, BLOCK=block, num_warps=block // 32)
    return run


KINDS = ("line", "sector", "bulk4k", "bulk16k")
COMPILED: dict[str, object] = {}  # each prefetch kind's compiled launch (its PTX is printed: the asm must survive)


def side_stream(window: Callable[[], None], pf: Callable[[], None]) -> None:
    """`pf` on a second stream beside `window`, joined before the caller's next launch (capturable)."""
    main = torch.cuda.current_stream()
    side = SIDE[0]
    side.wait_stream(main)
    with torch.cuda.stream(side):
        pf()
    window()
    main.wait_stream(side)


SIDE: list[torch.cuda.Stream] = []


def probe_case(name: str, copies: int, window: Callable[[int], None], gemv: Callable[[int], torch.Tensor],
               weight: Callable[[int], list[torch.Tensor]], ref: torch.Tensor, mb: float) -> dict:
    out = gemv(0)
    err = rel(out, ref)
    assert err < 2e-2, f"{name}: GEMV wrong ({err:.2e})"
    nbytes = int(mb * 2**20)
    rows: dict[str, float] = {}
    rows["window"] = graph_us([lambda c=c: window(c) for c in range(copies)])
    rows["gemv"] = graph_us([lambda c=c: gemv(c) for c in range(copies)])
    rows["window + gemv"] = graph_us([lambda c=c: (window(c), gemv(c)) for c in range(copies)])

    def fetch(kind: str, c: int) -> None:
        ws = weight(c)
        each = nbytes // len(ws)
        for w in ws:
            prefetcher(kind)(w, each)

    for kind in KINDS:
        rows[f"prefetch {kind}"] = graph_us([lambda c=c, k=kind: fetch(k, c) for c in range(copies)])
        rows[f"prefetch {kind} + gemv"] = graph_us([lambda c=c, k=kind: (fetch(k, c), gemv(c))
                                                   for c in range(copies)])
        rows[f"prefetch {kind} + window + gemv"] = graph_us(
            [lambda c=c, k=kind: (fetch(k, c), window(c), gemv(c)) for c in range(copies)])
        rows[f"[window | prefetch {kind}] + gemv"] = graph_us(
            [lambda c=c, k=kind: (side_stream(lambda: window(c), lambda: fetch(k, c)), gemv(c))
             for c in range(copies)])
    out = gemv(0)
    assert rel(out, ref) < 2e-2
    base = rows["window + gemv"]
    print(f"{name} (prefetch {mb:g} MB; GEMV rel err {err:.1e}):", flush=True)
    for k, us in rows.items():
        print(f"   {us:8.2f} us  {k}" + (f"   ({base - us:+.2f} us against window + gemv)" if "+" in k else ""),
              flush=True)
    return dict(prefetch_mb=mb, gemv_rel_err=err, us=rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=24.0, help="MB of the gate_up and LM head weights to prefetch")
    ap.add_argument("--cases", default="o,gate_up,lm_head")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/l2_prefetch_probe.py needs a CUDA GPU")
    SIDE.append(torch.cuda.Stream())
    bf = torch.bfloat16
    cases = args.cases.split(",")
    res: dict[str, dict] = {}
    x = torch.randn(1, K, device="cuda", dtype=bf)
    g = (torch.rand(K, device="cuda") + 0.5).to(bf)
    normed = [rms_norm_rounded(x, g, EPS)]

    def norm(_c: int) -> None:
        normed[0] = rms_norm_rounded(x, g, EPS)

    if "o" in cases:
        copies = 6
        t, hq, hk, d = 1040, 32, 8, 128
        q = torch.randn(1, hq, 1, d, device="cuda", dtype=bf)
        caches = [(torch.randn(1, hk, t, d, device="cuda", dtype=bf), torch.randn(1, hk, t, d, device="cuda", dtype=bf))
                  for _ in range(copies)]
        keep = torch.arange(t, device="cuda")[None, None, None, :] < t - 9
        att = torch.empty_like(q)
        host = Policy.make(BN=128, num_warps=8, num_stages=3)
        ws = [torch.randn(K, K, device="cuda", dtype=bf) * K ** -0.5 for _ in range(copies)]
        a = torch.randn(1, K, device="cuda", dtype=bf)
        o = torch.empty(1, K, device="cuda", dtype=bf)
        pol = gemv_policy(1, K, "cuda", K)
        res["o"] = probe_case(
            "o projection after attention", copies,
            lambda c: attention(q, caches[c][0], caches[c][1], mask=keep, out=att, policy=host),
            lambda c: gemm(a, ws[c].t(), out=o, policy=pol), lambda c: [ws[c]],
            a.float() @ ws[0].float().t(), mb=K * K * 2 / 2**20)
    if "gate_up" in cases:
        copies = 2
        n = 14336
        ws = [(torch.randn(n, K, device="cuda", dtype=bf) * K ** -0.5,
               torch.randn(n, K, device="cuda", dtype=bf) * K ** -0.5) for _ in range(copies)]
        h = torch.empty(1, n, device="cuda", dtype=bf)
        pol = gemv_policy(1, n, "cuda", K)
        norm(0)
        y = normed[0].float()
        ref = torch.nn.functional.silu(y @ ws[0][0].float().t()) * (y @ ws[0][1].float().t())
        res["gate_up"] = probe_case(
            "gate*up after the RMSNorm", copies, norm,
            lambda c: gate_up(normed[0], ws[c][0].t(), ws[c][1].t(), "silu", out=h, policy=pol), lambda c: list(ws[c]),
            ref, mb=args.mb)
    if "lm_head" in cases:
        copies = 2
        n = 128256
        ws = [torch.randn(n, K, device="cuda", dtype=bf) * K ** -0.5 for _ in range(copies)]
        logits = torch.empty(1, n, device="cuda", dtype=bf)
        pol = gemv_policy(1, n, "cuda", K)
        norm(0)
        res["lm_head"] = probe_case(
            "LM head after the final RMSNorm", copies, norm,
            lambda c: gemm(normed[0], ws[c].t(), out=logits, policy=pol), lambda c: [ws[c]],
            normed[0].float() @ ws[0].float().t(), mb=args.mb)
    for kind, compiled in COMPILED.items():
        ptx = getattr(compiled, "asm", {}).get("ptx", "")
        print(f"prefetch {kind}: PTX has {ptx.count('prefetch')} prefetch instruction(s)", flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "l2-prefetch-probe.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, cases=res),
        indent=1))


if __name__ == "__main__":
    main()
