"""What the backend's default plans compile to, for each shape of benchmarks/ops.py, without a GPU.

For every GEMM, attention and MoE shape of the ops benchmark, the op's template plan (what a cache miss runs
with ARGUS_ON_MISS=default) is compiled for the H100 (sm_90) and MI300X (gfx942) by Triton's own compiler on this
machine (argus_inductor.dsl.precompile), and the table shows per kernel: registers per thread, spilled bytes,
shared memory (LDS on AMD) against the architecture's limit, and whether the Hopper build issues wgmma and tensor
descriptor copies. A kernel that spills, or asks for more shared memory than its target has, shows up here
before any device time is spent. Writes compile-audit-<date>.{json,md} under --out.

    python benchmarks/compile_audit.py [--arch sm_90,gfx942] [--out DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHARED_LIMIT = {"sm_90": 227 * 1024, "gfx942": 64 * 1024}  # bytes a program may use (H100: 227 KB, MI300X: 64 KB)


def template_kernels(arch: str) -> list[tuple[str, Any, Any, dict[str, int]]]:
    """(shape label, kernel, policy, sizes of its shape symbols) for every kernel of every ops.py shape's template
    plan on `arch`."""
    import torch

    from argus_inductor import ops
    from argus_inductor.runtime.signature import make_signature
    from benchmarks.ops import ATTN, GEMM_M, GEMM_NK, MOE

    target = "hip" if arch.startswith("gfx") else "cuda"
    bf = torch.bfloat16
    out = []

    def add(label: str, op: str, epilogue: str, tensors: list, static: dict, dynamic: dict, sizes: dict) -> None:
        sig = dataclasses.replace(make_signature(op, epilogue, tensors, static, dynamic), arch=arch)
        spec = ops.spec_for(sig)
        pols = spec.policies(spec.template(sig, target), sig)
        kernels = {k.name: k for k in spec.kernels}
        for name, pol in pols.items():
            k = kernels[name]
            shape = dict(sizes)
            if op == "moe":
                bm = pol.const("BM", 16)
                nb = min(shape["E"], shape["TK"]) + shape["TK"] // bm
                shape.update(P=nb * bm, NB=nb)
            out.append((label, k, pol, {s: shape[s] for s in k.ir.symbols}))

    for m in GEMM_M + [8192]:
        for n, kk in (GEMM_NK if m != 8192 else [(8192, 8192)]):
            add(f"gemm M={m} N={n} K={kk}", "gemm", "", [torch.empty(m, kk, dtype=bf), torch.empty(n, kk, dtype=bf)],
                {"N": n, "K": kk}, {"M": m}, dict(M=m, N=n, K=kk, NB=n))
    for z, h, hk, s, t, d, causal in ATTN:
        q, kv = torch.empty(z, h, s, d, dtype=bf), torch.empty(z, hk, t, d, dtype=bf)
        add(f"attention {z}x{h}/{hk}x{s}x{t}x{d}{' causal' if causal else ''}", "attention",
            "causal" if causal else "", [q, kv, kv], {"H": h, "HK": hk, "D": d, "Z": z}, {"S": s, "T": t},
            dict(Z=z, H=h, HK=hk, S=s, T=t, D=d))
    for t, hd, inter, e, topk in MOE:
        add(f"moe T={t} HD={hd} I={inter} E={e} top{topk}", "moe", f"top{topk},silu",
            [torch.empty(t, hd, dtype=bf), torch.empty(e, 2 * inter, hd, dtype=bf),
             torch.empty(e, hd, inter, dtype=bf)],
            {"E": e, "I": inter, "HD": hd, "TOPK": topk}, {"T": t},
            dict(T=t, HD=hd, E=e, I2=2 * inter, I=inter, TK=t * topk))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="sm_90,gfx942", help="comma-separated: sm_90, gfx942")
    ap.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        ap.error("unset TRITON_INTERPRET (and ARGUS_INTERPRET): this compiles for GPUs")
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    bad = [a for a in archs if a not in SHARED_LIMIT]
    if bad:
        ap.error(f"unknown --arch {', '.join(bad)}; known: {', '.join(SHARED_LIMIT)}")
    import triton

    from argus_inductor.dsl.precompile import compile_report

    rows: list[dict[str, Any]] = []
    for arch in archs:
        for label, kernel, pol, sizes in template_kernels(arch):
            r = dataclasses.asdict(compile_report(kernel, pol, sizes, arch=arch))
            row = {"arch": arch, "shape": label, "kernel": kernel.name, "policy": pol.key(), **r,
                   "fits": r["ok"] and (r["shared_bytes"] or 0) <= SHARED_LIMIT[arch]}
            rows.append(row)
            print(f"{arch:7} {label:44} {kernel.name:16} ok={r['ok']} regs={r['registers']} spills={r['spills']} "
                  f"shared={r['shared_bytes']} wgmma={r['wgmma']} tma={r['descriptors']}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"compile-audit-{datetime.date.today()}"
    import torch

    command = "python benchmarks/compile_audit.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__,
            "triton": triton.__version__, "command": command.strip(),
            "note": "compiled on a machine without a GPU (argus_inductor.dsl.precompile); registers and spills from "
                    "the cuobjdump Triton ships (none for AMD)"}
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# What the template plans compile to ({meta['date']})", "",
             f"triton {meta['triton']}, torch {meta['torch']}; {meta['note']}. Command: `{meta['command']}`.", "",
             "| arch | shape | kernel | compiles | registers | spills (B) | shared (KB) | fits | wgmma | TMA |",
             "|---|---|---|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        shared = "-" if r["shared_bytes"] is None else f"{r['shared_bytes'] / 1024:.0f}"
        lines.append(f"| {r['arch']} | {r['shape']} | {r['kernel']} | {'yes' if r['ok'] else r['error'][:60]} "
                     f"| {r['registers'] if r['registers'] is not None else '-'} "
                     f"| {r['spills'] if r['spills'] is not None else '-'} | {shared} "
                     f"| {'yes' if r['fits'] else '**no**'} | {'yes' if r['wgmma'] else '-'} "
                     f"| {'yes' if r['descriptors'] else '-'} |")
    bad_rows = [r for r in rows if not r["fits"] or (r["spills"] or 0) > 0]
    lines += ["", f"{len(rows)} kernels; {len(bad_rows)} that do not compile, spill, or exceed their target's shared "
                  "memory."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]))
    print(f"wrote {out / stem}.json and .md")
    return 1 if bad_rows else 0


if __name__ == "__main__":
    sys.exit(main())
