"""Probe: what programmatic dependent launch (PDL) is worth to a decode step on Hopper.

A Llama-3-8B decode step at batch 1 (2 layers, as e2e.py builds it) is a chain of about 30 kernels in one CUDA graph:
GEMVs streaming weights, with small kernels (norms, the attention) between them. Each kernel starts only when the
one before it has finished and its writes are flushed, so every boundary costs the launch latency plus the previous
kernel's ramp-down, when its last programs leave SMs idle. With PDL a kernel is launched while the one before it
still runs: its programs read what no earlier kernel writes (the weights) and then wait (`griddepcontrol.wait`) for
the previous grid's completion before they read its output.

The probe times the same chain of plain Triton kernels (GEMVs in the form of Argus's GEMV path, and one-program
row kernels standing in for the small ones) inside a CUDA graph three ways:

* serial: no PDL;
* pdl: every kernel launched with PDL, waiting before its first load;
* pdl+prefetch: as pdl, and each GEMV program loads its first weight block before it waits.

Every variant's output is checked against the serial one's, which is checked against float32 torch.

    python benchmarks/pdl_probe.py     # prints ms per step and the ratios; writes $OUT/pdl-probe.json
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

HIDDEN, INTER, VOCAB, LAYERS = 4096, 14336, 128256, 2


@triton.jit
def pdl_enter(GDC: tl.constexpr):
    """Under PDL: let the next kernel launch, then wait for the previous one's writes (a kernel that reads only
    what earlier kernels wrote, so it has nothing to load before the wait)."""
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()


@triton.jit
def gemv(A, W, R, C, N, K: tl.constexpr, BK: tl.constexpr, RESIDUAL: tl.constexpr, GDC: tl.constexpr,
         PREFETCH: tl.constexpr):
    """C[n] = sum_k A[k] W[n, k] (+ R[n]); one column a program, products kept per K lane."""
    n = tl.program_id(0)
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    row = W + n.to(tl.int64) * K
    if PREFETCH:
        w = tl.load(row + tl.arange(0, BK)).to(tl.float32)
    if GDC:
        tl.extra.cuda.gdc_wait()
    if not PREFETCH:
        w = tl.load(row + tl.arange(0, BK)).to(tl.float32)
    acc = tl.load(A + tl.arange(0, BK)).to(tl.float32) * w
    for k in range(BK, K, BK):
        rk = k + tl.arange(0, BK)
        acc += tl.load(A + rk).to(tl.float32) * tl.load(row + rk).to(tl.float32)
    out = tl.sum(acc, 0)
    if RESIDUAL:
        out += tl.load(R + n).to(tl.float32)
    tl.store(C + n, out)


@triton.jit
def gate_up(A, W, C, N, K: tl.constexpr, BK: tl.constexpr, GDC: tl.constexpr, PREFETCH: tl.constexpr):
    """C[n] = silu(A . W[n]) * (A . W[N + n]): the MLP's gate and up rows of one column."""
    n = tl.program_id(0)
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    g_row = W + n.to(tl.int64) * K
    u_row = W + (N + n).to(tl.int64) * K
    if PREFETCH:
        wg = tl.load(g_row + tl.arange(0, BK)).to(tl.float32)
        wu = tl.load(u_row + tl.arange(0, BK)).to(tl.float32)
    if GDC:
        tl.extra.cuda.gdc_wait()
    if not PREFETCH:
        wg = tl.load(g_row + tl.arange(0, BK)).to(tl.float32)
        wu = tl.load(u_row + tl.arange(0, BK)).to(tl.float32)
    a = tl.load(A + tl.arange(0, BK)).to(tl.float32)
    g = a * wg
    u = a * wu
    for k in range(BK, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(A + rk).to(tl.float32)
        g += a * tl.load(g_row + rk).to(tl.float32)
        u += a * tl.load(u_row + rk).to(tl.float32)
    gs = tl.sum(g, 0)
    tl.store(C + n, gs / (1.0 + tl.exp(-gs)) * tl.sum(u, 0))


@triton.jit
def rms(X, Wn, Y, H: tl.constexpr, GDC: tl.constexpr):
    """Y = X / rms(X) * Wn for one row: the norms between the GEMVs."""
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    r = tl.arange(0, H)
    w = tl.load(Wn + r).to(tl.float32)
    if GDC:
        tl.extra.cuda.gdc_wait()
    x = tl.load(X + r).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, 0) / H + 1e-5) * w
    tl.store(Y + r, y)


