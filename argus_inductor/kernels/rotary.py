"""The rotary embedding in two ops: its cos and sin tables in one launch, computed once per (position, frequency),
and a decode step's rotation of q and k with the k/v cache write in one launch.

transformers' rotary embedding computes `emb = cat(freqs, freqs)` (positions x frequencies, float32), then
`emb.cos()` and `emb.sin()`, which every q and k rotation of every layer multiplies in. Inductor inlines such a
cheap producer into its consumers unless more than `realize_reads_threshold` kernels read it. In a model of a few
layers nothing reads it that often, so every q and k element recomputes two float32 transcendentals: the q
rotation took 24 us a layer at 2048 Mixtral tokens on the H100 (cos and sin, not the bytes) against about 11
for its loads and stores. Computed here once, the tables are a buffer Inductor's consumers read.

The op returns both tables packed in one float32 tensor (2, *emb.shape): cos first, then sin. The graph's own
scaling and dtype cast stay after it, in Inductor's kernels.

A decode step of one position (`rope_cache`) rotates q and k (`x * cos + rotate_half(x) * sin`) and writes the
rotated k and the v into the layer's static cache at the step's position (transformers' `keys.index_copy_(2,
position, k)` and the values' alike). Inductor makes three launches of it, about 2.7, 2.4 and 1.0 us a layer on
the H100 at Llama-3-8B's heads (benchmarks/results/NOTES.md, "End to end"): the q rotation, the k rotation with its
write, the v write. One launch does all three here, a program a head.
"""
from __future__ import annotations

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assume,
    cdiv,
    constexpr,
    cos,
    float32,
    int64,
    load,
    sin,
    store,
    tag,
    tile_grid,
    where,
)
from ..dsl.runtime import Kernel, kernel
from .launch import check_target, pow2, resolve_target
from .reduce import pick_kernel

MAX_WIDTH = 1024  # a table row is one tile (a rotary dimension of at most this many frequencies)


@kernel
def rotary_table_rows(E: Tensor("R", "D"), Y: Tensor("R2", "D", dtype=float32), BR: constexpr = 16,
                      BD: constexpr = 128):
    """Y[r] = cos(E[r]) and Y[R + r] = sin(E[r]), in float32, for each row r of E."""
    (pr,) = tile_grid(cdiv(R, BR))
    assume((D <= BD) & (R2 == 2 * R))
    rr = pr * BR + arange(BR)
    rd = arange(BD)
    live = (rr < R)[:, None] & (rd < D)[None, :]  # past R, a cos row would land on the sin rows
    e = load(E[rr, rd], mask=live, other=0.0).to(float32)
    store(Y[rr, rd], cos(e), mask=live)
    store(Y[R + rr, rd], sin(e), mask=live)


@kernel
def rope_cache_write(Q: Tensor("Z", "H", "S", "D"), K: Tensor("Z", "HK", "S", "D"), V: Tensor("Z", "HK", "S", "D"),
                     Cos: Tensor("Z", "S", "D"), Sin: Tensor("Z", "S", "D"), KC: Tensor("Z", "HK", "L", "D"),
                     VC: Tensor("Z", "HK", "L", "D"), Pos: Tensor("S", dtype=int64), QO: Tensor("Z", "H", "S", "D"),
                     BD: constexpr = 128):
    """One decode position: QO = Q * Cos + rotate_half(Q) * Sin, and K rotated alike and V written into the caches
    KC and VC at position Pos[0] (rotate_half(x) = cat(-x[D/2:], x[:D/2])). One program a head of a batch row: the
    H query heads' rotate q, the HK key/value heads' after them rotate k and write k and v."""
    z, h = tile_grid(Z, H + HK)
    assume((S == 1) & (D <= BD) & (D % 2 == 0))
    rd = arange(BD)
    half = D // 2
    first = rd < half
    partner = where(first, rd + half, rd - half)  # the element rotate_half puts at rd
    c = load(Cos[z, 0, rd]).to(float32)
    sn = load(Sin[z, 0, rd]).to(float32)
    sn = where(first, -sn, sn)
    if h < H:
        # rotate_half's element at rd is the partner's: tagged as rd's, so the store's coordinate check holds it
        # to rd's place like the other term
        q_half = tag(load(Q[z, h, 0, partner]), D=rd)
        store(QO[z, h, 0, rd], load(Q[z, h, 0, rd]).to(float32) * c + q_half.to(float32) * sn)
    else:
        hk = h - H
        p = load(Pos[0])
        inside = (p >= 0) & (p < L)  # a position outside the cache writes nothing (index_copy_ would raise)
        k_half = tag(load(K[z, hk, 0, partner]), D=rd)
        store(KC[z, hk, p, rd], load(K[z, hk, 0, rd]).to(float32) * c + k_half.to(float32) * sn, mask=inside)
        store(VC[z, hk, p, rd], load(V[z, hk, 0, rd]), mask=inside)


