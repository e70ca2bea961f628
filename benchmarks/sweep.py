"""Hand-set policy sweep on the GPU: for each benchmark shape, time a grid of policies and keep the best.

    python benchmarks/sweep.py [--ops gemm,attention] [--out DIR]

GEMM and MoE time with CUDA-graph replay (triton.testing.do_bench_cudagraph), ours and the peer alike, so host
launch overhead is out of both numbers; attention with CUDA events (triton.testing.do_bench), as SDPA's cuDNN
and flash paths run slower under graph capture. Every candidate is checked against a float32 reference first; a wrong
or failing candidate is recorded and skipped. Writes sweep-<date>.json (all candidates) and prints the
best per shape with its ratio to the peer.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels import attention, gemm, moe_expert_step  # noqa: E402
from argus_inductor.kernels.policies import gemm_policy, gemv_policy  # noqa: E402
from benchmarks.ops import ATTN, GEMM_M, GEMM_NK, MOE, bench_events, eager_moe, graph_median, rel  # noqa: E402


def bench(fn, copies: list | None = None) -> float:
    """CUDA-graph median; `copies` are the same call on other operands, run in turn so L2 is cold."""
    return graph_median([fn, *(copies or [])], rep=60)


def graph_us(chains: list) -> float:
    """bench in microseconds: the CUDA-graph median of running every chain once (each on its own copies), per chain."""
    return bench(chains[0], chains[1:]) * 1e3


def gemm_candidates(m: int) -> list[Policy]:
    out = []
    if m <= 16:
        for bn, bk, st in itertools.product((16, 32, 64), (128, 256, 512), (3, 5)):
            out.append(Policy.make(BM=16, BN=bn, BK=bk, num_warps=4, num_stages=st))
        for bn, bk, sk in itertools.product((32, 64), (128, 256), (2, 4)):
            out.append(Policy.make(BM=16, BN=bn, BK=bk, num_warps=4, num_stages=5, SPLIT_K=sk))
    elif m <= 128:
        for bm, bn, bk, w in itertools.product((32, 64, 128), (32, 64, 128), (64, 128), (4, 8)):
            out.append(Policy.make(BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=4))
        for bm, bn, sk in itertools.product((64, 128), (64, 128), (2, 3, 4)):
            out.append(Policy.make(BM=bm, BN=bn, BK=128, num_warps=8 if bm == 128 else 4, num_stages=4,
                                   SPLIT_K=sk))
    else:
        for bn, st, pers, tma in itertools.product((128, 256), (3, 4), (False, True), (False, True)):
            out.append(Policy.make(BM=128, BN=bn, BK=64, num_warps=8, num_stages=st, grid_order="grouped",
                                   group_m=8, persistent=pers, programs_per_sm=1 if bn == 256 else 2, tma=tma))
    return out


def gluon_gemm_candidates(m: int, n: int, k: int) -> list[Policy]:
    """The Gluon lowering's tiles (argus_inductor.hopper.gemm) for 64 <= M <= 128: 64- or 128-row tiles, widths
    64-256, K steps 64 and 128, with as many ring slots as fit shared memory and one fewer."""
    from argus_inductor.hopper.gemm import policy_fits

    out = []
    for bm, bn, bk in itertools.product((64, 128), (64, 128, 256), (64, 128)):
        fits = [st for st in range(2, 9) if policy_fits(Policy.make(
            BM=bm, BN=bn, BK=bk, num_warps=bm // 16, num_stages=st, warp_specialize=True)) is None]
        for st in sorted(fits)[-2:]:
            out.append(Policy.make(BM=bm, BN=bn, BK=bk, num_warps=bm // 16, num_stages=st, warp_specialize=True))
    template = gemm_policy(m, n, k, "cuda", gluon=True)
    return out + ([template] if template not in out else [])


def _weight(n: int, k: int, major: str) -> torch.Tensor:
    """A (K, N) operand: the transpose of an (N, K) nn.Linear weight ("k": K-contiguous) or row-major ("n")."""
    if major == "k":
        return torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return torch.randn(k, n, device="cuda", dtype=torch.bfloat16)


def sweep_gemm(rows: list[dict], max_m: int = 1 << 30, min_m: int = 0, b_major: str = "k",
               gluon: bool = False) -> None:
    """`gluon`: the Gluon lowering's candidates at M = 64 and 128 (with the Triton template beside them)."""
    from argus_inductor.hopper.gemm import declines

    for m in [m for m in (([64, 128] if gluon else GEMM_M) + [8192]) if min_m <= m <= max_m]:
        for n, k in (GEMM_NK if m != 8192 else [(8192, 8192)]):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = _weight(n, k, b_major)
            ref = a.float() @ b.float()
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ncopy = min(7, math.ceil(100 * 2**20 / (2 * (m * k + n * k + m * n)))) if m <= 128 else 0
            extra = [(torch.randn_like(a), _weight(n, k, b_major),
                      torch.empty_like(out)) for _ in range(ncopy)]
            peer = bench(lambda: torch.matmul(a, b), [lambda x=x: torch.matmul(x[0], x[1]) for x in extra])
            best = None
            default = gemm_policy(m, n, k, "cuda")
            cands = gemm_candidates(m) + [default, replace(default, tma=not default.tma)]
            if gluon:
                cands = gluon_gemm_candidates(m, n, k) + [default]
            for pol in cands:
                try:
                    if pol.warp_specialize and (why := declines(pol, a, b, out, out)) is not None:
                        raise RuntimeError(f"the Gluon kernel declines: {why}")  # it would time the fallback
                    out.fill_(float("nan"))
                    gemm(a, b, out=out, policy=pol)
                    err = rel(out, ref)
                    if not err < 1e-2:
                        rows.append(dict(op="gemm", m=m, n=n, k=k, policy=pol.as_dict(), error=f"rel err {err}"))
                        continue
                    t = bench(lambda: gemm(a, b, out=out, policy=pol),
                              [lambda x=x: gemm(x[0], x[1], out=x[2], policy=pol) for x in extra])
                except Exception as e:  # a policy that does not fit is data, not a crash
                    rows.append(dict(op="gemm", m=m, n=n, k=k, policy=pol.as_dict(), error=str(e)[:200]))
                    continue
                rows.append(dict(op="gemm", m=m, n=n, k=k, b_major=b_major, policy=pol.as_dict(), ms=t, peer_ms=peer,
                                 rel_err=err))
                if best is None or t < best[0]:
                    best = (t, pol)
            if best:
                print(f"gemm M={m} N={n} K={k}: best {best[0]:.4f} ms vs cuBLAS {peer:.4f} ms = "
                      f"{peer / best[0]:.2f}x  {best[1].key()}", flush=True)


