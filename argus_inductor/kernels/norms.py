"""Row softmax, RMSNorm and LayerNorm over the last dimension of a 2-D view."""
from __future__ import annotations

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    arange,
    assert_tag,
    cdiv,
    constexpr,
    exp,
    float32,
    full,
    inf,
    load,
    max,
    maximum,
    rsqrt,
    store,
    sum,
    tag_of,
    tile_grid,
    where,
    zeros,
)
from ..dsl.runtime import kernel


@kernel
def softmax_kernel(X: Tensor("R", "C"), Y: Tensor("R", "C"), BR: constexpr = 4, BC: constexpr = 64):
    """Y = softmax(X, dim=1), online over column blocks (one read for the statistics, one to write)."""
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


@kernel
def rmsnorm_kernel(X: Tensor("R", "C"), W: Tensor("C"), Y: Tensor("R", "C"), eps: float,
                   BR: constexpr = 4, BC: constexpr = 64, ROUND: constexpr = 0):
    """Y = X * rsqrt(mean(X^2) + eps) * W; ROUND 1 rounds the normalized value to Y's dtype before the weight
    multiplies it (transformers' RMSNorm: `weight * hidden.to(input_dtype)`)."""
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    ss = zeros((BR,), float32)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc]).to(float32)
        ss = ss + sum(x * x, 1)
    assert_tag((tag_of(ss, "sum(C).lo") <= 0) & (tag_of(ss, "sum(C).hi") >= C),
               "each row's mean square counts every element of the row")
    rstd = rsqrt(ss / C + eps)
    for c0 in range(0, C, BC):
        rc = c0 + arange(BC)
        x = load(X[rr, rc]).to(float32)
        w = load(W[rc]).to(float32)
        assert_tag(tag_of(w[None, :], "C") == tag_of(x, "C"), "the weight read belongs to the element's column")
        n = x * rstd[:, None]
        if ROUND == 1:
            n = n.to(Y.dtype).to(float32)
        store(Y[rr, rc], n * w[None, :])


@kernel
def layernorm_kernel(X: Tensor("R", "C"), W: Tensor("C"), Bias: Tensor("C"), Y: Tensor("R", "C"), eps: float,
                     BR: constexpr = 4, BC: constexpr = 64):
    """Y = (X - mean) / sqrt(var + eps) * W + Bias (biased variance, like torch.layer_norm)."""
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


def _rows(x: torch.Tensor) -> torch.Tensor:
    if x.dim() < 1:
        raise ValueError("expected at least a 1-D tensor")
    return x.reshape(-1, x.shape[-1])


def _out(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.shape != x.shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(x.shape)}")
    return out


def softmax(x: torch.Tensor, out: torch.Tensor | None = None, policy: Policy | None = None) -> torch.Tensor:
    """softmax over the last dimension."""
    out = _out(x, out)
    softmax_kernel(_rows(x), _rows(out), policy=policy)
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None,
            policy: Policy | None = None) -> torch.Tensor:
    out = _out(x, out)
    rmsnorm_kernel(_rows(x), weight, _rows(out), eps, policy=policy)
    return out


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
              out: torch.Tensor | None = None, policy: Policy | None = None) -> torch.Tensor:
    out = _out(x, out)
    layernorm_kernel(_rows(x), weight, bias, _rows(out), eps, policy=policy)
    return out
