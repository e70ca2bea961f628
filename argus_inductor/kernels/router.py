"""The MoE router's top-k in one launch: softmax over each token's expert logits, its K largest probabilities
(descending) and their experts, renormalized to sum 1 where the model asks (Mixtral, Qwen's norm_topk_prob).

Eager and Inductor run this as four to six launches a layer (softmax, top-k's gather and sort, the
renormalization, casts), each a few microseconds at decode. Here one program takes BT tokens, a whole row of
E <= BE experts each, and picks the K experts by K rounds of "largest probability, lowest expert on a tie".
The op returns one float32 tensor (T, 2K): the K weights, then the K experts as floats (exact below 2^24), which
the matcher splits back into the weights and int64 indices the graph's users read.
"""
from __future__ import annotations

import builtins

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    assume,
    cdiv,
    constexpr,
    exp,
    float32,
    inf,
    load,
    max,
    min,
    store,
    sum,
    tag_of,
    tile_grid,
    where,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .launch import check_target, pow2, resolve_target
from .reduce import pick_kernel

MAX_EXPERTS = 256  # a row of logits is one tile
MAX_TOP_K = 16


@kernel
def router_topk_rows(X: Tensor("T", "E"), Y: Tensor("T", "K2", dtype=float32), BT: constexpr = 16,
                     BE: constexpr = 8, K: constexpr = 2, BK: constexpr = 2, RENORM: constexpr = 1):
    """Y[t, :K] = the K largest of softmax(X[t, :]) in descending order (the lower expert first on a tie), divided by
    their sum when RENORM; Y[t, K:2K] = their experts."""
    (pt,) = tile_grid(cdiv(T, BT))
    assume((E <= BE) & (K <= E) & (K <= BK) & (K2 == 2 * K))
    rt = pt * BT + arange(BT)
    re = arange(BE)
    rk = arange(BK)
    x = load(X[rt, re], other=-inf).to(float32)
    m = max(x, 1)
    p = exp(x - m[:, None])
    den = sum(p, 1)
    assert_tag((tag_of(den, "sum(E).lo") <= 0) & (tag_of(den, "sum(E).hi") >= E),
               "each token's softmax sums all of its experts")
    p = where(re[None, :] < E, p / den[:, None], -inf)  # a lane past the experts never takes part in a max
    vals = zeros((BT, BK), float32)
    ids = zeros((BT, BK), float32)
    for j in range(K):
        best = max(p, 1)
        first = min(where(p == best[:, None], re[None, :], BE), 1)
        vals = where(rk[None, :] == j, best[:, None], vals)
        ids = where(rk[None, :] == j, first.to(float32)[:, None], ids)
        p = where(re[None, :] == first[:, None], -inf, p)  # a picked expert never wins a max again
    if RENORM == 1:
        vals = vals / sum(vals, 1)[:, None]
    store(Y[rt, rk], vals, mask=(rk < K)[None, :])
    store(Y[rt, K + rk], ids, mask=(rk < K)[None, :])


KERNELS = (router_topk_rows,)


def router_policy(t: int, e: int, k: int, renorm: bool, target: str) -> Policy:
    """One program a few tokens, a whole row of experts each."""
    check_target(target)
    be = builtins.max(2, pow2(e))
    bt = 4 if target == "interpret" else 16 if be <= 64 else 4
    return Policy.make(BT=bt, BE=be, K=k, BK=builtins.max(2, pow2(k)), RENORM=int(renorm), num_warps=4)


def router_topk(logits: torch.Tensor, k: int, renorm: bool, *, policies: dict[str, Policy] | None = None,
                kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """(T, 2K) float32: the top-k softmax weights of each row of `logits` (T, E), renormalized when `renorm`, then
    their experts."""
    if logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"router_topk takes (tokens, experts) float logits, got {tuple(logits.shape)} "
                         f"{logits.dtype}")
    t, e = logits.shape
    if not 1 <= k <= builtins.min(e, MAX_TOP_K) or e > MAX_EXPERTS:
        raise ValueError(f"router_topk takes 1 <= k <= min(experts, {MAX_TOP_K}) and at most {MAX_EXPERTS} "
                         f"experts, got k={k}, {e} experts")
    target = resolve_target(logits, target)
    y = torch.empty(t, 2 * k, dtype=torch.float32, device=logits.device)
    if t:
        pol = (policies or {}).get("router_topk_rows") or router_policy(t, e, k, renorm, target)
        if pol.const("BE", e) < e or pol.const("BK", k) < k:  # a row of experts is one tile, the top k another
            raise ValueError(f"router_topk's policy has BE={pol.const('BE')}, BK={pol.const('BK')} for {e} experts "
                             f"and k={k}")
        pick_kernel("router_topk_rows", router_topk_rows, kernels)(logits, y, policy=pol, target=target)
    return y


def router_shapes(logits: torch.Tensor, k: int) -> dict[str, int]:
    """router_topk_rows' shape symbols for (T, E) logits and top k."""
    return {"T": logits.shape[0], "E": logits.shape[1], "K2": 2 * k}


def router_reference(logits: torch.Tensor, k: int, renorm: bool) -> torch.Tensor:
    """torch's softmax, topk and renormalization, packed as router_topk packs them."""
    vals, ids = torch.topk(torch.softmax(logits.float(), -1), k, dim=-1)
    if renorm:
        vals = vals / vals.sum(-1, keepdim=True)
    return torch.cat([vals, ids.to(torch.float32)], -1)


__all__ = ["router_topk_rows", "router_topk", "router_reference", "router_policy", "router_shapes", "KERNELS"]
