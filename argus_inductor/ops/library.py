"""torch.ops.argus.library: the DSL library's general op classes (convolutions, reductions, softmax,
normalizations, pooling, scans, losses, elementwise chains) behind one custom op.

Each class is a `LibraryOp`: the host function that launches its DSL kernels, the torch reference it must match
(the fallback, and, run on fake tensors, the op's fake implementation: output shape and dtype always agree with
torch), the template policies of the kernels it launches, and its FLOPs as torch's FlopCounterMode counts them.
A call is `argus::library(name, tensors, args, node_id)` with the op's arguments as canonical JSON, so the graph,
the shape signature and the cache entry all carry them. Signatures: op = the class name, epilogue = the arguments,
every dim static; plans come from the same cache and ARGUS_ON_MISS rules as the GEMM/attention/MoE ops.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..dsl import Kernel, Policy
from ..kernels import conv as _conv
from ..kernels import loss as _loss
from ..kernels import normalize as _norm
from ..kernels import pointwise as _pw
from ..kernels import pool as _pool
from ..kernels import reduce as _reduce
from ..kernels import rms_rounded as _rmsnorm
from ..kernels import rotary as _rotary
from ..kernels import router as _router
from ..kernels import scan as _scan
from ..kernels.gemm import ACTIVATION_FNS
from ..kernels.policies import fit_shared_memory
from ..runtime.signature import Signature, make_signature
from .core import FORGET, LOCK, RESOLVERS, SPECS, OpSpec
from .dispatch import call_key, replay_hot, run_op, tensor_key

Tensors = list[Tensor | None]
Args = dict[str, Any]
HostFn = Callable[..., Tensor]


@dataclass(frozen=True)
class LibraryOp:
    name: str                                             # signature op name
    kind: str                                             # the ARGUS_OPS class that enables it
    kernels: tuple[Kernel, ...]                           # every kernel the host function may launch
    run: Callable[[Tensors, Args, dict[str, Any]], Tensor]   # (tensors, args, launch kwargs) -> result
    reference: Callable[[Tensors, Args], Tensor]          # torch semantics (fallback and fake)
    policies: Callable[[Tensors, Args, str], dict[str, Policy]]  # template policy of each kernel it launches
    flops: Callable[[Tensors, Args, Tensor], int] = lambda ts, a, out: 0
    # what the invariant checker needs beyond the policy: (constexprs, shape symbols) by kernel name; None proves
    # the kernels over symbolic shapes
    geometry: Callable[[Tensors, Args], tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]] | None = None
    # kernels generated per call (elementwise chains): the kernels of these tensors and arguments
    kernels_for: Callable[[Tensors, Args], tuple[Kernel, ...]] | None = None
    # the operands it writes in place besides returning its result (a KV cache): checked with the result
    writes: tuple[int, ...] = ()


LIBRARY: dict[str, LibraryOp] = {}


def register(op: LibraryOp) -> LibraryOp:
    LIBRARY[op.name] = op
    return op


@functools.lru_cache(maxsize=4096)
def parse_args(text: str) -> Args:
    """The arguments of a call from their canonical JSON, parsed once per text (every call of an op node carries
    the same text), with a chain's validated Chain kept under "_chain". Treat the result as read-only."""
    a = json.loads(text)
    if "chain" in a:
        a["_chain"] = chain_of(a)
    return a


