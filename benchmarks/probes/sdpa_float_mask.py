"""Probe: is SDPA right on this GPU and torch when bf16 attention is handed a float32 additive mask? A decode step
(one query token) over a static KV cache whose last positions are masked (-inf), grouped heads and not, each SDPA
backend forced in turn, against float64 math of the same operands.

Found (H200, torch 2.11.0+cu130, benchmarks/results/sdpa-float-mask-probe-h200-2026-11-29.log): the default
dispatch and cuDNN's attention were 0.10-0.27 off with the float32 mask, with or without grouped heads; the same mask
in bf16 was 2.2e-3 off, the math backend 1.7e-3; the memory-efficient backend refused the call. So the swap-in's
attention fallback (ops/references.attention_mask) hands SDPA the mask in q's dtype. Run again on a new torch to
see whether that is still needed.

    python benchmarks/probes/sdpa_float_mask.py
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# (batch, query heads, key/value heads, cache slots, live slots): Llama-3-8B's heads and e2e.py's decode cache
CASES = [(1, 8, 2, 1040, 1025), (32, 32, 8, 1040, 1025), (1, 8, 8, 1040, 1025), (1, 8, 2, 1024, 1000)]
BACKENDS = (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def row(z: int, h: int, hk: int, slots: int, live: int, d: int = 128) -> str:
    q = torch.randn(z, h, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(z, hk, slots, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    mask = torch.full((z, 1, 1, slots), -math.inf, device="cuda")
    mask[..., :live] = 0.0
    kr, vr = k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1)
    ref = ((q.double() @ kr.double().transpose(-1, -2)) / math.sqrt(d) + mask.double()).softmax(-1) @ vr.double()

    def rel(out: torch.Tensor) -> str:
        return f"{float((out.double() - ref).norm() / ref.norm()):.2e}"

    cells = [f"z{z} heads {h}/{hk} slots {slots}",
             "default, fp32 mask, gqa " + rel(F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                            enable_gqa=h != hk)),
             "default, fp32 mask, repeated " + rel(F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask)),
             "default, bf16 mask, gqa " + rel(F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bfloat16(),
                                                                            enable_gqa=h != hk))]
    for backend in BACKENDS:
        for name, kk, vv in (("gqa", k, v), ("repeated", kr, vr)):
            try:
                with sdpa_kernel([backend]), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, enable_gqa=kk.shape[1] != h)
                cells.append(f"{backend.name}, fp32 mask, {name} {rel(out)}")
            except RuntimeError:
                cells.append(f"{backend.name}, fp32 mask, {name} refused")
    return " | ".join(cells)


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; relative error against float64 math")
    torch.manual_seed(0)
    for case in CASES:
        print(row(*case), flush=True)


if __name__ == "__main__":
    main()
