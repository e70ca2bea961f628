"""The planted-bug suite: correct DSL kernels and mutants of each with a bug real kernel writers make.

Each case is DSL source text (read with `kernels_from_source`, never executed), a policy, concrete
shapes that are not multiples of the tiles, and the preconditions the symbolic proof needs. A mutant
replaces one piece of text; `expect` names the line a counterexample must point at (by default the
mutated line).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from argus_inductor.dsl import Policy
from argus_inductor.invariants import Staging

HEADER = "from argus_inductor.dsl import *\n\n\n"


@dataclass
class Mutant:
    name: str
    old: str
    new: str
    expect: str | None = None       # text on the line a violation must name (default: new's first line)
    occurrence: int = 1             # which occurrence of `old` to replace
    staging: Any = None             # a staging hook (pipeline mutants change the policy, not the source)

    def apply(self, source: str) -> str:
        if not self.old:
            return source
        pos = -1
        for _ in range(self.occurrence):
            pos = source.index(self.old, pos + 1)
        return source[:pos] + self.new + source[pos + len(self.old):]

    def expected_line(self, source: str) -> int:
        marker = self.expect or self.new.strip().splitlines()[0].strip()
        mutated = self.apply(source)
        hits = [i for i, line in enumerate(mutated.splitlines(), 1) if marker in line]
        assert hits, f"marker {marker!r} not found"
        if self.expect is None and self.old:
            start = mutated.count("\n", 0, self._pos(source)) + 1
            hits = [h for h in hits if h >= start] or hits
        return hits[0]

    def _pos(self, source: str) -> int:
        pos = -1
        for _ in range(self.occurrence):
            pos = source.index(self.old, pos + 1)
        return pos


@dataclass
class Case:
    name: str
    kernel: str
    source: str
    policy: dict[str, Any]
    shapes: dict[str, int]
    assumptions: list[str] = field(default_factory=list)
    mutants: list[Mutant] = field(default_factory=list)

    def make_policy(self) -> Policy:
        return Policy.make(**self.policy)


def too_deep(policy: Policy, loop: Any, load: Any) -> Staging | None:
    """A planted bad staging: loads issued num_stages iterations ahead into a ring of num_stages."""
    return Staging(buffers=policy.num_stages, distance=policy.num_stages, readers=0)


def async_reader(policy: Policy, loop: Any, load: Any) -> Staging | None:
    """Triton's default depth, but the mma of the previous iteration may still be reading its tile."""
    return Staging(buffers=policy.num_stages, distance=policy.num_stages - 1, readers=1)


GEMM = HEADER + '''\
@kernel
def gemm_bias_act(A: Tensor("M", "K"), B: Tensor("K", "N"), bias: Tensor("N"), C: Tensor("M", "N"),
                  BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32, ACT: constexpr = 1):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[rm, rk])
        b = load(B[rk, rn])
        acc = mma(a, b, acc)
    acc = acc + load(bias[rn]).to(float32)[None, :]
    if ACT == 1:
        acc = relu(acc)
    store(C[rm, rn], acc)
'''

BMM = HEADER + '''\
@kernel
def bmm(A: Tensor("Bt", "M", "K"), B: Tensor("Bt", "K", "N"), C: Tensor("Bt", "M", "N"),
        BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32):
    pb, pm, pn = tile_grid(Bt, cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        a = load(A[pb, rm, rk])
        b = load(B[pb, rk, rn])
        acc = mma(a, b, acc)
    store(C[pb, rm, rn], acc)
'''

SPLITK = HEADER + '''\
@kernel
def gemm_splitk(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"),
                BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32, SPLIT: constexpr = 4):
    pm, pn, ps = tile_grid(cdiv(M, BM), cdiv(N, BN), SPLIT)
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(ps * BK, K, SPLIT * BK):
        rk = k + arange(BK)
        a = load(A[rm, rk])
        b = load(B[rk, rn])
        acc = mma(a, b, acc)
    atomic_add(C[rm, rn], acc)
'''

