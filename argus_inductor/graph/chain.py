"""Elementwise chains in the graph Dynamo hands the backend: a region of elementwise ops (arithmetic, the
activations, clamps, powers) that only its last op's readers see becomes one synthesized DSL kernel
(argus_inductor.kernels.pointwise), or the epilogue of the Argus GEMM or convolution it follows when nothing else
reads that result (`linear_chain`, `conv_chain`); a region whose one reader sums or averages all of it is summed in the
same kernel (`pointwise_sum`), so its result is never written."""
from __future__ import annotations

import json
import operator
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..kernels.pointwise import broadcasts_to
from ..runtime import reporting as report
from .library import emit
from .patterns import Match, alive, as_num, bind, fake_value, static_shape

_BIN = {operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", operator.mul: "mul",
        torch.mul: "mul", operator.truediv: "div", torch.div: "div", torch.true_divide: "div",
        torch.maximum: "maximum", torch.minimum: "minimum"}
_BIN_METHODS = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "truediv": "div"}
_UN = {operator.neg: "neg", torch.neg: "neg", torch.abs: "abs", torch.exp: "exp", torch.log: "log", torch.sqrt: "sqrt",
       torch.rsqrt: "rsqrt", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
       torch.erf: "erf", torch.relu: "relu", F.relu: "relu", F.silu: "silu", F.selu: "selu", torch.selu: "selu",
       F.hardsigmoid: "hardsigmoid", F.hardswish: "hardswish", F.mish: "mish", F.softsign: "softsign",
       torch.reciprocal: "reciprocal", torch.square: "square"}
_UN_METHODS = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "relu", "reciprocal", "square"}
_PARAM_FNS: dict[Any, tuple[str, list[str], list[tuple[str, float]]]] = {
    F.leaky_relu: ("leaky_relu", ["input", "negative_slope", "inplace"], [("negative_slope", 0.01)]),
    F.hardtanh: ("hardtanh", ["input", "min_val", "max_val", "inplace"], [("min_val", -1.0), ("max_val", 1.0)]),
    F.softplus: ("softplus", ["input", "beta", "threshold"], [("beta", 1.0), ("threshold", 20.0)]),
    F.elu: ("elu", ["input", "alpha", "inplace"], [("alpha", 1.0)]),
}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
Operand = tuple[str, Any]  # ("node", fx.Node) or ("const", float) before the chain is numbered


def _elementwise(n: fx.Node) -> tuple[str, list[Any], list[float]] | None:
    """(chain op, value args (nodes or numbers), constant params) when n is an elementwise op a chain can hold."""
    v = fake_value(n)
    if v is None or v.dtype not in _FLOATS or n.op not in ("call_function", "call_method"):
        return None
    t = n.target
    if n.kwargs.get("inplace") or n.kwargs.get("out") is not None:
        return None
    if (n.op == "call_function" and t in _BIN) or (n.op == "call_method" and t in _BIN_METHODS):
        if len(n.args) != 2 or set(n.kwargs) - {"rounding_mode"} or n.kwargs.get("rounding_mode") is not None:
            return None
        op = _BIN[t] if n.op == "call_function" else _BIN_METHODS[t]
        return op, list(n.args), []
    if (n.op == "call_function" and t in _UN) or (n.op == "call_method" and t in _UN_METHODS):
        if len(n.args) != 1 or (n.kwargs and set(n.kwargs) != {"inplace"}):
            return None
        return (_UN[t] if n.op == "call_function" else t), [n.args[0]], []
    if n.op == "call_function" and t is F.gelu:
        approx = n.kwargs.get("approximate", n.args[1] if len(n.args) > 1 else "none")
        return ("gelu_tanh" if approx == "tanh" else "gelu"), [n.args[0]], []
    if (n.op == "call_function" and t in (torch.pow, operator.pow)) or (n.op == "call_method" and t == "pow"):
        e = as_num(n.args[1]) if len(n.args) == 2 else None
        return ("pow", [n.args[0]], [e]) if e is not None and isinstance(n.args[0], fx.Node) else None
    if (n.op == "call_function" and t in (torch.clamp, torch.clip, torch.clamp_min, torch.clamp_max)) or \
            (n.op == "call_method" and t in ("clamp", "clip", "clamp_min", "clamp_max")):
        name = t if isinstance(t, str) else t.__name__
        a = bind(n, ["input", "min", "max"] if name != "clamp_max" else ["input", "max"])
        lo, hi = a.get("min"), a.get("max")
        if (lo is not None and as_num(lo) is None) or (hi is not None and as_num(hi) is None):
            return None
        if lo is not None and hi is not None:
            return "clamp", [a["input"]], [float(lo), float(hi)]
        if lo is not None:
            return "clamp_min", [a["input"]], [float(lo)]
        if hi is not None:
            return "clamp_max", [a["input"]], [float(hi)]
        return None
    if n.op == "call_function" and t in _PARAM_FNS:
        op, names, params = _PARAM_FNS[t]
        a = bind(n, names)
        vals = [a.get(k, d) for k, d in params]
        if a.get("inplace") or any(as_num(x) is None for x in vals):
            return None
        return op, [a["input"]], [float(x) for x in vals]
    return None


