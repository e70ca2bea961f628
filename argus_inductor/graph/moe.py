"""The MoE family: the nodes of a transformers sparse-MoE experts module whose implementation traced into the graph
(grouped_mm / batched_mm experts; found through Dynamo's nn_module_stack) -> one argus::moe call.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from ..runtime import reporting as report
from .patterns import (
    SILU,
    Match,
    fake_value,
    is_call,
    is_pure,
    known_eq,
    same_shape,
    say_once,
)


def _experts_class(cls: Any) -> bool:
    name = getattr(cls, "__name__", str(cls))
    return name.endswith("Experts") and "Shared" not in name


def match_moe_regions(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    regions: dict[str, list[fx.Node]] = {}
    classes: dict[str, Any] = {}
    for n in g.nodes:
        stack = n.meta.get("nn_module_stack") or {}
        for path, cls in stack.values():
            if _experts_class(cls):
                regions.setdefault(path, []).append(n)
                classes[path] = cls
                break
    out = []
    for path, nodes in regions.items():
        if amp.intersection(nodes):
            continue
        m = _replace_moe_region(g, path, classes[path], nodes, gid)
        if m:
            out.append(m)
    return out


def _replace_moe_region(g: fx.Graph, path: str, cls: Any, nodes: list[fx.Node], gid: int) -> Match | None:
    cname = getattr(cls, "__name__", str(cls))
    where = f"{path} ({cname})"
    inside = set(nodes)
    params = [n for n in nodes if n.op in ("placeholder", "get_attr")]
    body = [n for n in nodes if n.op not in ("placeholder", "get_attr", "output")]
    ext: list[fx.Node] = []
    for n in body:
        for a in n.all_input_nodes:
            if a not in inside and a not in ext:
                ext.append(a)
    # A size expression (T * top_k, say) computed in this block and reused after it by the next layer, as
    # Dynamo shares it under dynamic shapes, is not an output: it stays in the graph for its users.
    outs = [n for n in body if any(u not in inside for u in n.users) and fake_value(n) is not None]
    tensors = [a for a in ext if fake_value(a) is not None]
    weights3d = [p for p in params + tensors if (fake_value(p) is not None and fake_value(p).dim() == 3)]
    others = [t for t in tensors if t not in weights3d]

    def refuse(why: str) -> None:
        say_once(f"argus: MoE experts module {where} left to Inductor: {why}")

    if len(outs) != 1 or not body:
        return refuse("it is not whole in this graph (its implementation breaks the graph, as transformers' "
                      "eager experts loop does); call argus_inductor.optimize(model) before torch.compile")
    if len(weights3d) != 2 or len(others) != 3 or any(fake_value(p).dim() != 3 for p in params):
        return refuse(f"expected two stacked expert weights and three inputs, found {len(weights3d)} and "
                      f"{len(others)} (biases, or another layout)")
    a, b = (fake_value(w) for w in weights3d)
    w1, w2 = None, None
    for x, y, nx, ny in ((a, b, weights3d[0], weights3d[1]), (b, a, weights3d[1], weights3d[0])):
        if x.shape[0] == y.shape[0] and x.shape[1] == 2 * y.shape[2] and x.shape[2] == y.shape[1]:
            w1, w2 = nx, ny
    if w1 is None:
        return refuse(f"weights {tuple(a.shape)} and {tuple(b.shape)} are not (E, 2I, H) and (E, H, I)")
    hd = fake_value(w1).shape[2]
    hidden = ids = tw = None
    for t in others:
        tv = fake_value(t)
        if tv.dim() == 2 and not tv.is_floating_point() and ids is None:
            ids = t
        elif tv.dim() == 2 and tv.is_floating_point() and known_eq(tv.shape[1], hd) and hidden is None:
            hidden = t
        elif tv.dim() == 2 and tv.is_floating_point() and tw is None:
            tw = t
    if hidden is None or ids is None or tw is None or not known_eq(fake_value(ids).shape[1], fake_value(tw).shape[1]):
        return refuse("its inputs are not hidden (T, H), top-k ids and top-k weights (T, k)")
    if not any(is_call(n, SILU, ("silu",)) or any("SiLU" in getattr(c, "__name__", str(c))
                                             for _, c in (n.meta.get("nn_module_stack") or {}).values())
               for n in body):
        return refuse("its activation is not SiLU")
    if any(is_call(n, {operator.getitem}) and isinstance(n.args[1], tuple) and any(
            isinstance(s, slice) and s.step not in (None, 1) for s in n.args[1]) for n in body):
        return refuse("its gate/up rows are interleaved")
    if any(not is_pure(n) and n.args and isinstance(n.args[0], fx.Node) and n.args[0] not in inside for n in body):
        return refuse("it updates a tensor from outside it in place")
    out = outs[0]
    ov, hv = fake_value(out), fake_value(hidden)
    if ov is None or not same_shape(ov, hv):
        return refuse("its output is not (T, H)")
    node_id = f"g{gid}:{path}"
    with g.inserting_before(out):
        new = g.call_function(torch.ops.argus.moe.default, (hidden, tw, ids, w1, w2, node_id))
        res = new if ov.dtype == hv.dtype else g.call_method("to", (new, ov.dtype))
    new.meta.update(out.meta)
    if "example_value" in new.meta:
        new.meta["example_value"] = hv.new_empty(hv.shape) if ov.dtype != hv.dtype else new.meta["example_value"]
    out.replace_all_uses_with(res)
    for n in reversed(list(g.nodes)):
        if n in inside and n.op not in ("placeholder", "get_attr") and not n.users:
            g.erase_node(n)
    report.record_match(node_id, "moe", where)
    return Match("moe", [where])
