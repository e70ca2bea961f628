"""What each output element of an op reads: the read sets (argus_inductor.invariants.readsets) of every op class, in
one place for the library's kernels and the kernels the agent writes (an LLM kernel keeps its template's parameter
names, so the same read set applies to it). `argus verify --op NAME` checks a user's file against them.

Coordinates are the output's dimension names in lower case (z, h, s, d for O(Z, H, S, D)); a reduced index is its
dimension's name in lower case within its own predicate. Variants are read from the epilogue string the signatures
carry ("causal", "gqa4", "mask", "bias+silu", "silu*up", ...) or, for the general library kernels, their flags.
"""
from __future__ import annotations

from collections.abc import Callable

from ..invariants.readsets import ReadSet, read_set


def _flags(epilogue: str) -> set[str]:
    return {p for p in epilogue.replace("+", ",").split(",") if p}


def gemm_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """C[m, n] = act(sum_k A[m, k] B[k, n] + bias[n]) (+ R[m, n])."""
    f = _flags(epilogue)
    facts = ["A.M == m", "B.N == n"]
    if "bias" in f:
        facts.append("bias.NB == n")
    if "residual" in f:
        facts.append("R.M == m and R.N == n")
    return (read_set("C", facts, {"K": ""}, f"gemm[{epilogue}]" if epilogue else "gemm"),)


def gate_up_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """C[m, n] = act(sum_k A[m, k] BG[k, n]) * sum_k A[m, k] BU[k, n]."""
    return (read_set("C", ["A.M == m", "BG.N == n", "BU.N == n"], {"K": ""}, f"gemm[{epilogue or 'silu*up'}]"),)


def bmm_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """C[b, m, n] = sum_k A[b, m, k] B[b, k, n]."""
    return (read_set("C", ["A.Bt == bt", "B.Bt == bt", "A.M == m", "B.N == n"], {"K": ""}, "bmm"),)


def splitk_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """The split-k partial sums added into C: each reads its own rows of A and columns of B (the partitions' union
    is proved by the atomic obligations)."""
    return (read_set("C", ["A.M == m", "B.N == n"], {}, "gemm (split-k partial sums)"),)


def bias_act_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[m, n] = act(X[m, n] + bias[n]): the split-k epilogue."""
    facts = ["X.M == m", "X.N == n"] + (["bias.NB == n"] if "bias" in _flags(epilogue) else [])
    return (read_set("Y", facts, {}, "gemm split-k epilogue"),)


def attention_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """O[z, h, s, d] = sum_t softmax_t(Q[z, h, s, :] . K[z, g(h), t, :] (+ Mask[z, h, s, t])) V[z, g(h), t, d] with
    g(h) = h // (H // HK), over the keys t <= s (causal, top-left aligned) or all T; the dot products reduce the head
    dimension D."""
    f = _flags(epilogue)
    facts = ["Q.Z == z", "Q.H == h", "Q.S == s", "K.Z == z", "K.HK == h // (H // HK)", "V.Z == z",
             "V.HK == h // (H // HK)", "V.D == d"]
    if "mask" in f:
        facts += ["Mask.Z == z", "Mask.H == h", "Mask.S == s"]
    keys = "t <= s" if "causal" in f else ""
    return (read_set("O", facts, {"T": keys, "D": ""}, f"attention[{epilogue}]" if epilogue else "attention"),)


def moe_gate_up_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Hout[p, i] = silu(X[tok(p)] . W1[e(p), i]) * (X[tok(p)] . W1[e(p), i + I]): tok(p) = sorted_ids[p] // TOPK
    (row p itself when X holds the gathered rows, GATHERED = 1), e(p) = block_expert[p // BM]."""
    facts = ["X.T == (p if GATHERED == 1 else sorted_ids[p] // TOPK)", "W1.E == block_expert[p // BM]",
             "W1.I2 == i or W1.I2 == i + I"]
    return (read_set("Hout", facts, {"HD": ""}, "moe gate-up"),)