SOFTMAX = HEADER + '''\
@kernel
def softmax(X: Tensor("R", "C"), Y: Tensor("R", "C"), BR: constexpr = 4, BC: constexpr = 64):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    m = full((BR,), -inf, float32)
    l = zeros((BR,), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc], other=-inf).to(float32)
        m_new = maximum(m, max(x, 1))
        l = l * exp(m - m_new) + sum(exp(x - m_new[:, None]), 1)
        m = m_new
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc], other=-inf).to(float32)
        store(Y[rr, rc], exp(x - m[:, None]) / l[:, None])
'''

RMSNORM = HEADER + '''\
@kernel
def rmsnorm(X: Tensor("R", "C"), W: Tensor("C"), Y: Tensor("R", "C"), eps: float,
            BR: constexpr = 4, BC: constexpr = 64):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    ss = zeros((BR,), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc]).to(float32)
        ss = ss + sum(x * x, 1)
    rstd = rsqrt(ss / C + eps)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc]).to(float32)
        w = load(W[rc]).to(float32)
        store(Y[rr, rc], x * rstd[:, None] * w[None, :])
'''

LAYERNORM = HEADER + '''\
@kernel
def layernorm(X: Tensor("R", "C"), W: Tensor("C"), Bias: Tensor("C"), Y: Tensor("R", "C"), eps: float,
              BR: constexpr = 4, BC: constexpr = 64):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    s = zeros((BR,), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        s = s + sum(load(X[rr, rc]).to(float32), 1)
    mean = s / C
    ss = zeros((BR,), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        d = where(rc[None, :] < C, load(X[rr, rc]).to(float32) - mean[:, None], 0.0)
        ss = ss + sum(d * d, 1)
    rstd = rsqrt(ss / C + eps)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc]).to(float32)
        w = load(W[rc]).to(float32)
        b = load(Bias[rc]).to(float32)
        store(Y[rr, rc], (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :])
'''

ATTENTION = HEADER + '''\
@kernel
def attention(Q: Tensor("Z", "H", "S", "D"), K: Tensor("Z", "HK", "T", "D"), V: Tensor("Z", "HK", "T", "D"),
              O: Tensor("Z", "H", "S", "D"), scale: float,
              BM: constexpr = 32, BN: constexpr = 32, BD: constexpr = 64, CAUSAL: constexpr = 1):
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
        assert_tag((tag_of(k, "HK") * (H // HK) <= h) & (h < (tag_of(k, "HK") + 1) * (H // HK)), "GQA group")
        s = mma(q, trans(k)) * scale
        visible = (rn[None, :] < T) & ((rn[None, :] <= rm[:, None]) | (CAUSAL == 0))
        s = where(visible, s, -inf)
        assert_tag(implies(CAUSAL == 1, tag_of(s, "T") <= tag_of(s, "S")), "a causal score never looks ahead")
        m_new = maximum(m_i, max(s, 1))
        alpha = exp(m_i - m_new)
        p = exp(s - m_new[:, None])
        l_i = l_i * alpha + sum(p, 1)
        acc = acc * alpha[:, None] + mma(p.to(V.dtype), v)
        assert_tag((tag_of(acc, "sum(T).lo") == tag_of(m_new[:, None], "max(T).lo")) &
                   (tag_of(acc, "sum(T).hi") == tag_of(m_new[:, None], "max(T).hi")), "acc and its max: same keys")
        m_i = m_new
    store(O[z, h, rm, rd], acc / l_i[:, None])
'''