KERNELS = (rotary_table_rows,)
CACHE_KERNELS = (rope_cache_write,)
MAX_HEADS = 1024  # query heads a decode position may have (a program each)


def rotary_policy(rows: int, width: int, target: str) -> Policy:
    """A few rows a program, a whole row each: 16 rows of 128 on a GPU (2048 positions: 128 programs)."""
    check_target(target)
    bd = max(2, pow2(width))
    br = 4 if target == "interpret" else max(1, min(16, 2048 // bd))
    return Policy.make(BR=br, BD=bd, num_warps=4)


def table_shapes(emb: torch.Tensor) -> dict[str, int]:
    """rotary_table_rows' shape symbols for the angles `emb` (rows of its last dim)."""
    width = emb.shape[-1]
    rows = emb.numel() // max(width, 1)
    return {"R": rows, "D": width, "R2": 2 * rows}


def rotary_table(emb: torch.Tensor, *, policies: dict[str, Policy] | None = None,
                 kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """(2, *emb.shape) float32: cos(emb), then sin(emb)."""
    if emb.dim() < 1 or not emb.is_floating_point():
        raise ValueError(f"rotary_table takes a float tensor of angles, got {tuple(emb.shape)} {emb.dtype}")
    width = emb.shape[-1]
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"rotary_table takes rows of 1 to {MAX_WIDTH} angles, got {width}")
    target = resolve_target(emb, target)
    x = emb.reshape(-1, width)
    y = torch.empty(2 * x.shape[0], width, dtype=torch.float32, device=emb.device)
    if x.shape[0]:
        pol = (policies or {}).get("rotary_table_rows") or rotary_policy(x.shape[0], width, target)
        if pol.const("BD", width) < width:  # the kernel writes one tile a row: a narrower tile leaves it half done
            raise ValueError(f"rotary_table's policy has BD={pol.const('BD')} for rows of {width} angles")
        pick_kernel("rotary_table_rows", rotary_table_rows, kernels)(x, y, policy=pol, target=target)
    return y.view(2, *emb.shape)


def rotary_reference(emb: torch.Tensor) -> torch.Tensor:
    """torch's cos and sin of `emb` in float32, packed as rotary_table packs them."""
    e = emb.float()
    return torch.stack([e.cos(), e.sin()])


def rope_cache_policy(heads: int, kv_heads: int, width: int, target: str) -> Policy:
    """A program a head, the head's whole width one tile; one warp up to 128 elements (four each), more beyond."""
    check_target(target)
    bd = max(2, pow2(width))
    return Policy.make(BD=bd, num_warps=max(1, min(4, bd // 128)))


def rope_cache_shapes(q: torch.Tensor, k: torch.Tensor, keys: torch.Tensor) -> dict[str, int]:
    """rope_cache_write's shape symbols for q (Z, H, S, D), k (Z, HK, S, D) and a cache (Z, HK, L, D)."""
    z, h, s, d = q.shape
    return {"Z": z, "H": h, "S": s, "D": d, "HK": k.shape[1], "L": keys.shape[2]}


def rope_cache_problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       keys: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> str:
    """Why rope_cache does not take these operands ("" where it does): q (Z, H, 1, D), k and v (Z, HK, 1, D),
    cos and sin broadcasting to (Z, 1, 1, D), caches (Z, HK, L, D) of the rotated k's and v's dtypes, one int64
    position, D even."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or keys.dim() != 4 or values.dim() != 4:
        return "q, k, v and the caches must be 4-D (batch, heads, positions, head dim)"
    z, h, s, d = q.shape
    hk = k.shape[1]
    if s != 1 or d % 2 or not 1 <= h <= MAX_HEADS or not 1 <= d <= MAX_WIDTH:
        return (f"q must be (batch, heads <= {MAX_HEADS}, 1 position, even head dim <= {MAX_WIDTH}), "
                f"got {tuple(q.shape)}")
    if tuple(k.shape) != (z, hk, 1, d) or tuple(v.shape) != (z, hk, 1, d) or hk > h:
        return f"k and v must be (batch, kv heads, 1, head dim) like q {tuple(q.shape)}, got {tuple(k.shape)}, " \
               f"{tuple(v.shape)}"
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 4 or t.shape[1] != 1 or t.shape[2] != 1 or t.shape[3] != d or t.shape[0] not in (1, z):
            return f"{name} must broadcast to ({z}, 1, 1, {d}), got {tuple(t.shape)}"
    if keys.shape != values.shape or keys.shape[:2] != (z, hk) or keys.shape[3] != d:
        return f"the caches must be ({z}, {hk}, length, {d}), got {tuple(keys.shape)} and {tuple(values.shape)}"
    if keys.dtype != torch.promote_types(k.dtype, cos.dtype) or values.dtype != v.dtype:
        return f"the caches' dtypes ({keys.dtype}, {values.dtype}) must be the rotated k's and the v's"
    if index.dim() != 1 or index.numel() != 1 or index.dtype != torch.int64:
        return f"the position must be one int64, got {tuple(index.shape)} {index.dtype}"
    if len({t.device for t in (q, k, v, cos, sin, keys, values, index)}) != 1:
        return "every operand must be on one device"
    return ""


def rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               keys: torch.Tensor, values: torch.Tensor, index: torch.Tensor, *,
               policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
               target: str | None = None) -> torch.Tensor:
    """q rotated (in q's layout, dtype promoted with cos's as torch's product would), after writing k rotated into
    `keys` and v into `values` at position index[0] (see rope_cache_problem for the shapes)."""
    why = rope_cache_problem(q, k, v, cos, sin, keys, values, index)
    if why:
        raise ValueError(f"rope_cache: {why}")
    target = resolve_target(q, target)
    z, h, _, d = q.shape
    out = torch.empty_like(q, dtype=torch.promote_types(q.dtype, cos.dtype))
    if z:
        pol = (policies or {}).get("rope_cache_write") or rope_cache_policy(h, k.shape[1], d, target)
        if pol.const("BD", d) < d:  # a head is one tile: a narrower tile leaves part of each head unwritten
            raise ValueError(f"rope_cache's policy has BD={pol.const('BD')} for heads of {d}")
        c = cos.expand(z, 1, 1, d)[:, 0]
        sn = sin.expand(z, 1, 1, d)[:, 0]
        pick_kernel("rope_cache_write", rope_cache_write, kernels)(q, k, v, c, sn, keys, values, index, out,
                                                                   policy=pol, target=target)
    return out


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cache_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         keys: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """What transformers' decode step does, in torch: the caches written in place, q rotated returned (in
    rope_cache's layout). The rotation is evaluated in float32 (float64 for float64 operands) and rounded once, as
    the kernel and Inductor's fused kernels do; eager bf16 rounds after each product and the sum, up to 3e-3 away
    (the tuner's 2e-3 tolerance once rejected the kernel against that chain of roundings)."""
    wide = torch.promote_types(torch.promote_types(q.dtype, cos.dtype), torch.float32)
    c, s = cos.to(wide), sin.to(wide)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x = x.to(wide)
        return x * c + rotate_half(x) * s

    keys.index_copy_(2, index, rotate(k).to(keys.dtype))
    values.index_copy_(2, index, v)
    return torch.empty_like(q, dtype=torch.promote_types(q.dtype, cos.dtype)).copy_(rotate(q))


__all__ = ["rotary_table_rows", "rotary_table", "rotary_reference", "rotary_policy", "table_shapes", "KERNELS",
           "MAX_WIDTH", "rope_cache_write", "rope_cache", "rope_cache_reference", "rope_cache_policy",
           "rope_cache_shapes", "rope_cache_problem", "CACHE_KERNELS"]