def canonical_args(args: Args) -> str:
    """The JSON text a call, its signature and its cache entry carry (tuples as lists, sorted keys)."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ convolutions

_CONV = {(False, 1): F.conv1d, (False, 2): F.conv2d, (False, 3): F.conv3d,
         (True, 1): F.conv_transpose1d, (True, 2): F.conv_transpose2d, (True, 3): F.conv_transpose3d}


def _conv_ref(ts: Tensors, a: Args) -> Tensor:
    x, w, b = ts
    fn = _CONV[(a["transposed"], w.dim() - 2)]
    if a["transposed"]:
        y = fn(x, w, b, a["stride"], a["padding"], a["output_padding"], a["groups"], a["dilation"])
    else:
        y = fn(x, w, b, a["stride"], a["padding"], a["dilation"], a["groups"])
    return ACTIVATION_FNS[a["activation"]](y)


def _conv_geo(ts: Tensors, a: Args) -> tuple[Any, ...]:
    x, w = ts[0], ts[1]
    return (tuple(x.shape), tuple(w.shape), a["stride"], a["padding"], a["dilation"], a["groups"], a["transposed"],
            a["output_padding"])


def _conv_flops(ts: Tensors, a: Args, out: Tensor) -> int:
    from torch.utils.flop_counter import conv_flop_count

    return int(conv_flop_count(list(ts[0].shape), list(ts[1].shape), list(out.shape), a["transposed"]))


def _conv_verify_geometry(ts: Tensors, a: Args) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    name, consts, shapes = _conv.conv_geometry(*_conv_geo(ts, a))
    return {name: consts}, {name: shapes}


register(LibraryOp(
    "conv", "conv", _conv.KERNELS,
    lambda ts, a, kw: _conv.conv(ts[0], ts[1], ts[2], a["stride"], a["padding"], a["dilation"], a["groups"],
                                 a["transposed"], a["output_padding"], a["activation"], **kw),
    _conv_ref,
    lambda ts, a, target: _conv.conv_policies(*_conv_geo(ts, a), target=target),
    _conv_flops, _conv_verify_geometry))


# ------------------------------------------------------------------------------------ reductions, softmax

_REDUCE_REF: dict[str, Callable[[Tensor, Any, bool], Tensor]] = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k) if d is not None else x.sum(),
    "mean": lambda x, d, k: x.mean(d, keepdim=k) if d is not None else x.mean(),
    "amax": lambda x, d, k: x.amax(d if d is not None else (), keepdim=k),
    "amin": lambda x, d, k: x.amin(d if d is not None else (), keepdim=k),
    "max": lambda x, d, k: x.amax(d if d is not None else (), keepdim=k),
    "min": lambda x, d, k: x.amin(d if d is not None else (), keepdim=k),
    "argmax": lambda x, d, k: x.argmax(d[0], keepdim=k) if d is not None else x.argmax(),
    "argmin": lambda x, d, k: x.argmin(d[0], keepdim=k) if d is not None else x.argmin(),
    "prod": lambda x, d, k: x.prod(d[0], keepdim=k) if d is not None else x.prod(),
}


def _dim_arg(d: Any) -> Any:
    return tuple(d) if isinstance(d, list) else d


def _reduce_dim(a: Args) -> Any:
    """The dim as reduce() takes it: one int for the arg kinds and prod, a tuple otherwise."""
    d = _dim_arg(a["dim"])
    return d[0] if d is not None and a["kind"] in ("argmax", "argmin", "prod") else d


register(LibraryOp(
    "reduce", "reduce", _reduce.KERNELS,
    lambda ts, a, kw: _reduce.reduce(ts[0], _reduce_dim(a), a["kind"], a["keepdim"], **kw),
    lambda ts, a: _REDUCE_REF[a["kind"]](ts[0], _dim_arg(a["dim"]), a["keepdim"]),
    lambda ts, a, target: _reduce.reduce_policies(tuple(ts[0].shape), _reduce_dim(a), a["kind"], target)))

register(LibraryOp(
    "softmax", "reduce", _reduce.KERNELS,
    lambda ts, a, kw: _reduce.softmax(ts[0], a["dim"], a["log"], **kw),
    lambda ts, a: (torch.log_softmax if a["log"] else torch.softmax)(ts[0], a["dim"]),
    lambda ts, a, target: _reduce.softmax_policies(tuple(ts[0].shape), a["dim"], target)))


# ---------------------------------------------------------------------------------------- normalizations

register(LibraryOp(
    "layer_norm", "norm", _norm.KERNELS,
    lambda ts, a, kw: _norm.layer_norm(ts[0], tuple(a["shape"]), ts[1], ts[2], a["eps"], **kw),
    lambda ts, a: F.layer_norm(ts[0], tuple(a["shape"]), ts[1], ts[2], a["eps"]),
    lambda ts, a, target: _norm.layer_norm_policies(tuple(ts[0].shape), tuple(a["shape"]), target)))

register(LibraryOp(
    "group_norm", "norm", _norm.KERNELS,
    lambda ts, a, kw: _norm.group_norm(ts[0], a["groups"], ts[1], ts[2], a["eps"], **kw),
    lambda ts, a: F.group_norm(ts[0], a["groups"], ts[1], ts[2], a["eps"]),
    lambda ts, a, target: _norm.group_norm_policies(tuple(ts[0].shape), a["groups"], target)))

register(LibraryOp(
    "instance_norm", "norm", _norm.KERNELS,
    lambda ts, a, kw: _norm.instance_norm(ts[0], ts[1], ts[2], a["eps"], **kw),
    lambda ts, a: F.instance_norm(ts[0], None, None, ts[1], ts[2], True, 0.0, a["eps"]),
    lambda ts, a, target: _norm.instance_norm_policies(tuple(ts[0].shape), target)))

register(LibraryOp(
    "batch_norm", "norm", _norm.KERNELS,
    lambda ts, a, kw: _norm.batch_norm(ts[0], ts[1], ts[2], ts[3], ts[4], False, a["eps"], **kw),
    lambda ts, a: F.batch_norm(ts[0], ts[1], ts[2], ts[3], ts[4], False, 0.0, a["eps"]),
    lambda ts, a, target: _norm.batch_norm_policies(tuple(ts[0].shape), False, target)))


def _lp_ref(ts: Tensors, a: Args) -> Tensor:
    x, d = ts[0], _dim_arg(a["dim"])
    n = torch.linalg.vector_norm(x, a["p"], d, keepdim=True) if d is not None else torch.linalg.vector_norm(x, a["p"])
    return x / (n.clamp_min(a["eps"]) if a["eps"] else n)


register(LibraryOp(
    "lp_normalize", "norm", _norm.KERNELS,
    lambda ts, a, kw: _norm.lp_normalize(ts[0], a["p"], _dim_arg(a["dim"]), a["eps"], **kw),
    _lp_ref,
    lambda ts, a, target: _norm.lp_normalize_policies(tuple(ts[0].shape), _dim_arg(a["dim"]), target)))


def _rms_ref(ts: Tensors, a: Args) -> Tensor:
    x = ts[0]
    y = x * torch.rsqrt(x.pow(2).mean(_dim_arg(a["dim"]), keepdim=True) + a["eps"])
    return y * ts[1] if ts[1] is not None else y


register(LibraryOp(
    "rms_norm", "norm", _norm.KERNELS,
    lambda ts, a, kw: _norm.rms_norm(ts[0], _dim_arg(a["dim"]), ts[1], a["eps"], **kw),
    _rms_ref,
    lambda ts, a, target: _norm.rms_norm_policies(tuple(ts[0].shape), _dim_arg(a["dim"]), target)))


register(LibraryOp(
    "rms_norm_rounded", "gemm", _rmsnorm.KERNELS,
    lambda ts, a, kw: _rmsnorm.rms_norm_rounded(ts[0], ts[1], a["eps"], **kw),
    lambda ts, a: _rmsnorm.rms_norm_reference(ts[0], ts[1], a["eps"]),
    lambda ts, a, target: {"rmsnorm_kernel": _rmsnorm.rms_norm_policy(
        ts[0].numel() // max(ts[0].shape[-1], 1), ts[0].shape[-1], target)}))


register(LibraryOp(
    "embedding_rms_norm_rounded", "gemm", _rmsnorm.EMBEDDING_KERNELS,
    lambda ts, a, kw: _rmsnorm.embedding_rms_norm_rounded(ts[0], ts[1], ts[2], a["eps"], **kw),
    lambda ts, a: _rmsnorm.embedding_rms_norm_reference(ts[0], ts[1], ts[2], a["eps"]),
    lambda ts, a, target: {"embedding_rmsnorm_kernel": _rmsnorm.embedding_rms_norm_policy(
        ts[0].numel(), ts[1].shape[-1], target)}))


register(LibraryOp(
    "router_topk", "moe", _router.KERNELS,
    lambda ts, a, kw: _router.router_topk(ts[0], a["k"], a["renorm"], **kw),
    lambda ts, a: _router.router_reference(ts[0], a["k"], a["renorm"]),
    lambda ts, a, target: {"router_topk_rows": _router.router_policy(ts[0].shape[0], ts[0].shape[1], a["k"],
                                                                     a["renorm"], target)},
    # proved at the router's own shape: a row of experts is one tile (E <= BE), checked against the policy
    geometry=lambda ts, a: ({}, {"router_topk_rows": _router.router_shapes(ts[0], a["k"])})))


register(LibraryOp(
    "rotary_table", "attention", _rotary.KERNELS,
    lambda ts, a, kw: _rotary.rotary_table(ts[0], **kw),
    lambda ts, a: _rotary.rotary_reference(ts[0]),
    lambda ts, a, target: {"rotary_table_rows": _rotary.rotary_policy(ts[0].numel() // max(ts[0].shape[-1], 1),
                                                                      ts[0].shape[-1], target)},
    # proved at the table's own shape, where the kernel's "a row is one tile" (D <= BD) is checked against the
    # policy, not assumed over symbolic sizes
    geometry=lambda ts, a: ({}, {"rotary_table_rows": _rotary.table_shapes(ts[0])})))


register(LibraryOp(
    "rope_cache", "attention", _rotary.CACHE_KERNELS,
    lambda ts, a, kw: _rotary.rope_cache(*ts, **kw),
    lambda ts, a: _rotary.rope_cache_reference(*ts),
    lambda ts, a, target: {"rope_cache_write": _rotary.rope_cache_policy(ts[0].shape[1], ts[1].shape[1],
                                                                         ts[0].shape[3], target)},
    # proved at the step's own shape: one position, a head one tile wide (checked against the policy)
    geometry=lambda ts, a: ({}, {"rope_cache_write": _rotary.rope_cache_shapes(ts[0], ts[1], ts[5])}),
    writes=(5, 6)))


# ----------------------------------------------------------------------------------------------- scans

def _scan_ref(ts: Tensors, a: Args) -> Tensor:
    x, mask, d = ts[0], ts[1], a["dim"]
    ident = 1.0 if a["kind"] == "prod" else 0.0
    if mask is not None:
        x = torch.where(mask, x, torch.full_like(x, ident))
    if a["reverse"]:
        x = x.flip(d)
    if a["exclusive"]:
        first = torch.full_like(x.narrow(d, 0, 1), ident)
        x = torch.cat([first, x.narrow(d, 0, x.shape[d] - 1)], d)
    y = (torch.cumprod if a["kind"] == "prod" else torch.cumsum)(x, d)
    return y.flip(d) if a["reverse"] else y


register(LibraryOp(
    "scan", "scan", _scan.KERNELS,
    lambda ts, a, kw: _scan.scan(ts[0], a["dim"], a["kind"], a["reverse"], a["exclusive"], ts[1], **kw),
    _scan_ref,
    lambda ts, a, target: _scan.scan_policies(tuple(ts[0].shape), a["dim"], target)))


# --------------------------------------------------------------------------------------------- pooling

_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_ADAPTIVE = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


def _avg_ref(ts: Tensors, a: Args) -> Tensor:
    fn = _AVGPOOL[a["rank"]]
    kw: dict[str, Any] = {"count_include_pad": a["count_include_pad"]}
    if a["rank"] > 1:
        kw["divisor_override"] = a["divisor_override"]
    return fn(ts[0], a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"], **kw)


register(LibraryOp(
    "max_pool", "pool", _pool.KERNELS,
    lambda ts, a, kw: _pool.max_pool(ts[0], a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                                     a["ceil_mode"], **kw),
    lambda ts, a: _MAXPOOL[a["rank"]](ts[0], a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                                      a["ceil_mode"]),
    lambda ts, a, target: _pool.max_pool_policies(tuple(ts[0].shape), a["kernel_size"], a["stride"], a["padding"],
                                                  a["dilation"], a["ceil_mode"], target=target)))

register(LibraryOp(
    "avg_pool", "pool", _pool.KERNELS,
    lambda ts, a, kw: _pool.avg_pool(ts[0], a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"],
                                     a["count_include_pad"], a["divisor_override"], **kw),
    _avg_ref,
    lambda ts, a, target: _pool.avg_pool_policies(tuple(ts[0].shape), a["kernel_size"], a["stride"], a["padding"],
                                                  a["ceil_mode"], target=target)))

register(LibraryOp(
    "adaptive_avg_pool", "pool", _pool.KERNELS,
    lambda ts, a, kw: _pool.adaptive_avg_pool(ts[0], a["output_size"], **kw),
    lambda ts, a: _ADAPTIVE[a["rank"]](ts[0], a["output_size"]),
    lambda ts, a, target: _pool.adaptive_avg_pool_policies(tuple(ts[0].shape), a["output_size"], target)))


# ---------------------------------------------------------------------------------------------- losses

def _reduced(v: Tensor, reduction: str) -> Tensor:
    return v.mean() if reduction == "mean" else v.sum() if reduction == "sum" else v


_LOSS_REF: dict[str, Callable[[Tensors, Args], Tensor]] = {
    "mse_loss": lambda ts, a: F.mse_loss(ts[0], ts[1], reduction=a["reduction"]),
    "l1_loss": lambda ts, a: F.l1_loss(ts[0], ts[1], reduction=a["reduction"]),
    "smooth_l1_loss": lambda ts, a: F.smooth_l1_loss(ts[0], ts[1], reduction=a["reduction"], beta=a["beta"]),
    "huber_loss": lambda ts, a: F.huber_loss(ts[0], ts[1], reduction=a["reduction"], delta=a["delta"]),
    "hinge_loss": lambda ts, a: _reduced((1 - ts[0] * ts[1]).clamp_min(0), a["reduction"]),
    "kl_div": lambda ts, a: F.kl_div(ts[0], ts[1], reduction=a["reduction"], log_target=a["log_target"]),
    "cross_entropy": lambda ts, a: F.cross_entropy(ts[0], ts[1], reduction=a["reduction"],
                                                   ignore_index=a["ignore_index"]),
    "nll_loss": lambda ts, a: F.nll_loss(ts[0], ts[1], reduction=a["reduction"], ignore_index=a["ignore_index"]),
    "cosine_similarity_loss": lambda ts, a: _reduced(1 - F.cosine_similarity(ts[0], ts[1], a["dim"], a["eps"]),
                                                     a["reduction"]),
    "triplet_margin_loss": lambda ts, a: F.triplet_margin_loss(ts[0], ts[1], ts[2], a["margin"], a["p"], a["eps"],
                                                               a["swap"], reduction=a["reduction"]),
}


def _loss_kwargs(a: Args) -> dict[str, Any]:
    return {k: v for k, v in a.items() if k != "fn"}


def _loss_policies(ts: Tensors, a: Args, target: str) -> dict[str, Policy]:
    fn = getattr(_loss, f"{a['fn']}_policies")
    if a["fn"] == "cosine_similarity_loss":
        return fn(tuple(ts[0].shape), a["dim"], target=target)
    return fn(tuple(ts[0].shape), target=target)


register(LibraryOp(
    "loss", "loss", _loss.KERNELS,
    lambda ts, a, kw: getattr(_loss, a["fn"])(*[t for t in ts if t is not None], **_loss_kwargs(a), **kw),
    lambda ts, a: _LOSS_REF[a["fn"]](ts, a),
    _loss_policies))


# -------------------------------------------------------------------------------- elementwise chains

def chain_of(a: Args) -> _pw.Chain:
    """The chain a call carries: [[op, [[kind, value], ...]], ...] in its arguments (built once per arguments
    text by parse_args, which keeps it under "_chain")."""
    if "_chain" in a:
        return a["_chain"]
    return _pw.Chain(tuple(_pw.Step(op, tuple(tuple(x) for x in args)) for op, args in a["chain"]))


def chain_args(chain: _pw.Chain) -> list[Any]:
    return [[s.op, [list(x) for x in s.args]] for s in chain.steps]


def _pointwise_kernel(ts: Tensors, a: Args) -> tuple[Kernel, ...]:
    return (_pw.pointwise_kernel(chain_of(a), len(ts)),)


register(LibraryOp(
    "pointwise", "pointwise", (),
    lambda ts, a, kw: _pw.pointwise(chain_of(a), ts, **kw),
    lambda ts, a: chain_of(a).reference(ts).to(_pw.result_dtype(ts)),
    lambda ts, a, target: {_pointwise_kernel(ts, a)[0].name: _pw.pointwise_policies(_pw.view_shape(ts),
                                                                                   target)["pointwise"]},
    kernels_for=_pointwise_kernel))


def _pointwise_sum_kernels(ts: Tensors, a: Args) -> tuple[Kernel, ...]:
    return (_pw.pointwise_sum_kernel(chain_of(a), len(ts)), _reduce.sum_partials_kernel)


def _pointwise_sum_ref(ts: Tensors, a: Args) -> Tensor:
    y = chain_of(a).reference(ts).to(_pw.result_dtype(ts))
    return y.mean() if a["mean"] else y.sum()


def _pointwise_sum_policies(ts: Tensors, a: Args, target: str) -> dict[str, Policy]:
    pols = _pw.pointwise_sum_policies(_pw.sum_view_shape(ts), target)
    return {_pointwise_sum_kernels(ts, a)[0].name: pols["pointwise_sum"],
            "sum_partials_kernel": pols["sum_partials_kernel"]}


# an elementwise chain whose one reader sums (or averages) all of it: one pass, no intermediate written
register(LibraryOp(
    "pointwise_sum", "pointwise", (),
    lambda ts, a, kw: _pw.pointwise_sum(chain_of(a), ts, mean=a["mean"], **kw),
    _pointwise_sum_ref, _pointwise_sum_policies, kernels_for=_pointwise_sum_kernels))


def _linear_chain_kernel(ts: Tensors, a: Args) -> tuple[Kernel, ...]:
    return (_pw.linear_chain_kernel(chain_of(a), len(ts) - 3),)


def _linear_chain_ref(ts: Tensors, a: Args) -> Tensor:
    y = F.linear(ts[0], ts[1], ts[2])
    return chain_of(a).reference([y, *ts[3:]]).to(ts[0].dtype)


def _linear_chain_policies(ts: Tensors, a: Args, target: str) -> dict[str, Policy]:
    (m, k), n = ts[0].shape, ts[1].shape[0]
    pol = _pw.linear_chain_policies(m, n, k, target)["gemm_epilogue"]
    if target == "hip" or (target != "interpret" and ts[0].dtype == torch.float32):
        # float32 doubles every staged tile, and MI300X has 64 KB of LDS (the mma precision is OpSpec.policies')
        pol = fit_shared_memory(pol, ts[0].element_size(), target=target)
    return {_linear_chain_kernel(ts, a)[0].name: pol}


register(LibraryOp(
    "linear_chain", "pointwise", (),
    lambda ts, a, kw: _pw.linear_chain(ts[0], ts[1], ts[2], chain_of(a), ts[3:], **kw),
    _linear_chain_ref, _linear_chain_policies,
    lambda ts, a, out: 2 * ts[0].shape[0] * ts[0].shape[1] * ts[1].shape[0],
    kernels_for=_linear_chain_kernel))


def _conv_chain_kernel(ts: Tensors, a: Args) -> tuple[Kernel, ...]:
    return (_pw.conv_chain_kernel(chain_of(a), len(ts) - 3, a["transposed"]),)


def _conv_chain_ref(ts: Tensors, a: Args) -> Tensor:
    y = _conv_ref(ts[:3], {**a, "activation": "none"})
    return chain_of(a).reference([y, *ts[3:]]).to(ts[0].dtype)


def _conv_chain_policies(ts: Tensors, a: Args, target: str) -> dict[str, Policy]:
    (pol,) = _conv.conv_policies(*_conv_geo(ts, a), target=target, direct=False).values()
    return {_conv_chain_kernel(ts, a)[0].name: pol}


def _conv_chain_geometry(ts: Tensors, a: Args) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    _, consts, shapes = _conv.conv_geometry(*_conv_geo(ts, a), direct=False)
    name = _conv_chain_kernel(ts, a)[0].name
    return {name: consts}, {name: shapes}


register(LibraryOp(
    "conv_chain", "pointwise", (),
    lambda ts, a, kw: _pw.conv_chain(ts[0], ts[1], ts[2], a["stride"], a["padding"], a["dilation"], a["groups"],
                                     a["transposed"], a["output_padding"], chain_of(a), ts[3:], **kw),
    _conv_chain_ref, _conv_chain_policies, _conv_flops, _conv_chain_geometry, _conv_chain_kernel))


# -------------------------------------------------------------------------------------------- the op

# Registered through the low-level Library API rather than torch.library.custom_op: the op runs on every call of a
# compiled model, and custom_op's Python wrappers (autograd shim, redispatch, aliasing check) cost about three times
# the dispatcher's own path. The schema is functional; the fake implementation below gives shapes to Inductor.
_LIB = torch.library.Library("argus", "FRAGMENT")
# "argus::<op>" -> the Python function that implements each op defined here (what agent/trace.py runs on fake values)
HOST_FUNCTIONS: dict[str, Callable[..., Tensor]] = {}


def _implement(name: str, fn: Callable[..., Tensor]) -> None:
    _LIB.impl(name, fn, "CompositeExplicitAutograd")
    HOST_FUNCTIONS[f"argus::{name}"] = fn


_LIB.define("library(str name, Tensor?[] tensors, str args, str node_id) -> Tensor")

# call key -> the strides of the reference's result for that call's operand metadata (the fake's, which Inductor
# checks the op's output against), or None where the reference does not run on meta tensors
_REF_STRIDES: dict[tuple, tuple[int, ...] | None] = {}
FORGET.append(_REF_STRIDES.clear)


def reference_strides(key: tuple, op: LibraryOp, ts: Tensors, a: Args) -> tuple[int, ...] | None:
    """The strides of `op`'s torch reference on operands with ts' metadata: the layout the op's fake gives (a
    convolution of a channels_last input is channels_last), worked out once per call key on fake tensors of the
    operands' device (meta tensors do not follow the CPU's layout rules)."""
    if key in _REF_STRIDES:
        return _REF_STRIDES[key]
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode() as mode:
            fakes = [None if t is None else mode.from_tensor(t) for t in ts]
            strides: tuple[int, ...] | None = tuple(op.reference(fakes, a).stride())
    except Exception:  # a reference fake tensors cannot run: the result keeps the kernels' layout
        strides = None
    with LOCK:
        if len(_REF_STRIDES) > 4096:
            _REF_STRIDES.clear()
        _REF_STRIDES[key] = strides
    return strides


def in_reference_layout(out: Tensor, strides: tuple[int, ...] | None) -> Tensor:
    """`out` with the reference's strides (a copy where the kernels wrote another layout): the op's result must
    have the layout its fake promised, or the compiled graph's stride check raises (and any view of it reads the
    wrong elements)."""
    if strides is None or tuple(out.stride()) == strides or len(strides) != out.dim() or \
            any(st == 0 and n > 1 for st, n in zip(strides, out.shape)):  # (a broadcast layout: no copy target)
        return out
    return torch.empty_strided(out.shape, strides, dtype=out.dtype, device=out.device).copy_(out)


def library(name: str, tensors: Sequence[Tensor | None], args: str, node_id: str) -> Tensor:
    """The library op `name` on `tensors` with `args` (canonical JSON): the DSL kernels where the device has an
    Argus target and the signature a plan, else the torch reference."""
    ts = list(tensors)
    present = [t for t in ts if t is not None]
    floats = [t for t in present if t.is_floating_point()]
    if floats:
        # run_op keys the call by the float operands' metadata itself; the memo adds the others' (masks, targets)
        memo = (name, args, tuple(t is None for t in ts),
                *[tensor_key(t) for t in present if not t.is_floating_point()])
        key = call_key(node_id, memo, floats)
        hot = replay_hot(key, node_id, floats, present)  # a fresh output: no aliasing check needed
        if hot is not None:
            return hot
    op = LIBRARY[name]
    a = parse_args(args)

    def sig() -> Any:
        return library_signature(name, ts, args)

    def run(plan: Any, target: str) -> Tensor:
        kw = {"policies": dict(plan.policies), "kernels": dict(plan.kernels), "target": target}
        return in_reference_layout(op.run(ts, a, kw), strides)

    def fallback() -> Tensor:
        return op.reference(ts, a)

    if any(t.numel() == 0 for t in present):
        # an empty operand: torch's answer (an empty result, or a reduction of nothing), copied so that it is no
        # view of an operand; the kernels' policies and proofs are not made for empty dims
        return fallback().clone()
    if not floats:
        out = fallback()
    else:
        strides = reference_strides(key, op, ts, a)  # worked out before run_op records the launches
        out = run_op(node_id, sig, run, fallback, floats, memo, flops=lambda out: op.flops(ts, a, out),
                     inputs=present, key=key)
    # a functional op: its result never shares memory with an operand (a reference that returns a view is copied)
    if out.numel() and any(t.numel() and t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
                           for t in present):
        out = out.clone()
    return out


_implement("library", library)


@torch.library.register_fake("argus::library")
def _(name, tensors, args, node_id):
    return LIBRARY[name].reference(list(tensors), parse_args(args))


# transformers' RMSNorm with its eps as an argument of the op, not of the library call's JSON: under dynamic=True the
# eps is a SymFloat of the graph (a float attribute Dynamo passes as an input), known only when the op runs
_LIB.define("rms_norm(Tensor x, Tensor weight, float eps, str node_id) -> Tensor")


def rms_norm(x: Tensor, weight: Tensor, eps: float, node_id: str) -> Tensor:
    """library op rms_norm_rounded with this call's eps."""
    return library("rms_norm_rounded", [x, weight], canonical_args({"eps": float(eps)}), node_id)