@triton.jit
def mix(X, Y, H: tl.constexpr, GDC: tl.constexpr):
    """Y = X / 2: a stand-in for the rotary embedding and the cache writes at decode (one small launch)."""
    pdl_enter(GDC)
    r = tl.arange(0, H)
    x = tl.load(X + r).to(tl.float32)
    tl.store(Y + r, x * 0.5)


@triton.jit
def cache_part(Q, KV, P, KEYS: tl.constexpr, D: tl.constexpr, GDC: tl.constexpr):
    """A stand-in for split-KV decode attention's first pass: program c reads its chunk of KEYS cached rows of D
    (keys and values of one head) and writes D partial sums scaled by the query; as much memory as the real one."""
    c = tl.program_id(0)
    pdl_enter(GDC)
    rk = tl.arange(0, KEYS)
    rd = tl.arange(0, D)
    kv = tl.load(KV + (c * KEYS + rk)[:, None].to(tl.int64) * D + rd[None, :]).to(tl.float32)
    q = tl.load(Q + (c % 16) * D + rd).to(tl.float32)
    tl.store(P + c * D + rd, tl.sum(kv, 0) * q / KEYS)


@triton.jit
def cache_merge(P, O, CHUNKS: tl.constexpr, D: tl.constexpr, GDC: tl.constexpr):
    """A stand-in for the merge pass: program h sums CHUNKS partial rows of its head."""
    h = tl.program_id(0)
    pdl_enter(GDC)
    rc = tl.arange(0, CHUNKS)
    rd = tl.arange(0, D)
    p = tl.load(P + ((h % 8) * CHUNKS + rc)[:, None] * D + rd[None, :])
    tl.store(O + h * D + rd, tl.sum(p, 0))