MOE = HEADER + '''\
@kernel
def moe_step(X: Tensor("T", "HD"), Wg: Tensor("E", "HD", "F"), Wu: Tensor("E", "HD", "F"),
             sorted_ids: Tensor("P", dtype=int32), block_expert: Tensor("NB", dtype=int32),
             topk_weights: Tensor("TK"), Out: Tensor("T", "F"),
             TOPK: constexpr = 2, BM: constexpr = 16, BF: constexpr = 32, BK: constexpr = 32):
    pb, pf = tile_grid(NB, cdiv(F, BF))
    rp = pb * BM + arange(BM)
    pair = load(sorted_ids[rp])
    tok = pair // TOPK
    e = load(block_expert[pb])
    assume((e >= 0) & (e < E))
    rf = pf * BF + arange(BF)
    gate = zeros((BM, BF), float32)
    up = zeros((BM, BF), float32)
    for k in range(0, HD, BK):
        rk = k + arange(BK)
        x = load(X[tok, rk])
        tag(x, expert=load(block_expert[rp // BM])[:, None], pair=pair[:, None])
        wg = load(Wg[e, rk, rf])
        wu = load(Wu[e, rk, rf])
        gate = mma(x, wg, gate)
        assert_tag(tag_of(gate, "expert") == tag_of(gate, "E"), "a gathered row meets its own expert's weights")
        up = mma(x, wu, up)
    w = load(topk_weights[pair]).to(float32)
    y = silu(gate) * up * w[:, None]
    assert_tag(tag_of(y, "TK") == tag_of(y, "pair"), "the routing weight belongs to the row's (token, k) pair")
    atomic_add(Out[tok, rf], y)
'''