_implement("rms_norm", rms_norm)


@torch.library.register_fake("argus::rms_norm")
def _(x, weight, eps, node_id):
    return _rmsnorm.rms_norm_reference(x, weight, eps)


# the embedding's rows and the first layer's RMSNorm of them in one launch, packed (2, *ids.shape, hidden): out[0] the
# rows (the residual stream), out[1] the norm (the first projections' input); eps as rms_norm's
_LIB.define("embedding_rms_norm(Tensor ids, Tensor table, Tensor weight, float eps, str node_id) -> Tensor")


def embedding_rms_norm(ids: Tensor, table: Tensor, weight: Tensor, eps: float, node_id: str) -> Tensor:
    """library op embedding_rms_norm_rounded with this call's eps."""
    return library("embedding_rms_norm_rounded", [ids, table, weight], canonical_args({"eps": float(eps)}), node_id)


_implement("embedding_rms_norm", embedding_rms_norm)


@torch.library.register_fake("argus::embedding_rms_norm")
def _(ids, table, weight, eps, node_id):
    return _rmsnorm.embedding_rms_norm_reference(ids, table, weight, eps)


# a decode step's rotation of q and k with its KV-cache write (kernels/rotary.py): the caches are written in place
# Flexible layout: Inductor hands the op each operand as it is laid out, so the rotary tables every layer's op reads
# are computed once (under the default, exact strides, Inductor computes an unrealized table again for each op)
_LIB.define("rope_cache(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, "
            "Tensor index, str node_id) -> Tensor", tags=(torch.Tag.flexible_layout,))


