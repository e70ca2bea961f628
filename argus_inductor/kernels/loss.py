"""Loss functions: an element-wise (or per-row) term, then a deterministic two-stage sum.

Stage one gives each program a contiguous chunk of CHUNK blocks of the flattened terms and writes its
fp32 partial sum; stage two is one program that sums the partials in order and scales the total
(1/N for "mean", 1/batch for "batchmean"). No atomics: the result is the same bit for bit on every
run with the same policy. Per-row losses (cross entropy, NLL, cosine, triplet) write their row terms
first and reuse the same two stages.
"""
from __future__ import annotations

import builtins
from collections.abc import Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    abs,
    arange,
    assert_tag,
    assume,
    cdiv,
    constexpr,
    exp,
    float32,
    full,
    implies,
    inf,
    int64,
    load,
    log,
    max,
    maximum,
    minimum,
    sqrt,
    store,
    sum,
    tag_of,
    tile_grid,
    where,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .launch import pow2_between
from .launch import resolve_target as _target
from .reduce import sum_partials_kernel

__all__ = [
    "KERNELS", "LOSSES", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "hinge_loss", "kl_div",
    "cross_entropy", "nll_loss", "cosine_similarity_loss", "triplet_margin_loss",
    "mse_loss_policies", "l1_loss_policies", "smooth_l1_loss_policies", "huber_loss_policies",
    "hinge_loss_policies", "kl_div_policies", "cross_entropy_policies", "nll_loss_policies",
    "cosine_similarity_loss_policies", "triplet_margin_loss_policies",
    "pointwise_loss_kernel", "loss_partial_kernel", "sum_partials_kernel", "cross_entropy_kernel",
    "cosine_loss_kernel", "triplet_loss_kernel",
]

# the element-wise terms (the LOSS constexpr); alpha is beta (smooth L1) or delta (Huber)
LOSSES = {"mse": 0, "l1": 1, "smooth_l1": 2, "huber": 3, "hinge": 4, "kl_div": 5, "kl_div_log_target": 6,
          "identity": 7}


@kernel
def pointwise_loss_kernel(P: Tensor("N"), T: Tensor("N"), Y: Tensor("N"), alpha: float,
                          LOSS: constexpr = 0, BLOCK: constexpr = 1024):
    """Y = term(P, T) element-wise (reduction="none")."""
    (pb,) = tile_grid(cdiv(N, BLOCK))
    ri = pb * BLOCK + arange(BLOCK)
    p = load(P[ri]).to(float32)
    t = load(T[ri]).to(float32)
    d = p - t
    e = d * d
    if LOSS == 1:
        e = abs(d)
    if LOSS == 2:
        e = where(abs(d) < alpha, 0.5 * d * d / alpha, abs(d) - 0.5 * alpha)
    if LOSS == 3:
        e = where(abs(d) < alpha, 0.5 * d * d, alpha * (abs(d) - 0.5 * alpha))
    if LOSS == 4:
        e = where(1.0 - p * t < 0.0, 0.0, 1.0 - p * t)  # max(., 0) keeping NaN, as torch's clamp
    if LOSS == 5:
        e = where(t > 0.0, t * (log(t) - p), 0.0)
    if LOSS == 6:
        e = exp(t) * (t - p)
    if LOSS == 7:
        e = p
    store(Y[ri], e)


