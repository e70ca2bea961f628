"""The graph pipeline: the passes in the order each needs the graph the previous one left.

1. moe: experts regions -> argus::moe (moe.py); then rows no output reads are pruned (row_pruning.py) and the
   softmax routers become router_topk launches (router.py).
2. attention (attention.py), then the rotary tables and a decode step's rotation and KV-cache writes (rotary.py).
3. gemm: einsum and outer products in matmul form, gate*up, q/k/v side by side, the GEMMs with their epilogues
   (gemm.py), then the decode RMSNorms between them (norm.py).
4. the library op classes (library.py), elementwise chains last (chain.py) so they fuse into what was rewritten.

May import: every other module of graph/, ops, runtime. Imported by the backend, the agent's tracing and the vLLM
plugin.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable

import torch.fx as fx

from .attention import match_eager_attention, match_sdpa
from .chain import match_pointwise
from .gemm import einsum_as_matmul, match_gate_up, match_gemm, match_linear_cats, outer_products_as_mul
from .library import rewrite_library
from .moe import match_moe_regions
from .norm import rewrite_decode_norms
from .patterns import LIBRARY_KINDS, SDPA, Match, alive, is_call, under_autocast
from .rotary import rewrite_rope_cache_writes, rewrite_rotary_tables
from .router import rewrite_routers
from .row_pruning import prune_unread_rows

GRAPH_IDS = itertools.count()  # each rewritten graph's node ids are g<id>:<node name>


def rewrite(gm: fx.GraphModule, enabled: Iterable[str], moe_regions: bool = True,
            prune_rows: bool = True) -> list[Match]:
    """Rewrite matched subgraphs in place; returns what was matched. Nothing inside an enabled autocast region
    is matched (under_autocast). `prune_rows`: once the experts regions are argus::moe calls, compute only the
    rows a final slice keeps of the row-wise ops before it (row_pruning: a prefill's last layer on its last
    position), so the GEMM and attention matchers see those shapes."""
    enabled = tuple(enabled)
    gid = next(GRAPH_IDS)
    g = gm.graph
    matches: list[Match] = []
    amp = under_autocast(g)
    if "moe" in enabled and moe_regions:
        matches += match_moe_regions(g, gid, amp)
    if prune_rows:  # after the experts regions became argus::moe calls, whose rows (tokens) are independent
        pruned = prune_unread_rows(g, gid)
        if pruned:
            matches += pruned
            amp = under_autocast(g)  # the new nodes sit beside the ones they replace, in the same regions
    if "moe" in enabled:
        matches += rewrite_routers(g, gid, amp)
    if "attention" in enabled:
        for node in list(g.nodes):
            if not alive(node) or node.op not in ("call_function", "call_method") or node in amp:
                continue
            m = match_sdpa(g, node, gid) if is_call(node, SDPA) else match_eager_attention(g, node, gid)
            if m:
                matches.append(m)
        matches += rewrite_rotary_tables(g, gid, amp)  # the rotary tables the attention's q and k are rotated by
        matches += rewrite_rope_cache_writes(g, gid, amp)  # a decode step's q, k rotation and KV-cache write
    changed = False
    if "gemm" in enabled:
        einsum_as_matmul(g, amp)
        changed = outer_products_as_mul(g, amp)
        for node in list(g.nodes):
            if alive(node) and node.op in ("call_function", "call_method") and node not in amp:
                m = match_gate_up(g, node, gid)
                if m:
                    matches.append(m)
        matches += match_linear_cats(g, gid, amp)
        for node in list(g.nodes):
            if alive(node) and node.op in ("call_function", "call_method") and node not in amp:
                m = match_gemm(g, node, gid)
                if m:
                    matches.append(m)
        matches += rewrite_decode_norms(g, gid, amp)  # RMSNorms between the GEMMs just rewritten, at decode
    library = [k for k in enabled if k in LIBRARY_KINDS]
    if library:
        matches += rewrite_library(g, gid, tuple(library), amp)
    if "pointwise" in enabled:
        matches += match_pointwise(g, gid)
    if matches or changed:
        g.lint()
        gm.recompile()
    return matches