def moe_gather_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Xs[p, hd] = X[sorted_ids[p] // TOPK, hd]."""
    return (read_set("Xs", ["X.T == sorted_ids[p] // TOPK", "X.HD == hd"], {}, "moe gather"),)


def moe_down_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[t, hd] += topk_weights[pair] * (Hin[p] . W2[e(p), hd]) for every sorted row p of token t's pairs: the row's
    pair belongs to t, the weight is that pair's, the expert that of the row's block."""
    facts = ["sorted_ids[Hin.P] // TOPK == t", "topk_weights.TK == sorted_ids[Hin.P]",
             "W2.E == block_expert[Hin.P // BM]", "W2.HD == hd"]
    return (read_set("Y", facts, {}, "moe down and combine"),)


def softmax_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[r, c] = exp(X[r, c] - max_c' X[r, c']) / sum_c' exp(X[r, c'] - max)."""
    return (read_set("Y", ["X.R == r", "X.C == c"], {"C": ""}, "softmax"),)


def rmsnorm_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[r, c] = X[r, c] * rsqrt(mean_c' X[r, c']^2 + eps) * W[c]."""
    return (read_set("Y", ["X.R == r", "X.C == c", "W.C == c"], {"C": ""}, "rmsnorm"),)


def layernorm_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[r, c] = (X[r, c] - mean_r) / sqrt(var_r + eps) * W[c] + Bias[c], mean and variance over all of row r."""
    return (read_set("Y", ["X.R == r", "X.C == c", "W.C == c", "Bias.C == c"], {"C": ""}, "layernorm"),)


def reduce_rows_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[o] = reduce_r X[o, r]."""
    return (read_set("Y", ["X.O == o"], {"R": ""}, "reduction over rows"),)


def reduce_cols_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[o, i] = reduce_r X[o, r, i]."""
    return (read_set("Y", ["X.O == o", "X.I == i"], {"R": ""}, "reduction over a middle dimension"),)


def softmax_rows_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[o, r] = (log)softmax over r of X[o, :] at r."""
    return (read_set("Y", ["X.O == o", "X.R == r"], {"R": ""}, "softmax over rows"),)


def softmax_cols_reads(epilogue: str = "") -> tuple[ReadSet, ...]:
    """Y[o, r, i] = (log)softmax over r of X[o, :, i] at r."""
    return (read_set("Y", ["X.O == o", "X.R == r", "X.I == i"], {"R": ""}, "softmax over a middle dimension"),)


# the library's kernels (and so the agent's templates) by name: the read sets of the op each implements
KERNEL_READS: dict[str, Callable[[str], tuple[ReadSet, ...]]] = {
    "gemm_epilogue": gemm_reads,
    "gemm_residual": lambda e: gemm_reads(",".join(p for p in (e, "residual") if p)),
    "gemm_gate_up": gate_up_reads,
    "bmm_kernel": bmm_reads,
    "gemm_splitk": splitk_reads,
    "bias_act_cast": bias_act_reads,
    "attention_fwd": attention_reads,
    "attention_decode": attention_reads,
    "moe_gate_up": moe_gate_up_reads,
    "moe_gather": moe_gather_reads,
    "moe_down": moe_down_reads,
    "softmax_kernel": softmax_reads,
    "rmsnorm_kernel": rmsnorm_reads,
    "layernorm_kernel": layernorm_reads,
    "reduce_rows": reduce_rows_reads,
    "reduce_cols": reduce_cols_reads,
    "softmax_rows": softmax_rows_reads,
    "softmax_cols": softmax_cols_reads,
}

# the agent's ops (and `argus verify --op`): the read sets of the op's contract kernel, by epilogue
OP_READS: dict[str, Callable[[str], tuple[ReadSet, ...]]] = {
    "gemm": lambda e: gate_up_reads(e) if e.endswith("*up") else gemm_reads(e),
    "bmm": bmm_reads,
    "attention": attention_reads,
    "moe": moe_gate_up_reads,
    "moe_down": moe_down_reads,
    "softmax": softmax_reads,
    "rmsnorm": rmsnorm_reads,
    "layernorm": layernorm_reads,
    "reduce": reduce_rows_reads,
}


def kernel_reads(kernel: str, epilogue: str = "") -> tuple[ReadSet, ...]:
    """The read sets a library kernel (or an agent kernel in its place) is checked against; () for kernels whose op
    states none (helpers, partial-result passes)."""
    f = KERNEL_READS.get(kernel)
    return f(epilogue) if f is not None else ()


def op_reads(op: str, epilogue: str = "") -> tuple[ReadSet, ...]:
    """The read sets of an op by name (`argus verify --op attention --causal`)."""
    if op not in OP_READS:
        raise KeyError(f"no read set for op '{op}'; known: {', '.join(sorted(OP_READS))}")
    return OP_READS[op](epilogue)


__all__ = ["KERNEL_READS", "OP_READS", "kernel_reads", "op_reads"]