@kernel
def loss_partial_kernel(P: Tensor("N"), T: Tensor("N"), Partial: Tensor("S"), alpha: float,
                        LOSS: constexpr = 0, BLOCK: constexpr = 1024, CHUNK: constexpr = 4):
    """Partial[s] = sum of term(P, T) over the chunk [s * CHUNK * BLOCK, (s + 1) * CHUNK * BLOCK)."""
    (s,) = tile_grid(S)
    lo = s * (CHUNK * BLOCK)
    part = zeros((1,), float32)
    for i0 in range(lo, minimum(N, lo + CHUNK * BLOCK), BLOCK):
        ri = i0 + arange(BLOCK)
        p = load(P[ri]).to(float32)
        t = load(T[ri]).to(float32)
        d = p - t
        e = d * d
        if LOSS == 1:
            e = abs(d)
        if LOSS == 2:
            e = where(abs(d) < alpha, 0.5 * d * d / alpha, abs(d) - 0.5 * alpha)
        if LOSS == 3:
            e = where(abs(d) < alpha, 0.5 * d * d, alpha * (abs(d) - 0.5 * alpha))
        if LOSS == 4:
            e = where(1.0 - p * t < 0.0, 0.0, 1.0 - p * t)  # max(., 0) keeping NaN, as torch's clamp
        if LOSS == 5:
            e = where(t > 0.0, t * (log(t) - p), 0.0)
        if LOSS == 6:
            e = exp(t) * (t - p)
        if LOSS == 7:
            e = p
        part = part + sum(where(ri < N, e, 0.0), 0)
    assert_tag((tag_of(part, "sum(N).lo") == s * CHUNK * BLOCK)
               & (tag_of(part, "sum(N).hi") >= minimum(N, (s + 1) * CHUNK * BLOCK)),
               "partial sum s covers all of its chunk [s * CHUNK * BLOCK, (s + 1) * CHUNK * BLOCK) of the elements")
    store(Partial[s + arange(1)], part)


@kernel
def cross_entropy_kernel(X: Tensor("N", "C"), Tgt: Tensor("N", dtype=int64), Loss: Tensor("N"),
                         Valid: Tensor("N"), ignore_index: int,
                         BR: constexpr = 4, BC: constexpr = 64, LOG_SOFTMAX: constexpr = 1):
    """Loss[r] = logsumexp(X[r]) - X[r, Tgt[r]] (LOG_SOFTMAX = 1) or -X[r, Tgt[r]] (NLL on log-probabilities),
    0 where Tgt[r] == ignore_index, NaN where Tgt[r] is no class index (the host refuses such targets on a call
    site's first call; later calls replay without looking at them, and NaN keeps the answer from looking right);
    Valid[r] = 1 where the row counts. The log-sum-exp runs online over
    column blocks and the target logit is picked in the same pass, into a tile summed once at the end (the checker
    follows that element-wise accumulation over the loop, and requires the pick's sum to include the target)."""
    (pr,) = tile_grid(cdiv(N, BR))
    rr = pr * BR + arange(BR)
    tgt = load(Tgt[rr])
    keep = tgt != ignore_index
    m = full((BR,), -inf, float32)
    l = zeros((BR,), float32)
    hits = zeros((BR, BC), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc], other=-inf).to(float32)
        hit = rc[None, :] == tgt[:, None]
        sel = where(hit, x, 0.0)
        assert_tag(implies(hit, tag_of(sel, "C") == tgt[:, None]), "the picked logit is the target's column")
        hits = hits + sel
        if LOG_SOFTMAX == 1:
            m_new = maximum(m, max(x, 1))
            l = l * exp(m - m_new) + sum(exp(x - m_new[:, None]), 1)
            m = m_new
    picked = sum(hits, 1)
    loss = 0.0 - picked
    if LOG_SOFTMAX == 1:
        loss = m + log(l) - picked
    bad = keep & ((tgt < 0) | (tgt >= C))
    store(Loss[rr], where(keep, where(bad, inf - inf, loss), 0.0))
    store(Valid[rr], where(keep, 1.0, 0.0))


@kernel
def cosine_loss_kernel(A: Tensor("N", "D"), B: Tensor("N", "D"), Loss: Tensor("N"), eps: float,
                       BR: constexpr = 4, BD: constexpr = 64):
    """Loss[r] = 1 - <A[r], B[r]> / (max(|A[r]|, eps) * max(|B[r]|, eps))."""
    (pr,) = tile_grid(cdiv(N, BR))
    rr = pr * BR + arange(BR)
    dot = zeros((BR,), float32)
    na = zeros((BR,), float32)
    nb = zeros((BR,), float32)
    for d0 in range(0, D, BD):
        rd = d0 + arange(BD)
        a = load(A[rr, rd]).to(float32)
        b = load(B[rr, rd]).to(float32)
        dot = dot + sum(a * b, 1)
        na = na + sum(a * a, 1)
        nb = nb + sum(b * b, 1)
    cos = dot / (maximum(sqrt(na), eps) * maximum(sqrt(nb), eps))
    store(Loss[rr], 1.0 - cos)