def _region(root: fx.Node, shape: tuple[int, ...]) -> tuple[list[fx.Node], list[fx.Node]] | None:
    """The elementwise nodes feeding `root` that only it (transitively) reads, in topological order, and the
    tensor inputs of that region (each broadcasting to `shape`)."""
    members = {root}
    work = [root]
    while work:
        n = work.pop()
        ew = _elementwise(n)
        if ew is None:
            return None
        for a in ew[1]:
            if isinstance(a, fx.Node) and a not in members and _elementwise(a) is not None \
                    and set(a.users) <= members and static_shape(a) == shape:
                members.add(a)
                work.append(a)
    order = [n for n in root.graph.nodes if n in members]
    inputs: list[fx.Node] = []
    for n in order:
        for a in _elementwise(n)[1]:
            if isinstance(a, fx.Node) and a not in members and a not in inputs:
                sh = static_shape(a)
                if sh is None or fake_value(a).dtype not in _FLOATS or not broadcasts_to(sh, shape):
                    return None
                inputs.append(a)
            elif not isinstance(a, fx.Node) and as_num(a) is None:
                return None
    return order, inputs


def _chain(order: list[fx.Node], inputs: list[fx.Node]) -> list[Any]:
    """The chain (as library_ops.chain_args writes it) of a region: input i is inputs[i]."""
    steps: list[Any] = []
    where: dict[fx.Node, Operand] = {}
    for n in order:
        op, vals, params = _elementwise(n)
        args = []
        for v in vals:
            if isinstance(v, fx.Node):
                args.append(list(where[v] if v in where else ("in", inputs.index(v))))
            else:
                args.append(["const", float(v)])
        if op in ("add", "sub", "mul", "div", "maximum", "minimum") and all(a[0] == "const" for a in args):
            raise ValueError("constant-only step")
        steps.append([op, args + [["const", p] for p in params]])
        where[n] = ("step", len(steps) - 1)
    return steps


def _anchor(inputs: list[fx.Node], order: list[fx.Node], shape: tuple[int, ...]) -> tuple[str, fx.Node] | None:
    """An Argus GEMM (argus::linear, 2-D, no residual) or convolution (argus::library conv) whose result only the
    region reads and whose shape is the region's: the chain can run in its epilogue."""
    members = set(order)
    for n in inputs:
        if not set(n.users) <= members or static_shape(n) != shape:
            continue
        if (n.target is torch.ops.argus.linear.default and fake_value(n.args[0]) is not None
                and fake_value(n.args[0]).dim() == 2):
            return "linear", n
        if n.target is torch.ops.argus.library.default and n.args[0] == "conv":
            return "conv", n
    return None


