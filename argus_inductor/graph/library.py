"""Matchers for the library op classes (argus_inductor.ops.library) over the graph Dynamo hands the backend:
convolutions (with the activation that follows), reductions, softmax/log-softmax, normalizations (layer, group,
instance, batch in eval mode, RMS, Lp/Frobenius), scans (with the flip-scan-flip reverse and the masked forms),
pooling, and losses (elementwise chains: chain_match.py). A match becomes one `torch.ops.argus.library` call
carrying the op's name and canonical arguments; anything whose arguments the library does not cover is left alone
for Inductor."""
from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..ops.library import LIBRARY, canonical_args
from ..runtime import reporting as report
from .patterns import (
    Match,
    activation_of,
    alive,
    as_int,
    as_num,
    bind,
    dims_arg,
    erase_unused,
    fake_value,
    float_tensor,
    int_list,
    is_call,
    torch_fns,
)

Found = tuple[str, list[Any], dict[str, Any], fx.Node, list[fx.Node]]  # name, tensor args, args, last node, nodes


_CONV = {**{f: (i + 1, False) for i, f in enumerate((torch.conv1d, torch.conv2d, torch.conv3d))},
         **{f: (i + 1, True) for i, f in enumerate((torch.conv_transpose1d, torch.conv_transpose2d,
                                                   torch.conv_transpose3d))}}
_CONV_ARGS = ["input", "weight", "bias", "stride", "padding", "dilation", "groups"]
_CONVT_ARGS = ["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"]


def _match_conv(node: fx.Node) -> Found | None:
    if node.op != "call_function" or node.target not in _CONV:
        return None
    rank, transposed = _CONV[node.target]
    a = bind(node, _CONVT_ARGS if transposed else _CONV_ARGS)
    x, w, b = a.get("input"), a.get("weight"), a.get("bias")
    if not (float_tensor(x) and float_tensor(w)) or (b is not None and not float_tensor(b)):
        return None
    if fake_value(x).dim() != rank + 2:  # unbatched input: leave it to Inductor
        return None
    pad = a.get("padding", 0)
    args: dict[str, Any] = {"stride": int_list(a.get("stride", 1), rank),
                            "dilation": int_list(a.get("dilation", 1), rank),
                            "padding": pad if isinstance(pad, str) and not transposed else int_list(pad, rank),
                            "output_padding": int_list(a.get("output_padding", 0), rank),
                            "groups": as_int(a.get("groups", 1)), "transposed": transposed}
    if any(v is None for v in args.values()):
        return None
    act, act_node = "none", None
    users = list(node.users)
    if len(users) == 1:
        found = activation_of(users[0])
        if found is not None and users[0].args and users[0].args[0] is node:
            act, act_node = found, users[0]
    args["activation"] = act
    nodes = [node] + ([act_node] if act_node is not None else [])
    return "conv", [x, w, b], args, nodes[-1], nodes


# ------------------------------------------------------------------------------------- reductions, softmax

_REDUCE_FNS = {torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin", torch.argmax: "argmax",
               torch.argmin: "argmin", torch.prod: "prod", torch.max: "max", torch.min: "min"}
