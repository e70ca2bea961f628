"""Probe: the persistent GEMM template's Triton source with its tile loop flattened into the K loop
(`tl.range(..., flatten=True)`, so Triton's pipeliner overlaps one tile's epilogue with the next tile's loads) and
its C store (and residual load) through tensor descriptors, against the source as lowered today and cuBLAS.

    python benchmarks/gemm_flatten_probe.py [--m 2048,4096] [--out DIR]

The variants are made by rewriting the lowered Triton text before it is compiled (`runtime._load_module`), so the
DSL kernel, its proof and its launch are those of the backend; only the loop and the epilogue's memory ops differ.
Prefill shapes of Llama-3-8B and Mixtral's attention (M rows; N, K of each projection), bf16, CUDA-graph median.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.dsl import Policy, runtime  # noqa: E402
from argus_inductor.dsl.lowering import LoweredSource  # noqa: E402
from argus_inductor.kernels.gemm import gemm  # noqa: E402
from argus_inductor.kernels.gemm_residual import gate_up, gemm_add  # noqa: E402
from argus_inductor.kernels.policies import gemm_policy  # noqa: E402
from benchmarks.sweep import bench, rel  # noqa: E402

VARIANT = {"name": "base"}
_load = runtime._load_module


def rewrite(text: str, variant: str) -> str:
    if variant == "base":
        return text
    loop = "for tile in range(tl.program_id(0), num_tiles, NUM_PROGRAMS):"
    assert loop in text, "not a persistent source"
    text = text.replace(loop, "for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=True):")
    if variant == "flat":
        return text
    # C (and R) through descriptors: the tile's corner is (pm * BM, pn * BN)
    first = re.search(r"^(\s+)(\w+_desc) = tl.make_tensor_descriptor", text, re.M)
    ind = first.group(1)
    decl = f"{ind}C_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[C_stride0, 1], block_shape=[BM, BN])\n"
    if "R_ptrs" in text:
        decl += (f"{ind}R_desc = tl.make_tensor_descriptor(R, shape=[M, N], strides=[R_stride0, 1], "
                 f"block_shape=[BM, BN])\n")
        text = re.sub(r"^(\s+)(\w+) = tl.load\(R_ptrs, mask=R_mask, other=0\)",
                      r"\1\2 = R_desc.load([pm * BM, pn * BN])", text, flags=re.M)
    text = text[:first.start()] + decl + text[first.start():]
    text, n = re.subn(r"tl.store\(C_ptrs, (.*), mask=C_mask\)", r"C_desc.store([pm * BM, pn * BN], \1)", text)
    assert n == 1, text
    return text


def _patched(src: LoweredSource, target: str):
    if VARIANT["name"] != "base" and "NUM_PROGRAMS" in src.source:
        src = replace(src, source=rewrite(src.source, VARIANT["name"]))
    return _load(src, target)


runtime._load_module = _patched

SHAPES = [  # (op, N, K): Llama-3-8B / Mixtral attention and MLP projections
    ("residual", 4096, 14336), ("residual", 4096, 4096), ("epilogue", 4096, 4096), ("epilogue", 1024, 4096),
    ("epilogue", 6144, 4096), ("gate_up", 14336, 4096)]


def policies(m: int, n: int, k: int) -> list[Policy]:
    d = gemm_policy(m, n, k, "cuda")
    return [d, replace(d, num_stages=4),
            Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=4, grid_order="grouped", group_m=8,
                        persistent=True, programs_per_sm=2, tma=True),
            Policy.make(BM=128, BN=256, BK=64, num_warps=8, num_stages=3, grid_order="grouped", group_m=16,
                        persistent=True, tma=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="2048,4096")
    ap.add_argument("--variants", default="base,flat,flat_desc")
    ap.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args = ap.parse_args()
    rows = []
    for m in (int(x) for x in args.m.split(",")):
        for op, n, k in SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
            w2 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
            r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            if op == "residual":
                ref = r.float() + a.float() @ w.float().t()
                peer = bench(lambda: torch.addmm(r, a, w.t()))
                ours = lambda pol: gemm_add(a, w.t(), r, out=out, policy=pol)  # noqa: E731
            elif op == "gate_up":
                ref = F.silu(a.float() @ w.float().t()) * (a.float() @ w2.float().t())
                peer = bench(lambda: F.silu(a @ w.t()) * (a @ w2.t()))
                ours = lambda pol: gate_up(a, w.t(), w2.t(), out=out, policy=pol)  # noqa: E731
            else:
                ref = a.float() @ w.float().t()
                peer = bench(lambda: a @ w.t())
                ours = lambda pol: gemm(a, w.t(), out=out, policy=pol)  # noqa: E731
            flop = 2 * m * n * k * (2 if op == "gate_up" else 1)
            for pol in policies(m, n, k):
                for variant in args.variants.split(","):
                    VARIANT["name"] = variant
                    row = dict(op=op, m=m, n=n, k=k, variant=variant, policy=pol.key(), peer_ms=peer)
                    try:
                        out.fill_(float("nan"))
                        ours(pol)
                        err = rel(out, ref)
                        if not err < 2e-2:
                            raise RuntimeError(f"rel err {err}")
                        t = bench(lambda: ours(pol))
                        row.update(ms=t, rel_err=err, tflops=flop / t / 1e9, vs_peer=peer / t)
                        print(f"{op:8s} M={m} N={n} K={k} {variant:9s} {t:.4f} ms ({flop / t / 1e9:.0f} TFLOP/s) "
                              f"peer {peer:.4f} = {peer / t:.3f}x  {pol.key()}", flush=True)
                    except Exception as e:  # a variant that does not compile is data
                        row["error"] = str(e)[:300]
                        print(f"{op:8s} M={m} N={n} K={k} {variant:9s} ERROR {str(e)[:200]}", flush=True)
                    rows.append(row)
    VARIANT["name"] = "base"
    meta = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), device=torch.cuda.get_device_name(),
                torch=torch.__version__, triton=__import__("triton").__version__, timing="do_bench_cudagraph median")
    path = Path(args.out) / f"gemm-flatten-probe-m{args.m.replace(',', '-')}-{datetime.date.today()}.json"
    path.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
