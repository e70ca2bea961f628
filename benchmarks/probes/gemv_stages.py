"""Probe: are the decode GEMV templates (gemv_policy's one-column programs, one token) at the speed of a plain Triton
GEMV of the same tile? Times gemm_residual (o, down), gemm_gate_up, gemm_epilogue (q|k|v as one, an LM head) and
gemv_cat at Llama-3-8B's shapes over their pipeline stages, static K steps or a range loop (KSTEPS) and 1, 2 or 4
columns a program, beside the plain kernel with K a constexpr (its loads all issued before the first product).
CUDA-graph medians with the weights rotated over copies, each variant checked against float32 torch first.

What it found (benchmarks/results/gemv-stages-probe-h100-2026-11-25{,b}.log, NOTES.md "GEMM"): static steps pay
where the K loop is short over one weight (policies.gemv_static_steps), two columns a program pay for the 7-step down
projection (policies.gemv_columns); the down projection stays about 1 us behind the plain kernel.

    python benchmarks/probes/gemv_stages.py
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus_inductor.kernels.gemm import gemm, gemv_cat  # noqa: E402
from argus_inductor.kernels.gemm_residual import gate_up, gemm_add  # noqa: E402
from argus_inductor.kernels.policies import gemv_cat_policy, gemv_policy  # noqa: E402
from benchmarks.sweep import graph_us, rel  # noqa: E402


@triton.jit
def gemv_plain(x, w, out, K: tl.constexpr, BK: tl.constexpr):
    """out[row] = w[row] . x, K a constexpr (its steps unroll: every load is issued before the first product)."""
    row = tl.program_id(0)
    acc = tl.zeros([BK], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        acc += tl.load(w + row.to(tl.int64) * K + ks).to(tl.float32) * tl.load(x + ks).to(tl.float32)
    tl.store(out + row, tl.sum(acc, axis=0).to(tl.bfloat16))


@triton.jit
def gemv_residual(x, w, resid, out, K: tl.constexpr, BK: tl.constexpr):
    """out[row] = bf16(w[row] . x) + resid[row], rounded as the backend's gemm_residual rounds."""
    row = tl.program_id(0)
    acc = tl.zeros([BK], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        acc += tl.load(w + row.to(tl.int64) * K + ks).to(tl.float32) * tl.load(x + ks).to(tl.float32)
    y = tl.sum(acc, axis=0).to(tl.bfloat16).to(tl.float32)
    tl.store(out + row, (y + tl.load(resid + row).to(tl.float32)).to(tl.bfloat16))


@triton.jit
def gemv_gate_up(x, wg, wu, out, K: tl.constexpr, BK: tl.constexpr):
    """out[row] = silu(wg[row] . x) * (wu[row] . x), both products rounded to bf16 first."""
    row = tl.program_id(0)
    acc_g = tl.zeros([BK], tl.float32)
    acc_u = tl.zeros([BK], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        xv = tl.load(x + ks).to(tl.float32)
        acc_g += tl.load(wg + row.to(tl.int64) * K + ks).to(tl.float32) * xv
        acc_u += tl.load(wu + row.to(tl.int64) * K + ks).to(tl.float32) * xv
    gate = tl.sum(acc_g, axis=0).to(tl.bfloat16).to(tl.float32)
    up = tl.sum(acc_u, axis=0).to(tl.bfloat16).to(tl.float32)
    tl.store(out + row, (gate * tl.sigmoid(gate) * up).to(tl.bfloat16))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/probes/gemv_stages.py needs a CUDA GPU")
    bf, dev = torch.bfloat16, "cuda"
    cases: list[tuple[str, int, int, int]] = [("o + residual", 4096, 4096, 4), ("down + residual", 4096, 14336, 2),
                                              ("gate*up", 14336, 4096, 2), ("q|k|v as one (6144)", 6144, 4096, 4),
                                              ("lm head (32000)", 32000, 4096, 2)]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for name, n, k, copies in cases:
        x = torch.randn(1, k, device=dev, dtype=bf)
        r = torch.randn(1, n, device=dev, dtype=bf)
        out = torch.empty(1, n, device=dev, dtype=bf)
        ws = [torch.randn(n, k, device=dev, dtype=bf) * k ** -0.5 for _ in range(copies)]
        us = [torch.randn(n, k, device=dev, dtype=bf) * k ** -0.5 for _ in range(copies)] if "gate" in name else []
        base = gemv_policy(1, n, "cuda", k)

        def plain(c: int) -> None:  # the plain Triton kernel of gemv_policy's tile with K a constexpr
            if "residual" in name:
                gemv_residual[(n,)](x, ws[c], r, out, K=k, BK=2048, num_warps=8)
            elif "gate" in name:
                gemv_gate_up[(n,)](x, ws[c], us[c], out, K=k, BK=2048, num_warps=8)
            else:
                gemv_plain[(n,)](x, ws[c], out, K=k, BK=2048, num_warps=8)

        variants: list[tuple[str, Callable[[int], None]]] = [("plain, K constexpr", plain)]
        steps = -(-k // base.const("BK"))
        for stages, bn, ksteps in ((1, 1, 0), (1, 1, steps), (2, 1, 0), (3, 1, 0), (4, 1, 0), (1, 2, 0), (1, 2, steps),
                                   (3, 2, 0), (1, 4, 0), (3, 4, 0)):
            pol = replace(base, num_stages=stages).with_consts(BN=bn, KSTEPS=ksteps)

            def run(c: int, pol=pol) -> None:
                if "residual" in name:
                    gemm_add(x, ws[c].t(), r, out=out, policy=pol)
                elif "gate" in name:
                    gate_up(x, ws[c].t(), us[c].t(), "silu", out=out, policy=pol)
                else:
                    gemm(x, ws[c].t(), out=out, policy=pol)

            variants.append((f"stages={stages} BN={bn}" + (f" KSTEPS={ksteps}" if ksteps else ""), run))
        for label, run in variants:
            run(0)
            torch.cuda.synchronize()
            y = x.float() @ ws[0].float().t()
            ref = y + r.float() if "residual" in name else \
                torch.nn.functional.silu(y) * (x.float() @ us[0].float().t()) if "gate" in name else y
            err = rel(out, ref)
            assert err < 2e-2, f"{name}, {label}: relative error {err:.2e}"
            fns: list[Callable[[], None]] = [lambda c=c: run(c) for c in range(copies)]
            t = graph_us(fns)
            print(f"  {name:20s} N={n:6d} K={k:5d} {label:28s}: {t:8.2f} us  "
                  f"({n * k * 2 * (2 if us else 1) / t / 1e6:.2f} TB/s), rel err {err:.1e}", flush=True)

    # gemv_cat (decode's q, k and v in one launch) with and without static K steps
    k, widths, copies = 4096, (4096, 1024, 1024), 4
    x = torch.randn(1, k, device=dev, dtype=bf)
    out = torch.empty(1, sum(widths), device=dev, dtype=bf)
    wss = [[torch.randn(w, k, device=dev, dtype=bf) * k ** -0.5 for w in widths] for _ in range(copies)]
    ref = torch.cat([x.float() @ w.float().t() for w in wss[0]], 1)
    base = gemv_cat_policy("cuda", k)
    for ksteps in (0, -(-k // base.const("BK"))):
        pol = base.with_consts(KSTEPS=ksteps)

        def cat(c: int, pol=pol) -> None:
            gemv_cat(x, *(w.t() for w in wss[c]), out, policy=pol)

        cat(0)
        torch.cuda.synchronize()
        err = rel(out, ref)
        assert err < 2e-2, f"gemv_cat, KSTEPS={ksteps}: relative error {err:.2e}"
        fns = [lambda c=c: cat(c) for c in range(copies)]
        t = graph_us(fns)
        print(f"  {'gemv_cat q|k|v':20s} N={sum(widths):6d} K={k:5d} {f'KSTEPS={ksteps}':28s}: {t:8.2f} us  "
              f"({sum(widths) * k * 2 / t / 1e6:.2f} TB/s), rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
