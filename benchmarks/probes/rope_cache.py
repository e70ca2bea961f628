"""Probe: a decode step's q and k rotation with its KV-cache write, Argus's one launch (rope_cache)
against what Inductor makes of the same torch code (max-autotune, its launches in one CUDA graph), at Llama-3-8B's
heads (32 query, 8 key/value, head dim 128) and a 1040-position cache, batch 1 and 32.

Both run on the same operands: q, k and v as head views of one projection's output (what gemv_cat leaves), bf16
cos and sin of one position broadcast over the batch, and the caches; each is checked against float64 torch (the
rotated q, and the caches after the write) before it is timed (CUDA-graph medians). Found (H100,
benchmarks/results/rope-cache-probe-h100-2026-11-25.log): 1.71 against 3.75 us at batch 1, 2.05 against 4.69 at 32.

    python benchmarks/probes/rope_cache.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels.rotary import rope_cache, rope_cache_reference, rotate_half  # noqa: E402
from benchmarks.sweep import bench, rel  # noqa: E402

H, HK, D, LENGTH = 32, 8, 128, 1040


def step(q, k, v, cos, sin, keys, values, index):
    """transformers' apply_rotary_pos_emb and StaticCache's two writes."""
    q_embed = q * cos + rotate_half(q) * sin
    keys.index_copy_(2, index, k * cos + rotate_half(k) * sin)
    values.index_copy_(2, index, v)
    return q_embed


def operands(z: int) -> tuple[torch.Tensor, ...]:
    proj = torch.randn(z, 1, (H + 2 * HK) * D, device="cuda", dtype=torch.bfloat16)
    q = proj[..., :H * D].view(z, 1, H, D).transpose(1, 2)
    k = proj[..., H * D:(H + HK) * D].view(z, 1, HK, D).transpose(1, 2)
    v = proj[..., (H + HK) * D:].view(z, 1, HK, D).transpose(1, 2)
    ang = torch.rand(1, 1, 1, D // 2, device="cuda") * 1000
    ang = torch.cat((ang, ang), -1)
    keys = torch.randn(z, HK, LENGTH, D, device="cuda", dtype=torch.bfloat16)
    values = torch.randn(z, HK, LENGTH, D, device="cuda", dtype=torch.bfloat16)
    index = torch.tensor([1000], device="cuda")
    return q, k, v, ang.cos().bfloat16(), ang.sin().bfloat16(), keys, values, index


def checked(name: str, fn, ops: tuple[torch.Tensor, ...]) -> str:
    """`fn` on copies of the caches against float64 torch: the rotated q's and the written caches' errors."""
    keys, values = ops[5].clone(), ops[6].clone()
    out = fn(*ops[:5], keys, values, ops[7])
    wk, wv = ops[5].double(), ops[6].double()
    want = rope_cache_reference(*[t.double() for t in ops[:5]], wk, wv, ops[7])
    errs = rel(out, want), rel(keys, wk), rel(values, wv)
    assert max(errs) < 1e-2, f"{name}: relative errors {errs}"
    return f"rel err q {errs[0]:.1e}, keys {errs[1]:.1e}, values {errs[2]:.1e}"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/probes/rope_cache.py needs a CUDA GPU")
    inductor = torch.compile(step, mode="max-autotune-no-cudagraphs", dynamic=False)
    for z in (1, 32):
        ops = operands(z)
        fns = {"inductor max-autotune": inductor}
        for warps in (1, 2, 4):
            pol = Policy.make(BD=D, num_warps=warps)
            fns[f"argus rope_cache (BD={D}, {warps} warp{'s' if warps > 1 else ''})"] = \
                lambda *a, pol=pol: rope_cache(*a, policies={"rope_cache_write": pol})
        times = {}
        for name, fn in fns.items():
            note = checked(name, fn, ops)
            times[name] = bench(lambda fn=fn: fn(*ops))
            print(f"batch {z}: {name}: {times[name] * 1e3:.2f} us ({note})", flush=True)
        peer = times["inductor max-autotune"]
        for name, t in times.items():
            if name.startswith("argus"):
                print(f"batch {z}: {name}: {peer / t:.2f}x Inductor", flush=True)


if __name__ == "__main__":
    main()