@kernel
def triplet_loss_kernel(A: Tensor("N", "D"), Pos: Tensor("N", "D"), Neg: Tensor("N", "D"), Loss: Tensor("N"),
                        margin: float, p: float, eps: float,
                        BR: constexpr = 4, BD: constexpr = 64, NORM: constexpr = 2, SWAP: constexpr = 0):
    """Loss[r] = max(d(A, Pos) - d(A, Neg) + margin, 0) with d(x, y) = |x - y + eps|_p (NORM 1, 2, or 0 for a
    general p); SWAP = 1 uses min(d(A, Neg), d(Pos, Neg)) as the negative distance."""
    (pr,) = tile_grid(cdiv(N, BR))
    assume(p > 0.0)  # the host's check: |x|^p of a zero (padded) lane, exp(p * log(0)), is 0
    rr = pr * BR + arange(BR)
    sp = zeros((BR,), float32)
    sn = zeros((BR,), float32)
    ss = zeros((BR,), float32)
    for d0 in range(0, D, BD):
        rd = d0 + arange(BD)
        inside = rd[None, :] < D
        a = load(A[rr, rd]).to(float32)
        q = load(Pos[rr, rd]).to(float32)
        n = load(Neg[rr, rd]).to(float32)
        xp = abs(where(inside, a - q + eps, 0.0))
        xn = abs(where(inside, a - n + eps, 0.0))
        xs = abs(where(inside, q - n + eps, 0.0))
        if NORM == 2:
            xp = xp * xp
            xn = xn * xn
            xs = xs * xs
        if NORM == 0:
            xp = exp(p * log(xp))
            xn = exp(p * log(xn))
            xs = exp(p * log(xs))
        sp = sp + sum(xp, 1)
        sn = sn + sum(xn, 1)
        if SWAP == 1:
            ss = ss + sum(xs, 1)
    if NORM == 2:
        sp = sqrt(sp)
        sn = sqrt(sn)
        ss = sqrt(ss)
    if NORM == 0:
        sp = exp(log(sp) / p)
        sn = exp(log(sn) / p)
        ss = exp(log(ss) / p)
    if SWAP == 1:
        sn = where((sn < ss) | (sn != sn), sn, ss)  # torch.min: NaN wins
    e = sp - sn + margin
    store(Loss[rr], where(e < 0.0, 0.0, e))  # max(., 0) keeping NaN, as torch's clamp


KERNELS: tuple[Kernel, ...] = (pointwise_loss_kernel, loss_partial_kernel, sum_partials_kernel, cross_entropy_kernel,
                               cosine_loss_kernel, triplet_loss_kernel)

REDUCTIONS = ("none", "mean", "sum")


# ---- policies ----------------------------------------------------------------------------------------------
def _numel(shape: Sequence[int]) -> int:
    n = 1
    for v in shape:
        n *= int(v)
    return n