def rope_cache(q: Tensor, k: Tensor, v: Tensor, cos: Tensor, sin: Tensor, keys: Tensor, values: Tensor,
               index: Tensor, node_id: str) -> Tensor:
    """library op rope_cache: q rotated, k rotated and v written into the caches at position index[0]."""
    return library("rope_cache", [q, k, v, cos, sin, keys, values, index], "{}", node_id)


_implement("rope_cache", rope_cache)


@torch.library.register_fake("argus::rope_cache")
def _(q, k, v, cos, sin, keys, values, index, node_id):
    return torch.empty_like(q, dtype=torch.promote_types(q.dtype, cos.dtype))


def library_signature(name: str, ts: Tensors, args: str) -> Any:
    """op = name, epilogue = the arguments (and which optional tensors are absent), every dim static."""
    present = [t for t in ts if t is not None]
    absent = "".join("0" if t is None else "1" for t in ts)
    static = {f"t{i}d{j}": int(n) for i, t in enumerate(present) for j, n in enumerate(t.shape)}
    return make_signature(name, f"{args}|{absent}", present, static, {})


def _shapes_of(sig: Any) -> tuple[Tensors, Args]:
    """Meta tensors with the shapes and dtypes a library signature records, and its arguments."""
    args, absent = sig.epilogue.rsplit("|", 1)
    dims: dict[int, dict[int, int]] = {}
    for k, v in sig.static_dims:
        i, j = k[1:].split("d")
        dims.setdefault(int(i), {})[int(j)] = int(v)
    present = []
    for i, dt in enumerate(sig.dtypes):
        shape = tuple(dims.get(i, {})[j] for j in range(len(dims.get(i, {}))))
        present.append(torch.empty(shape, dtype=getattr(torch, dt), device="meta"))
    it = iter(present)
    ts: Tensors = [next(it) if c == "1" else None for c in absent]
    return ts, parse_args(args)


