"""Probe: what the decode GEMV templates' bounds masks and runtime K cost. gemv_stages_probe.py found the
backend's templates 0.35-1.4 us slower than a plain Triton kernel of the same tile (down + residual 4096 x 14336:
41.2 against 39.9 us on the H100), where the plain kernel has K a constexpr and no masks. This takes the Triton
source the DSL lowers each template to, at the policy the backend gives it, and times it beside three edits of
that source: the weight's and the activation's loads without their masks, K a constexpr, and both. CUDA-graph
medians with the weights rotated over copies, each variant first checked against float32 torch.

    python benchmarks/gemv_mask_probe.py
"""
from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.kernels.gemm import gemm_epilogue, gemv_cat  # noqa: E402
from argus_inductor.kernels.gemm_residual import gemm_gate_up, gemm_residual  # noqa: E402
from argus_inductor.kernels.policies import gemv_cat_policy, gemv_policy, gemv_static_steps  # noqa: E402
from benchmarks.sweep import graph_us, rel  # noqa: E402

_TMP = Path(tempfile.mkdtemp(prefix="gemv_mask_probe_"))


def _edited(src: str, unmask: tuple[str, ...], k_constexpr: bool) -> str:
    for name in unmask:  # tl.load(X_ptrs, mask=X_mask, other=0) -> tl.load(X_ptrs)
        src = re.sub(rf"tl\.load\(({name}_ptrs\w*), mask={name}_mask\w*, other=0\)", r"tl.load(\1)", src)
    if k_constexpr:
        src = re.sub(r"^(\s+)K,$", r"\1K: tl.constexpr,", src, count=1, flags=re.M)
    return src


def _load(src: str, tag: str) -> tuple[Callable, list[str]]:
    path = _TMP / f"k_{tag}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"k_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    fn = next(v for k, v in vars(mod).items() if k.endswith("_kernel"))
    params = re.search(r"def \w+_kernel\((.*?)\):", src, re.S).group(1)  # type: ignore[union-attr]
    names = [p.strip().split(":")[0] for p in params.split(",") if p.strip()]
    return fn, names


def _args(names: list[str], tensors: dict[str, torch.Tensor], dims: dict[str, int],
          consts: dict[str, int]) -> list:
    out = []
    for n in names:
        if n in tensors:
            out.append(tensors[n])
        elif n in dims:
            out.append(dims[n])
        elif n in consts:
            out.append(consts[n])
        else:
            t, _, d = n.rpartition("_stride")
            out.append(tensors[t].stride(int(d)))
    return out


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("benchmarks/gemv_mask_probe.py needs a CUDA GPU")
    bf, dev = torch.bfloat16, "cuda"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    cases = [("o + residual", gemm_residual, 4096, 4096, 4), ("down + residual", gemm_residual, 4096, 14336, 2),
             ("gate*up", gemm_gate_up, 14336, 4096, 2), ("lm head", gemm_epilogue, 128256, 4096, 2),
             ("gemv_cat q|k|v", gemv_cat, 6144, 4096, 4)]
    for name, kern, n, k, copies in cases:
        x = torch.randn(1, k, device=dev, dtype=bf)
        out = torch.empty(1, n, device=dev, dtype=bf)
        r = torch.randn(1, n, device=dev, dtype=bf)
        if kern is gemv_cat:
            widths = (4096, 1024, 1024)
            pol = gemv_cat_policy("cuda", k)
            pol = pol.with_consts(KSTEPS=gemv_static_steps(k, pol.const("BK"), 1))
            ws = [[torch.randn(w, k, device=dev, dtype=bf) * k ** -0.5 for w in widths] for _ in range(copies)]
            sets = [{"A": x, "B0": w[0].t(), "B1": w[1].t(), "B2": w[2].t(), "C": out} for w in ws]
            dims = {"M": 1, "K": k, "N0": widths[0], "N1": widths[1], "N2": widths[2], "NC": n}
            ref = torch.cat([x.float() @ w.float().t() for w in ws[0]], 1)
            grid = (sum(-(-w // pol.const("BN")) for w in widths),)
            unmask = ("A", "B0", "B1", "B2")
        else:
            pol = gemv_policy(1, n, "cuda", k)
            weights = 2 if kern is gemm_gate_up else 1
            pol = pol.with_consts(KSTEPS=gemv_static_steps(k, pol.const("BK"), pol.const("BN"), weights))
            ws = [torch.randn(n, k, device=dev, dtype=bf) * k ** -0.5 for _ in range(copies)]
            y = x.float() @ ws[0].float().t()
            if kern is gemm_gate_up:
                us = [torch.randn(n, k, device=dev, dtype=bf) * k ** -0.5 for _ in range(copies)]
                pol = pol.with_consts(ACT=3)
                sets = [{"A": x, "BG": w.t(), "BU": u.t(), "C": out} for w, u in zip(ws, us)]
                ref = torch.nn.functional.silu(y) * (x.float() @ us[0].float().t())
                unmask = ("A", "BG", "BU")
            else:
                pol = pol.with_consts(HAS_BIAS=0, ACT=0)
                sets = [{"A": x, "B": w.t(), "bias": out, "R": r, "C": out} for w in ws]
                ref = y + r.float() if kern is gemm_residual else y
                unmask = ("A", "B")
            dims = {"M": 1, "K": k, "N": n, "NB": 1}
            grid = (-(-n // pol.const("BN")),)
        consts = dict(pol.consts)
        src = kern.triton_source(pol)
        print(f"{name}: N={n} K={k} policy {pol}", flush=True)
        for label, um, kc in (("template", (), False), ("loads unmasked", unmask, False),
                              ("K constexpr", (), True), ("unmasked + K constexpr", unmask, True)):
            fn, names = _load(_edited(src, um, kc), f"{name.split()[0].replace('*', '')}_{n}_{k}_{len(um)}_{int(kc)}")
            argv = [_args(names, s, dims, consts) for s in sets]

            def run(c: int, fn=fn, argv=argv) -> None:
                fn[grid](*argv[c], num_warps=pol.num_warps, num_stages=pol.num_stages)

            run(0)
            torch.cuda.synchronize()
            err = rel(out, ref)
            assert err < 2e-2, f"{name}, {label}: relative error {err:.2e}"
            t = graph_us([lambda c=c: run(c) for c in range(copies)])
            nbytes = sum(v.numel() * v.element_size() for kk, v in sets[0].items() if kk.startswith("B"))
            print(f"  {label:26s}: {t:8.2f} us  ({nbytes / t / 1e6:.2f} TB/s), rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
