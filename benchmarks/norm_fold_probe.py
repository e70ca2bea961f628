"""Probe: what would folding a decode step's RMSNorm into the GEMVs around it save? A Llama decode b=1 step runs
four RMSNorm launches between its GEMVs (about 2.3 us each on the H100, one program reducing 4096 elements). The
fold: the residual GEMV before the norm also adds its rows' squares into a sum (one atomic add a program, into a
zeroed scalar) and stores h * g beside h; the GEMV after it scales each dot product by rsqrt(sum / K + eps). This
rounds differently from transformers' norm (h * g rounded once instead of (h * r) rounded, then * g), within bf16.

Chains, each one CUDA graph with the weights rotated over copies so every GEMV reads them from memory, at
Llama-3-8B's shapes (one token), the o projection (4096 x 4096, plus the residual) then the RMSNorm then gate*up
(2 x 14336 x 4096):

* argus: the backend's kernels and policies (gemm_residual and gemm_gate_up's GEMV path, rms_norm_rounded);
* plain: the same three steps as plain Triton GEMVs (a weight row a program, products kept per K lane);
* plain, folded: a zero fill of the sum, the residual GEMV with the sum and h * g, the scaled gate*up (two launches
  and the fill);
* fill alone, and the two folded GEMVs without the fill (a bound: what the fold gives if the zeroing cost nothing,
  its result not checked);
* each kernel of the argus and plain chains alone.

Every checked chain's output is compared with float32 torch first.

    python benchmarks/norm_fold_probe.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.kernels.gemm_residual import gate_up, gemm_add  # noqa: E402
from argus_inductor.kernels.policies import gemv_policy  # noqa: E402
from argus_inductor.kernels.rms_rounded import rms_norm_rounded  # noqa: E402
from benchmarks.sweep import graph_us, rel  # noqa: E402

K = 4096
N_UP = 14336
EPS = 1e-5
BK = 2048


@triton.jit
def gemv_residual(x, w, resid, out, hg, g, ss, K: tl.constexpr, BK: tl.constexpr, FOLD: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BK], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        acc += tl.load(w + row.to(tl.int64) * K + ks).to(tl.float32) * tl.load(x + ks).to(tl.float32)
    y = tl.sum(acc, axis=0).to(tl.bfloat16).to(tl.float32)
    h = (y + tl.load(resid + row).to(tl.float32)).to(tl.bfloat16)
    tl.store(out + row, h)
    if FOLD:
        hf = h.to(tl.float32)
        tl.atomic_add(ss, hf * hf)
        tl.store(hg + row, (hf * tl.load(g + row).to(tl.float32)).to(tl.bfloat16))


@triton.jit
def rmsnorm(x, g, out, eps, K: tl.constexpr):
    ks = tl.arange(0, K)
    xf = tl.load(x + ks).to(tl.float32)
    r = tl.rsqrt(tl.sum(xf * xf, axis=0) / K + eps)
    tl.store(out + ks, ((xf * r).to(tl.bfloat16).to(tl.float32) * tl.load(g + ks).to(tl.float32)).to(tl.bfloat16))


@triton.jit
def gemv_gate_up(x, wg, wu, out, ss, eps, K: tl.constexpr, BK: tl.constexpr, FOLD: tl.constexpr):
    row = tl.program_id(0)
    acc_g = tl.zeros([BK], tl.float32)
    acc_u = tl.zeros([BK], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        xv = tl.load(x + ks).to(tl.float32)
        acc_g += tl.load(wg + row.to(tl.int64) * K + ks).to(tl.float32) * xv
        acc_u += tl.load(wu + row.to(tl.int64) * K + ks).to(tl.float32) * xv
    gate = tl.sum(acc_g, axis=0)
    up = tl.sum(acc_u, axis=0)
    if FOLD:
        r = tl.rsqrt(tl.load(ss) / K + eps)
        gate = gate * r
        up = up * r
    gate = gate.to(tl.bfloat16).to(tl.float32)
    up = up.to(tl.bfloat16).to(tl.float32)
    tl.store(out + row, (gate * tl.sigmoid(gate) * up).to(tl.bfloat16))




def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("benchmarks/norm_fold_probe.py needs a CUDA GPU")
    bf, dev, copies = torch.bfloat16, "cuda", 2
    a = torch.randn(1, K, device=dev, dtype=bf)
    resid = torch.randn(1, K, device=dev, dtype=bf)
    g = (torch.rand(K, device=dev) + 0.5).to(bf)
    wo = [torch.randn(K, K, device=dev, dtype=bf) * K ** -0.5 for _ in range(copies)]
    wg = [torch.randn(N_UP, K, device=dev, dtype=bf) * K ** -0.5 for _ in range(copies)]
    wu = [torch.randn(N_UP, K, device=dev, dtype=bf) * K ** -0.5 for _ in range(copies)]
    h, hg, normed = (torch.empty(1, K, device=dev, dtype=bf) for _ in range(3))  # normed: the plain chain's
    out = torch.empty(1, N_UP, device=dev, dtype=bf)
    ss = torch.zeros(1, device=dev, dtype=torch.float32)

    def reference(c: int) -> torch.Tensor:
        h64 = (a.double() @ wo[c].double().t()).to(bf).double() + resid.double()
        n = h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + EPS) * g.double()
        return torch.nn.functional.silu(n @ wg[c].double().t()) * (n @ wu[c].double().t())

    pol_o, pol_up = gemv_policy(1, K, "cuda", K), gemv_policy(1, N_UP, "cuda", K)

    def argus(c: int) -> None:
        gemm_add(a, wo[c].t(), resid, out=h, policy=pol_o)
        gate_up(rms_norm_rounded(h, g, EPS), wg[c].t(), wu[c].t(), "silu", out=out, policy=pol_up)

    def plain(c: int) -> None:
        gemv_residual[(K,)](a, wo[c], resid, h, hg, g, ss, K=K, BK=BK, FOLD=False, num_warps=8)
        rmsnorm[(1,)](h, g, normed, EPS, K=K, num_warps=8)
        gemv_gate_up[(N_UP,)](normed, wg[c], wu[c], out, ss, EPS, K=K, BK=BK, FOLD=False, num_warps=8)

    def folded_gemvs(c: int) -> None:
        gemv_residual[(K,)](a, wo[c], resid, h, hg, g, ss, K=K, BK=BK, FOLD=True, num_warps=8)
        gemv_gate_up[(N_UP,)](hg, wg[c], wu[c], out, ss, EPS, K=K, BK=BK, FOLD=True, num_warps=8)

    def folded(c: int) -> None:
        ss.zero_()
        folded_gemvs(c)

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    for name, chain in (("argus", argus), ("plain", plain), ("plain, folded", folded)):
        for c in range(copies):
            chain(c)
            torch.cuda.synchronize()
            err = rel(out, reference(c))
            assert err < 2e-2, f"{name}, copy {c}: relative error {err:.2e} against float64 torch"
        print(f"  {name}: relative error {err:.1e} against float64 torch", flush=True)
    rows = {
        "argus: o + residual, RMSNorm, gate*up": [lambda c=c: argus(c) for c in range(copies)],
        "plain: the same three": [lambda c=c: plain(c) for c in range(copies)],
        "plain, folded: fill, o + sum, scaled gate*up": [lambda c=c: folded(c) for c in range(copies)],
        "the fill alone": [lambda: ss.zero_()],
        "the folded GEMVs without the fill (bound, unchecked)": [lambda c=c: folded_gemvs(c) for c in range(copies)],
        "plain RMSNorm alone": [lambda: rmsnorm[(1,)](h, g, normed, EPS, K=K, num_warps=8)],
        "argus RMSNorm alone": [lambda: rms_norm_rounded(h, g, EPS)],
        "argus o + residual alone": [lambda c=c: gemm_add(a, wo[c].t(), resid, out=h, policy=pol_o)
                                     for c in range(copies)],
        "plain o + residual alone": [lambda c=c: gemv_residual[(K,)](a, wo[c], resid, h, hg, g, ss, K=K, BK=BK,
                                                                     FOLD=False, num_warps=8) for c in range(copies)],
        "argus gate*up alone": [lambda c=c: gate_up(normed, wg[c].t(), wu[c].t(), "silu", out=out, policy=pol_up)
                                for c in range(copies)],
        "plain gate*up alone": [lambda c=c: gemv_gate_up[(N_UP,)](normed, wg[c], wu[c], out, ss, EPS, K=K, BK=BK,
                                                                  FOLD=False, num_warps=8) for c in range(copies)],
    }
    for _ in range(2):  # two rounds, the card's state drifts
        for name, chains in rows.items():
            print(f"  {graph_us(chains):8.2f} us  {name}", flush=True)


if __name__ == "__main__":
    main()