def example_operands(sig: Any, device: torch.device | str, seed: int = 0) -> tuple[Tensors, Args]:
    """Random operands with a library signature's shapes and dtypes on `device`, and its arguments: floats uniform
    in [0.5, 1.5) (inside every op's domain: variances, logs, roots), masks random, integer tensors 0 or 1 (class
    indices valid for any class count >= 2). What `argus warmup` tunes a recorded miss on."""
    metas, a = _shapes_of(sig)
    gen = torch.Generator().manual_seed(seed)
    out: Tensors = []
    for m in metas:
        if m is None:
            out.append(None)
            continue
        if m.dtype.is_floating_point:
            t = (torch.rand(m.shape, generator=gen) + 0.5).to(m.dtype)
        elif m.dtype == torch.bool:
            t = torch.rand(m.shape, generator=gen) < 0.5
        else:
            t = torch.randint(0, 2, m.shape, generator=gen, dtype=m.dtype)
        out.append(t.to(device))
    return out, a


def launcher(sig: Any, ts: Tensors, a: Args) -> tuple[Callable[[Any, str], Tensor], Callable[[], Tensor]]:
    """(run_plan, reference) of a library signature on fixed operands: run_plan(plan, target) launches the plan's
    kernels, reference() is torch's output (what ops.tune_library takes). For an op that writes operands in place
    (`writes`) both start from the same contents of those operands (zeros) and return the result followed by the
    written operands, flat, so a plan that leaves part of a cache unwritten differs from torch. The flat tensor takes
    the least precise of their dtypes, so the tolerance its dtype gives is theirs: flat in float32, bf16 KV-cache
    writes were held to float32's 2e-3, and a bf16 rope_cache failed its tuning at 4e-3, one bf16 rounding."""
    op = LIBRARY[sig.op]

    def checked(fn: Callable[[], Tensor]) -> Tensor:
        if not op.writes:
            return fn()
        for i in op.writes:
            ts[i].zero_()  # type: ignore[union-attr]
        parts = [fn(), *[ts[i] for i in op.writes]]
        floats = [t.dtype for t in parts if t.is_floating_point()]  # type: ignore[union-attr]
        low = max(floats, key=lambda dt: torch.finfo(dt).eps, default=torch.float32)
        wide = torch.float64 if torch.float64 in floats else torch.float32  # joined without rounding any part
        return torch.cat([t.to(wide).flatten() for t in parts]).to(low)  # type: ignore[union-attr]

    def run_plan(plan: Any, target: str) -> Tensor:
        return checked(lambda: op.run(ts, a, {"policies": dict(plan.policies), "kernels": dict(plan.kernels),
                                              "target": target}))

    return run_plan, lambda: checked(lambda: op.reference(ts, a))