# (N, K); the last two: Qwen2.5-7B's and Qwen3-MoE's LM heads (the K = 2048 one ran at 75% of the copy on the H200,
# one 4 KB step a program: NOTES.md)
GEMV_NK = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (128256, 4096), (32000, 4096),
           (152064, 3584), (151936, 2048)]


def gemv_candidates() -> list[Policy]:
    """gemm_epilogue's CUDA-core path (GEMV=1, one row a program): 1-16 columns, K steps 512-4096, 8 warps, at most
    16K float32 partial sums a program (the products are kept per K lane and summed after the loop; 4 warps were
    1-4% slower in gemv-probe-h100-2026-11-24.log)."""
    return [Policy.make(BM=1, BN=bn, BK=bk, num_warps=w, num_stages=1, GEMV=1)
            for bn, bk, w in itertools.product((1, 2, 4, 8, 16), (512, 1024, 2048, 4096), (8,))
            if 512 <= bn * bk <= 16384]


def sweep_gemv(rows: list[dict], only_n: set[int] | None = None) -> None:
    """M = 1 (decode at batch 1) at the linears of Llama-3-8B: the GEMV path's tiles against the template's tensor-core
    tile and cuBLAS; then the gate*up and residual kernels with the three fastest GEMV tiles of their shape."""
    from argus_inductor.kernels.gemm_residual import gate_up as gate_up_fn
    from argus_inductor.kernels.gemm_residual import gemm_add

    for n, k in [(n, k) for n, k in GEMV_NK if not only_n or n in only_n]:
        a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        b = _weight(n, k, "k")
        ref = a.float() @ b.float()
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        ncopy = min(7, math.ceil(100 * 2**20 / (2 * n * k)))
        extra = [(torch.randn_like(a), _weight(n, k, "k"), torch.empty_like(out)) for _ in range(ncopy)]
        peer = bench(lambda: torch.matmul(a, b), [lambda x=x: torch.matmul(x[0], x[1]) for x in extra])
        torch._dynamo.reset()
        lin = torch.compile(lambda x, w: x @ w, mode="max-autotune-no-cudagraphs")
        inductor = bench(lambda: lin(a, b), [lambda x=x: lin(x[0], x[1]) for x in extra])
        gb = 2 * n * k / 1e9
        timed = []
        for pol in gemv_candidates() + [gemm_policy(1, n, k, "cuda")]:
            try:
                out.fill_(float("nan"))
                gemm(a, b, out=out, policy=pol)
                err = rel(out, ref)
                if not err < 1e-2:
                    rows.append(dict(op="gemv", n=n, k=k, policy=pol.as_dict(), error=f"rel err {err}"))
                    continue
                t = bench(lambda: gemm(a, b, out=out, policy=pol),
                          [lambda x=x: gemm(x[0], x[1], out=x[2], policy=pol) for x in extra])
            except Exception as e:
                rows.append(dict(op="gemv", n=n, k=k, policy=pol.as_dict(), error=str(e)[:200]))
                continue
            rows.append(dict(op="gemv", m=1, n=n, k=k, policy=pol.as_dict(), ms=t, peer_ms=peer,
                             inductor_ms=inductor, rel_err=err, tb_s=gb / t))
            timed.append((t, pol))
        timed.sort(key=lambda tp: tp[0])
        tmpl = next((t for t, p in timed if not p.const("GEMV")), math.nan)
        print(f"gemv N={n} K={k}: best {timed[0][0]:.4f} ms ({gb / timed[0][0]:.2f} TB/s) {timed[0][1].key()}; "
              f"tensor-core template {tmpl:.4f} ms; cuBLAS {peer:.4f} ms = {peer / timed[0][0]:.2f}x; max-autotune "
              f"Inductor {inductor:.4f} ms = {inductor / timed[0][0]:.2f}x", flush=True)
        if (n, k) not in ((14336, 4096), (4096, 14336), (4096, 4096)):
            continue
        fused = "gate_up" if n == 14336 else "residual"
        b2, r = _weight(n, k, "k"), torch.randn(1, n, device="cuda", dtype=torch.bfloat16)
        fref = F.silu(ref) * (a.float() @ b2.float()) if fused == "gate_up" else ref + r.float()

        def call(pol, a=a, b=b, b2=b2, r=r, out=out, fused=fused):
            if fused == "gate_up":
                return gate_up_fn(a, b, b2, out=out, policy=pol)
            return gemm_add(a, b, r, out=out, policy=pol)
        cands = [gemv_policy(1, n, "cuda", k)] + [p for _, p in timed if p.const("GEMV")][:3]
        cands = list(dict.fromkeys(cands + [gemm_policy(1, n, k, "cuda")]))
        for pol in cands:
            try:
                err = rel(call(pol), fref)
                t = bench(lambda pol=pol: call(pol))
            except Exception as e:
                rows.append(dict(op=fused, n=n, k=k, policy=pol.as_dict(), error=str(e)[:200]))
                continue
            nb = (2 if fused == "gate_up" else 1) * gb
            rows.append(dict(op=fused, m=1, n=n, k=k, policy=pol.as_dict(), ms=t, rel_err=err, tb_s=nb / t))
            print(f"  {fused} N={n} K={k}: {t:.4f} ms ({nb / t:.2f} TB/s), rel err {err:.1e}  {pol.key()}", flush=True)