def _sum_policies(n: int, target: str) -> dict[str, Policy]:
    """Tiles of the two reduction stages (and the unreduced element-wise kernel) for n terms."""
    if target == "interpret":
        return {"pointwise_loss_kernel": Policy.make(BLOCK=64),
                "loss_partial_kernel": Policy.make(BLOCK=64, CHUNK=2),
                "sum_partials_kernel": Policy.make(BLOCK=64)}
    block = 1024
    chunk = pow2_between(-(-n // (block * 1024)), 1, 1 << 16)  # at most ~1024 partial sums
    parts = -(-n // (block * chunk))
    return {"pointwise_loss_kernel": Policy.make(BLOCK=block, num_warps=4, num_stages=1),
            "loss_partial_kernel": Policy.make(BLOCK=block, CHUNK=chunk, num_warps=4, num_stages=2),
            "sum_partials_kernel": Policy.make(BLOCK=pow2_between(parts, 16, 1024), num_warps=4, num_stages=1)}


def _row_policy(rows: int, cols: int, target: str, col_name: str) -> Policy:
    if target == "interpret":
        return Policy.make(BR=4, **{col_name: 16})
    bc = pow2_between(cols, 16, 2048)
    br = pow2_between(rows, 1, builtins.max(1, 4096 // bc))
    return Policy.make(BR=br, **{col_name: bc}, num_warps=4 if br * bc <= 2048 else 8, num_stages=2)


def _elementwise_policies(shape: Sequence[int], target: str) -> dict[str, Policy]:
    return _sum_policies(_numel(shape), target)


def mse_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of mse_loss for inputs of this shape."""
    return _elementwise_policies(shape, target)


def l1_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of l1_loss for inputs of this shape."""
    return _elementwise_policies(shape, target)


def smooth_l1_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of smooth_l1_loss for inputs of this shape."""
    return _elementwise_policies(shape, target)


def huber_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of huber_loss for inputs of this shape."""
    return _elementwise_policies(shape, target)


def hinge_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of hinge_loss for inputs of this shape."""
    return _elementwise_policies(shape, target)


def kl_div_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of kl_div for inputs of this shape."""
    return _elementwise_policies(shape, target)


def cross_entropy_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of cross_entropy for logits of shape (N, C)."""
    rows, cols = _rows_cols(shape)
    return {"cross_entropy_kernel": _row_policy(rows, cols, target, "BC"), **_sum_policies(rows, target)}


def nll_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of nll_loss for log-probabilities of shape (N, C)."""
    return cross_entropy_policies(shape, target)


def cosine_similarity_loss_policies(shape: Sequence[int], dim: int = 1, target: str = "cuda") -> dict[str, Policy]:
    """Template policies of cosine_similarity_loss for inputs of this shape, reduced along dim."""
    n = _numel(shape)
    cols = int(shape[dim]) if shape else 1
    rows = n // builtins.max(cols, 1)
    return {"cosine_loss_kernel": _row_policy(rows, cols, target, "BD"), **_sum_policies(rows, target)}


def triplet_margin_loss_policies(shape: Sequence[int], target: str = "cuda") -> dict[str, Policy]:
    """Template policies of triplet_margin_loss for (N, D) (or (D,)) embeddings."""
    rows, cols = (1, int(shape[0])) if len(shape) == 1 else (int(shape[0]), int(shape[1]))
    return {"triplet_loss_kernel": _row_policy(rows, cols, target, "BD"), **_sum_policies(rows, target)}


def _rows_cols(shape: Sequence[int]) -> tuple[int, int]:
    if len(shape) == 1:
        return 1, int(shape[0])
    return int(shape[0]), int(shape[1])


# ---- host helpers ------------------------------------------------------------------------------------------
class _Launcher:
    """The policies and kernel substitutions of one op call, and where it runs."""

    def __init__(self, templates: dict[str, Policy], policies: dict[str, Policy] | None,
                 kernels: dict[str, Kernel] | None, target: str) -> None:
        self.templates = templates
        self.policies = policies or {}
        self.kernels = kernels or {}
        self.target = target

    def __call__(self, default: Kernel, *args: object, **consts: int) -> None:
        pol = self.policies.get(default.name, self.templates[default.name])
        if consts:
            pol = pol.with_consts(**consts)
        self.kernels.get(default.name, default)(*args, policy=pol, target=self.target)

    def total(self, p: torch.Tensor, t: torch.Tensor, loss: int, alpha: float, scale: float) -> torch.Tensor:
        """scale * sum(term(p, t)) over the flat tensors, as a (1,) fp32 tensor (two deterministic stages)."""
        n = p.numel()
        pol = self.policies.get("loss_partial_kernel", self.templates["loss_partial_kernel"])
        per = pol.const("BLOCK", 1024) * pol.const("CHUNK", 4)
        partial = _alloc((-(-n // per),), torch.float32, p.device)
        self(loss_partial_kernel, p, t, partial, alpha, LOSS=loss)
        out = _alloc((1,), torch.float32, p.device)
        self(sum_partials_kernel, partial, out, scale)
        return out


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a kernel writes comes from here (tests fill them with NaN to catch unwritten elements)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _check_float(x: object, name: str, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what}: {name} must be a tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{what}: {name} must be a floating-point tensor, got {x.dtype}")
    return x


def _check_reduction(reduction: str, what: str, allowed: tuple[str, ...] = REDUCTIONS) -> None:
    if reduction not in allowed:
        raise ValueError(f"{what}: reduction must be one of {', '.join(map(repr, allowed))}, got {reduction!r}")


def _pair(p: torch.Tensor, t: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_float(p, "input", what)
    _check_float(t, "target", what)
    if p.device != t.device:
        raise ValueError(f"{what}: input is on {p.device} but target is on {t.device}")
    if p.shape != t.shape:
        try:
            p, t = torch.broadcast_tensors(p, t)
        except RuntimeError:
            raise ValueError(f"{what}: input {tuple(p.shape)} and target {tuple(t.shape)} do not broadcast") from None
    if p.numel() == 0:
        raise ValueError(f"{what}: empty input")
    return p, t


def _elementwise(p: torch.Tensor, t: torch.Tensor, loss: str, alpha: float, reduction: str, what: str,
                 policies: dict[str, Policy] | None, kernels: dict[str, Kernel] | None, target: str | None,
                 batch_divisor: int | None = None) -> torch.Tensor:
    p, t = _pair(p, t, what)
    dtype = torch.promote_types(p.dtype, t.dtype)
    tgt = _target(p, target)
    run = _Launcher(_sum_policies(p.numel(), tgt), policies, kernels, tgt)
    pf, tf = p.reshape(-1), t.reshape(-1)
    if reduction == "none":
        y = _alloc(tuple(p.shape), dtype, p.device)
        run(pointwise_loss_kernel, pf, tf, y.view(-1), alpha, LOSS=LOSSES[loss])
        return y
    n = pf.numel()
    scale = 1.0 if reduction == "sum" else 1.0 / (batch_divisor if reduction == "batchmean" else n)
    return run.total(pf, tf, LOSSES[loss], alpha, scale).reshape(()).to(dtype)


def _finish_rows(run: _Launcher, rows: torch.Tensor, reduction: str, dtype: torch.dtype,
                 shape: tuple[int, ...]) -> torch.Tensor:
    """Reduce per-row fp32 terms: "none" gives them back in `shape` and `dtype`."""
    if reduction == "none":
        return rows.reshape(shape).to(dtype)
    scale = 1.0 if reduction == "sum" else 1.0 / rows.numel()
    return run.total(rows, rows, LOSSES["identity"], 0.0, scale).reshape(()).to(dtype)


# ---- element-wise losses -----------------------------------------------------------------------------------
def mse_loss(p: torch.Tensor, t: torch.Tensor, reduction: str = "mean", *, policies: dict[str, Policy] | None = None,
             kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.mse_loss: (p - t)^2, reduced."""
    _check_reduction(reduction, "mse_loss")
    return _elementwise(p, t, "mse", 0.0, reduction, "mse_loss", policies, kernels, target)


def l1_loss(p: torch.Tensor, t: torch.Tensor, reduction: str = "mean", *, policies: dict[str, Policy] | None = None,
            kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.l1_loss: |p - t|, reduced."""
    _check_reduction(reduction, "l1_loss")
    return _elementwise(p, t, "l1", 0.0, reduction, "l1_loss", policies, kernels, target)


def smooth_l1_loss(p: torch.Tensor, t: torch.Tensor, beta: float = 1.0, reduction: str = "mean", *,
                   policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                   target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""
    _check_reduction(reduction, "smooth_l1_loss")
    if not isinstance(beta, (int, float)) or beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be a non-negative number, got {beta!r}")
    kind = "smooth_l1" if beta > 0 else "l1"
    return _elementwise(p, t, kind, float(beta), reduction, "smooth_l1_loss", policies, kernels, target)


def huber_loss(p: torch.Tensor, t: torch.Tensor, delta: float = 1.0, reduction: str = "mean", *,
               policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
               target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    _check_reduction(reduction, "huber_loss")
    if not isinstance(delta, (int, float)) or delta <= 0:
        raise ValueError(f"huber_loss: delta must be a positive number, got {delta!r}")
    return _elementwise(p, t, "huber", float(delta), reduction, "huber_loss", policies, kernels, target)


def hinge_loss(p: torch.Tensor, t: torch.Tensor, reduction: str = "mean", *, policies: dict[str, Policy] | None = None,
               kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """mean(clamp(1 - p * t, min=0)) (t holds +-1 labels); reduction "sum" or "none" as for the others."""
    _check_reduction(reduction, "hinge_loss")
    return _elementwise(p, t, "hinge", 0.0, reduction, "hinge_loss", policies, kernels, target)


def kl_div(input_log: torch.Tensor, target_p: torch.Tensor, reduction: str = "batchmean", log_target: bool = False, *,
           policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
           target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.kl_div(input_log, target_p): target * (log(target) - input_log) (0 where target is 0),
    or exp(target) * (target - input_log) with log_target; "batchmean" divides the sum by input.size(0)."""
    _check_reduction(reduction, "kl_div", REDUCTIONS + ("batchmean",))
    _check_float(input_log, "input", "kl_div")
    batch = input_log.shape[0] if input_log.dim() > 0 else 1
    kind = "kl_div_log_target" if log_target else "kl_div"
    return _elementwise(input_log, target_p, kind, 0.0, reduction, "kl_div", policies, kernels, target,
                        batch_divisor=batch)


# ---- per-row losses ----------------------------------------------------------------------------------------
def _class_rows(x: torch.Tensor, tgt: torch.Tensor, ignore_index: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_float(x, "input", what)
    if not isinstance(tgt, torch.Tensor) or tgt.dtype != torch.int64:
        got = tgt.dtype if isinstance(tgt, torch.Tensor) else type(tgt).__name__
        raise ValueError(f"{what}: target must be an int64 tensor of class indices, got {got}")
    if x.dim() == 1 and tgt.dim() == 0:
        x, tgt = x[None], tgt[None]
    if x.dim() != 2 or tgt.dim() != 1 or tgt.shape[0] != x.shape[0]:
        raise ValueError(f"{what}: expected input (N, C) and target (N,), got {tuple(x.shape)} and {tuple(tgt.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{what}: empty input of shape {tuple(x.shape)}")
    if tgt.device != x.device:
        raise ValueError(f"{what}: input is on {x.device} but target is on {tgt.device}")
    capturing = tgt.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if not capturing:
        # A check for the user, not part of the computation: hidden from a replay's recorder (runtime/replay.py),
        # so a call site's later calls replay without it (and its host sync); the kernel gives NaN for such rows.
        with _disable_current_modes():
            bad = (tgt != ignore_index) & ((tgt < 0) | (tgt >= x.shape[1]))
            if bool(bad.any()):
                raise ValueError(f"{what}: target holds class indices outside [0, {x.shape[1]})")
    return x, tgt


def _class_loss(x: torch.Tensor, tgt: torch.Tensor, reduction: str, ignore_index: int, log_softmax: int,
                what: str, policies: dict[str, Policy] | None, kernels: dict[str, Kernel] | None,
                target: str | None) -> torch.Tensor:
    _check_reduction(reduction, what)
    if not isinstance(ignore_index, int):
        raise ValueError(f"{what}: ignore_index must be an int, got {ignore_index!r}")
    unbatched = x.dim() == 1
    x, tgt = _class_rows(x, tgt, ignore_index, what)
    tg = _target(x, target)
    run = _Launcher(cross_entropy_policies(tuple(x.shape), tg), policies, kernels, tg)
    n = x.shape[0]
    loss = _alloc((n,), torch.float32, x.device)
    valid = _alloc((n,), torch.float32, x.device)
    run(cross_entropy_kernel, x, tgt, loss, valid, ignore_index, LOG_SOFTMAX=log_softmax)
    if reduction == "none":
        return loss.reshape(()).to(x.dtype) if unbatched else loss.to(x.dtype)
    total = run.total(loss, loss, LOSSES["identity"], 0.0, 1.0)
    if reduction == "mean":  # over the rows that count, divided on the device (one more launch, no host sync)
        from . import pointwise as pw

        count = run.total(valid, valid, LOSSES["identity"], 0.0, 1.0)
        total = pw.pointwise(pw.Chain((pw.Step("div", (("in", 0), ("in", 1))),)), [total, count], target=tg)
    return total.reshape(()).to(x.dtype)


def cross_entropy(logits: torch.Tensor, target_idx: torch.Tensor, reduction: str = "mean", ignore_index: int = -100, *,
                  policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                  target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.cross_entropy with class-index targets: logits (N, C), target (N,) int64; "mean"
    averages over the rows whose target is not ignore_index (no class weights, no label smoothing)."""
    return _class_loss(logits, target_idx, reduction, ignore_index, 1, "cross_entropy", policies, kernels, target)


def nll_loss(logp: torch.Tensor, target_idx: torch.Tensor, reduction: str = "mean", ignore_index: int = -100, *,
             policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
             target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.nll_loss: -logp[r, target[r]], logp (N, C), target (N,) int64 (no class weights)."""
    return _class_loss(logp, target_idx, reduction, ignore_index, 0, "nll_loss", policies, kernels, target)


def cosine_similarity_loss(p: torch.Tensor, t: torch.Tensor, dim: int = 1, eps: float = 1e-8,
                           reduction: str = "mean", *, policies: dict[str, Policy] | None = None,
                           kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """mean(1 - F.cosine_similarity(p, t, dim, eps)); "none" gives 1 - cos per position."""
    _check_reduction(reduction, "cosine_similarity_loss")
    p, t = _pair(p, t, "cosine_similarity_loss")
    if not -p.dim() <= dim < p.dim():
        raise ValueError(f"cosine_similarity_loss: dim {dim} is out of range for {p.dim()}-D inputs")
    if not isinstance(eps, (int, float)) or eps <= 0:
        raise ValueError(f"cosine_similarity_loss: eps must be a positive number, got {eps!r}")
    dtype = torch.promote_types(p.dtype, t.dtype)
    dim = dim % p.dim()
    a, b = p.movedim(dim, -1), t.movedim(dim, -1)
    rest = tuple(a.shape[:-1])
    a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    tg = _target(p, target)
    run = _Launcher(cosine_similarity_loss_policies(tuple(p.shape), dim, tg), policies, kernels, tg)
    rows = _alloc((a2.shape[0],), torch.float32, p.device)
    run(cosine_loss_kernel, a2, b2, rows, float(eps))
    return _finish_rows(run, rows, reduction, dtype, rest)


def triplet_margin_loss(a: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, reduction: str = "mean", *,
                        policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                        target: str | None = None) -> torch.Tensor:
    """torch.nn.functional.triplet_margin_loss on (N, D) (or (D,)) embeddings with p-norm distances
    |x - y + eps|_p, p > 0."""
    what = "triplet_margin_loss"
    _check_reduction(reduction, what)
    for name, v in (("anchor", a), ("positive", pos), ("negative", neg)):
        _check_float(v, name, what)
    if not (a.shape == pos.shape == neg.shape) or a.dim() not in (1, 2) or a.numel() == 0:
        raise ValueError(f"{what}: anchor, positive and negative must share one (N, D) or (D,) shape, got "
                         f"{tuple(a.shape)}, {tuple(pos.shape)}, {tuple(neg.shape)}")
    if not (a.device == pos.device == neg.device):
        raise ValueError(f"{what}: the three inputs must be on one device")
    if not isinstance(p, (int, float)) or p <= 0:
        raise ValueError(f"{what}: p must be a positive number, got {p!r}")
    if not isinstance(margin, (int, float)) or margin <= 0:
        raise ValueError(f"{what}: margin must be a positive number, got {margin!r}")
    dtype = torch.promote_types(torch.promote_types(a.dtype, pos.dtype), neg.dtype)
    unbatched = a.dim() == 1
    a2, q2, n2 = (v.reshape(1, -1) if unbatched else v for v in (a, pos, neg))
    tg = _target(a, target)
    run = _Launcher(triplet_margin_loss_policies(tuple(a2.shape), tg), policies, kernels, tg)
    rows = _alloc((a2.shape[0],), torch.float32, a.device)
    norm = 2 if p == 2 else (1 if p == 1 else 0)
    run(triplet_loss_kernel, a2, q2, n2, rows, float(margin), float(p), float(eps), NORM=norm, SWAP=int(bool(swap)))
    return _finish_rows(run, rows, reduction, dtype, () if unbatched else (a2.shape[0],))
