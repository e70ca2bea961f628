"""torch.ops.argus.*: the custom ops matched subgraphs become. Each has a fake (meta) implementation so
Inductor and dynamic shapes see through it, and a real one that runs the Argus kernel for the
tensors' signature, or the aten op where Argus does not apply."""
from __future__ import annotations

import logging
import math
import time

import torch
import torch.nn.functional as F
from torch import Tensor

from . import reporting as _report
from .config import Options
from .kernels import attention as _attention
from .kernels import bmm as _bmm
from .kernels import gemm as _gemm
from .policies import attention_policy, gemm_policy
from .signature import device_arch, make_signature

log = logging.getLogger("argus_inductor")
_ACTIVE = Options.resolve()
SUPPORTED_ARCHS = ("sm_90", "gfx942")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def set_active_options(opts: Options) -> None:
    global _ACTIVE
    _ACTIVE = opts


def active_options() -> Options:
    return _ACTIVE


def target_for(device: torch.device, opts: Options | None = None) -> str | None:
    """The Triton target Argus kernels use for tensors on `device`, or None where Argus does not run."""
    opts = opts or _ACTIVE
    if device.type == "cpu":
        return "interpret" if opts.interpret else None
    if device.type == "cuda":
        arch = device_arch(device)
        if arch in SUPPORTED_ARCHS:
            return "hip" if arch.startswith("gfx") else "cuda"
    return None


def _run(node_id: str, sig_fn, kernel_fn, fallback_fn, tensors: list[Tensor]):
    target = target_for(tensors[0].device)
    reason = None
    if target is None:
        reason = f"fallback (no Argus target for {device_arch(tensors[0].device)})"
    elif any(t.dtype not in DTYPES for t in tensors):
        reason = f"fallback (dtype {tensors[0].dtype} not supported)"
    elif _ACTIVE.on_miss == "fallback":
        reason = "fallback (ARGUS_ON_MISS=fallback)"
    timed = _ACTIVE.report or not tensors[0].is_cuda  # a host clock costs nothing on the CPU
    if timed and tensors[0].is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    if reason is None:
        out = kernel_fn(target)
        source = "default (template policy, untuned)"
    else:
        out = fallback_fn()
        source = reason
    ms = None
    if timed:
        if tensors[0].is_cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
    _report.record_call(node_id, sig_fn().short(), source, ms)
    return out


_ACTS = {"none": lambda x: x, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
         "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@torch.library.custom_op("argus::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str, node_id: str) -> Tensor:
    """act(x @ weight.T + bias) for x (..., K), weight (N, K)."""
    k = x.shape[-1]
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]

    def sig():
        epi = "+".join(p for p in ("bias" if bias is not None else "", activation if activation != "none" else "") if p)
        return make_signature("gemm", epi, [x2, weight], {"N": n, "K": k}, {"M": m})

    def run(target: str) -> Tensor:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
        _gemm(x2, weight.t(), bias, activation, out=out, policy=gemm_policy(m, n, k, target))
        return out.view(*x.shape[:-1], n)

    def fallback() -> Tensor:
        return _ACTS[activation](F.linear(x, weight, bias))

    return _run(node_id, sig, run, fallback, [x, weight])


@linear.register_fake
def _(x, weight, bias, activation, node_id):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("argus::bmm", mutates_args=())
def bmm(a: Tensor, b: Tensor, node_id: str) -> Tensor:
    bt, m, k = a.shape
    n = b.shape[2]

    def sig():
        return make_signature("bmm", "", [a, b], {"N": n, "K": k}, {"B": bt, "M": m})

    def run(target: str) -> Tensor:
        out = torch.empty(bt, m, n, dtype=a.dtype, device=a.device)
        return _bmm(a, b, out=out, policy=gemm_policy(m, n, k, target))

    return _run(node_id, sig, run, lambda: torch.bmm(a, b), [a, b])


@bmm.register_fake
def _(a, b, node_id):
    return a.new_empty(a.shape[0], a.shape[1], b.shape[2])


@torch.library.custom_op("argus::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float | None, node_id: str) -> Tensor:
    """softmax(q k^T * scale [causal]) v for q (Z, H, S, D), k/v (Z, HK, T, D), H % HK == 0."""
    z, h, s, d = q.shape
    hk, t = k.shape[1], k.shape[2]

    def sig():
        epi = ",".join(p for p in ("causal" if is_causal else "", f"gqa{h // hk}" if h != hk else "") if p)
        return make_signature("attention", epi, [q, k, v], {"H": h, "HK": hk, "D": d}, {"Z": z, "S": s, "T": t})

    def run(target: str) -> Tensor:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous, as the fake says
        return _attention(q, k, v, is_causal, scale, out=out, policy=attention_policy(s, d, target))

    def fallback() -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=h != hk)

    if v.shape[-1] != d or h % hk:
        return fallback()
    return _run(node_id, sig, run, fallback, [q, k, v])


@attention.register_fake
def _(q, k, v, is_causal, scale, node_id):
    return q.new_empty(*q.shape[:-1], v.shape[-1])


def default_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)
