"""The read-set and fill-value planted bugs (issue 42): mutants of the library's kernels (and of the planted-bug suite's
attention) that the kernel-wide obligations and the kernels' own assertions used to let through, each checked against
its op's read set (argus_inductor.specs.reads). Where `strip` is set the kernel's own tag assertions are
removed first: the read set or the fill obligation must reject the bug by itself, whether or not its author asserted
anything."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from argus_inductor.invariants import read_set

from .suite import ATTENTION, LIBRARY, library_kernels


@dataclass
class ReadMutant:
    name: str
    category: str          # fill values, padded-lane arithmetic, off-by-one masks, diagonal inclusion, ...
    kernel: str            # a library kernel, or "attention" (the planted-bug suite's)
    old: str
    new: str
    kinds: tuple[str, ...]  # the violation kinds that count as the rejection
    epilogue: str = ""      # the op variant whose read set applies
    strip: bool = False     # remove the kernel's own assert_tag statements first
    policy: dict[str, Any] = field(default_factory=dict)  # overrides of the kernel's LIBRARY policy
    shapes: dict[str, int] = field(default_factory=dict)  # overrides of its LIBRARY shapes
    symbolic: bool = True   # also rejected with the dynamic dimensions symbolic


# row sums over square tiles: summing the tile over the wrong axis type-checks
ROW_SUMS = """from argus_inductor.dsl import *


@kernel
def row_sums(X: Tensor("R", "C"), Y: Tensor("R"), B: constexpr = 16):
    (pr,) = tile_grid(cdiv(R, B))
    rr = pr * B + arange(B)
    acc = zeros((B,), float32)
    for c0 in range(0, C, B):
        rc = c0 + arange(B)
        acc = acc + sum(load(X[rr, rc]).to(float32), 1)
    store(Y[rr], acc)