class Step:
    def __init__(self) -> None:
        g = torch.Generator(device="cuda").manual_seed(0)

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, device="cuda", generator=g) / shape[-1] ** 0.5).to(torch.bfloat16)

        self.layers = [dict(n1=torch.rand(HIDDEN, device="cuda", generator=g).bfloat16() + 0.5, qkv=w(6144, HIDDEN),
                            o=w(HIDDEN, HIDDEN), n2=torch.rand(HIDDEN, device="cuda", generator=g).bfloat16() + 0.5,
                            gu=w(2 * INTER, HIDDEN), down=w(HIDDEN, INTER), cache=w(128 * 64, 256))
                       for _ in range(LAYERS)]
        self.norm = torch.rand(HIDDEN, device="cuda", generator=g).bfloat16() + 0.5
        self.head = w(VOCAB, HIDDEN)
        self.x = torch.randn(HIDDEN, device="cuda", generator=g).bfloat16()
        e = lambda n: torch.empty(n, device="cuda", dtype=torch.bfloat16)  # noqa: E731
        self.h, self.t, self.qkv, self.att, self.act = e(HIDDEN), e(HIDDEN), e(6144), e(HIDDEN), e(INTER)
        self.h2, self.logits = e(HIDDEN), e(VOCAB)
        self.part = torch.empty(128 * 256, device="cuda", dtype=torch.float32)

    def run(self, gdc: bool, prefetch: bool, bk: int = 2048) -> torch.Tensor:
        kw = dict(GDC=gdc, launch_pdl=gdc)
        pf = dict(PREFETCH=prefetch)
        self.h.copy_(self.x)
        for lay in self.layers:
            rms[(1,)](self.h, lay["n1"], self.t, H=HIDDEN, num_warps=8, **kw)
            gemv[(6144,)](self.t, lay["qkv"], self.t, self.qkv, 6144, K=HIDDEN, BK=bk, RESIDUAL=False,
                          num_warps=8, **kw, **pf)
            mix[(1,)](self.qkv, self.att, H=HIDDEN, num_warps=8, **kw)
            cache_part[(128,)](self.att, lay["cache"], self.part, KEYS=64, D=256, num_warps=4, **kw)
            cache_merge[(32,)](self.part, self.att, CHUNKS=16, D=128, num_warps=4, **kw)
            gemv[(HIDDEN,)](self.att, lay["o"], self.h, self.h2, HIDDEN, K=HIDDEN, BK=bk, RESIDUAL=True,
                            num_warps=8, **kw, **pf)
            rms[(1,)](self.h2, lay["n2"], self.t, H=HIDDEN, num_warps=8, **kw)
            gate_up[(INTER,)](self.t, lay["gu"], self.act, INTER, K=HIDDEN, BK=bk, num_warps=8, **kw, **pf)
            gemv[(HIDDEN,)](self.act, lay["down"], self.h2, self.h, HIDDEN, K=INTER, BK=2048, RESIDUAL=True,
                            num_warps=8, **kw, **pf)
        rms[(1,)](self.h, self.norm, self.t, H=HIDDEN, num_warps=8, **kw)
        gemv[(VOCAB,)](self.t, self.head, self.t, self.logits, VOCAB, K=HIDDEN, BK=bk, RESIDUAL=False,
                       num_warps=8, **kw, **pf)
        return self.logits

    def reference(self) -> torch.Tensor:
        def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return x * torch.rsqrt(x.pow(2).mean() + 1e-5) * w.float()

        h = self.x.float()
        for lay in self.layers:
            qkv = lay["qkv"].float() @ norm(h, lay["n1"])
            q = (qkv[:HIDDEN] * 0.5).view(16, 256)
            part = lay["cache"].float().view(128, 64, 256).sum(1) * q.repeat(8, 1) / 64
            att = part.reshape(256, 128)[:128].view(8, 16, 128).sum(1).repeat(4, 1).reshape(-1)
            h2 = h + lay["o"].float() @ att
            gu = lay["gu"].float() @ norm(h2, lay["n2"])
            h = h2 + lay["down"].float() @ (torch.nn.functional.silu(gu[:INTER]) * gu[INTER:])
        return self.head.float() @ norm(h, self.norm)


def time_graph(step: Step, gdc: bool, prefetch: bool, bk: int, reps: int = 200) -> tuple[float, torch.Tensor]:
    out = step.run(gdc, prefetch, bk).clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.run(gdc, prefetch, bk)
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return sorted(times)[2], out


def main() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        sys.exit("benchmarks/pdl_probe.py needs an NVIDIA GPU of compute capability 9.0 or above")
    step = Step()
    ref = step.reference()
    res = {}
    base = None
    for name, gdc, pre, bk in (("serial", False, False, 2048), ("pdl", True, False, 2048),
                               ("pdl+prefetch", True, True, 2048), ("serial BK=4096", False, False, 4096),
                               ("pdl+prefetch BK=4096", True, True, 4096), ("serial again", False, False, 2048)):
        ms, out = time_graph(step, gdc, pre, bk)
        err = float((out.float() - ref).norm() / ref.norm())
        same = base is None or bool((out.float() - base.float()).abs().max() <= 1e-2 * base.float().abs().max())
        base = out if base is None else base
        res[name] = dict(ms=ms, rel_err=err, same_as_serial=same)
        print(f"{name:22s} {ms * 1e3:8.1f} us a step  rel err vs float32 {err:.1e}  same as serial: {same}",
              flush=True)
    for name in ("pdl", "pdl+prefetch", "serial BK=4096", "pdl+prefetch BK=4096"):
        print(f"serial / {name}: {res['serial']['ms'] / res[name]['ms']:.3f}x")
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / "pdl-probe.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, results=res),
        indent=1))


if __name__ == "__main__":
    main()
