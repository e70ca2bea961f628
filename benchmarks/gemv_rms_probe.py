"""Probe: decode's RMSNorm folded into the GEMV after it (kernels/gemv_rms.py) against the two launches the backend
runs without it (the norm kernel of kernels/rms_rounded.py, then the GEMV at its template policy), at one row of
Llama-3-8B's projections after a norm: the LM head, the MLP's gate and up, and attention's q, k and v. Each
candidate is checked against a float32 reference of the model's formula first; weights rotate so that each call
reads them from memory (as a decode step does), and both sides time in one CUDA graph.

    python benchmarks/gemv_rms_probe.py      # prints each shape's rows, writes $OUT/gemv-rms-probe.json

Session 20 tried the same fusion inside gemv_cat and gemm_gate_up and dropped it (NOTES.md); this probe (session 25)
adds the LM head's form and each kernel's registers a thread. What it found (gemv-rms-probe-h100-2026-11-25.log,
gemv-rms-probe-w16-h100-2026-11-25.log): no fused tile beats the two launches by more than 1.1 us (q/k/v), and the
LM head loses 10-60 us. At the GEMV's own tile (one column, K steps of 2048, 8 warps) the fused kernel takes 38
registers a thread against 32, so an SM holds 6 programs instead of 8 and keeps a quarter fewer bytes in flight;
tiles that need fewer registers read A in narrower pieces and lose more.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.dsl import Policy, kernels_from_source  # noqa: E402
from argus_inductor.dsl.runtime import observe_launches  # noqa: E402
from argus_inductor.kernels.gemm import gemm, gemv_cat  # noqa: E402
from argus_inductor.kernels.gemm_residual import gate_up  # noqa: E402
from argus_inductor.kernels.policies import gemv_cat_policy, gemv_policy  # noqa: E402
from argus_inductor.kernels.rms_rounded import rms_norm_rounded  # noqa: E402
from benchmarks.sweep import bench, rel  # noqa: E402

K = 4096
EPS = 1e-5
TILES = [(1, 2048, 8), (1, 1024, 4), (1, 1024, 8), (1, 2048, 4), (1, 512, 4), (2, 2048, 8), (2, 1024, 4), (4, 1024, 4),
         (1, 4096, 16), (1, 2048, 16)]

# The fused kernels: every program of the GEMV sums the squares of A's row in its own K loop and scales its column
# sums by rstd once after it; the norm weight multiplies A as it is loaded. Each proves with the checker (the norm
# weight read at the element's K index, the sum of squares covering all of K).
FUSED = kernels_from_source("from argus_inductor.dsl import *\n\n" + '''
@kernel
def gemv_rms(A: Tensor("M", "K"), G: Tensor("K"), B: Tensor("K", "N"), C: Tensor("M", "N"), eps: float,
             BN: constexpr = 32, BK: constexpr = 256, ACT: constexpr = 0):
    """C = act(rstd * ((A * G) @ B)) with rstd = rsqrt(mean(A^2) + eps) per row of A: one program a row and BN
    columns, on the CUDA cores; the products and the squares kept per K lane and summed once after the loop."""
    pm, pn = tile_grid(M, cdiv(N, BN))
    rn = pn * BN + arange(BN)
    part = zeros((BK, BN), float32)
    sq = zeros((BK,), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[pm, rk]).to(float32)
        g = load(G[rk]).to(float32)
        assert_tag(tag_of(g, "K") == tag_of(a, "K"), "the norm weight read belongs to the element's K index")
        sq = sq + a * a
        part = part + (a * g)[:, None] * load(B[rk, rn]).to(float32)
    rstd = rsqrt(sum(sq, 0) / K + eps)
    store(C[pm, rn], activation(sum(part, 0) * rstd, ACT))


@kernel
def gemv_gate_up_rms(A: Tensor("M", "K"), G: Tensor("K"), BG: Tensor("K", "N"), BU: Tensor("K", "N"),
                     C: Tensor("M", "N"), eps: float, BN: constexpr = 32, BK: constexpr = 256, ACT: constexpr = 3):
    """C = act(rstd * ((A * G) @ BG)) * (rstd * ((A * G) @ BU)): the gated MLP's first half after its norm, one
    program a row and BN columns of both weights."""
    pm, pn = tile_grid(M, cdiv(N, BN))
    rn = pn * BN + arange(BN)
    part_g = zeros((BK, BN), float32)
    part_u = zeros((BK, BN), float32)
    sq = zeros((BK,), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[pm, rk]).to(float32)
        g = load(G[rk]).to(float32)
        assert_tag(tag_of(g, "K") == tag_of(a, "K"), "the norm weight read belongs to the element's K index")
        sq = sq + a * a
        ag = (a * g)[:, None]
        part_g = part_g + ag * load(BG[rk, rn]).to(float32)
        part_u = part_u + ag * load(BU[rk, rn]).to(float32)
    rstd = rsqrt(sum(sq, 0) / K + eps)
    store(C[pm, rn], activation(sum(part_g, 0) * rstd, ACT) * (sum(part_u, 0) * rstd))


@kernel
def gemv_cat_rms(A: Tensor("M", "K"), G: Tensor("K"), B0: Tensor("K", "N0"), B1: Tensor("K", "N1"),
                 B2: Tensor("K", "N2"), C: Tensor("M", "NC"), eps: float, BN: constexpr = 32, BK: constexpr = 256):
    """C = rstd * ((A * G) @ [B0 | B1 | B2]): an attention's q, k and v projections after its norm, one launch,
    as gemv_cat runs them (each segment's programs under a branch of their own), each program summing the row's
    squares with its products."""
    t0 = cdiv(N0, BN)
    t1 = cdiv(N1, BN)
    pm, pn = tile_grid(M, t0 + t1 + cdiv(N2, BN))
    assume(NC == N0 + N1 + N2)
    s1 = (pn >= t0).to(int32)  # past the first segment's tiles
    s2 = (pn >= t0 + t1).to(int32)  # past the second's
    rn = (pn - s1 * t0 - s2 * t1) * BN + arange(BN)  # the program's columns of its segment
    if s1 == 0:
        part0 = zeros((BK, BN), float32)
        sq0 = zeros((BK,), float32)
        for k in range(0, K, BK):
            rk = k + arange(BK)
            a0 = load(A[pm, rk]).to(float32)
            g0 = load(G[rk]).to(float32)
            assert_tag(tag_of(g0, "K") == tag_of(a0, "K"), "the norm weight read belongs to the element's K index")
            sq0 = sq0 + a0 * a0
            part0 = part0 + (a0 * g0)[:, None] * load(B0[rk, rn]).to(float32)
        store(C[pm, rn], sum(part0, 0) * rsqrt(sum(sq0, 0) / K + eps), mask=rn < N0)
    if (s1 == 1) & (s2 == 0):
        part1 = zeros((BK, BN), float32)
        sq1 = zeros((BK,), float32)
        for k in range(0, K, BK):
            rk = k + arange(BK)
            a1 = load(A[pm, rk]).to(float32)
            g1 = load(G[rk]).to(float32)
            assert_tag(tag_of(g1, "K") == tag_of(a1, "K"), "the norm weight read belongs to the element's K index")
            sq1 = sq1 + a1 * a1
            part1 = part1 + (a1 * g1)[:, None] * load(B1[rk, rn]).to(float32)
        store(C[pm, N0 + rn], sum(part1, 0) * rsqrt(sum(sq1, 0) / K + eps), mask=rn < N1)
    if s2 == 1:
        part2 = zeros((BK, BN), float32)
        sq2 = zeros((BK,), float32)
        for k in range(0, K, BK):
            rk = k + arange(BK)
            a2 = load(A[pm, rk]).to(float32)
            g2 = load(G[rk]).to(float32)
            assert_tag(tag_of(g2, "K") == tag_of(a2, "K"), "the norm weight read belongs to the element's K index")
            sq2 = sq2 + a2 * a2
            part2 = part2 + (a2 * g2)[:, None] * load(B2[rk, rn]).to(float32)
        store(C[pm, N0 + N1 + rn], sum(part2, 0) * rsqrt(sum(sq2, 0) / K + eps), mask=rn < N2)
''', filename="<gemv_rms_probe>")
gemv_rms, gemv_gate_up_rms, gemv_cat_rms = FUSED["gemv_rms"], FUSED["gemv_gate_up_rms"], FUSED["gemv_cat_rms"]


def registers(fn) -> str:
    """The registers (and spills) a thread of each kernel `fn` launches takes: what bounds the programs an SM
    keeps in flight, and so the bytes a GEMV has in flight."""
    seen: list[str] = []

    def note(compiled, flat, programs, launched) -> None:
        seen.append(f"{compiled.ir.name} {launched.n_regs} regs, {launched.n_spills} spills, {programs} programs")

    with observe_launches(note):
        fn()
    torch.cuda.synchronize()
    return "; ".join(seen)


def normed(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS) * g.float()


def weights(widths: tuple[int, ...], copies: int) -> list[list[torch.Tensor]]:
    return [[torch.randn(w, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5 for w in widths]
            for _ in range(copies)]


def probe(form: str, widths: tuple[int, ...], rows: list[dict]) -> None:
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16) * 3
    g = (torch.rand(K, device="cuda") + 0.5).to(torch.bfloat16)
    copies = 2 if sum(widths) > 100000 else 8
    ws = weights(widths, copies)
    n = widths[0] if form == "gate_up" else sum(widths)
    out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
    y = normed(x, g)
    if form == "gate_up":
        ref = F.silu(y @ ws[0][0].float().t()) * (y @ ws[0][1].float().t())
    else:
        ref = y @ torch.cat(ws[0]).float().t()

    def two(c: list[torch.Tensor]) -> torch.Tensor:
        h = rms_norm_rounded(x, g, EPS)
        if form == "gate_up":
            return gate_up(h, c[0].t(), c[1].t(), "silu", out=out, policy=gemv_policy(1, n, "cuda", K))
        if form == "cat":
            gemv_cat(h, *(w.t() for w in c), out, policy=gemv_cat_policy("cuda", K))
            return out
        return gemm(h, c[0].t(), out=out, policy=gemv_policy(1, n, "cuda", K))

    def fused(c: list[torch.Tensor], pol: Policy) -> torch.Tensor:
        if form == "gate_up":
            gemv_gate_up_rms(x, g, c[0].t(), c[1].t(), out, EPS, policy=pol.with_consts(ACT=3))
        elif form == "cat":
            gemv_cat_rms(x, g, *(w.t() for w in c), out, EPS, policy=pol)
        else:
            gemv_rms(x, g, c[0].t(), out, EPS, policy=pol)
        return out

    gbytes = sum(widths) * K * 2 / 1e9
    base_err = rel(two(ws[0]), ref)
    base = bench(lambda: two(ws[0]), [lambda c=c: two(c) for c in ws[1:]])
    print(f"{form} {widths} K={K}: norm + GEMV {base * 1e3:.1f} us ({gbytes / base:.2f} TB/s), "
          f"rel err {base_err:.1e} [{registers(lambda: two(ws[0]))}]", flush=True)
    row = dict(form=form, widths=widths, k=K, two_launches_ms=base, two_rel_err=base_err)
    for bn, bk, w in TILES:
        pol = Policy.make(BN=bn, BK=bk, num_warps=w, num_stages=1)
        out.fill_(float("nan"))
        err = rel(fused(ws[0], pol), ref)
        t = bench(lambda pol=pol: fused(ws[0], pol), [lambda c=c, pol=pol: fused(c, pol) for c in ws[1:]])
        rows.append(dict(row, policy=pol.as_dict(), ms=t, rel_err=err, speedup=base / t))
        print(f"  fused {pol.key()}: {t * 1e3:.1f} us ({gbytes / t:.2f} TB/s), rel err {err:.1e}, "
              f"{base / t:.2f}x the two launches ({(base - t) * 1e3:+.1f} us) [{registers(lambda: fused(ws[0], pol))}]",
              flush=True)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("benchmarks/gemv_rms_probe.py needs a CUDA GPU")
    torch.manual_seed(0)
    rows: list[dict] = []
    probe("cat", (4096, 1024, 1024), rows)
    probe("gate_up", (14336, 14336), rows)
    probe("linear", (128256,), rows)
    out = Path(os.environ.get("OUT", "."))
    (out / "gemv-rms-probe.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), indent=1))


if __name__ == "__main__":
    main()
