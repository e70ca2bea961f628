"""Attention forward with online softmax: causal or not, GQA/MQA, any sequence length."""
from __future__ import annotations

import builtins
import math

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    cdiv,
    constexpr,
    exp,
    float32,
    full,
    inf,
    load,
    max,
    maximum,
    minimum,
    mma,
    store,
    sum,
    tile_grid,
    trans,
    where,
    zeros,
)
from ..dsl.runtime import kernel


@kernel
def attention_fwd(Q: Tensor("Z", "H", "S", "D"), K: Tensor("Z", "HK", "T", "D"), V: Tensor("Z", "HK", "T", "D"),
                  O: Tensor("Z", "H", "S", "D"), scale: float,
                  BM: constexpr = 64, BN: constexpr = 64, BD: constexpr = 64, CAUSAL: constexpr = 0):
    """O = softmax(Q K^T * scale [+ causal mask]) V; query head h reads key/value head h // (H // HK).

    The causal mask is top-left aligned (key j is visible to query i when j <= i), as in
    scaled_dot_product_attention(is_causal=True).
    """
    pm, zh = tile_grid(cdiv(S, BM), Z * H)
    z = zh // H
    h = zh % H
    hk = h // (H // HK)
    rm = pm * BM + arange(BM)
    rd = arange(BD)
    q = load(Q[z, h, rm, rd])
    m_i = full((BM,), -inf, float32)
    l_i = zeros((BM,), float32)
    acc = zeros((BM, BD), float32)
    hi = T
    if CAUSAL == 1:
        hi = minimum(T, (pm + 1) * BM)
    for n0 in range(0, hi, BN):
        rn = n0 + arange(BN)
        k = load(K[z, hk, rn, rd])
        v = load(V[z, hk, rn, rd])
        s = mma(q, trans(k)) * scale
        valid = (rn[None, :] < T) & ((rn[None, :] <= rm[:, None]) | (CAUSAL == 0))
        s = where(valid, s, -inf)
        m_new = maximum(m_i, max(s, 1))
        alpha = exp(m_i - m_new)
        p = exp(s - m_new[:, None])
        l_i = l_i * alpha + sum(p, 1)
        acc = acc * alpha[:, None] + mma(p.to(V.dtype), v)
        m_i = m_new
    store(O[z, h, rm, rd], acc / l_i[:, None])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, out: torch.Tensor | None = None,
              policy: Policy | None = None) -> torch.Tensor:
    """q (Z, H, S, D), k and v (Z, HK, T, D) with H % HK == 0."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"attention needs q (Z,H,S,D), k=v (Z,HK,T,D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    d = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if out is None:
        out = torch.empty_like(q)
    bd = 1 << builtins.max(4, (d - 1).bit_length())
    policy = (policy or Policy.make(BM=64, BN=64)).with_consts(BD=bd, CAUSAL=int(causal))
    attention_fwd(q, k, v, out, scale, policy=policy)
    return out
