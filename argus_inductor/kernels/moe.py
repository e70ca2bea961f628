"""The MoE expert step: rows sorted and padded per expert, grouped gate-up GEMM with SiLU(gate)*up,
grouped down GEMM, and a scatter-add back to token order weighted by the routing weights."""
from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    assume,
    atomic_add,
    cdiv,
    constexpr,
    cumsum,
    float32,
    int32,
    load,
    mma,
    padding_lanes,
    silu,
    store,
    sum,
    tag,
    tag_of,
    tile_grid,
    trans,
    where,
    zeros,
)
from ..dsl.runtime import kernel
from .launch import pow2


@kernel
def moe_gate_up(X: Tensor("T", "HD"), W1: Tensor("E", "I2", "HD"), sorted_ids: Tensor("P", dtype=int32),
                block_expert: Tensor("NB", dtype=int32), Hout: Tensor("P", "I"),
                TOPK: constexpr = 2, BM: constexpr = 16, BN: constexpr = 64, BK: constexpr = 32,
                GATHERED: constexpr = 0):
    """Hout[p] = silu(x W_gate[e]^T) * (x W_up[e]^T) for the token of sorted pair p, e its block's expert.

    W1[e] stacks the gate rows [0, I) over the up rows [I, 2I). Padding pairs (id >= T*TOPK) read
    nothing and produce zeros; blocks whose expert is E (beyond the last real block) do nothing.
    GATHERED=1: X holds the routed rows already in sorted order (moe_gather: row p is pair p's token row, T = P),
    read as dense tiles (through tensor descriptors where the policy asks for them) instead of row by row.
    """
    pb, pn = tile_grid(NB, cdiv(I, BN))
    e = load(block_expert[pb])
    assume((e >= 0) & (e <= E))
    if e < E:
        rp = pb * BM + arange(BM)
        pair = load(sorted_ids[rp])
        tok = pair // TOPK
        rn = pn * BN + arange(BN)
        gate = zeros((BM, BN), float32)
        up = zeros((BM, BN), float32)
        for k in range(0, HD, BK):
            rk = k + arange(BK)
            if GATHERED == 1:
                x = load(X[rp, rk])
                assert_tag(tag_of(x, "T") == rp[:, None], "each sorted row reads its own gathered slot")
            else:
                x = load(X[tok, rk])
            tag(x, expert=load(block_expert[rp // BM])[:, None])
            wg = load(W1[e, rn, rk], mask=(rn < I)[:, None])
            wu = load(W1[e, rn + I, rk])
            assert_tag(tag_of(wu, "I2") == tag_of(wg, "I2") + I, "up rows sit I below their gate rows")
            gate = mma(x, trans(wg), gate)
            up = mma(x, trans(wu), up)
            assert_tag(tag_of(gate, "expert") == tag_of(gate, "E"), "each row meets its own expert's weights")
        h = silu(gate) * up
        padding_lanes(h, ((tok < 0) | (tok >= T))[:, None])  # a padding pair's row: zeros, never read as a result
        store(Hout[rp, rn], h)


@kernel
def moe_gather(X: Tensor("T", "HD"), sorted_ids: Tensor("P", dtype=int32), Xs: Tensor("P", "HD"),
               TOPK: constexpr = 2, BM: constexpr = 16, BK: constexpr = 128):
    """Xs[p] = X[token of sorted pair p], zeros for padding pairs: the routed rows once in expert order, so that
    the grouped gate-up GEMM (moe_gate_up with GATHERED=1) reads them as dense tiles."""
    pm, pk = tile_grid(cdiv(P, BM), cdiv(HD, BK))
    rp = pm * BM + arange(BM)
    pair = load(sorted_ids[rp])
    rk = pk * BK + arange(BK)
    x = load(X[pair // TOPK, rk])
    assert_tag(tag_of(x, "T") == (load(sorted_ids[rp]) // TOPK)[:, None], "each slot holds its own pair's token row")
    store(Xs[rp, rk], x)


@kernel
def moe_down(Hin: Tensor("P", "I"), W2: Tensor("E", "HD", "I"), sorted_ids: Tensor("P", dtype=int32),
             block_expert: Tensor("NB", dtype=int32), topk_weights: Tensor("TK"), Y: Tensor("T", "HD"),
             TOPK: constexpr = 2, BM: constexpr = 16, BN: constexpr = 64, BK: constexpr = 32):
    """Y[token] += routing_weight * (Hin[p] W2[e]^T), scattered back to token order (Y is float32)."""
    pb, pn = tile_grid(NB, cdiv(HD, BN))
    e = load(block_expert[pb])
    assume((e >= 0) & (e <= E))
    if e < E:
        rp = pb * BM + arange(BM)
        pair = load(sorted_ids[rp])
        tok = pair // TOPK
        rn = pn * BN + arange(BN)
        acc = zeros((BM, BN), float32)
        for k in range(0, I, BK):
            rk = k + arange(BK)
            hrow = load(Hin[rp, rk])
            tag(hrow, expert=load(block_expert[rp // BM])[:, None], pair=pair[:, None])
            acc = mma(hrow, trans(load(W2[e, rn, rk])), acc)
            assert_tag(tag_of(acc, "expert") == tag_of(acc, "E"), "each row meets its own expert's weights")
        w = load(topk_weights[pair]).to(float32)
        y = acc * w[:, None]
        assert_tag(tag_of(y, "TK") == tag_of(y, "pair"), "each row is scaled by its own routing weight")
        atomic_add(Y[tok, rn], y)


@kernel
def moe_route(topk_ids: Tensor("N"), sorted_ids: Tensor("S", dtype=int32),
              block_expert: Tensor("NB", dtype=int32), E: int, BM: constexpr = 16, BN: constexpr = 16,
              BE: constexpr = 16, BS: constexpr = 64, BB: constexpr = 4):
    """moe_align_block in one launch (E <= BE): each program fills BS slots of sorted_ids and the BB = BS / BM
    blocks of block_expert they make up, by gathering rather than scattering (slot s holds the pair whose sorted
    position is s, or the padding id N), so every output element is written once.

    A pair's sorted position is its expert's first row (the blocks of the experts before it, times BM) plus how
    many earlier pairs chose the same expert: the order a stable sort by expert gives. The pairs x experts table
    is built BN pairs at a time, in two passes: the experts' counts, then each pair's position (the same expert's
    pairs of the chunks before it carried in `seen`). The ids are floats (a router's packed output), converted to
    int32 in the program."""
    (ps,) = tile_grid(cdiv(S, BS))
    assume((E <= BE) & (BS == BB * BM) & (S == NB * BM))
    re = arange(BE)
    counts = zeros((BE,), int32)
    for n0 in range(0, N, BN):
        rn = n0 + arange(BN)
        valid = rn < N
        onehot = (load(topk_ids[rn], mask=valid, other=-1).to(int32)[:, None] == re[None, :]) & valid[:, None]
        counts = counts + sum(onehot.to(int32), 0)
    blocks = (counts + BM - 1) // BM
    block_end = cumsum(blocks, 0)
    row_start = (block_end - blocks) * BM
    rs = ps * BS + arange(BS)
    owner = zeros((BS,), int32)  # 1 + the pair sorted into each slot, 0 for a padding slot
    seen = zeros((BE,), int32)
    for n0 in range(0, N, BN):
        rn = n0 + arange(BN)
        valid = rn < N
        onehot = (load(topk_ids[rn], mask=valid, other=-1).to(int32)[:, None] == re[None, :]) & valid[:, None]
        hits = onehot.to(int32)
        earlier = cumsum(hits, 0) - hits + seen[None, :]
        pos = sum(where(onehot, earlier + row_start[None, :], 0), 1)
        match = (pos[None, :] == rs[:, None]) & valid[None, :]
        owner = owner + sum(where(match, rn[None, :] + 1, 0), 1)
        seen = seen + sum(hits, 0)
    store(sorted_ids[rs], where(owner > 0, owner - 1, N))
    rb = ps * BB + arange(BB)
    before = (block_end[None, :] <= rb[:, None]) & (re[None, :] < E)
    store(block_expert[rb], sum(before.to(int32), 1))


@kernel
def moe_count(topk_ids: Tensor("N", dtype=int32), chunk_counts: Tensor("C", "BEC", dtype=int32), E: int,
              BN: constexpr = 256, BE: constexpr = 16):
    """The first pass of a routing too large for moe_route: how many of chunk c's BN pairs chose each expert
    (chunk_counts[c, e]; C = cdiv(N, BN), E <= BE = BEC)."""
    (pc,) = tile_grid(C)
    assume((E <= BE) & (BEC == BE))
    rn = pc * BN + arange(BN)
    valid = rn < N
    re = arange(BE)
    onehot = (load(topk_ids[rn], mask=valid, other=-1)[:, None] == re[None, :]) & valid[:, None]
    store(chunk_counts[pc, re], sum(onehot.to(int32), 0))


@kernel
def moe_place(topk_ids: Tensor("N", dtype=int32), chunk_counts: Tensor("C", "BEC", dtype=int32),
              sorted_ids: Tensor("S", dtype=int32), block_expert: Tensor("NB", dtype=int32), E: int,
              BM: constexpr = 128, BN: constexpr = 256, BE: constexpr = 16, BC: constexpr = 16, BS: constexpr = 16):
    """The second pass: one program BS of a block's BM slots fills them (and the block's first program the block's
    expert), by gathering (slot s holds the pair whose sorted position is s, or the padding id N), so every output
    element is written once.

    The experts' totals, and so each expert's blocks, come from moe_count's table; a block of expert e holds e's
    pairs of ranks r0 .. r0 + BM - 1 in pair order, and the program of slots j .. j + BS - 1 of it reads only the
    chunks holding ranks r0 + j .. r0 + j + BS - 1 (a few, found from the table's column e), not every pair as
    moe_route's programs do. Its slots x pairs match table is BS x BN: a whole block's (BM = 128 slots against
    chunks of 256 pairs) took 40 us a layer of Mixtral's prefill on the H100, one program a block walking several
    chunks in turn."""
    pb, pj = tile_grid(NB, BM // BS)
    assume((E <= BE) & (BEC == BE) & (S == NB * BM) & (C <= BC) & (C * BN >= N) & (C * BN < N + BN) & (BM % BS == 0))
    re = arange(BE)
    rc = arange(BC)
    table = load(chunk_counts[rc, re], mask=(rc < C)[:, None], other=0)
    blocks = (sum(table, 0) + BM - 1) // BM
    block_end = cumsum(blocks, 0)
    done = (block_end <= pb) & (re < E)  # the experts whose blocks end before this one
    e = sum(done.to(int32), 0)  # E for the padding blocks after the last expert's
    r0 = (pb - sum(where(re == e, block_end - blocks, 0), 0)) * BM + pj * BS  # the rank of the program's 1st slot
    col = sum(where(re[None, :] == e, table, 0), 1)  # expert e's pairs in each chunk
    upto = cumsum(col, 0)
    passed = upto <= r0  # the chunks wholly before rank r0
    reach = (upto - col < r0 + BS) & (rc < C)  # the chunks starting before rank r0 + BS
    seen = sum(where(passed, col, 0), 0)  # e's pairs in the chunks wholly before rank r0
    rs = arange(BS)
    owner = zeros((BS,), int32)  # 1 + the pair sorted into each slot, 0 for a padding slot
    for c in range(sum(passed.to(int32), 0), sum(reach.to(int32), 0)):
        rn = c * BN + arange(BN)
        valid = rn < N
        hit = (load(topk_ids[rn], mask=valid, other=-1) == e) & valid
        hits = hit.to(int32)
        rank = cumsum(hits, 0) - hits + seen
        match = (rank[None, :] == r0 + rs[:, None]) & hit[None, :]
        owner = owner + sum(where(match, rn[None, :] + 1, 0), 1)
        seen = seen + sum(hits, 0)
    store(sorted_ids[pb * BM + pj * BS + rs], where(owner > 0, owner - 1, N))
    rb = pb + arange(1)
    store(block_expert[rb], zeros((1,), int32) + e, mask=(arange(1) + pj) == 0)  # by the block's first program


def moe_align_counted(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                      policy: Policy | None = None, slots: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_align_block's result from two DSL launches (moe_count, then moe_place) instead of a few dozen torch
    launches, for up to 256 experts and COUNTED_ROUTE_MAX_CHUNKS chunks of pairs. Same layout, order, padding.
    `slots`: moe_place's slots a program (default PLACE_SLOTS), a power of two; more than block_m takes block_m."""
    flat = topk_ids.reshape(-1).to(torch.int32)
    n = flat.numel()
    if num_experts > 256:
        raise ValueError(f"moe_align_counted takes up to 256 experts, got {num_experts}")
    bn, chunks = _route_chunks(n, num_experts)
    if chunks > COUNTED_ROUTE_MAX_CHUNKS:
        raise ValueError(f"{n} pairs of {num_experts} experts make {chunks} chunks of {bn} pairs, more than "
                         f"moe_align_counted's {COUNTED_ROUTE_MAX_CHUNKS}")
    nb = route_blocks(n, num_experts, block_m)
    be = _experts_tile(num_experts)
    table = torch.empty(chunks, be, dtype=torch.int32, device=flat.device)
    sorted_ids = torch.empty(nb * block_m, dtype=torch.int32, device=flat.device)
    block_expert = torch.empty(nb, dtype=torch.int32, device=flat.device)
    bs = builtins.min(block_m, PLACE_SLOTS if slots is None else slots)
    if bs < 1 or bs & (bs - 1) or block_m % bs:
        raise ValueError(f"moe_place's slots a program must be a power of two dividing BM={block_m}, got {bs}")
    pol = (policy or Policy.make(num_warps=8 if bs * bn >= 8192 else 4)).with_consts(
        BM=block_m, BN=bn, BE=be, BC=pow2(chunks), BS=bs)
    moe_count(flat, table, num_experts, policy=Policy.make(num_warps=4).with_consts(BN=bn, BE=be))
    moe_place(flat, table, sorted_ids, block_expert, num_experts, policy=pol)
    return sorted_ids, block_expert


# moe_place's slots a program (BS): a block's slots split among BM / BS programs. H100 (`sweep.py --ops route`,
# sweep-route-place-slots-h100-2026-11-24.json; count + place, us, at 128, 64, 32 and 16 slots a program): 2048 tokens
# of 8 experts, top 2 29.8 / 14.1 / 9.5 / 7.8; 4096 tokens 30.1 / 15.3 / 10.9 / 8.6; 512 tokens of 60, top 4 33.2 /
# 21.0 / 19.4 / 12.1
PLACE_SLOTS = 16

# moe_place reads its whole chunks x experts table: at most this many chunks of pairs (_route_chunks makes the
# chunks longer to keep the table within 2**14 cells)
COUNTED_ROUTE_MAX_CHUNKS = 256


def route_blocks(pairs: int, num_experts: int, block_m: int) -> int:
    """NB, the blocks of block_m slots any routing of `pairs` pairs over `num_experts` experts fills (each expert's
    run padded up to whole blocks): the length of block_expert, and sorted_ids is NB * block_m."""
    return builtins.min(num_experts, pairs) + pairs // block_m


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _route_chunks(pairs: int, num_experts: int) -> tuple[int, int]:
    """(pairs a chunk, chunks) of a counted routing: chunks of 256 pairs, larger where the experts x chunks table
    would pass 2**14 cells."""
    bn = 256
    while _cdiv(pairs, bn) * _experts_tile(num_experts) > 1 << 14:
        bn *= 2
    return bn, _cdiv(pairs, bn)


def moe_align_fused(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                    policy: Policy | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_align_block's result from one DSL kernel (moe_route) instead of a few dozen torch launches, for up to 256
    experts. Same layout, same order, same padding. Every program reads all the pairs twice, so the work grows with
    pairs x slots: `moe_align` keeps it to routings of at most FUSED_ROUTE_MAX_CELLS pairs x experts. moe_route reads
    the ids as floats (whole numbers below 256, exact in any float dtype): a router's packed float32 ids go in as
    they are, with no cast launched before it; integer ids are cast once, as they were to int32 before."""
    flat = topk_ids.reshape(-1)
    if not flat.is_floating_point():
        flat = flat.to(torch.float32)
    n = flat.numel()
    if num_experts > 256:
        raise ValueError(f"moe_align_fused takes up to 256 experts, got {num_experts}")
    nb = route_blocks(n, num_experts, block_m)
    sorted_ids = torch.empty(nb * block_m, dtype=torch.int32, device=flat.device)
    block_expert = torch.empty(nb, dtype=torch.int32, device=flat.device)
    bs = builtins.max(block_m, 64)
    bb = bs // block_m
    be = _experts_tile(num_experts)
    # a chunk of pairs at a time: its pairs x experts and slots x pairs tables stay a few thousand elements
    bn = builtins.min(builtins.max(16, pow2(n)), builtins.max(16, 16384 // be), builtins.max(16, 8192 // bs))
    pol = (policy or Policy.make(num_warps=4 if n <= 256 else 8)).with_consts(BM=block_m, BN=bn, BE=be, BS=bs, BB=bb)
    moe_route(flat, sorted_ids, block_expert, num_experts, policy=pol)
    return sorted_ids, block_expert


# Which routing sort moe_align runs, by pairs x experts (experts rounded up to a power of two, at least 16): up to
# FUSED_ROUTE_MAX_CELLS one moe_route launch; up to COUNTED_ROUTE_MAX_CELLS moe_count + moe_place; beyond, the
# torch ops of moe_align_block. H100, `sweep.py --ops route` (sweep-route-counted-h100-2026-11-24.json; us, torch
# ops / moe_route / count + place):
# - decode sizes (up to 128 pairs): 44-48 / 3.3-7.9 / 5.1-6.9; moe_route wins up to 4K cells, the two launches at 16K;
# - 512 tokens of 8 experts (16K cells): 74 / 37 / 22;
# - 2048 and 4096 tokens of 8 experts (64K, 128K cells): 82 / 140 / 30 and 125 / 275 / 30;
# - 512 tokens of 60 experts, top 4 (128K cells): 78 / 103 / 33;
# - 4096 tokens of 60 experts (1M cells) and 2048 tokens of 256 experts, top 8 (4M): 127 / 1549 / 160 and
#   129 / 2916 / 429: a block of one of many experts holds few pairs a chunk, so moe_place reads many chunks.
# With moe_place's blocks split among programs of PLACE_SLOTS slots (session 20, sweep-route-place-slots-h100-
# 2026-11-24.json, at 32 slots a program): 2048 / 4096 tokens of 8 experts 80 / 9.5 and 122 / 10.9; 4096 tokens of
# 60 experts, top 4 126 / 42; 2048 tokens of 256 experts, top 8 128 / 149: the two launches now win up to 1M cells.
FUSED_ROUTE_MAX_CELLS = 1 << 13
COUNTED_ROUTE_MAX_CELLS = 1 << 20
_FUSED_ROUTE_FAILED: list[str] = []


def _experts_tile(num_experts: int) -> int:
    """moe_route's BE: the experts rounded up to a power of two, at least 16."""
    return builtins.max(16, pow2(num_experts))


def fused_route_takes(pairs: int, num_experts: int) -> bool:
    """Whether moe_align sorts a routing of `pairs` (token, k) pairs with moe_route (FUSED_ROUTE_MAX_CELLS)."""
    return 0 < pairs and num_experts <= 256 and pairs * _experts_tile(num_experts) <= FUSED_ROUTE_MAX_CELLS


def counted_route_takes(pairs: int, num_experts: int) -> bool:
    """Whether moe_align sorts a routing of `pairs` pairs with moe_count + moe_place: one too large for moe_route,
    of at most COUNTED_ROUTE_MAX_CELLS pairs x experts (and so few enough chunks for moe_place's table)."""
    return (0 < pairs and num_experts <= 256 and not fused_route_takes(pairs, num_experts)
            and pairs * _experts_tile(num_experts) <= COUNTED_ROUTE_MAX_CELLS
            and _route_chunks(pairs, num_experts)[1] <= COUNTED_ROUTE_MAX_CHUNKS)


def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """sorted_ids and block_expert as moe_align_block defines them: one moe_route launch for routings of at most
    FUSED_ROUTE_MAX_CELLS pairs x experts (and 256 experts), moe_count + moe_place for larger ones, the torch ops
    beyond those or where a routing kernel failed once in this process (said once, on the log)."""
    n = topk_ids.numel()
    if not _FUSED_ROUTE_FAILED:
        try:
            if fused_route_takes(n, num_experts):
                return moe_align_fused(topk_ids, num_experts, block_m)
            if counted_route_takes(n, num_experts):
                return moe_align_counted(topk_ids, num_experts, block_m)
        except Exception as e:  # a kernel that cannot launch here must not take the MoE op down with it
            import logging

            _FUSED_ROUTE_FAILED.append(f"{type(e).__name__}: {e}")
            logging.getLogger("argus_inductor").warning("argus: a MoE routing kernel failed (%s); sorting with torch "
                                                        "ops from now on", _FUSED_ROUTE_FAILED[0])
    return moe_align_block(topk_ids, num_experts, block_m)


def moe_align_block(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort (token, k) pairs by expert and pad each expert's run to a multiple of block_m, on the device
    and without a host synchronisation (so it can be captured in a CUDA graph).

    Returns sorted_ids (NB*block_m,) int32 of pair ids t*topk + j, padding = T*topk, and block_expert (NB,)
    int32, the expert of each block; NB = min(E, n) + n // block_m bounds the blocks any routing needs,
    and blocks past the last real one carry expert id E (the kernels skip them).
    """
    flat = topk_ids.reshape(-1).to(torch.int64)
    n = flat.numel()
    dev = flat.device
    capturing = dev.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if n and not capturing and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):
        raise ValueError(f"expert ids must lie in [0, {num_experts})")
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    blocks = (counts + block_m - 1) // block_m
    block_end = torch.cumsum(blocks, 0)
    row_start = (block_end - blocks) * block_m
    order = torch.argsort(flat, stable=True)
    expert_sorted = flat[order]
    first = torch.cumsum(counts, 0) - counts
    pos = torch.arange(n, device=dev) - first[expert_sorted]
    nb = route_blocks(n, num_experts, block_m)
    sorted_ids = torch.full((nb * block_m,), n, dtype=torch.int32, device=dev)
    sorted_ids[row_start[expert_sorted] + pos] = order.to(torch.int32)
    block_expert = torch.searchsorted(block_end, torch.arange(nb, device=dev), right=True).to(torch.int32)
    return sorted_ids, block_expert


def gather_policy(target: str | None, topk: int) -> Policy:
    """moe_gather's tiles: 32 rows by 128 columns a program on a GPU (a copy: the widths only set how much each
    program moves), small tiles under the interpreter."""
    if target == "interpret":
        return Policy.make(BM=16, BK=16, TOPK=topk)
    return Policy.make(BM=32, BK=128, num_warps=4, num_stages=2, TOPK=topk)


def gathers_rows(policy: Policy) -> bool:
    """Whether a gate-up policy reads the routed rows gathered into expert order first (GATHERED=1)."""
    return policy.const("GATHERED", 0) == 1


def gate_up_rows(x: torch.Tensor, w1: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
                 h: torch.Tensor, policy: Policy, target: str | None = None, gate_up: Any = None,
                 before: Callable[[torch.Tensor], None] | None = None) -> None:
    """The grouped gate-up GEMM (moe_gate_up, or `gate_up`, a kernel of its signature) into h. Where `policy` says
    GATHERED=1, the routed rows of x are first gathered once into expert order (moe_gather), and the GEMM reads
    them as dense tiles. `before(rows)`, if given, sees the rows tensor the GEMM reads, before it runs."""
    gate_up = gate_up or moe_gate_up
    if gathers_rows(policy):
        xs = torch.empty(sorted_ids.numel(), x.shape[1], dtype=x.dtype, device=x.device)
        moe_gather(x, sorted_ids, xs, policy=gather_policy(target, policy.const("TOPK", 2)), target=target)
        x = xs
    if before is not None:
        before(x)
    gate_up(x, w1, sorted_ids, block_expert, h, policy=policy, target=target)


def moe_expert_step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                    topk_ids: torch.Tensor, policy_up: Policy | None = None,
                    policy_down: Policy | None = None) -> torch.Tensor:
    """y = sum_j topk_weights[t, j] * (silu(x W1g[e]^T) * (x W1u[e]^T)) W2[e]^T with e = topk_ids[t, j].

    x (T, HD); w1 (E, 2I, HD) gate rows over up rows; w2 (E, HD, I); topk_* (T, topk).
    """
    t, hd = x.shape
    e, i2, hd1 = w1.shape
    if hd1 != hd or w2.shape[0] != e or w2.shape[1] != hd or i2 % 2 or w2.shape[2] != i2 // 2:
        raise ValueError(f"inconsistent MoE shapes: x {tuple(x.shape)}, w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)}")
    topk = topk_ids.shape[1]
    policy_up = policy_up or Policy.make(BM=16, BN=64, BK=32)
    bm = policy_up.const("BM", 16)
    policy_down = (policy_down or Policy.make(BN=64, BK=32)).with_consts(BM=bm, TOPK=topk)
    policy_up = policy_up.with_consts(TOPK=topk)
    sorted_ids, block_expert = moe_align(topk_ids, e, bm)
    h = torch.empty(sorted_ids.numel(), i2 // 2, dtype=x.dtype, device=x.device)
    gate_up_rows(x, w1, sorted_ids, block_expert, h, policy_up)
    y = torch.zeros(t, hd, dtype=torch.float32, device=x.device)
    moe_down(h, w2, sorted_ids, block_expert, topk_weights.reshape(-1).contiguous(), y, policy=policy_down)
    return y.to(x.dtype)
