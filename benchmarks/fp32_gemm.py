"""Float32 GEMMs at float32 accuracy: cuBLAS SGEMM against our three-pass tf32, split in registers or split once.

    python benchmarks/fp32_gemm.py [--out benchmarks/results] [--quick] [--ieee]

Three-pass tf32 (hi*hi + hi*lo + lo*hi) is what our float32 GEMMs run at torch's "high" float32 matmul precision (at
"highest", torch's default, they run full float32, input_precision="ieee": three-pass tf32's error measured here is
larger than SGEMM's; docs/backend.md). Two ways: `input_precision="tf32x3"` splits every tile in registers
inside the K loop; kernels.gemm.tf32_split splits A and B once ([hi lo hi], [lo; hi; hi]) and one tf32 GEMM runs
over 3K. For each shape (the KernelBench float32 matmuls): median ms by CUDA events (triton.testing.do_bench) of
cuBLAS, the in-register split at the template policy, and the pre-split GEMM at each of a few tile policies
(split included in its time); the ratio cuBLAS time / ours; the max relative error of each against a float64
reference. Writes JSON and Markdown under --out and prints the table last. Needs a CUDA GPU.

--ieee times full float32 instead (what Argus runs at "highest"): the template's plan, which hands float32 the bf16
tensor-core tile (271 ms at 4096^3 on the H200 against SGEMM's 2.9: NOTES.md), and a grid of CUDA-core (FMA) tiles.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels.gemm import gemm_epilogue, split_operands  # noqa: E402
from argus_inductor.kernels.policies import fit_shared_memory, gemm_policy  # noqa: E402

# (M, N, K, what): the float32 matmuls of benchmarks/kernelbench/problems/level1 at full size
# B layout: "n-major" is B (K, N) row-major as torch.matmul(a, b) passes it, "k-major" an nn.Linear weight's w.t()
SHAPES = [(4096, 4096, 4096, "01/12/13 square", "n-major"), (4096, 4096, 4096, "square, linear", "k-major"),
          (2048, 3072, 4096, "11 transposed", "k-major"), (16384, 768, 2048, "09 3-D x matrix", "n-major"),
          (65536, 768, 256, "10 4-D x matrix", "n-major"), (8192, 8192, 32, "14 small K", "n-major"),
          (32768, 256, 64, "03 tall-skinny", "n-major")]
TILES = [dict(BM=128, BN=128, BK=32, num_warps=8, num_stages=4), dict(BM=128, BN=128, BK=32, num_warps=4, num_stages=4),
         dict(BM=128, BN=256, BK=32, num_warps=8, num_stages=3), dict(BM=256, BN=128, BK=32, num_warps=8, num_stages=3),
         dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3), dict(BM=64, BN=128, BK=32, num_warps=4, num_stages=4),
         dict(BM=128, BN=256, BK=32, num_warps=8, num_stages=3, persistent=True, grid_order="grouped")]


# --ieee: full float32 products (input_precision "ieee", Triton's FMA path: what Argus runs at torch's default
# "highest"), tiles for CUDA cores rather than tensor cores; each with K split so no chain passes IEEE_CHAIN_K
IEEE_TILES = [dict(BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=st)
              for bm, bn, bk, w, st in ((64, 64, 32, 4, 3), (64, 64, 16, 4, 4), (128, 64, 32, 4, 3),
                                        (64, 128, 32, 4, 3), (128, 128, 16, 8, 3), (128, 128, 32, 8, 3),
                                        (128, 128, 32, 4, 2), (32, 64, 32, 2, 3), (64, 32, 32, 2, 3))]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max())


def _operands(m: int, n: int, k: int, b_layout: str) -> tuple[torch.Tensor, ...]:
    """A (M, K), B (K, N) in `b_layout`, their float64 product, an output and an unused bias, on the GPU."""
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda").t() if b_layout == "k-major" else torch.randn(k, n, device="cuda")
    out = torch.empty(m, n, device="cuda")
    return a, b, a.double() @ b.double(), out, out.new_empty(1)


def run_shape(m: int, n: int, k: int, b_layout: str, tiles: list[dict]) -> dict:
    import triton.testing

    a, b, ref, out, bias = _operands(m, n, k, b_layout)
    row: dict = {"M": m, "N": n, "K": k, "B": b_layout}

    def cublas() -> torch.Tensor:
        return a @ b

    template = fit_shared_memory(gemm_policy(m, n, k, "cuda"), 4)
    in_regs = replace(template, input_precision="tf32x3",
                      consts=tuple((c, v) for c, v in template.consts if c != "SPLIT_K"))

    def registers() -> torch.Tensor:
        gemm_epilogue(a, b, bias, out, policy=in_regs)
        return out

    def presplit(pol: Policy):
        def call() -> torch.Tensor:
            gemm_epilogue(*split_operands(a, b), bias, out, policy=pol)
            return out
        return call

    torch.backends.cuda.matmul.allow_tf32 = False
    t_cublas = triton.testing.do_bench(cublas, warmup=25, rep=100)
    row["cublas_ms"], row["cublas_err"] = t_cublas, rel_err(cublas(), ref)
    try:
        row["registers_ms"] = triton.testing.do_bench(registers, warmup=25, rep=100)
        row["registers_err"] = rel_err(registers(), ref)
        row["registers_policy"] = in_regs.key()
    except Exception as e:  # a template that does not compile is a row, not a crash
        row["registers_error"] = f"{type(e).__name__}: {e}"[:200]
    best = None
    for t in tiles:
        pol = Policy.make(**t, input_precision="tf32")
        try:
            fn = presplit(pol)
            err = rel_err(fn(), ref)
            ms = triton.testing.do_bench(fn, warmup=25, rep=100)
        except Exception as e:
            row.setdefault("presplit_failed", []).append(f"{pol.key()}: {type(e).__name__}")
            continue
        row.setdefault("presplit", []).append({"policy": pol.key(), "ms": ms, "err": err})
        if best is None or ms < best[0]:
            best = (ms, err, pol.key())
    if best:
        row["presplit_ms"], row["presplit_err"], row["presplit_policy"] = best
        row["presplit_vs_cublas"] = t_cublas / best[0]
    split_only = triton.testing.do_bench(lambda: split_operands(a, b),
                                         warmup=10, rep=50)
    row["split_only_ms"] = split_only
    flops = 2.0 * m * n * k
    row["cublas_tflops"] = flops / t_cublas * 1e-9
    if best:
        row["presplit_tflops"] = flops / best[0] * 1e-9
    return row


def run_ieee(m: int, n: int, k: int, b_layout: str, tiles: list[dict]) -> dict:
    """cuBLAS SGEMM against full-float32 Argus GEMMs: the template's ieee plan (what a miss runs at "highest") and
    each FMA tile, K split at IEEE_CHAIN_K as the template splits it; ms, TFLOP/s and max relative error each."""
    import triton.testing

    from argus_inductor.kernels.policies import ieee_chain_split

    a, b, ref, out, bias = _operands(m, n, k, b_layout)
    torch.backends.cuda.matmul.allow_tf32 = False
    flops = 2.0 * m * n * k
    t_cublas = triton.testing.do_bench(lambda: a @ b, warmup=25, rep=100)
    row: dict = {"M": m, "N": n, "K": k, "B": b_layout, "cublas_ms": t_cublas, "cublas_err": rel_err(a @ b, ref),
                 "cublas_tflops": flops / t_cublas * 1e-9, "tiles": []}
    template = ieee_chain_split(replace(fit_shared_memory(gemm_policy(m, n, k, "cuda"), 4), input_precision="ieee"), k)
    cands = [("template", template)] + [
        ("fma", ieee_chain_split(Policy.make(**t, input_precision="ieee", grid_order="grouped"), k)) for t in tiles]
    for what, pol in cands:
        def call(pol: Policy = pol) -> torch.Tensor:
            gemm_epilogue(a, b, bias, out, policy=pol)
            return out
        try:
            err = rel_err(call(), ref)
            ms = triton.testing.do_bench(call, warmup=5, rep=50)
        except Exception as e:  # a tile that does not compile is a row, not a crash
            row["tiles"].append({"what": what, "policy": pol.key(), "error": f"{type(e).__name__}: {e}"[:200]})
            continue
        row["tiles"].append({"what": what, "policy": pol.key(), "ms": ms, "err": err,
                             "tflops": flops / ms * 1e-9, "vs_cublas": t_cublas / ms})
        print(f"  {what} {pol.key()}: {ms:.3f} ms ({flops / ms * 1e-9:.1f} TFLOP/s, {t_cublas / ms:.2f}x cuBLAS), "
              f"rel err {err:.1e}", flush=True)
    return row


def _cell(t: dict | None) -> str:
    return f"{t['ms']:.3f} ({t['vs_cublas']:.2f}x)" if t else "failed"


def ieee_table(rows: list[dict]) -> str:
    lines = ["| shape | M x N x K | B | cuBLAS ms (TFLOP/s) | template ms (x cuBLAS) | best FMA tile ms (x cuBLAS) "
             "| best tile | max rel err cuBLAS / best |", "|---" * 8 + "|"]
    for r in rows:
        timed = [t for t in r["tiles"] if "ms" in t]
        tmpl = next((t for t in timed if t["what"] == "template"), None)
        best = min((t for t in timed if t["what"] == "fma"), key=lambda t: t["ms"], default=None)
        lines.append(f"| {r['what']} | {r['M']}x{r['N']}x{r['K']} | {r['B']} | {r['cublas_ms']:.3f} "
                     f"({r['cublas_tflops']:.1f}) | {_cell(tmpl)} | {_cell(best)} | {best['policy'] if best else '-'} "
                     f"| {r['cublas_err']:.1e} / {best['err'] if best else float('nan'):.1e} |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    lines = ["| shape | M x N x K | B | cuBLAS ms | in-register tf32x3 ms | pre-split ms (split alone) "
             "| cuBLAS/pre-split | max rel err cuBLAS / in-reg / pre-split | pre-split policy |", "|---" * 9 + "|"]
    for r in rows:
        reg = f"{r['registers_ms']:.3f}" if "registers_ms" in r else "failed"
        pre = f"{r['presplit_ms']:.3f} ({r['split_only_ms']:.3f})" if "presplit_ms" in r else "failed"
        ratio = f"{r['presplit_vs_cublas']:.2f}x" if "presplit_vs_cublas" in r else "-"
        errs = " / ".join(f"{r[k]:.1e}" if k in r else "-" for k in ("cublas_err", "registers_err", "presplit_err"))
        lines.append(f"| {r['what']} | {r['M']}x{r['N']}x{r['K']} | {r['B']} | {r['cublas_ms']:.3f} | {reg} | {pre} "
                     f"| {ratio} | {errs} | {r.get('presplit_policy', '-')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results", help="folder for the JSON and Markdown results")
    ap.add_argument("--quick", action="store_true", help="first two shapes and two tile policies only")
    ap.add_argument("--ieee", action="store_true",
                    help="full float32 instead (input_precision ieee, what Argus runs at torch's default "
                         "\"highest\"): the template's plan and a grid of FMA tiles against SGEMM")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fp32_gemm.py needs a CUDA GPU (it times cuBLAS against our kernels)")
    shapes = SHAPES[:2] if args.quick else SHAPES
    tiles = TILES[:2] if args.quick else TILES
    rows = []
    if args.ieee:
        tiles = IEEE_TILES[:2] if args.quick else IEEE_TILES
    for m, n, k, what, b_layout in shapes:
        if args.ieee:
            print(f"{what} {m}x{n}x{k} ({b_layout}):", flush=True)
            r = run_ieee(m, n, k, b_layout, tiles)
            r["what"] = what
            rows.append(r)
            continue
        r = run_shape(m, n, k, b_layout, tiles)
        r["what"] = what
        rows.append(r)
        print(f"{what}: cuBLAS {r['cublas_ms']:.3f} ms, pre-split {r.get('presplit_ms', float('nan')):.3f} ms",
              flush=True)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "python": platform.python_version(),
            "command": "python benchmarks/fp32_gemm.py" + (" --quick" if args.quick else "") +
                       (" --ieee" if args.ieee else "")}
    try:
        import triton
        meta["triton"] = triton.__version__
    except ImportError:
        pass
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"fp32-gemm{'-ieee' if args.ieee else ''}-{datetime.date.today().isoformat()}"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = ieee_table(rows) if args.ieee else table(rows)
    title = "Full float32 GEMM (FMA tiles)" if args.ieee else "Float32 GEMM at float32 accuracy"
    (out / f"{stem}.md").write_text(f"# {title}\n\n{json.dumps(meta)}\n\n{md}\n")
    print(md)


if __name__ == "__main__":
    main()