def match_pointwise(g: fx.Graph, gid: int) -> list[Match]:
    """Elementwise regions -> one synthesized kernel each; a region right after an Argus GEMM or convolution
    becomes that kernel's epilogue."""
    from ..kernels.pointwise import Chain, Step, result_dtype

    matches = []
    for root in reversed(list(g.nodes)):
        if not alive(root) or _elementwise(root) is None:
            continue
        users = list(root.users)
        if len(users) == 1 and _elementwise(users[0]) is not None \
                and static_shape(users[0]) == static_shape(root):
            continue  # not a root: its one reader extends the region
        shape = static_shape(root)
        if shape is None:
            continue
        found = _region(root, shape)
        if found is None:
            continue
        order, inputs = found
        if not inputs or result_dtype([fake_value(n) for n in inputs]) != fake_value(root).dtype:
            continue
        anchor = _anchor(inputs, order, shape)
        total = _summed_by(root) if anchor is None else None
        try:
            if anchor is None:  # a chain all summed by its reader is summed as it is computed, never written
                steps = _chain(order, inputs)
                name, tensors, args = ("pointwise", inputs, {"chain": steps}) if total is None else \
                    ("pointwise_sum", inputs, {"chain": steps, "mean": total[1]})
            else:
                kind, a = anchor
                rest = [n for n in inputs if n is not a]
                cargs = json.loads(a.args[2]) if kind == "conv" else {}
                act = cargs.pop("activation") if kind == "conv" else a.args[3]
                steps = _chain(order, [a, *rest])
                if act != "none":  # the activation the GEMM/conv folded runs first in the fused epilogue
                    steps = _shift(steps, [[act, [["in", 0]]]])
                if kind == "linear":
                    name, tensors, args = "linear_chain", [a.args[0], a.args[1], a.args[2], *rest], {"chain": steps}
                else:
                    x, w, b = a.args[1]
                    name, tensors, args = "conv_chain", [x, w, b, *rest], {**cargs, "chain": steps}
            Chain(tuple(Step(op, tuple(tuple(x) for x in xs)) for op, xs in steps))  # validates
        except ValueError:
            continue
        nodes = order + ([anchor[1]] if anchor is not None else [])
        if anchor is not None:  # the GEMM/convolution is now the fused kernel's
            report.forget_match(anchor[1].args[-1])
        last = root
        if total is not None:  # the reduction is now the fused kernel's
            last = total[0]
            report.forget_match(last.args[-1])
            nodes.append(last)
        matches.append(emit(g, gid, (name, list(tensors), args, last, nodes)))
    return matches


def _summed_by(root: fx.Node) -> tuple[fx.Node, bool] | None:
    """(the reduction, whether it is a mean) where the one reader of `root` is an Argus reduction of all of it to
    one number (x.sum(), x.mean(), torch.mean(x), rewritten to argus::library("reduce") before the chains)."""
    users = list(root.users)
    if len(users) != 1:
        return None
    u = users[0]
    if u.target is not torch.ops.argus.library.default or u.args[0] != "reduce" or list(u.args[1]) != [root]:
        return None
    a = json.loads(u.args[2])
    if a.get("kind") not in ("sum", "mean") or a.get("dim") is not None or a.get("keepdim"):
        return None
    return u, a["kind"] == "mean"


def _shift(steps: list[Any], pre: list[Any]) -> list[Any]:
    """`steps` with `pre` put first: reads of input 0 become reads of the last pre step, step indices move."""
    k = len(pre)

    def fix(a: list[Any]) -> list[Any]:
        if a[0] == "in" and a[1] == 0:
            return ["step", k - 1]
        if a[0] == "step":
            return ["step", a[1] + k]
        return a
    return [*pre, *([op, [fix(a) for a in args]] for op, args in steps)]