CASES: list[Case] = [
    Case("gemm+bias+act", "gemm_bias_act", GEMM, dict(BM=32, BN=32, BK=32, ACT=1), dict(M=200, N=136, K=100), [], [
        Mutant("off-by-one row offset", "rm = pm * BM + arange(BM)", "rm = pm * BM + arange(BM) + 1"),
        Mutant("K loop skips the last partial tile", "range(0, K, BK)", "range(0, K - K % BK, BK)"),
        Mutant("K loop repeats the last partial tile", "rk = k + arange(BK)",
               "rk = minimum(k, K - BK) + arange(BK)"),
        Mutant("swapped operand coordinates (B read transposed)", "b = load(B[rk, rn])",
               "b = trans(load(B[rn, rk]))"),
        Mutant("off-by-one K offset in A", "a = load(A[rm, rk])", "a = load(A[rm, rk + 1])"),
        Mutant("bias of the neighbouring column", "load(bias[rn])", "load(bias[rn + 1])"),
        Mutant("grid leaves the right border unwritten", "cdiv(N, BN))", "N // BN)"),
        Mutant("pipeline prefetches past its ring", "", "", expect="a = load(A[rm, rk])", staging=too_deep),
        Mutant("pipeline overwrites the tile an async mma reads", "", "", expect="a = load(A[rm, rk])",
               staging=async_reader),
    ]),
    Case("batched gemm", "bmm", BMM, dict(BM=32, BN=32, BK=32), dict(Bt=3, M=70, N=45, K=53), [], [
        Mutant("B from the neighbouring batch", "b = load(B[pb, rk, rn])", "b = load(B[(pb + 1) % Bt, rk, rn])"),
        Mutant("result stored into another batch", "store(C[pb, rm, rn], acc)",
               "store(C[Bt - 1 - pb, rm, rn], acc)"),
        Mutant("K loop starts one tile late", "range(0, K, BK)", "range(BK, K, BK)"),
        Mutant("column tiles overlap (wrong stride)", "rn = pn * BN + arange(BN)", "rn = pn * (BN - 1) + arange(BN)"),
        Mutant("batch grid one short", "tile_grid(Bt, ", "tile_grid(Bt - 1, "),
        Mutant("swapped M and K of A", "a = load(A[pb, rm, rk])", "a = trans(load(A[pb, rk, rm]))"),
    ]),
    Case("split-k gemm", "gemm_splitk", SPLITK, dict(BM=32, BN=32, BK=32, SPLIT=4), dict(M=70, N=45, K=300), [], [
        Mutant("overlapping split-k partitions", "range(ps * BK, K, SPLIT * BK)",
               "range(ps * BK, K, (SPLIT - 1) * BK)"),
        Mutant("missing split-k partitions", "range(ps * BK, K, SPLIT * BK)",
               "range(ps * BK, K, (SPLIT + 1) * BK)"),
        Mutant("split grid one partition short", "cdiv(N, BN), SPLIT)", "cdiv(N, BN), SPLIT - 1)"),
        Mutant("partial sums stored instead of added", "atomic_add(C[rm, rn], acc)", "store(C[rm, rn], acc)"),
        Mutant("K loop skips the last partial tile", "range(ps * BK, K, SPLIT * BK)",
               "range(ps * BK, K - BK, SPLIT * BK)"),
        Mutant("off-by-one K offset in B", "b = load(B[rk, rn])", "b = load(B[rk + 1, rn])"),
    ]),
    Case("softmax", "softmax", SOFTMAX, dict(BR=4, BC=64), dict(R=13, C=150), [], [
        Mutant("rescale with the tile max instead of the running max", "l = l * exp(m - m_new)",
               "l = l * exp(m - max(x, 1))"),
        Mutant("sum taken relative to the stale running max", "sum(exp(x - m_new[:, None]), 1)",
               "sum(exp(x - m[:, None]), 1)"),
        Mutant("running sum never rescaled", "l = l * exp(m - m_new) + ", "l = l + "),
        Mutant("statistics loop skips the last partial tile", "range(0, C, BC)", "range(0, C - C % BC, BC)"),
        Mutant("output columns off by one", "rc = c0 + arange(BC)", "rc = c0 + arange(BC) + 1", occurrence=2),
        Mutant("grid drops the last rows", "tile_grid(cdiv(R, BR))", "tile_grid(R // BR)"),
    ]),
    Case("rmsnorm", "rmsnorm", RMSNORM, dict(BR=4, BC=64), dict(R=13, C=150), [], [
        Mutant("sum of squares skips the last partial tile", "range(0, C, BC)", "range(0, C - C % BC, BC)"),
        Mutant("weight of the neighbouring column", "load(W[rc])", "load(W[rc + 1])"),
        Mutant("off-by-one row offset", "rr = pr * BR + arange(BR)", "rr = pr * BR + arange(BR) + 1"),
        Mutant("mask drops the last column from the statistics", "x = load(X[rr, rc]).to(float32)\n        ss",
               "x = load(X[rr, rc], mask=(rc < C - 1)[None, :]).to(float32)\n        ss"),
        Mutant("grid drops the last rows", "tile_grid(cdiv(R, BR))", "tile_grid(R // BR)"),
    ]),
    Case("layernorm", "layernorm", LAYERNORM, dict(BR=4, BC=64), dict(R=13, C=150), [], [
        Mutant("mean loop skips the last partial tile", "range(0, C, BC)", "range(0, C - C % BC, BC)"),
        Mutant("variance loop skips the last partial tile", "range(0, C, BC)", "range(0, C - C % BC, BC)",
               occurrence=2),
        Mutant("variance mask drops the last column", "where(rc[None, :] < C,", "where(rc[None, :] < C - 1,"),
        Mutant("bias of the neighbouring column", "load(Bias[rc])", "load(Bias[rc - 1])"),
        Mutant("output stored one column to the right", "store(Y[rr, rc],", "store(Y[rr, rc + 1],"),
        Mutant("grid drops the last rows", "tile_grid(cdiv(R, BR))", "tile_grid(R // BR)"),
    ]),
    Case("attention", "attention", ATTENTION, dict(BM=32, BN=32, BD=64, CAUSAL=1),
         dict(Z=2, H=4, HK=2, S=50, T=50, D=64), ["H % HK == 0", "D <= BD"], [
        Mutant("missing causal mask", "visible = (rn[None, :] < T) & ((rn[None, :] <= rm[:, None]) | (CAUSAL == 0))",
               "visible = rn[None, :] < T"),
        Mutant("inverted causal mask", "(rn[None, :] <= rm[:, None])", "(rn[None, :] >= rm[:, None])"),
        Mutant("causal loop stops before the diagonal block", "hi = minimum(T, (pm + 1) * BM)",
               "hi = minimum(T, pm * BM)"),
        Mutant("online softmax: probabilities against the stale running max", "p = exp(s - m_new[:, None])",
               "p = exp(s - m_i[:, None])"),
        Mutant("online softmax: rescale with the tile max", "alpha = exp(m_i - m_new)",
               "alpha = exp(m_i - max(s, 1))"),
        Mutant("online softmax: running max never carried", "        m_i = m_new\n", "        m_i = m_i + 0.0\n",
               expect="m_new = maximum(m_i, max(s, 1))"),
        Mutant("GQA: interleaved instead of grouped key/value heads", "hk = h // (H // HK)", "hk = h % HK"),
        Mutant("keys read one row late", "k = load(K[z, hk, rn, rd])", "k = load(K[z, hk, rn + 1, rd])"),
    ]),
    Case("moe expert step", "moe_step", MOE, dict(TOPK=2, BM=16, BF=32, BK=32),
         dict(T=13, HD=40, E=4, F=24, P=64, NB=4, TK=26), ["P == NB * BM"], [
        Mutant("gathered rows meet the next block's expert", "e = load(block_expert[pb])",
               "e = load(block_expert[(pb + 1) % NB])", expect="assert_tag(tag_of(gate, \"expert\")"),
        Mutant("sorted rows off by one", "rp = pb * BM + arange(BM)", "rp = pb * BM + arange(BM) + 1",
               expect="assert_tag(tag_of(gate, \"expert\")"),
        Mutant("scatter-add to the pair id instead of the token", "atomic_add(Out[tok, rf], y)",
               "atomic_add(Out[pair, rf], y)"),
        Mutant("routing weight of the sorted row instead of the pair", "w = load(topk_weights[pair])",
               "w = load(topk_weights[rp])"),
        Mutant("hidden-dim loop skips the last partial tile", "range(0, HD, BK)", "range(0, HD - HD % BK, BK)"),
        Mutant("up projection one row of W late", "wu = load(Wu[e, rk, rf])", "wu = load(Wu[e, rk + 1, rf])"),
    ]),
]


