"""The MoE router's softmax -> top-k [-> renormalization] as one `argus::library("router_topk")` call.

Matches `topk(softmax(x, dim=-1), k, dim=-1)` over (tokens, experts) float logits (transformers' Mixtral, Qwen-MoE
and OLMoE routers), with `values / values.sum(-1, keepdim=True)` after it when the model renormalizes. The call
returns the weights and the experts packed in one float32 tensor (kernels/router.py); two views split it back, the
experts cast to int64 as topk gives them. Runs with the "moe" op kind."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..kernels.router import MAX_EXPERTS, MAX_TOP_K, router_reference
from ..ops.library import canonical_args
from ..runtime import reporting as report
from .patterns import Match, alive, as_int, bind, dims_arg, erase_unused, fake_value, is_call

SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax}
TOPK = {torch.topk, torch.Tensor.topk}
SUM = {torch.sum, torch.Tensor.sum}
DIV = {operator.truediv, operator.itruediv, torch.div, torch.true_divide, torch.Tensor.div, torch.Tensor.div_}


def _router(node: fx.Node) -> tuple[fx.Node, int, fx.Node | None, fx.Node | None, fx.Node | None] | None:
    """(logits, k, the values' use to replace, the experts' use to replace, the renormalizing division or None)
    when `node` is the top-k of a router's softmax; the nodes are topk's getitems or the division."""
    if not is_call(node, TOPK, ("topk",)):
        return None
    a = bind(node, ["input", "k", "dim", "largest", "sorted"])
    sm, k = a.get("input"), as_int(a.get("k"))
    if not is_call(sm, SOFTMAX, ("softmax",)) or list(sm.users) != [node] or a.get("largest", True) is not True:
        return None
    s = bind(sm, ["input", "dim", "_stacklevel", "dtype"] if sm.op == "call_function" else ["input", "dim"])
    x, xv, sv = s.get("input"), fake_value(s.get("input")), fake_value(sm)
    if xv is None or sv is None or xv.dim() != 2 or not xv.is_floating_point() or sv.dtype != torch.float32:
        return None
    e = as_int(xv.shape[1])
    if e is None or e > MAX_EXPERTS or k is None or not 1 <= k <= min(e, MAX_TOP_K):
        return None
    if dims_arg(s.get("dim"), 2) != [1] or dims_arg(a.get("dim", -1), 2) != [1]:
        return None
    gets = {u.args[1]: u for u in node.users if u.op == "call_function" and u.target is operator.getitem}
    if len(gets) != len(node.users) or not gets:
        return None
    values, experts = gets.get(0), gets.get(1)
    div = None
    if values is not None and len(values.users) == 2:
        sums = [u for u in values.users if is_call(u, SUM, ("sum",))]
        divs = [u for u in values.users if is_call(u, DIV, ("div", "div_", "__truediv__", "__itruediv__"))]
        if len(sums) == 1 and len(divs) == 1:
            sa = bind(sums[0], ["input", "dim", "keepdim"])
            d = divs[0]
            if (sa.get("keepdim") is True and dims_arg(sa.get("dim"), 2) == [1] and list(sums[0].users) == [d]
                    and d.args[:2] == (values, sums[0]) and len(d.args) == 2 and not d.kwargs):
                div = d
    return x, k, (div if div is not None else values), experts, div


def rewrite_routers(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Rewrite every router top-k of the graph (outside autocast regions) into one router_topk call."""
    out = []
    for node in list(g.nodes):
        if not alive(node) or node in amp:
            continue
        found = _router(node)
        if found is None:
            continue
        x, k, values, experts, div = found
        renorm = div is not None
        node_id = f"g{gid}:{node.name}"
        xv = fake_value(x)
        with xv.fake_mode:
            pv = router_reference(xv, k, renorm)
        with g.inserting_before(node):
            packed = g.call_function(torch.ops.argus.library.default,
                                     ("router_topk", [x], canonical_args({"k": k, "renorm": renorm}), node_id))
            weights = g.call_function(operator.getitem, (packed, (slice(None), slice(None, k))))
            ids_f = g.call_function(operator.getitem, (packed, (slice(None), slice(k, None))))
            ids = g.call_method("to", (ids_f, torch.int64))
        for new, val in ((packed, pv), (weights, pv[:, :k]), (ids_f, pv[:, k:]), (ids, pv[:, k:].to(torch.int64))):
            new.meta.update({key: v for key, v in node.meta.items() if key != "example_value"})
            new.meta["example_value"] = val
        if values is not None:
            values.replace_all_uses_with(weights)
        if experts is not None:
            experts.replace_all_uses_with(ids)
            for user in list(ids.users):  # argus::moe reads the packed float ids itself: no cast kernel before it
                if user.target is torch.ops.argus.moe.default and user.args[2] is ids:
                    user.args = (*user.args[:2], ids_f, *user.args[3:])
            if not ids.users:
                g.erase_node(ids)
        names = [n.name for n in (x, node, div) if n is not None]
        report.record_match(node_id, "moe", "router " + " -> ".join(names))
        erase_unused(g, [n for n in (div, values, experts) if n is not None] + [node])
        out.append(Match("moe", names))
    return out


__all__ = ["rewrite_routers"]