def attn_candidates(s: int, d: int) -> list[Policy]:
    if s == 1:
        return [Policy.make(BN=bn, num_warps=w, num_stages=st, tma=tma) for bn, w, st, tma in
                itertools.product((64, 128, 256), (4, 8), (2, 3), (False, True))]
    tiles = [(64, 64, 4, 3), (128, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (64, 128, 4, 3),
             (64, 64, 4, 2), (64, 32, 4, 3)]
    return [Policy.make(BM=bm, BN=bn, num_warps=w, num_stages=st, tma=tma) for (bm, bn, w, st), tma in
            itertools.product(tiles, (False, True)) if not (d >= 256 and bm * bn > 8192)]


def sweep_attention(rows: list[dict], shapes: list[tuple] | None = None) -> None:
    """`shapes` (--attn-shape): these shapes instead of ops.py's, timed by CUDA-graph replay (as a compiled model
    runs them) instead of back-to-back events, with the Gluon lowering's policy among the candidates."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from argus_inductor.kernels.policies import attention_policy

    timer = bench if shapes else bench_events
    for z, h, hk, s, t, d, causal in shapes or ATTN:
        q = torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(z, hk, t, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(z, hk, t, d, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(q)
        ke, ve = k[:1].repeat_interleave(h // hk, 1).float(), v[:1].repeat_interleave(h // hk, 1).float()
        ref = F.scaled_dot_product_attention(q[:1].float(), ke, ve, is_causal=causal)
        peers = {}
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    peers[name] = timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                        enable_gqa=h != hk))
            except RuntimeError:
                pass
        peer = min(peers.values()) if peers else math.nan
        best = None
        cands = attn_candidates(s, d)
        if shapes and d in (64, 128) and s % 128 == 0 and t % 128 == 0:  # the Gluon lowering, were it taken here
            ws = attention_policy(max(s, 1024), d, "cuda")
            cands += [ws, replace(ws, num_stages=3)]
        for pol in cands:
            try:
                out.fill_(float("nan"))
                attention(q, k, v, causal, out=out, policy=pol)
                err = rel(out[:1], ref)
                if not err < 2e-2:
                    rows.append(dict(op="attention", shape=[z, h, hk, s, t, d, causal], policy=pol.as_dict(),
                                     error=f"rel err {err}"))
                    continue
                tm = timer(lambda: attention(q, k, v, causal, out=out, policy=pol))
            except Exception as e:
                rows.append(dict(op="attention", shape=[z, h, hk, s, t, d, causal], policy=pol.as_dict(),
                                 error=str(e)[:200]))
                continue
            rows.append(dict(op="attention", shape=[z, h, hk, s, t, d, causal], policy=pol.as_dict(), ms=tm,
                             peer_ms=peer, peers=peers, rel_err=err))
            if best is None or tm < best[0]:
                best = (tm, pol)
        if best:
            print(f"attention {z}x{h}/{hk} S={s} T={t} D={d} causal={causal}: best {best[0]:.4f} ms vs "
                  f"{peer:.4f} ms = {peer / best[0]:.2f}x  {best[1].key()}", flush=True)


def _moe_pairs(ups: list[tuple], downs: list[tuple], launches: list[dict] | tuple[dict, ...] = ({},)
               ) -> list[tuple[Policy, Policy]]:
    """(gate-up, down) policies: each launch setting (grid order, persistence, descriptors) with each gate-up tile
    (BM, BN, BK, warps, stages) and each down tile (BN, BK, warps, stages)."""
    return [(replace(Policy.make(BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=st), **v),
             replace(Policy.make(BN=dbn, BK=dbk, num_warps=dw, num_stages=dst), **v))
            for v in launches for bm, bn, bk, w, st in ups for dbn, dbk, dw, dst in downs]


def moe_candidates(tokens: int, topk: int, experts: int, wide: bool = False, launch: bool = False,
                   gather: bool = False, tiles: bool = False, gluon: bool = False) -> list[tuple[Policy, Policy]]:
    prefill = tokens * topk > 64 * experts
    if prefill and gluon:
        # prefill, the Gluon lowerings of the gate-up and down GEMMs (--gluon) against the template's Triton
        # kernels, each alone with the other's template and together
        launch_ = [{"grid_order": "grouped", "group_m": 8, "persistent": True, "tma": True}]
        base_up, base_down = (128, 128, 64, 8, 3), (256, 64, 8, 3)
        ws = [{**launch_[0], "warp_specialize": True}]
        pairs = _moe_pairs([base_up], [base_down], launch_)
        g_ups = _moe_pairs([(128, 128, 64, 8, 4), (128, 128, 64, 8, 3), (128, 64, 64, 8, 4), (128, 64, 128, 8, 3)],
                           [base_down], ws)
        g_downs = _moe_pairs([base_up], [(256, 64, 8, 3), (256, 64, 8, 4), (128, 64, 8, 4), (128, 128, 8, 3)], ws)
        pairs += [(u, replace(d, warp_specialize=False)) for u, d in g_ups]
        pairs += [(replace(u, warp_specialize=False), d) for u, d in g_downs]
        pairs += _moe_pairs([(128, 128, 64, 8, 4), (128, 64, 64, 8, 4)], [(256, 64, 8, 4), (128, 64, 8, 4)], ws)
        return [(u.with_consts(GATHERED=1), d) for u, d in pairs]
    if prefill and tiles:
        # prefill, the template's launch (gathered rows, persistent, descriptors, bands of 8) with other tiles
        # (--moe-tiles): each gate-up tile with the template's down tile, then each down tile with its gate-up tile
        launch_ = [{"grid_order": "grouped", "group_m": 8, "persistent": True, "tma": True}]
        base_up, base_down = (128, 128, 64, 8, 3), (256, 64, 8, 3)
        ups = [base_up, (128, 64, 64, 8, 4), (128, 64, 64, 4, 4), (128, 64, 128, 8, 3), (64, 128, 64, 4, 4),
               (128, 128, 32, 8, 5)]
        pairs = _moe_pairs(ups, [base_down], launch_) + _moe_pairs([base_up], [(128, 128, 8, 3), (128, 64, 8, 4),
                                                                              (256, 64, 8, 4)], launch_)
        return [(u.with_consts(GATHERED=1), d) for u, d in pairs]
    if prefill and gather:
        # prefill, the routed rows gathered into expert order first (--moe-gather): the template's launch setting
        # with its tiles and wider ones, each with the rows read by token id and read as gathered dense tiles
        pairs = _moe_pairs([(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3)], [(256, 64, 8, 3)],
                           [{"grid_order": "grouped", "group_m": 8, "persistent": True, "tma": True}])
        return [(u.with_consts(GATHERED=g), d) for u, d in pairs for g in (0, 1)]
    if prefill and launch:
        # prefill, launch variants of the template's tiles (--moe-launch): persistent programs and descriptor
        # loads of the weights, each with bands of 16 and 8
        return _moe_pairs([(128, 128, 64, 8, 3), (128, 128, 64, 8, 4)], [(256, 64, 8, 3)],
                          [{"grid_order": "grouped", "group_m": g, "persistent": pers, "tma": tma}
                           for g in (16, 8) for pers in (False, True) for tma in (False, True)])
    if prefill and wide:
        # prefill, the wide search (--moe-prefill): bands of 4, 8 and 16 row blocks and row order, deeper
        # pipelines and narrower gate-up tiles, each gate-up policy with each down policy of the same order
        return _moe_pairs([(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 8, 4), (128, 64, 64, 4, 4)],
                          [(256, 64, 8, 3), (128, 64, 8, 3)],
                          [{"grid_order": "row"}, *({"grid_order": "grouped", "group_m": g} for g in (4, 8, 16))])
    if not prefill:
        return _moe_pairs([(16, 64, 128, 4, 5), (16, 128, 64, 4, 3), (16, 32, 128, 4, 5), (16, 64, 64, 4, 4)],
                          [(64, 128, 4, 5), (128, 64, 4, 3), (32, 128, 4, 5)])
    out = _moe_pairs([(64, 128, 64, 8, 3), (64, 256, 64, 8, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3)],
                     [(128, 64, 8, 3), (256, 64, 8, 3), (128, 64, 4, 4)])
    # prefill: the grid walks blocks of rows in bands of 8 (programs that share a weight column block run
    # together, so it is read from memory once, not once per row block), with and without descriptor loads
    out += [(replace(u, grid_order="grouped", group_m=8, tma=tma), replace(d, grid_order="grouped", group_m=8,
                                                                          tma=tma))
            for u, d in out[::3] for tma in (False, True)]
    return out


def sweep_moe(rows: list[dict], tokens: list[int] | None = None, wide: bool = False,
              experts: int | None = None, launch: bool = False, gather: bool = False, tiles: bool = False,
              gluon: bool = False) -> None:
    from benchmarks.ops import grouped_moe

    shapes = MOE if tokens is None else [(t, *cfg[1:]) for cfg in MOE[::3] for t in tokens]
    shapes = [sh for sh in shapes if experts is None or sh[3] == experts]
    for t, hd, inter, e, topk in shapes:
        x = torch.randn(t, hd, device="cuda", dtype=torch.bfloat16)
        w1 = torch.randn(e, 2 * inter, hd, device="cuda", dtype=torch.bfloat16) * hd**-0.5
        w2 = torch.randn(e, hd, inter, device="cuda", dtype=torch.bfloat16) * inter**-0.5
        tw, ti = torch.topk(torch.softmax(torch.randn(t, e, device="cuda"), -1), topk)
        tw = tw.to(torch.bfloat16)
        ref = eager_moe(x.float(), w1.float(), w2.float(), tw.float(), ti)
        peer = bench(lambda: grouped_moe(x, w1, w2, tw, ti))
        best = None
        for up, down in moe_candidates(t, topk, e, wide, launch, gather, tiles, gluon):
            pol = {"moe_gate_up": up.as_dict(), "moe_down": {k: v for k, v in down.as_dict().items() if k != "BM"}}
            try:
                y = moe_expert_step(x, w1, w2, tw, ti, policy_up=up, policy_down=down)
                err = rel(y, ref)
                if not err < 2e-2:
                    rows.append(dict(op="moe", shape=[t, hd, inter, e, topk], policy=pol, error=f"rel err {err}"))
                    continue
                tm = bench(lambda: moe_expert_step(x, w1, w2, tw, ti, policy_up=up, policy_down=down))
            except Exception as ex:
                rows.append(dict(op="moe", shape=[t, hd, inter, e, topk], policy=pol, error=str(ex)[:200]))
                continue
            rows.append(dict(op="moe", shape=[t, hd, inter, e, topk], policy=pol, ms=tm, peer_ms=peer, rel_err=err))
            if gluon:
                print(f"  {tm:.4f} ms (rel err {err:.1e})  up {up.key()}  down {down.key()}", flush=True)
            if best is None or tm < best[0]:
                best = (tm, up, down)
        if best:
            print(f"moe T={t} H={hd} I={inter} E={e} k={topk}: best {best[0]:.4f} ms vs grouped_mm {peer:.4f} ms "
                  f"= {peer / best[0]:.2f}x  up {best[1].key()} down {best[2].key()}", flush=True)


def sweep_cat(rows: list[dict]) -> None:
    """Decode's q, k and v projections at one row (Llama-3-8B and Mixtral-8x7B: 4096 / 1024 / 1024 of K = 4096):
    one gemv_cat launch at several tiles against the three launches the backend runs without it (each at its
    template's policy) and three cuBLAS calls, on the same data."""
    from argus_inductor.kernels.gemm import gemv_cat
    from argus_inductor.kernels.policies import gemv_cat_policy

    for widths, k in (((4096, 1024, 1024), 4096),):
        n = sum(widths)
        a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(w, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5 for w in widths]
        ref = a.float() @ torch.cat(ws).float().t()
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        outs = [torch.empty(1, w, device="cuda", dtype=torch.bfloat16) for w in widths]
        # other weights of the same shapes, run in turn so that each call reads its weights from memory (as a
        # decode step does: a layer's weights are long gone from L2 when the next step comes round)
        cold = [[torch.randn(w, k, device="cuda", dtype=torch.bfloat16) for w in widths] for _ in range(7)]

        def three(pols: list[Policy], weights: list[torch.Tensor] = ws) -> None:
            for w, o, pol in zip(weights, outs, pols):
                gemm(a, w.t(), out=o, policy=pol)

        tmpl = [gemv_policy(1, w, "cuda", k) or gemm_policy(1, w, k, "cuda") for w in widths]
        three(tmpl)
        err3 = rel(torch.cat(outs, 1), ref)
        sep = bench(lambda: three(tmpl), [lambda c=c: three(tmpl, c) for c in cold])
        peer = bench(lambda: [torch.matmul(a, w.t()) for w in ws],
                     [lambda c=c: [torch.matmul(a, w.t()) for w in c] for c in cold])
        row = dict(op="cat", widths=widths, k=k, three_launches_ms=sep, three_rel_err=err3, cublas_ms=peer)
        print(f"cat {widths} K={k}: three launches {sep * 1e3:.1f} us (rel err {err3:.1e}), three cuBLAS calls "
              f"{peer * 1e3:.1f} us", flush=True)
        cands = [gemv_cat_policy("cuda", k)] + [Policy.make(BN=bn, BK=bk, num_warps=w, num_stages=1)
                                                for bn, bk, w in itertools.product((1, 2, 4, 8, 16), (512, 1024, 2048),
                                                                                   (4, 8))
                                                if 1024 <= bn * bk <= 16384]
        for pol in cands:
            out.fill_(float("nan"))
            gemv_cat(a, *(w.t() for w in ws), out, policy=pol)
            err = rel(out, ref)
            t = bench(lambda pol=pol: gemv_cat(a, *(w.t() for w in ws), out, policy=pol),
                      [lambda pol=pol, c=c: gemv_cat(a, *(w.t() for w in c), out, policy=pol) for c in cold])
            rows.append(dict(row, policy=pol.as_dict(), ms=t, rel_err=err, vs_three=sep / t, vs_cublas=peer / t))
            print(f"  gemv_cat {pol.key()}: {t * 1e3:.1f} us ({2 * n * k / t / 1e9:.2f} TB/s), rel err {err:.1e}, "
                  f"{sep / t:.2f}x the three launches, {peer / t:.2f}x cuBLAS", flush=True)


def sweep_router(rows: list[dict]) -> None:
    """One row against a MoE router's few columns (Mixtral's 8 experts of 4096, Qwen2-MoE's 60 of 2048,
    DeepSeek-V3's 256 of 7168): the GEMV path's narrow tiles against the tensor-core template and cuBLAS."""
    from argus_inductor.kernels.policies import gemv_policy

    for n, k in ((8, 4096), (60, 2048), (256, 7168)):
        a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        b = _weight(n, k, "k")
        ref = a.float() @ b.float()
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        peer = bench(lambda: torch.matmul(a, b))
        tmpl = gemm_policy(1, n, k, "cuda")
        cands = [tmpl] + [Policy.make(BM=1, BN=bn, BK=bk, num_warps=w, num_stages=3, GEMV=1)
                          for bn, bk, w in itertools.product((8, 16), (512, 1024, 2048, 4096), (4, 8))]
        chosen = gemv_policy(1, n, "cuda")
        timed = []
        for pol in cands:
            out.fill_(float("nan"))
            gemm(a, b, out=out, policy=pol)
            err = rel(out, ref)
            t = bench(lambda pol=pol: gemm(a, b, out=out, policy=pol))
            rows.append(dict(op="router", m=1, n=n, k=k, policy=pol.as_dict(), ms=t, peer_ms=peer, rel_err=err,
                             template=pol == tmpl, chosen=pol == chosen))
            timed.append((t, pol))
        timed.sort(key=lambda tp: tp[0])
        mine = next(t for t, p in timed if p == chosen)
        print(f"router N={n} K={k}: gemv_policy's {mine * 1e3:.2f} us, best {timed[0][0] * 1e3:.2f} us "
              f"({timed[0][1].key()}), template {next(t for t, p in timed if p == tmpl) * 1e3:.2f} us, cuBLAS "
              f"{peer * 1e3:.2f} us", flush=True)


def sweep_route(rows: list[dict]) -> None:
    """The MoE routing sort alone: one moe_route launch and the two of moe_count + moe_place against
    moe_align_block's torch ops, at decode sizes (rows of 16 an expert block) and prefill sizes (rows of 128, the
    prefill tiles'), on both sides of the size up to which moe_align takes moe_route (FUSED_ROUTE_MAX_CELLS)."""
    from argus_inductor.kernels.moe import (
        counted_route_takes,
        fused_route_takes,
        moe_align_block,
        moe_align_counted,
        moe_align_fused,
    )

    shapes = [(e, k, t, 16) for e, k in ((8, 2), (128, 8)) for t in (1, 4, 16) if t * k <= 128]
    shapes += [(8, 2, t, 128) for t in (512, 2048, 4096)] + [(60, 4, 512, 128), (60, 4, 4096, 128),
                                                              (256, 8, 2048, 128)]
    for experts, topk, t, bm in shapes:
        pairs = t * topk
        takes = ("moe_route" if fused_route_takes(pairs, experts) else
                 "moe_count + moe_place" if counted_route_takes(pairs, experts) else "the torch ops")
        ids = torch.stack([torch.randperm(experts, device="cuda")[:topk] for _ in range(t)])
        want = moe_align_block(ids, experts, bm)
        row = dict(op="route", t=t, experts=experts, topk=topk, block_m=bm, moe_align_takes=takes,
                   torch_ms=bench(lambda: moe_align_block(ids, experts, bm)))
        for name, fn in (("fused", moe_align_fused), ("counted", moe_align_counted)):
            got = fn(ids, experts, bm)
            row[f"{name}_same"] = torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
            row[f"{name}_ms"] = bench(lambda fn=fn: fn(ids, experts, bm))
        slots = {}  # moe_place's slots a program (PLACE_SLOTS; BM: one program a block, as before session 20)
        if counted_route_takes(pairs, experts):
            for bs in sorted({bm, 64, 32, 16} & set(range(1, bm + 1))):
                got = moe_align_counted(ids, experts, bm, slots=bs)
                ok = torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
                slots[bs] = (bench(lambda bs=bs: moe_align_counted(ids, experts, bm, slots=bs)), ok)
        row["place_slots"] = {str(bs): dict(ms=ms, same=ok) for bs, (ms, ok) in slots.items()}
        rows.append(row)
        print(f"route T={t} E={experts} k={topk} BM={bm}: torch ops {row['torch_ms'] * 1e3:.1f} us, moe_route "
              f"{row['fused_ms'] * 1e3:.1f} us (same: {row['fused_same']}), moe_count + moe_place "
              f"{row['counted_ms'] * 1e3:.1f} us (same: {row['counted_same']}); moe_align takes {takes}"
              + "".join(f"; {bs} slots a program {ms * 1e3:.1f} us{'' if ok else ' (DIFFERS)'}"
                        for bs, (ms, ok) in slots.items()), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="gemm,attention",
                    help="comma-separated: gemm, attention, moe, route, gemv (M = 1 on the CUDA cores), "
                         "cat (decode's q, k and v in one launch), router (one row, a MoE router's columns)")
    ap.add_argument("--max-m", type=int, default=1 << 30, help="only GEMM shapes with M <= this")
    ap.add_argument("--min-m", type=int, default=0, help="only GEMM shapes with M >= this")
    ap.add_argument("--b-major", choices=("k", "n"), default="k",
                    help="GEMM B operand: K-contiguous (an nn.Linear weight, transposed) or N-contiguous")
    ap.add_argument("--moe-tokens", help="MoE: comma-separated token counts instead of 1, 64 and 4096")
    ap.add_argument("--moe-prefill", action="store_true",
                    help="MoE: the wide prefill search (grid bands of 4/8/16 row blocks and row order, deeper "
                         "pipelines); long: 32 policies a shape")
    ap.add_argument("--moe-launch", action="store_true",
                    help="MoE: the prefill template's tiles with persistent programs and descriptor loads (16 policies "
                         "a shape)")
    ap.add_argument("--moe-gather", action="store_true",
                    help="MoE prefill: the template's launch setting with three gate-up tiles, each reading the routed "
                         "rows by token id and gathered into expert order first (moe_gather); 6 policies a shape")
    ap.add_argument("--moe-tiles", action="store_true",
                    help="MoE prefill: the template's launch with other gate-up and down tiles (9 policies a shape)")
    ap.add_argument("--moe-experts", type=int, help="MoE: only the configuration with this many experts")
    ap.add_argument("--gluon", action="store_true",
                    help="GEMM: the Gluon lowering's tile candidates at M = 64 and 128 against the Triton "
                         "template; MoE prefill: the Gluon gate-up and down lowerings against the template's "
                         "Triton kernels")
    ap.add_argument("--gemv-n", help="gemv: only the shapes with these N (comma-separated)")
    ap.add_argument("--attn-shape", action="append", default=[],
                    help="attention: Z,H,HK,S,T,D,causal (repeatable) instead of ops.py's shapes, timed by CUDA-graph "
                         "replay, the Gluon lowering among the candidates")
    ap.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/sweep.py needs a CUDA GPU")
    rows: list[dict] = []
    for op in args.ops.split(","):
        if op.strip() == "gemm":
            sweep_gemm(rows, args.max_m, args.min_m, args.b_major, args.gluon)
        elif op.strip() == "moe":
            sweep_moe(rows, [int(t) for t in args.moe_tokens.split(",")] if args.moe_tokens else None,
                      args.moe_prefill, args.moe_experts, args.moe_launch, args.moe_gather, args.moe_tiles,
                      args.gluon)
        elif op.strip() == "route":
            sweep_route(rows)
        elif op.strip() == "cat":
            sweep_cat(rows)
        elif op.strip() == "router":
            sweep_router(rows)
        elif op.strip() == "gemv":
            sweep_gemv(rows, {int(n) for n in args.gemv_n.split(",")} if args.gemv_n else None)
        else:
            shapes = [tuple(int(x) for x in sh.split(",")) for sh in args.attn_shape]
            sweep_attention(rows, [(*sh[:6], bool(sh[6])) for sh in shapes] or None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                date=datetime.datetime.now().isoformat(timespec="seconds"), timing="do_bench_cudagraph median")
    tag = args.ops.replace(",", "-") + ("-gluon" if args.gluon else "")
    (out / f"sweep-{tag}-{datetime.date.today()}.json").write_text(
        json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
