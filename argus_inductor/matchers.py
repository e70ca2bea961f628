"""Pattern matchers over the graph Dynamo hands the backend: GEMM (+ epilogue) and attention
subgraphs become torch.ops.argus.* calls; every other node is left for Inductor."""
from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn.functional as F

from . import ops  # noqa: F401  (registers torch.ops.argus.*)
from . import reporting as report

_GRAPH_IDS = itertools.count()

LINEAR = {torch._C._nn.linear, F.linear}
MATMUL = {torch.matmul, operator.matmul, torch.mm}
BMM = {torch.bmm}
ADDMM = {torch.addmm}
SDPA = {F.scaled_dot_product_attention, getattr(torch._C._nn, "scaled_dot_product_attention", None)} - {None}
ACTIVATIONS = {torch.relu: "relu", F.relu: "relu", torch.nn.functional.silu: "silu", F.gelu: "gelu"}
METHOD_ACTS = {"relu": "relu"}


@dataclass
class Match:
    kind: str
    nodes: list[str]


def _val(n) -> torch.Tensor | None:
    if not isinstance(n, fx.Node):
        return None
    v = n.meta.get("example_value", n.meta.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def _activation(node: fx.Node) -> str | None:
    if node.op == "call_function" and node.target in ACTIVATIONS:
        if node.target is F.gelu:
            approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
            return "gelu_tanh" if approx == "tanh" else "gelu"
        if node.kwargs.get("inplace") or (len(node.args) > 1 and node.args[1] is True):
            return None
        return ACTIVATIONS[node.target]
    if node.op == "call_method" and node.target in METHOD_ACTS:
        return METHOD_ACTS[node.target]
    return None


def _is(node: fx.Node, targets: set, methods: tuple[str, ...] = ()) -> bool:
    return (node.op == "call_function" and node.target in targets) or (node.op == "call_method"
                                                                          and node.target in methods)


def rewrite(gm: fx.GraphModule, enabled: tuple[str, ...]) -> list[Match]:
    """Rewrite matched subgraphs in place; returns what was matched."""
    gid = next(_GRAPH_IDS)
    g = gm.graph
    matches: list[Match] = []
    for node in list(g.nodes):
        if node.op not in ("call_function", "call_method"):
            continue
        if "gemm" in enabled:
            m = _match_gemm(g, node, gid)
            if m:
                matches.append(m)
                continue
        if "attention" in enabled and _is(node, SDPA):
            m = _match_sdpa(g, node, gid)
            if m:
                matches.append(m)
    if matches:
        g.eliminate_dead_code()
        g.lint()
        gm.recompile()
    return matches


def _fold_activation(g: fx.Graph, node: fx.Node) -> tuple[str, fx.Node | None]:
    users = list(node.users)
    if len(users) == 1:
        act = _activation(users[0])
        if act is not None and users[0].args[0] is node:
            return act, users[0]
    return "none", None


def _match_gemm(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    bias = None
    if _is(node, LINEAR):
        x, w = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        wt = None
    elif _is(node, MATMUL, ("matmul", "mm", "__matmul__")):
        x, b = node.args[0], node.args[1]
        xv, bv = _val(x), _val(b)
        if xv is None or bv is None:
            return None
        if xv.dim() == 3 and bv.dim() == 3 and xv.shape[0] == bv.shape[0]:
            return _replace(g, node, "bmm", (x, b), gid, [node.name])
        if xv.dim() < 2 or bv.dim() != 2:
            return None
        w, wt = None, b
    elif _is(node, BMM, ("bmm",)):
        return _replace(g, node, "bmm", (node.args[0], node.args[1]), gid, [node.name])
    elif _is(node, ADDMM) and not node.kwargs:
        bias, x, wt = node.args[0], node.args[1], node.args[2]
        bv = _val(bias)
        if bv is None or bv.dim() != 1:
            return None
        w = None
    else:
        return None
    xv = _val(x)
    if xv is None or xv.dim() < 2:
        return None
    act, act_node = _fold_activation(g, node)
    with g.inserting_before(node):
        if w is None:
            w = g.call_function(torch.t, (wt,))
        node_id = f"g{gid}:{node.name}"
        new = g.call_function(torch.ops.argus.linear.default, (x, w, bias, act, node_id))
    names = [node.name] + ([act_node.name] if act_node is not None else [])
    report.record_match(node_id, "gemm", " -> ".join(names))
    new.meta.update((act_node or node).meta)
    (act_node or node).replace_all_uses_with(new)
    if act_node is not None:
        g.erase_node(act_node)
    g.erase_node(node)
    return Match("gemm", names)


def _replace(g: fx.Graph, node: fx.Node, kind: str, args: tuple, gid: int, names: list[str]) -> Match:
    node_id = f"g{gid}:{node.name}"
    with g.inserting_before(node):
        new = g.call_function(getattr(torch.ops.argus, kind).default, (*args, node_id))
    report.record_match(node_id, "gemm" if kind == "bmm" else kind, " -> ".join(names))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    g.erase_node(node)
    return Match(kind, names)


def _match_sdpa(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    a = dict(zip(names, node.args))
    a.update(node.kwargs)
    if a.get("attn_mask") is not None or a.get("dropout_p", 0.0) not in (0, 0.0):
        return None
    q, k, v = a["query"], a["key"], a["value"]
    vals = [_val(t) for t in (q, k, v)]
    if any(t is None or t.dim() != 4 for t in vals):
        return None
    if vals[0].shape[1] != vals[1].shape[1] and not a.get("enable_gqa", False):
        return None
    node_id = f"g{gid}:{node.name}"
    with g.inserting_before(node):
        new = g.call_function(torch.ops.argus.attention.default,
                              (q, k, v, bool(a.get("is_causal", False)), a.get("scale"), node_id))
    report.record_match(node_id, "attention", node.name)
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    g.erase_node(node)
    return Match("attention", [node.name])