def template_policies(sig: Any, target: str) -> dict[str, Any]:
    op = LIBRARY[sig.op]
    ts, a = _shapes_of(sig)
    return {k: p.as_dict() for k, p in op.policies(ts, a, target).items()}


def _geometry(sig: Any) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    op = LIBRARY[sig.op]
    if op.geometry is None:
        return {}, {}
    ts, a = _shapes_of(sig)
    return op.geometry(ts, a)


def kernels_of(sig: Any) -> tuple[Kernel, ...]:
    """The kernels a signature's plan may run: the class's library kernels, or those generated for its chain."""
    op = LIBRARY[sig.op]
    if op.kernels_for is None:
        return op.kernels
    ts, a = _shapes_of(sig)
    return op.kernels_for(ts, a)


def select_policies(policy: dict[str, Any], sig: Any) -> dict[str, Policy]:
    """The stored policy of each kernel, with the constexprs the signature fixes (a convolution's geometry)."""
    consts, _ = _geometry(sig)
    return {k: Policy.make(**dict(v)).with_consts(**consts.get(k, {})) for k, v in policy.items()}


def verify_shapes(sig: Any) -> dict[str, dict[str, int]]:
    return _geometry(sig)[1]


_SPECS: dict[tuple[str, str], OpSpec] = {}


def _resolve(sig: Signature) -> OpSpec | None:
    """A library op class's spec, one per signature op and arguments: plans by the same cache rules as the other
    ops, policies from its host functions, kernels its own or generated for its chain."""
    if sig.op in SPECS or sig.op == "gemm" or sig.op not in LIBRARY:
        return None
    key = (sig.op, sig.epilogue)
    with LOCK:
        spec = _SPECS.get(key)
    if spec is None:
        spec = OpSpec(sig.op, kernels_of(sig), template_policies, lambda s: {}, verify_shapes, select_policies,
                      tunes=True)
        with LOCK:
            _SPECS[key] = spec
    return spec


RESOLVERS.append(_resolve)


__all__ = ["LIBRARY", "LibraryOp", "register", "canonical_args", "library", "library_signature", "template_policies",
           "select_policies", "verify_shapes"]
