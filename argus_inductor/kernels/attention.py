"""Attention forward with online softmax: causal or not, GQA/MQA, any sequence length."""
from __future__ import annotations

import builtins
import math
from dataclasses import replace

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    assume,
    cdiv,
    constexpr,
    exp2,
    float32,
    full,
    implies,
    inf,
    load,
    max,
    maximum,
    minimum,
    mma,
    store,
    sum,
    tag_of,
    tile_grid,
    trans,
    where,
    zeros,
)
from ..dsl.runtime import kernel
from .launch import pow2


@kernel
def attention_fwd(Q: Tensor("Z", "H", "S", "D"), K: Tensor("Z", "HK", "T", "D"), V: Tensor("Z", "HK", "T", "D"),
                  Mask: Tensor("Z", "H", "S", "T"), O: Tensor("Z", "H", "S", "D"), scale: float,
                  BM: constexpr = 64, BN: constexpr = 64, BD: constexpr = 64, CAUSAL: constexpr = 0,
                  HAS_MASK: constexpr = 0, SAFE: constexpr = 1):
    """O = softmax(Q K^T * scale [+ Mask] [+ causal mask]) V; query head h reads key/value head h // (H // HK).

    Mask (HAS_MASK=1) is additive (any float dtype), broadcast by zero strides; -inf hides a key (a bool mask's
    False is -inf), finite entries below MASK_FLOOR count as MASK_FLOOR (scores are scaled by log2(e), which would
    take them past float32's range), so a row masked with a dtype's minimum averages its keys as SDPA does. A row
    with no visible key (every score -inf) is zero with SAFE=1, as SDPA's, and NaN with SAFE=0, as softmax followed
    by a matmul (an attention written out); NaN and +inf in the mask or the inputs give NaN.

    The causal mask is top-left aligned (key j is visible to query i when j <= i), as in
    scaled_dot_product_attention(is_causal=True). Keys are walked in two loops: whole key blocks that no
    mask touches (below the diagonal for causal programs) need no select, only the diagonal blocks and
    the ragged last block do. Scores are kept in base 2 (scale * log2(e) folded in) so the softmax uses
    exp2. Programs of one head are adjacent in launch order (the query block is the fast grid axis), so
    the query blocks of a head read its keys and values from L2 rather than each from memory.
    """
    zh, pm = tile_grid(Z * H, cdiv(S, BM))
    z = zh // H
    h = zh % H
    hk = h // (H // HK)
    assume((H % HK == 0) & (D <= BD))
    rm = pm * BM + arange(BM)
    rd = arange(BD)
    qk_scale = scale * 1.4426950408889634
    q = load(Q[z, h, rm, rd])
    m_i = full((BM,), -inf, float32)
    l_i = zeros((BM,), float32)
    acc = zeros((BM, BD), float32)
    lo = T - T % BN
    hi = T
    if CAUSAL == 1:
        lo = minimum(lo, pm * BM // BN * BN)  # whole key blocks below the diagonal, for any BN
        hi = minimum(T, (pm + 1) * BM)
    if HAS_MASK == 1:
        lo = 0
    for n0 in range(0, lo, BN):
        rn = n0 + arange(BN)
        k = load(K[z, hk, rn, rd])
        v = load(V[z, hk, rn, rd])
        assert_tag((tag_of(k, "HK") * (H // HK) <= h) & (h < (tag_of(k, "HK") + 1) * (H // HK)),
                   "query head h reads the key/value head of its GQA group")
        qk = mma(q, trans(k))
        assert_tag(implies(CAUSAL == 1, tag_of(qk, "T") <= tag_of(qk, "S")), "a causal score never looks ahead")
        m_new = maximum(m_i, max(qk, 1) * qk_scale)  # scale > 0 (the host negates q for a negative one)
        m_use = where(m_new == -inf, 0.0, m_new)  # a row with no finite score yet: exp2(-inf - 0) = 0, not NaN
        alpha = exp2(m_i - m_use)
        p = exp2(qk * qk_scale - m_use[:, None])  # one fused multiply-add a score
        l_i = l_i * alpha + sum(p, 1)
        acc = mma(p.to(V.dtype), v, acc * alpha[:, None])
        m_i = m_new
    for n0 in range(lo, hi, BN):
        rn = n0 + arange(BN)
        k = load(K[z, hk, rn, rd])
        v = load(V[z, hk, rn, rd])
        assert_tag((tag_of(k, "HK") * (H // HK) <= h) & (h < (tag_of(k, "HK") + 1) * (H // HK)),
                   "query head h reads the key/value head of its GQA group")
        visible = (rn[None, :] < T) & ((CAUSAL == 0) | (rn[None, :] <= rm[:, None]))
        s = mma(q, trans(k)) * qk_scale
        if HAS_MASK == 1:
            mk = load(Mask[z, h, rm, rn]).to(float32)
            s = s + where((mk < -2.3e38) & (mk > -inf), -2.3e38, mk) * 1.4426950408889634  # MASK_FLOOR
        s = where(visible, s, -inf)
        assert_tag(implies(CAUSAL == 1, tag_of(s, "T") <= tag_of(s, "S")),
                   "a causal score on the diagonal never looks ahead")
        m_new = maximum(m_i, max(s, 1))
        m_use = where(m_new == -inf, 0.0, m_new)  # every key so far hidden: p = 0, not exp2(-inf + inf)
        alpha = exp2(m_i - m_use)
        p = exp2(s - m_use[:, None])
        l_i = l_i * alpha + sum(p, 1)
        acc = mma(p.to(V.dtype), v, acc * alpha[:, None])
        m_i = m_new
    store(O[z, h, rm, rd], where(((l_i == 0.0) & (SAFE == 1))[:, None], 0.0, acc / l_i[:, None]))  # see SAFE


@kernel
def attention_decode(Q: Tensor("Z", "H", "S", "D"), K: Tensor("Z", "HK", "T", "D"), V: Tensor("Z", "HK", "T", "D"),
                     Mask: Tensor("Z", "H", "S", "T"), O: Tensor("Z", "H", "S", "D"), scale: float,
                     BG: constexpr = 16, BN: constexpr = 64, BD: constexpr = 64, HAS_MASK: constexpr = 0,
                     SAFE: constexpr = 1):
    """Decode: one query token (S == 1) against a long KV cache. The G = H // HK query heads that share a
    key/value head are packed into the rows of one tile, so each K and V row is read once per group. Masks and
    rows with no visible key as attention_fwd's."""
    (zk,) = tile_grid(Z * HK)
    z = zk // HK
    hk = zk % HK
    g = H // HK
    assume((S == 1) & (H % HK == 0) & (g <= BG) & (D <= BD))
    rg = arange(BG)
    hrow = hk * g + rg
    rd = arange(BD)
    qk_scale = scale * 1.4426950408889634
    q = load(Q[z, hrow, 0, rd], mask=(rg < g)[:, None])
    m_i = full((BG,), -inf, float32)
    l_i = zeros((BG,), float32)
    acc = zeros((BG, BD), float32)
    for n0 in range(0, T, BN):
        rn = n0 + arange(BN)
        k = load(K[z, hk, rn, rd])
        v = load(V[z, hk, rn, rd])
        s = mma(q, trans(k)) * qk_scale
        if HAS_MASK == 1:
            mk = load(Mask[z, hrow, 0, rn], mask=(rg < g)[:, None]).to(float32)
            s = s + where((mk < -2.3e38) & (mk > -inf), -2.3e38, mk) * 1.4426950408889634  # MASK_FLOOR
        s = where(rn[None, :] < T, s, -inf)
        m_new = maximum(m_i, max(s, 1))
        m_use = where(m_new == -inf, 0.0, m_new)
        alpha = exp2(m_i - m_use)
        p = exp2(s - m_use[:, None])
        l_i = l_i * alpha + sum(p, 1)
        acc = acc * alpha[:, None] + mma(p.to(V.dtype), v)
        m_i = m_new
    store(O[z, hrow, 0, rd], where(((l_i == 0.0) & (SAFE == 1))[:, None], 0.0, acc / l_i[:, None]),
          mask=(rg < g)[:, None])


@kernel
def attention_decode_part(Q: Tensor("Z", "H", "S", "D"), K: Tensor("Z", "HK", "C", "TS", "D"),
                          V: Tensor("Z", "HK", "C", "TS", "D"), Mask: Tensor("Z", "H", "S", "C", "TS"),
                          Acc: Tensor("Z", "H", "C", "D", dtype=float32), Max: Tensor("Z", "H", "C", dtype=float32),
                          Den: Tensor("Z", "H", "C", dtype=float32), scale: float, BG: constexpr = 16,
                          BN: constexpr = 64, BD: constexpr = 64, HAS_MASK: constexpr = 0):
    """Split-KV decode, first pass: the KV cache viewed as C chunks of TS keys, one program a (batch, key/value head,
    chunk) with the group's query heads packed in its rows (as attention_decode). Each chunk's softmax statistics
    over its own keys: the running max (Max, log2 units), the sum of exp2(s - max) (Den) and the unnormalized
    output (Acc); attention_decode_merge combines the chunks."""
    zk, c = tile_grid(Z * HK, C)
    z = zk // HK
    hk = zk % HK
    g = H // HK
    assume((S == 1) & (H % HK == 0) & (g <= BG) & (D <= BD))
    rg = arange(BG)
    hrow = hk * g + rg
    rd = arange(BD)
    qk_scale = scale * 1.4426950408889634
    q = load(Q[z, hrow, 0, rd], mask=(rg < g)[:, None])
    m_i = full((BG,), -inf, float32)
    l_i = zeros((BG,), float32)
    acc = zeros((BG, BD), float32)
    for n0 in range(0, TS, BN):
        rn = n0 + arange(BN)
        k = load(K[z, hk, c, rn, rd])
        v = load(V[z, hk, c, rn, rd])
        s = mma(q, trans(k)) * qk_scale
        if HAS_MASK == 1:
            mk = load(Mask[z, hrow, 0, c, rn], mask=(rg < g)[:, None]).to(float32)
            s = s + where((mk < -2.3e38) & (mk > -inf), -2.3e38, mk) * 1.4426950408889634  # MASK_FLOOR
        s = where(rn[None, :] < TS, s, -inf)
        m_new = maximum(m_i, max(s, 1))
        m_use = where(m_new == -inf, 0.0, m_new)
        alpha = exp2(m_i - m_use)
        p = exp2(s - m_use[:, None])
        l_i = l_i * alpha + sum(p, 1)
        acc = acc * alpha[:, None] + mma(p.to(V.dtype), v)
        m_i = m_new
    store(Acc[z, hrow, c, rd], acc, mask=(rg < g)[:, None])
    store(Max[z, hrow, c], m_i, mask=rg < g)
    store(Den[z, hrow, c], l_i, mask=rg < g)


@kernel
def attention_decode_merge(Acc: Tensor("Z", "H", "C", "D", dtype=float32), Max: Tensor("Z", "H", "C", dtype=float32),
                           Den: Tensor("Z", "H", "C", dtype=float32), O: Tensor("Z", "H", "S", "D"),
                           BC: constexpr = 16, BD: constexpr = 64, SAFE: constexpr = 1):
    """Split-KV decode, second pass: one program a (batch, query head) rescales each chunk's statistics to the
    largest chunk max and sums them: O = sum_c 2^(m_c - m) Acc_c / sum_c 2^(m_c - m) Den_c (where no chunk had a
    visible key: 0 with SAFE=1, NaN with SAFE=0, as attention_fwd)."""
    (zh,) = tile_grid(Z * H)
    z = zh // H
    h = zh % H
    assume((S == 1) & (C <= BC) & (D <= BD))
    rc = arange(BC)
    rd = arange(BD)
    m_c = load(Max[z, h, rc], mask=rc < C, other=-inf)
    m = max(m_c, 0)
    w = exp2(m_c - where(m == -inf, 0.0, m))
    den = sum(w * load(Den[z, h, rc], mask=rc < C, other=0.0), 0)
    acc = sum(w[:, None] * load(Acc[z, h, rc, rd], mask=(rc < C)[:, None], other=0.0), 0)
    store(O[z, h, 0, rd], where((den == 0.0) & (SAFE == 1), 0.0, acc / den))


def nonnegative_scale(q: torch.Tensor, scale: float) -> tuple[torch.Tensor, float]:
    """(q, scale) as the kernels take them: they take the row maximum of unscaled scores, so scale >= 0; for a
    negative one, (-q) k^T |scale| is the same softmax input."""
    return (q, scale) if scale >= 0 else (-q, -scale)


MASKED_SCORE = -math.inf  # what a bool mask's False adds to a score: the key is hidden (SDPA's semantics)
MASK_FLOOR = -2.3e38  # finite mask entries below it count as it in the kernels (times log2(e), float32's range)


def mask_operand(mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The Mask argument of the attention kernels: `mask` (bool: True keeps; float: added to the scores)
    broadcast to (Z, H, S, T) by zero strides, or a placeholder the kernels never read when there is none.
    Device-side only (no host sync), so it can be captured in a CUDA graph."""
    z, h, s = q.shape[:3]
    t = k.shape[2]
    if mask is None:
        return torch.empty(1, dtype=torch.float32, device=q.device).expand(z, h, s, t)
    if mask.dtype == torch.bool:
        mask = torch.where(mask, 0.0, MASKED_SCORE).to(torch.float32)  # one launch (a no-op cast under float32)
    elif not mask.is_floating_point():
        raise ValueError(f"an attention mask is bool or floating point, not {mask.dtype}")
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    try:
        return mask.expand(z, h, s, t)
    except RuntimeError:
        raise ValueError(f"attention mask of shape {tuple(mask.shape)} does not broadcast to (Z, H, S, T) = "
                         f"{(z, h, s, t)}") from None


# Split-KV decode pays where a decode step's (batch, key/value head) programs are too few to fill the GPU: each
# walks the whole cache alone. Chunks of at least SPLIT_MIN_KEYS keys, as many as bring the programs to about
# SPLIT_TARGET_PROGRAMS.
SPLIT_TARGET_PROGRAMS = 128
SPLIT_MIN_KEYS = 64
SPLIT_MAX_CHUNKS = 64  # the merge's chunk tile (BC): one program reads every chunk's statistics


def decode_split_chunks(z: int, hk: int, t: int) -> int:
    """How many chunks of the KV cache split-KV decode runs for Z x HK programs over T keys: 1 (no split) where the
    programs fill the GPU already or no chunk count divides T into chunks of SPLIT_MIN_KEYS or more. The smallest
    count that brings the programs to SPLIT_TARGET_PROGRAMS: more chunks of fewer key blocks each measured slower
    (Llama's 8 key/value heads on the H100, benchmarks/probes/decode_attention.py: 4096 keys in 16 chunks 11.6 us,
    in 32 of one block each 14.9; 1040 keys flat at 7.5-8.1 us over 10-16 chunks)."""
    want = -(-SPLIT_TARGET_PROGRAMS // (z * hk))
    if want < 2:
        return 1
    for c in range(want, builtins.min(4 * want, t // SPLIT_MIN_KEYS, SPLIT_MAX_CHUNKS) + 1):  # the smallest divisor
        if t % c == 0:
            return c
    return 1


def attention_decode_split(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, out: torch.Tensor,
                           scale: float, part: Policy, merge: Policy, target: str | None = None,
                           chunks: int | None = None) -> int:
    """Split-KV decode into `out` where it pays (decode_split_chunks): attention_decode_part over the cache's
    chunks, then attention_decode_merge; `mask` is mask_operand's (Z, H, 1, T) view. Returns the chunk count it
    ran, or 0 with nothing launched where the split does not pay or the cache or the mask does not view as chunks
    (a layout whose key stride cannot split). `chunks`: run this many instead (a probe's sweep), dividing T."""
    z, h, _, d = q.shape
    t = k.shape[2]
    chunks = decode_split_chunks(z, k.shape[1], t) if chunks is None else chunks
    if chunks < 2:
        return 0
    try:
        kc, vc = k.unflatten(2, (chunks, t // chunks)), v.unflatten(2, (chunks, t // chunks))
        mc = mask.unflatten(3, (chunks, t // chunks))
    except RuntimeError:
        return 0
    acc = torch.empty(z, h, chunks, d, dtype=torch.float32, device=q.device)
    mx = torch.empty(z, h, chunks, dtype=torch.float32, device=q.device)
    den = torch.empty(z, h, chunks, dtype=torch.float32, device=q.device)
    extra = {"target": target} if target else {}
    attention_decode_part(q, kc, vc, mc, acc, mx, den, scale, policy=part, **extra)
    attention_decode_merge(acc, mx, den, out, policy=merge, **extra)
    return chunks


def split_policies(group: int, d: int, has_mask: bool, decode: Policy) -> tuple[Policy, Policy]:
    """attention_decode_part's and attention_decode_merge's policies: the decode kernel's packing, and the key block
    and launch of `decode` (the decode policy the step would run unsplit); the merge reads up to SPLIT_MAX_CHUNKS
    chunks, and a row with no visible key is what `decode`'s SAFE says. The same for every chunk count, so a plan
    proves the policies its decode steps run."""
    bd = builtins.max(16, pow2(d))
    part = Policy.make(BG=builtins.max(16, pow2(group)), BN=decode.const("BN", 64), BD=bd, HAS_MASK=int(has_mask))
    part = replace(part, num_warps=decode.num_warps, num_stages=decode.num_stages)
    return part, Policy.make(BC=SPLIT_MAX_CHUNKS, BD=bd, SAFE=decode.const("SAFE", 1), num_warps=4)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, out: torch.Tensor | None = None,
              policy: Policy | None = None, mask: torch.Tensor | None = None, safe: bool = True) -> torch.Tensor:
    """q (Z, H, S, D), k and v (Z, HK, T, D) with H % HK == 0; `mask` (optional) broadcasts to (Z, H, S, T):
    bool (True keeps) or additive float, applied with the causal mask when both are given. A row with no visible
    key: zero with `safe` (SDPA), NaN without (softmax then a matmul)."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"attention needs q (Z,H,S,D), k=v (Z,HK,T,D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    d = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    q, scale = nonnegative_scale(q, scale)
    if out is None:
        out = torch.empty_like(q)
    m = mask_operand(mask, q, k)
    has_mask = int(mask is not None)
    bd = builtins.max(16, pow2(d))
    group = q.shape[1] // k.shape[1]
    if q.shape[2] == 1 and group <= 64 and not causal:
        # decode: pack the query heads of each key/value group into one tile (causal decode with top-left
        # alignment would see key 0 only, so causal single-token queries take the general kernel)
        bg = builtins.max(16, pow2(group))
        bn = policy.const("BN", 64) if policy is not None else 64
        dec = Policy.make(BG=bg, BN=bn, BD=bd, HAS_MASK=has_mask, SAFE=int(safe))
        if policy is not None:
            dec = replace(dec, num_warps=policy.num_warps, num_stages=policy.num_stages)
        if not attention_decode_split(q, k, v, m, out, scale, *split_policies(group, d, has_mask, dec)):
            attention_decode(q, k, v, m, out, scale, policy=dec)
        return out
    policy = (policy or Policy.make(BM=64, BN=64)).with_consts(BD=bd, CAUSAL=int(causal), HAS_MASK=has_mask,
                                                                SAFE=int(safe))
    attention_fwd(q, k, v, m, out, scale, policy=policy)
    return out