_REDUCE_METHODS = {"sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "max", "min"}


def _match_reduce(node: fx.Node) -> Found | None:
    if node.op == "call_function" and node.target in _REDUCE_FNS:
        kind = _REDUCE_FNS[node.target]
    elif node.op == "call_method" and node.target in _REDUCE_METHODS:
        kind = node.target
    else:
        return None
    a = bind(node, ["input", "dim", "keepdim"])
    x = a.get("input")
    if not float_tensor(x) or a.get("dtype") is not None or "out" in a:
        return None
    rank = fake_value(x).dim()
    if rank == 0:
        return None
    d = a.get("dim")
    keepdim = a.get("keepdim", False)
    if not isinstance(keepdim, bool):
        return None
    if kind in ("max", "min") and d is not None:  # torch.max(x, dim) -> (values, indices)
        if as_int(d) is None:
            return None
        users = list(node.users)
        if not users or not all(u.op == "call_function" and u.target is operator.getitem and u.args[1] in (0, 1)
                                for u in users):
            return None
        return "max_pair", [x], {"kind": kind, "dim": [d % rank], "keepdim": keepdim}, node, [node]
    if d is None or (kind in ("amax", "amin") and d in ((), [])):
        dims = None
    else:
        dims = dims_arg(d, rank)
        if dims is None:
            return None
    if kind == "prod" and dims is not None and len(dims) != 1:
        return None
    if kind in ("argmax", "argmin") and dims is not None and len(dims) != 1:
        return None
    return "reduce", [x], {"kind": kind, "dim": dims, "keepdim": keepdim}, node, [node]


_SOFTMAX = {torch.softmax: False, F.softmax: False, torch.Tensor.softmax: False, torch.special.softmax: False,
            torch.log_softmax: True, F.log_softmax: True, torch.Tensor.log_softmax: True,
            torch.special.log_softmax: True}


def _along_dim(node: fx.Node, functions: dict[Any, Any], methods: dict[str, Any]) -> tuple[Any, fx.Node, int] | None:
    """(what `functions` or `methods` say the call is, its input, its dim in [0, rank)) for a call f(input, dim)
    on a floating-point tensor of rank >= 1 with an int dim and no dtype argument (softmax, cumsum, ...)."""
    if node.op == "call_function" and node.target in functions:
        what = functions[node.target]
    elif node.op == "call_method" and node.target in methods:
        what = methods[node.target]
    else:
        return None
    a = bind(node, ["input", "dim"])
    x, d = a.get("input"), a.get("dim")
    if not float_tensor(x) or as_int(d) is None or a.get("dtype") is not None or fake_value(x).dim() == 0:
        return None
    return what, x, d % fake_value(x).dim()


def _match_softmax(node: fx.Node) -> Found | None:
    found = _along_dim(node, _SOFTMAX, {"softmax": False, "log_softmax": True})
    if found is None:
        return None
    log, x, d = found
    return "softmax", [x], {"dim": d, "log": log}, node, [node]


# ----------------------------------------------------------------------------------------- normalizations

def _opt_tensor(n: Any) -> bool:
    return n is None or float_tensor(n)


def _match_norm(node: fx.Node) -> Found | None:
    if node.op != "call_function":
        return None
    t = node.target
    if t is F.layer_norm or t is torch.layer_norm:
        a = bind(node, ["input", "normalized_shape", "weight", "bias", "eps"])
        shape = a.get("normalized_shape")
        shape = [shape] if as_int(shape) is not None else shape
        if not isinstance(shape, (list, tuple)) or not all(as_int(s) is not None for s in shape):
            return None
        x, w, b = a.get("input"), a.get("weight"), a.get("bias")
        if float_tensor(x) and _opt_tensor(w) and _opt_tensor(b):
            return "layer_norm", [x, w, b], {"shape": list(shape), "eps": float(a.get("eps", 1e-5))}, node, [node]
        return None
    if t is F.group_norm or t is torch.group_norm:
        a = bind(node, ["input", "num_groups", "weight", "bias", "eps"])
        x, w, b = a.get("input"), a.get("weight"), a.get("bias")
        if float_tensor(x) and _opt_tensor(w) and _opt_tensor(b) and as_int(a.get("num_groups")) is not None:
            return "group_norm", [x, w, b], {"groups": a["num_groups"], "eps": float(a.get("eps", 1e-5))}, node, [node]
        return None
    if t is F.batch_norm or t is torch.batch_norm:
        a = bind(node, ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"])
        x, rm, rv, w, b = (a.get(k) for k in ("input", "running_mean", "running_var", "weight", "bias"))
        if a.get("training", False) is not False or not (float_tensor(rm) and float_tensor(rv)):
            return None  # training mode updates the running statistics: Inductor's
        if float_tensor(x) and _opt_tensor(w) and _opt_tensor(b):
            return "batch_norm", [x, rm, rv, w, b], {"eps": float(a.get("eps", 1e-5))}, node, [node]
        return None
    if t is F.instance_norm or t is torch.instance_norm:
        a = bind(node, ["input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum",
                         "eps"])
        if a.get("running_mean") is not None or a.get("running_var") is not None:
            return None
        if a.get("use_input_stats", True) is not True:
            return None
        x, w, b = a.get("input"), a.get("weight"), a.get("bias")
        if float_tensor(x) and _opt_tensor(w) and _opt_tensor(b) and fake_value(x).dim() >= 3:
            return "instance_norm", [x, w, b], {"eps": float(a.get("eps", 1e-5))}, node, [node]
    return None


_NORM_FNS = torch_fns("norm") | {torch.functional.norm, torch.linalg.vector_norm, torch.linalg.norm}
_DIV = {operator.truediv, torch.div, torch.true_divide}


def _lp_of(x: fx.Node, n: Any) -> tuple[float, list[int] | None, list[fx.Node]] | None:
    """(p, dims, nodes) when `n` computes the Lp norm of x over dims (kept, or over everything)."""
    if not isinstance(n, fx.Node) or len(n.users) != 1:
        return None
    rank = fake_value(x).dim()
    if (n.op == "call_function" and n.target in _NORM_FNS) or (n.op == "call_method" and n.target == "norm"):
        names = ["input", "ord", "dim", "keepdim"] if n.target is torch.linalg.vector_norm else \
            ["input", "p", "dim", "keepdim"]
        a = bind(n, names)
        if a.get("input") is not x or a.get("dtype") is not None:
            return None
        p = a.get("ord", a.get("p", 2 if n.target is not torch.linalg.norm else None))
        p = 2.0 if p in ("fro", None) else as_num(p)
        if p not in (1.0, 2.0):
            return None
        d = a.get("dim")
        if d is None:
            return p, None, [n]
        dims = dims_arg(d, rank)
        return (p, dims, [n]) if dims is not None and a.get("keepdim") is True else None
    if is_call(n, {torch.sum}, ("sum",)):  # sum(abs(x), dim, keepdim=True): the L1 norm
        a = bind(n, ["input", "dim", "keepdim"])
        ab = a.get("input")
        if not (is_call(ab, {torch.abs}, ("abs",)) and ab.args[0] is x and len(ab.users) == 1):
            return None
        d = a.get("dim")
        if d is None:
            return 1.0, None, [n, ab]
        dims = dims_arg(d, rank)
        return (1.0, dims, [n, ab]) if dims is not None and a.get("keepdim") is True else None
    return None


def _match_lp(node: fx.Node) -> Found | None:
    if node.op != "call_function" or node.target not in _DIV or len(node.args) != 2 or node.kwargs:
        return None
    x, n = node.args
    if not float_tensor(x):
        return None
    found = _lp_of(x, n)
    if found is None:
        return None
    p, dims, nodes = found
    return "lp_normalize", [x], {"p": p, "dim": dims, "eps": 0.0}, node, [node, *nodes]


def _match_rms(node: fx.Node) -> Found | None:
    """x * rsqrt(mean(x^2, dim, keepdim=True) + eps) (times a weight, when one follows) and
    x / sqrt(mean(x^2, dim, keepdim=True) + eps)."""
    if node.op != "call_function" or len(node.args) != 2:
        return None
    if node.target in (operator.mul, torch.mul):
        x, r = node.args
        if not is_call(r, {torch.rsqrt}, ("rsqrt",)):
            x, r = r, x
        if not is_call(r, {torch.rsqrt}, ("rsqrt",)):
            return None
    elif node.target in _DIV:
        x, r = node.args
        if not is_call(r, {torch.sqrt}, ("sqrt",)):
            return None
    else:
        return None
    if not float_tensor(x) or len(r.users) != 1:
        return None
    found = mean_square(r.args[0], x)
    if found is None or as_num(found[0]) is None:
        return None
    eps, dims, (add, mean, sq) = found
    nodes = [node, r, add, mean, sq]
    args = {"dim": dims, "eps": float(eps)}
    weight = _rms_weight(node, x, dims)
    if weight is not None:  # the weight multiply runs in the kernel, not as a second pass over the output
        w, mul = weight
        return "rms_norm", [x, w], args, mul, [mul, *nodes]
    return "rms_norm", [x, None], args, node, nodes


def mean_square(add: Any, x: fx.Node, adds: tuple[str, ...] = ("add",)
                ) -> tuple[Any, list[int], list[fx.Node]] | None:
    """(eps, dims, [add, mean, square]) when `add` = mean(x^2, dims, keepdim=True) + eps, in either order, x^2 as
    x ** 2 or x * x, each node used once; eps is the add's other operand as it stands (a number, or a node the
    caller takes or refuses). `adds`: the add methods taken besides torch.add and +. The statistics of an RMS
    norm: _match_rms's, and norm_match's transformers form."""
    if fake_value(x) is None or not (is_call(add, {operator.add, torch.add}, adds) and len(add.users) == 1
                               and len(add.args) == 2):
        return None
    for mean, eps in (add.args, add.args[::-1]):
        if not (is_call(mean, {torch.mean}, ("mean",)) and len(mean.users) == 1):
            continue
        a = bind(mean, ["input", "dim", "keepdim"])
        sq = a.get("input")
        if a.get("keepdim") is not True or not isinstance(sq, fx.Node) or len(sq.users) != 1:
            continue
        if not ((is_call(sq, {torch.pow, operator.pow}, ("pow",)) and sq.args[0] is x and as_num(sq.args[1]) == 2.0)
                or (is_call(sq, {operator.mul, torch.mul}, ("mul",)) and sq.args[0] is x and sq.args[1] is x)):
            continue
        dims = dims_arg(a.get("dim"), fake_value(x).dim())
        if dims is not None:
            return eps, dims, [add, mean, sq]
    return None


def _rms_weight(node: fx.Node, x: fx.Node, dims: list[int]) -> tuple[fx.Node, fx.Node] | None:
    """(weight, the multiply) when the normalized value's only use is `* weight` (either order) with a weight of
    x's dtype shaped like the normalized dims, and those dims trailing (so the weight broadcasts over them as
    rms_norm applies it)."""
    if len(node.users) != 1:
        return None
    (mul,) = node.users
    if not (is_call(mul, {operator.mul, torch.mul}, ("mul",)) and len(mul.args) == 2 and not mul.kwargs):
        return None
    w = mul.args[1] if mul.args[0] is node else mul.args[0]
    if w is node or not float_tensor(w):
        return None
    xv, wv = fake_value(x), fake_value(w)
    rank = xv.dim()
    if sorted(dims) != list(range(rank - len(dims), rank)) or wv.dtype != xv.dtype:
        return None
    if tuple(wv.shape) != tuple(xv.shape[d] for d in sorted(dims)):
        return None
    return w, mul


# ---------------------------------------------------------------------------------------------- scans

_SCANS = {torch.cumsum: "sum", torch.cumprod: "prod", torch.Tensor.cumsum: "sum", torch.Tensor.cumprod: "prod"}


def _flip_of(n: Any, d: int, rank: int) -> Any:
    """The input of flip(input, [d]) when n is that flip, else None."""
    if not is_call(n, {torch.flip}, ("flip",)):
        return None
    dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dims")
    if isinstance(dims, int):
        dims = [dims]
    if isinstance(dims, (list, tuple)) and len(dims) == 1 and as_int(dims[0]) is not None and dims[0] % rank == d:
        return n.args[0]
    return None


def _match_scan(node: fx.Node) -> Found | None:
    found = _along_dim(node, _SCANS, {"cumsum": "sum", "cumprod": "prod"})
    if found is None:
        return None
    kind, x, d = found
    rank = fake_value(x).dim()
    nodes, last, reverse = [node], node, False
    inner = _flip_of(x, d, rank)
    users = list(node.users)
    if inner is not None and len(x.users) == 1 and len(users) == 1 and _flip_of(users[0], d, rank) is node:
        nodes, last, reverse = [users[0], node, x], users[0], True
        x = inner
    mask = None  # cumsum(x * mask): a masked-out element adds 0, the identity (for a product it would not be)
    if kind == "sum" and is_call(x, {operator.mul, torch.mul}, ("mul",)) and len(x.users) == 1 and len(x.args) == 2:
        u, v = x.args
        for val, m in ((u, v), (v, u)):
            mv, vv = fake_value(m), fake_value(val)
            if mv is not None and vv is not None and mv.dtype == torch.bool and vv.is_floating_point() \
                    and tuple(mv.shape) == tuple(vv.shape):
                nodes.append(x)
                x, mask = val, m
                break
    return "scan", [x, mask], {"dim": d, "kind": kind, "reverse": reverse, "exclusive": False}, last, nodes


# -------------------------------------------------------------------------------------------- pooling

_MAXPOOL = {**{f: i + 1 for i, f in enumerate((F.max_pool1d, F.max_pool2d, F.max_pool3d))},
            **{f: i + 1 for i, f in enumerate((torch.max_pool1d, torch.max_pool2d, torch.max_pool3d))}}
_AVGPOOL = {torch.avg_pool1d: 1, F.avg_pool2d: 2, F.avg_pool3d: 3}
_ADAPTIVE = {F.adaptive_avg_pool1d: 1, F.adaptive_avg_pool2d: 2, F.adaptive_avg_pool3d: 3,
             torch.adaptive_avg_pool1d: 1}


def _match_pool(node: fx.Node) -> Found | None:
    if node.op != "call_function":
        return None
    t = node.target
    if t in _MAXPOOL or t in _AVGPOOL:
        rank = _MAXPOOL.get(t) or _AVGPOOL[t]
        names = ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"] \
            if t in _MAXPOOL else ["input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                                   "divisor_override"]
        a = bind(node, names)
        x = a.get("input")
        if not float_tensor(x) or fake_value(x).dim() != rank + 2 or a.get("return_indices", False):
            return None
        k = int_list(a.get("kernel_size"), rank)
        s = a.get("stride")
        s = k if s is None or s == [] or s == () else int_list(s, rank)
        args: dict[str, Any] = {"rank": rank, "kernel_size": k, "stride": s,
                                "padding": int_list(a.get("padding", 0), rank),
                                "ceil_mode": bool(a.get("ceil_mode", False))}
        if t in _MAXPOOL:
            args["dilation"] = int_list(a.get("dilation", 1), rank)
        else:
            args["count_include_pad"] = bool(a.get("count_include_pad", True))
            div = a.get("divisor_override")
            args["divisor_override"] = div if as_int(div) is not None else None
            if div is not None and as_int(div) is None:
                return None
        if any(v is None for key, v in args.items() if key != "divisor_override"):
            return None
        return ("max_pool" if t in _MAXPOOL else "avg_pool"), [x], args, node, [node]
    if t in _ADAPTIVE:
        rank = _ADAPTIVE[t]
        a = bind(node, ["input", "output_size"])
        x = a.get("input")
        out = int_list(a.get("output_size"), rank)
        if not float_tensor(x) or fake_value(x).dim() != rank + 2 or out is None:
            return None
        return "adaptive_avg_pool", [x], {"rank": rank, "output_size": out}, node, [node]
    return None


# ----------------------------------------------------------------------------------------------- losses

_LOSS_FNS: dict[Any, tuple[str, list[str], dict[str, Any]]] = {
    F.mse_loss: ("mse_loss", ["input", "target", "size_average", "reduce", "reduction"], {}),
    F.l1_loss: ("l1_loss", ["input", "target", "size_average", "reduce", "reduction"], {}),
    F.smooth_l1_loss: ("smooth_l1_loss", ["input", "target", "size_average", "reduce", "reduction", "beta"],
                       {"beta": 1.0}),
    F.huber_loss: ("huber_loss", ["input", "target", "reduction", "delta"], {"delta": 1.0}),
    F.kl_div: ("kl_div", ["input", "target", "size_average", "reduce", "reduction", "log_target"],
               {"log_target": False}),
    F.cross_entropy: ("cross_entropy", ["input", "target", "weight", "size_average", "ignore_index", "reduce",
                                        "reduction", "label_smoothing"], {"ignore_index": -100}),
    F.nll_loss: ("nll_loss", ["input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction"],
                 {"ignore_index": -100}),
    F.triplet_margin_loss: ("triplet_margin_loss", ["anchor", "positive", "negative", "margin", "p", "eps", "swap",
                                                    "size_average", "reduce", "reduction"],
                            {"margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False}),
}
_LOSS_TENSORS = {"input", "target", "anchor", "positive", "negative"}


def _same_float_shapes(*ns: Any) -> bool:
    vs = [fake_value(n) for n in ns]
    return all(v is not None and v.is_floating_point() and tuple(v.shape) == tuple(vs[0].shape) for v in vs)


def _match_loss_fn(node: fx.Node) -> Found | None:
    if node.op != "call_function" or node.target not in _LOSS_FNS:
        return None
    name, names, defaults = _LOSS_FNS[node.target]
    a = bind(node, names)
    if a.get("size_average") is not None or a.get("reduce") is not None or a.get("weight") is not None \
            or a.get("label_smoothing", 0.0) not in (0, 0.0):
        return None
    reduction = a.get("reduction", "mean")
    if reduction not in ("mean", "sum", "none", "batchmean") or (reduction == "batchmean" and name != "kl_div"):
        return None
    args: dict[str, Any] = {"fn": name, "reduction": reduction}
    for k, d in defaults.items():
        v = a.get(k, d)
        if isinstance(d, bool):
            if not isinstance(v, bool):
                return None
        elif as_num(v) is None:
            return None
        args[k] = v if isinstance(d, int) else float(v)  # bool and int defaults keep their type
    tensors = [a.get(k) for k in names if k in _LOSS_TENSORS]
    if name in ("cross_entropy", "nll_loss"):
        x, t = tensors
        xv, tv = fake_value(x), fake_value(t)
        if xv is None or tv is None or not xv.is_floating_point() or xv.dim() != 2 or tv.dtype != torch.int64 \
                or tv.dim() != 1:
            return None
    elif name == "triplet_margin_loss":
        if not _same_float_shapes(*tensors) or fake_value(tensors[0]).dim() != 2:
            return None
    elif not _same_float_shapes(*tensors):
        return None
    return "loss", tensors + [None] * (3 - len(tensors)), args, node, [node]


def _mean_of(node: fx.Node) -> Any:
    """The input of mean(x) over everything (torch.mean(x) or x.mean())."""
    if is_call(node, {torch.mean}, ("mean",)) and len(node.args) == 1 and not node.kwargs:
        return node.args[0]
    return None


def _match_loss_pattern(node: fx.Node) -> Found | None:
    """mean((a - b) ** 2) -> MSE, mean(|a - b|) -> L1, mean(clamp(1 - a * b, min=0)) -> hinge,
    mean(1 - cosine_similarity(a, b, dim)) -> cosine similarity loss."""
    inner = _mean_of(node)
    if not isinstance(inner, fx.Node) or len(inner.users) != 1:
        return None
    one = {operator.sub, torch.sub}
    if is_call(inner, {torch.pow, operator.pow}, ("pow",)) and as_num(inner.args[1]) == 2.0:
        d = inner.args[0]
        if is_call(d, one, ("sub",)) and len(d.users) == 1 and _same_float_shapes(*d.args[:2]):
            return "loss", [d.args[0], d.args[1], None], {"fn": "mse_loss", "reduction": "mean"}, node, [node, inner, d]
    if is_call(inner, {torch.abs}, ("abs",)):
        d = inner.args[0]
        if is_call(d, one, ("sub",)) and len(d.users) == 1 and _same_float_shapes(*d.args[:2]):
            return "loss", [d.args[0], d.args[1], None], {"fn": "l1_loss", "reduction": "mean"}, node, [node, inner, d]
    if is_call(inner, {torch.clamp, torch.clamp_min}, ("clamp", "clamp_min")):
        lo = inner.kwargs.get("min", inner.args[1] if len(inner.args) > 1 else None)
        hi = inner.kwargs.get("max", inner.args[2] if len(inner.args) > 2 else None)
        d = inner.args[0]
        one_minus = is_call(d, one, ("sub",)) and as_num(d.args[0]) == 1.0 and len(d.users) == 1
        if as_num(lo) == 0.0 and hi is None and one_minus:
            m = d.args[1]
            if (is_call(m, {operator.mul, torch.mul}, ("mul",)) and len(m.users) == 1
                    and _same_float_shapes(*m.args[:2])):
                return ("loss", [m.args[0], m.args[1], None], {"fn": "hinge_loss", "reduction": "mean"}, node,
                        [node, inner, d, m])
    if is_call(inner, one, ("sub",)) and as_num(inner.args[0]) == 1.0:
        c = inner.args[1]
        if is_call(c, {torch.cosine_similarity, F.cosine_similarity}) and len(c.users) == 1:
            a = bind(c, ["x1", "x2", "dim", "eps"])
            if _same_float_shapes(a.get("x1"), a.get("x2")) and as_int(a.get("dim", 1)) is not None:
                rank = fake_value(a["x1"]).dim()
                args = {"fn": "cosine_similarity_loss", "reduction": "mean", "dim": a.get("dim", 1) % rank,
                        "eps": float(a.get("eps", 1e-8))}
                return "loss", [a["x1"], a["x2"], None], args, node, [node, inner, c]
    return None


# ----------------------------------------------------------------------------------------------- rewrite

MATCHERS: dict[str, list[Callable[[fx.Node], Found | None]]] = {
    "conv": [_match_conv],
    "norm": [_match_norm, _match_lp, _match_rms],
    "scan": [_match_scan],
    "pool": [_match_pool],
    "loss": [_match_loss_fn, _match_loss_pattern],
    "reduce": [_match_softmax, _match_reduce],
}


def emit(g: fx.Graph, gid: int, found: Found) -> Match:
    name, tensors, args, last, nodes = found
    node_id = f"g{gid}:{last.name}"
    if name == "max_pair":  # torch.max(x, dim): values and/or indices, each a reduce call
        node = last
        for u in list(node.users):
            kind = args["kind"] if u.args[1] == 0 else ("argmax" if args["kind"] == "max" else "argmin")
            a = {**args, "kind": kind}
            with g.inserting_before(u):
                new = g.call_function(torch.ops.argus.library.default,
                                      ("reduce", tensors, canonical_args(a), f"{node_id}.{u.args[1]}"))
            new.meta.update(u.meta)
            u.replace_all_uses_with(new)
            g.erase_node(u)
            report.record_match(f"{node_id}.{u.args[1]}", "reduce", f"{node.name}[{u.args[1]}]")
        erase_unused(g, [node])
        return Match("reduce", [node.name])
    with g.inserting_before(last):
        new = g.call_function(torch.ops.argus.library.default, (name, tensors, canonical_args(args), node_id))
    new.meta.update(last.meta)
    last.replace_all_uses_with(new)
    names = [n.name for n in reversed(nodes)]
    report.record_match(node_id, name if name.endswith("_chain") else LIBRARY[name].kind, " -> ".join(names))
    erase_unused(g, [n for n in nodes if alive(n) and not n.users])
    return Match(LIBRARY[name].kind, names)


def rewrite_library(g: fx.Graph, gid: int, enabled: tuple[str, ...], amp: set[fx.Node] | None = None
                    ) -> list[Match]:
    """Rewrite the library op classes named in `enabled` (order: conv, norm, scan, pool, loss, reduce: patterns
    that contain a reduction, like an Lp normalization, are matched before the bare reduction; elementwise chains
    last, so they can fuse into the GEMMs and convolutions already rewritten). `amp`: nodes under autocast, whose
    dtypes autocast decides (matchers._under_autocast): no match takes one."""
    amp = amp or set()
    matches: list[Match] = []
    for kind, fns in MATCHERS.items():
        if kind not in enabled:
            continue
        for fn in fns:
            for node in list(g.nodes):
                if not alive(node) or node.op not in ("call_function", "call_method") or node in amp:
                    continue
                found = fn(node)
                if (found is not None and all(alive(n) for n in found[4]) and not amp.intersection(found[4])
                        and _self_contained(found)):
                    matches.append(emit(g, gid, found))
    return matches


def _self_contained(found: Found) -> bool:
    """Every node of a match but its last feeds only the match (nothing else reads an intermediate)."""
    nodes = set(found[4])
    return all(set(n.users) <= nodes for n in found[4] if n is not found[3])