"""
ROW_SUMS_READS = (read_set("Y", ["X.R == r"], {"C": ""}, "row sums"),)

SUITE_ATTENTION = ("attention", ATTENTION, dict(BM=32, BN=32, BD=64, CAUSAL=1), dict(Z=2, H=4, HK=2, S=50, T=50, D=64),
                   ["H % HK == 0", "D <= BD"])


def source(kernel: str) -> str:
    if kernel == "attention":
        return ATTENTION
    if kernel == "row_sums":
        return ROW_SUMS
    return "from argus_inductor.dsl import *\n" + library_kernels()[kernel].ir.source


def setup(m: ReadMutant) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    pol, shapes, pre = (SUITE_ATTENTION[2:] if m.kernel == "attention" else
                        (dict(B=16), dict(R=37, C=45), []) if m.kernel == "row_sums" else LIBRARY[m.kernel])
    return {**pol, **m.policy}, {**shapes, **m.shapes}, list(pre)


def strip_assertions(text: str) -> str:
    """The source with every assert_tag statement replaced by `pass` (lines kept, so line numbers hold)."""
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id == "assert_tag":
            first, last = node.lineno - 1, node.end_lineno - 1
            indent = lines[first][:len(lines[first]) - len(lines[first].lstrip())]
            lines[first] = indent + "pass"
            for i in range(first + 1, last + 1):
                lines[i] = ""
    return "\n".join(lines) + "\n"


FILL, PADDED, MASKS, DIAGONAL, RAGGED, GQA, MOE, AXIS = (
    "fill values", "padded-lane arithmetic", "off-by-one masks", "diagonal inclusion", "ragged last tiles",
    "GQA row ownership", "MoE row ownership", "wrong axis / tile index as offset")

MUTANTS = [
    # a masked lane's `other` that is not the identity of the reduction it feeds
    ReadMutant("row max over a zero fill (held-out: fill 0 for a max)", FILL, "softmax_kernel",
               "x = load(X[rr, rc], other=-inf).to(float32)\n        m_new",
               "x = load(X[rr, rc]).to(float32)\n        m_new", ("reduction-fill",)),
    ReadMutant("router softmax over a zero fill", FILL, "router_topk_rows",
               "x = load(X[rt, re], other=-inf).to(float32)", "x = load(X[rt, re], other=0.0).to(float32)",
               ("reduction-fill",), strip=True),
    ReadMutant("decode attention forgets rn < T (held-out)", FILL, "attention_decode",
               "s = where(rn[None, :] < T, s, -inf)\n        m_new = maximum(m_i, max(s, 1))",
               "m_new = maximum(m_i, max(s, 1))",
               ("reduction-fill",), epilogue="gqa4"),
    ReadMutant("column max over a zero fill", FILL, "reduce_cols",
               "x = load(X[o, rr, ri], other=-inf).to(float32)\n            acc = maximum(acc, max(x, 0))",
               "x = load(X[o, rr, ri], other=0.0).to(float32)\n            acc = maximum(acc, max(x, 0))",
               ("reduction-fill",), strip=True, policy=dict(KIND=2)),
    # arithmetic on padded lanes that leaves them no longer the identity
    ReadMutant("variance over padded lanes (held-out)", PADDED, "layernorm_kernel",
               "d = where(rc[None, :] < C, load(X[rr, rc]).to(float32) - mean[:, None], 0.0)",
               "d = load(X[rr, rc]).to(float32) - mean[:, None]", ("reduction-fill",)),
    ReadMutant("eps added inside the sum of squares", PADDED, "rmsnorm_kernel",
               "ss = ss + sum(x * x, 1)", "ss = ss + sum(x * x + eps, 1)", ("reduction-fill",)),
    # masks one lane off
    ReadMutant("variance mask lets lane C in", MASKS, "layernorm_kernel",
               "where(rc[None, :] < C,", "where(rc[None, :] <= C,", ("reduction-fill",)),
    ReadMutant("decode key mask lets key T in", MASKS, "attention_decode",
               "where(rn[None, :] < T,", "where(rn[None, :] <= T,", ("reduction-fill",), epilogue="gqa4"),
    ReadMutant("causal mask < instead of <= (held-out)", MASKS, "attention_fwd",
               "(rn[None, :] <= rm[:, None])", "(rn[None, :] < rm[:, None])", ("read-set",),
               epilogue="causal,gqa2"),
    # the diagonal of a causal attention
    ReadMutant("each query loses its own key", DIAGONAL, "attention",
               "(rn[None, :] <= rm[:, None])", "(rn[None, :] < rm[:, None])", ("read-set",), epilogue="causal,gqa2"),
    ReadMutant("the unmasked loop runs into the diagonal block, no assertion", DIAGONAL, "attention_fwd",
               "lo = minimum(lo, pm * BM // BN * BN)", "lo = minimum(lo, (pm + 1) * BM // BN * BN)", ("read-set",),
               epilogue="causal,gqa2", strip=True),
    # the last, ragged tile of a reduction (or all of it) never added
    ReadMutant("K loop range(0, K - BK, BK) at K = BK (held-out zero-trip)", RAGGED, "gemm_epilogue",
               "for k in range(0, K, BK):", "for k in range(0, K - BK, BK):", ("read-set", "reduction-complete"),
               epilogue="bias+gelu", shapes=dict(K=32)),
    ReadMutant("K loop range(0, 0, BK)", RAGGED, "bmm_kernel", "for k in range(0, K, BK):",
               "for k in range(0, 0, BK):", ("read-set", "reduction-complete"), shapes=dict(K=64)),
    ReadMutant("decode drops the ragged last key block", RAGGED, "attention_decode", "for n0 in range(0, T, BN):",
               "for n0 in range(0, T - T % BN, BN):", ("read-set", "reduction-complete"), epilogue="gqa4"),
    # which key/value head a query head reads
    ReadMutant("GQA heads interleaved, no assertion", GQA, "attention_fwd", "hk = h // (H // HK)", "hk = h % HK",
               ("read-set",), epilogue="causal,gqa2", strip=True),
    ReadMutant("decode packs the group's heads strided", GQA, "attention_decode", "hrow = hk * g + rg",
               "hrow = hk + rg * HK", ("read-set",), epilogue="gqa4", strip=True),
    # which expert, pair and token a routed row belongs to
    ReadMutant("gate-up meets the next block's expert, no assertion", MOE, "moe_gate_up",
               "e = load(block_expert[pb])", "e = load(block_expert[(pb + 1) % NB])", ("read-set",), strip=True),
    ReadMutant("combine weights the sorted row, not its pair, no assertion", MOE, "moe_down",
               "w = load(topk_weights[pair]).to(float32)", "w = load(topk_weights[rp]).to(float32)", ("read-set",),
               strip=True),
    ReadMutant("gather reads the pair's slot as its token, no assertion", MOE, "moe_gather",
               "x = load(X[pair // TOPK, rk])", "x = load(X[pair % TOPK, rk])", ("read-set",), strip=True),
    # a reduction over the wrong axis, a tile index used as an element offset
    ReadMutant("sum over the wrong axis (held-out)", AXIS, "row_sums", "sum(load(X[rr, rc]).to(float32), 1)",
               "sum(load(X[rr, rc]).to(float32), 0)", ("read-set",)),
    ReadMutant("weight read at the tile index (held-out)", AXIS, "rmsnorm_kernel", "w = load(W[rc]).to(float32)",
               "w = load(W[c0 // BC + arange(BC)]).to(float32)", ("read-set",), strip=True),
]