# The library's kernels (argus_inductor/kernels): policy, concrete shapes, and the preconditions their
# symbolic proofs need (what the host wrappers guarantee).
LIBRARY: dict[str, tuple[dict[str, Any], dict[str, int], list[str]]] = {
    "gemm_epilogue": (dict(BM=32, BN=32, BK=32, HAS_BIAS=1, ACT=2), dict(M=200, N=136, K=100, NB=136), ["NB == N"]),
    "gemm_residual": (dict(BM=32, BN=32, BK=32, HAS_BIAS=1, ACT=1), dict(M=200, N=136, K=100, NB=136), ["NB == N"]),
    "gemm_gate_up": (dict(BM=32, BN=32, BK=32), dict(M=200, N=136, K=100), []),
    "bmm_kernel": (dict(BM=32, BN=32, BK=32), dict(Bt=3, M=70, N=45, K=53), []),
    "gemm_splitk": (dict(BM=32, BN=32, BK=32, SPLIT_K=3), dict(M=70, N=45, K=300), []),
    "bias_act_cast": (dict(BM=16, BN=32, HAS_BIAS=1, ACT=1), dict(M=70, N=45, NB=45), ["NB == N"]),
    "softmax_kernel": (dict(BR=4, BC=64), dict(R=13, C=150), []),
    "rmsnorm_kernel": (dict(BR=4, BC=64), dict(R=13, C=150), []),
    "layernorm_kernel": (dict(BR=4, BC=64), dict(R=13, C=150), []),
    "attention_fwd": (dict(BM=32, BN=32, BD=64, CAUSAL=1), dict(Z=2, H=4, HK=2, S=50, T=50, D=64),
                      ["H % HK == 0", "D <= BD"]),
    "attention_decode": (dict(BG=16, BN=32, BD=64), dict(Z=2, H=8, HK=2, S=1, T=75, D=64),
                         ["H % HK == 0", "D <= BD", "H // HK <= BG", "S == 1"]),
    "moe_gate_up": (dict(BM=16, BN=32, BK=32, TOPK=2), dict(T=13, HD=40, E=4, I2=48, I=24, P=64, NB=4),
                    ["0 <= block_expert <= E", "I2 == 2 * I", "P == NB * BM"]),
    "moe_gather": (dict(BM=16, BK=16, TOPK=2), dict(T=13, HD=40, P=64), []),
    "router_topk_rows": (dict(BT=4, BE=8, K=2, BK=2, RENORM=1), dict(T=13, E=7, K2=4), []),
    "moe_down": (dict(BM=16, BN=32, BK=32, TOPK=2), dict(T=13, HD=40, E=4, I=24, P=64, NB=4, TK=26),
                 ["0 <= block_expert <= E", "P == NB * BM"]),
    # the general op classes. Left out: adaptive average pooling (its symbolic window bounds are nonlinear and
    # stay undecided) and the convolutions (their symbolic K-coverage proof hits the solver's time limit under
    # load); test_pool_loss_bugs.py and test_conv_bugs.py prove them at concrete odd shapes
    "reduce_rows": (dict(BO=4, BR=16, KIND=0), dict(O=13, R=37), []),
    "reduce_cols": (dict(BR=8, BI=16, KIND=1), dict(O=3, R=37, I=21), []),
    "argreduce_rows": (dict(BO=4, BR=16, KIND=1), dict(O=13, R=37), []),
    "argreduce_cols": (dict(BR=8, BI=16, KIND=0), dict(O=3, R=37, I=21), []),
    "softmax_rows": (dict(BO=4, BR=16, LOG=1), dict(O=13, R=37), []),
    "softmax_cols": (dict(BR=8, BI=16, LOG=1), dict(O=3, R=37, I=21), []),
    "norm_rows": (dict(BO=4, BR=16, MODE=0, HAS_W=1, HAS_B=1), dict(O=13, L=37), []),
    "norm_cols": (dict(BR=8, BI=16, MODE=1, HAS_W=1), dict(O=3, R=37, I=21), []),
    "group_norm_kernel": (dict(BL=16, HAS_W=1, HAS_B=1), dict(N=3, G=4, L=35, CG=5), ["L % CG == 0"]),
    "row_moments": (dict(BO=4, BR=16), dict(O=13, L=37), []),
    "channel_norm": (dict(BC=4, BH=16, HAS_W=1, HAS_B=1), dict(N=3, C=13, HW=37), []),
    "max_pool_kernel": (dict(BC=4, BW=8, KD=2, KH=3, KW=3, SD=2, SH=2, SW=2, PD=1, PH=1, PW=1, DD=1, DH=2, DW=2),
        dict(NC=5, D=5, H=11, W=13, OD=3, OH=5, OW=6), []),
    "avg_pool_kernel": (dict(BC=4, BW=8, KD=2, KH=3, KW=3, SD=2, SH=2, SW=2, PD=1, PH=1, PW=1, COUNT_PAD=0),
        dict(NC=5, D=5, H=11, W=13, OD=3, OH=6, OW=7), []),
    "pointwise_loss_kernel": (dict(BLOCK=64, LOSS=4), dict(N=301), []),
    "loss_partial_kernel": (dict(BLOCK=64, CHUNK=2, LOSS=0), dict(N=301, S=3), []),
    "sum_partials_kernel": (dict(BLOCK=16), dict(S=37, O=1), ["O == 1"]),
    "cross_entropy_kernel": (dict(BR=4, BC=16), dict(N=13, C=37), []),
    "cosine_loss_kernel": (dict(BR=4, BD=16), dict(N=13, D=37), []),
    "triplet_loss_kernel": (dict(BR=4, BD=16, NORM=0, SWAP=1), dict(N=13, D=37), []),
    "scan_kernel": (dict(BO=1, BL=16, BI=16, PROD=0, REVERSE=1, EXCLUSIVE=1, MASKED=1), dict(O=3, L=37, I=5), []),
}



def library_kernels() -> dict[str, Any]:
    """Every @kernel of argus_inductor.kernels, by name (importing the modules never runs a kernel)."""
    import importlib
    import pkgutil

    import argus_inductor.kernels as lib
    from argus_inductor.dsl import Kernel

    out: dict[str, Any] = {}
    for m in pkgutil.iter_modules(lib.__path__):
        mod = importlib.import_module(f"argus_inductor.kernels.{m.name}")
        out.update({k.name: k for k in vars(mod).values() if isinstance(k, Kernel)})
    return out
