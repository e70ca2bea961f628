"""The GEMM family: linear, matmul/mm, addmm, bmm (einsum in matmul form) with the activation that follows and a
residual add after it -> argus::linear / linear_residual / bmm; act(linear(x, Wg)) * linear(x, Wu) -> argus::gate_up;
three bias-free projections of one input at decode -> argus::linear_cat; outer products as the multiply they are.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx

from ..runtime import reporting as report
from .patterns import (
    ADD,
    ADDMM,
    BMM,
    LINEAR,
    MATMUL,
    MUL,
    Match,
    activation_of,
    alive,
    erase_unused,
    fake_value,
    is_call,
    known_eq,
    only_user,
    same_shape,
    static_shape,
)

EINSUM = {torch.einsum, getattr(torch.functional, "einsum", torch.einsum)}


def _einsum_matmul_form(eq: str) -> bool:
    """Whether a two-operand einsum is a plain matmul: 'P c, c d -> P d' (a tensor times a matrix over its last
    dim) or 'B i c, B c k -> B i k' (batched), each letter once per operand, no repeated or summed-out letter."""
    eq = eq.replace(" ", "")
    if "->" not in eq or "." in eq:
        return False
    ins, out = eq.split("->")
    parts = ins.split(",")
    if len(parts) != 2:
        return False
    a, b = parts
    if any(len(set(x)) != len(x) for x in (a, b, out)) or len(a) < 2 or len(b) < 2:
        return False
    c = a[-1]
    if len(b) == 2:
        return b[0] == c and out == a[:-1] + b[1] and b[1] not in a
    batch = b[:-2]
    return (b[-2] == c and a[:-2] == batch and out == a[:-1] + b[-1] and b[-1] not in a)


def einsum_as_matmul(g: fx.Graph, amp: set[fx.Node]) -> None:
    """Rewrite einsums that are plain matmuls into torch.matmul, so the GEMM matchers see them (not under autocast
    (`amp`), where no matcher would take them)."""
    for node in list(g.nodes):
        if (node.op != "call_function" or node.target not in EINSUM or node.kwargs or len(node.args) < 2
                or node in amp):
            continue
        eq, operands = node.args[0], node.args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        if not isinstance(eq, str) or len(operands) != 2 or not _einsum_matmul_form(eq):
            continue
        with g.inserting_before(node):
            new = g.call_function(torch.matmul, tuple(operands))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        g.erase_node(node)


def _fold_activation(node: fx.Node) -> tuple[str, fx.Node | None]:
    users = list(node.users)
    if len(users) == 1:
        act = activation_of(users[0])
        if act is not None and users[0].args[0] is node:
            return act, users[0]
    return "none", None


def _residual_of(last: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(the add node, the residual) when `last`'s only user adds a tensor of its own shape and dtype."""
    users = list(last.users)
    if len(users) != 1:
        return None
    u = users[0]
    if not is_call(u, ADD, ("add",)) or len(u.args) != 2 or u.kwargs:
        return None
    other = u.args[1] if u.args[0] is last else u.args[0]
    if other is last or not isinstance(other, fx.Node):
        return None
    rv, ov = fake_value(other), fake_value(last)
    if rv is None or ov is None or rv.dtype != ov.dtype or rv.device != ov.device or not same_shape(rv, ov):
        return None
    return u, other


def _outer_product(node: fx.Node) -> bool:
    """A product whose reduced dim is statically 1 (rotary embeddings' `inv_freq @ position_ids`): each output
    element is one multiply. Left to Inductor (as a broadcast multiply: outer_products_as_mul)."""
    if not node.args:
        return False
    a = fake_value(node.args[1] if is_call(node, ADDMM) else node.args[0])
    return a is not None and a.dim() >= 2 and known_eq(a.shape[-1], 1)


def outer_products_as_mul(g: fx.Graph, amp: set[fx.Node]) -> bool:
    """Rewrite matmul/bmm of a reduced dim 1 into the broadcast multiply it is ((.., M, 1) * (.., 1, N): one
    product, one rounding, the same values), so Inductor fuses it into its consumers (torch 2.13's decomposition
    does this for bmm; torch 2.11's Inductor calls cuBLAS). The rotary embedding's is read by the cos and sin of
    every q and k element: as a GEMM its materialized (1, 64, S) product is read there with a transposed index, and
    costs a launch (the q rotary took 34 us a layer at Llama-3-8B's 1x2048 on the H100 against max-autotune's 15).
    Returns whether the graph changed; `amp`: nodes under autocast, left alone."""
    changed = False
    for node in list(g.nodes):
        matmul = is_call(node, MATMUL | BMM, ("matmul", "mm", "bmm", "__matmul__"))
        if node in amp or not (matmul and len(node.args) == 2 and not node.kwargs and _outer_product(node)):
            continue
        av, bv = fake_value(node.args[0]), fake_value(node.args[1])
        if bv is None or bv.dim() < 2 or av.dim() != bv.dim() or not known_eq(bv.shape[-2], 1):
            continue
        with g.inserting_before(node):
            new = g.call_function(torch.mul, tuple(node.args))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        g.erase_node(node)
        changed = True
    return changed


def match_gemm(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    if _outer_product(node):
        return None
    bias = None
    if is_call(node, LINEAR):
        x, w = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        wt = None
        wv = fake_value(w)
        if wv is None or wv.dim() != 2:
            return None
    elif is_call(node, MATMUL, ("matmul", "mm", "__matmul__")):
        x, b = node.args[0], node.args[1]
        xv, bv = fake_value(x), fake_value(b)
        if xv is None or bv is None:
            return None
        if xv.dim() == 3 and bv.dim() == 3 and known_eq(xv.shape[0], bv.shape[0]):
            return replace_call(g, node, "bmm", (x, b), gid, [node.name])
        if xv.dim() >= 2 and bv.dim() >= 3:
            return batched_matmul(g, node, x, b, gid)
        if xv.dim() < 2 or bv.dim() != 2:
            return None
        w, wt = None, b
    elif is_call(node, BMM, ("bmm",)):
        return replace_call(g, node, "bmm", (node.args[0], node.args[1]), gid, [node.name])
    elif is_call(node, ADDMM) and not node.kwargs:
        bias, x, wt = node.args[0], node.args[1], node.args[2]
        bv = fake_value(bias)
        if bv is None or bv.dim() != 1:
            return None
        w = None
    else:
        return None
    xv = fake_value(x)
    if xv is None or xv.dim() < 2 or (bias is not None and not isinstance(bias, fx.Node)):
        return None
    act, act_node = _fold_activation(node)
    last = act_node or node
    res = _residual_of(last)
    anchor = res[0] if res else last
    with g.inserting_before(anchor):
        if w is None:
            w = g.call_function(torch.t, (wt,))
        node_id = f"g{gid}:{node.name}"
        if res:
            new = g.call_function(torch.ops.argus.linear_residual.default, (x, w, bias, res[1], act, node_id))
        else:
            new = g.call_function(torch.ops.argus.linear.default, (x, w, bias, act, node_id))
    names = [node.name] + ([act_node.name] if act_node is not None else []) + ([res[0].name] if res else [])
    report.record_match(node_id, "gemm", " -> ".join(names))
    new.meta.update(anchor.meta)
    anchor.replace_all_uses_with(new)
    erase_unused(g, ([res[0]] if res else []) + ([act_node] if act_node is not None else []) + [node])
    return Match("gemm", names)


def _plain_linear(n: Any) -> tuple[fx.Node, fx.Node] | None:
    """(x, weight) of a bias-free linear(x, weight) with a 2-D weight."""
    if not is_call(n, LINEAR):
        return None
    bias = n.args[2] if len(n.args) > 2 else n.kwargs.get("bias")
    wv = fake_value(n.args[1])
    if bias is not None or wv is None or wv.dim() != 2:
        return None
    return n.args[0], n.args[1]


def match_gate_up(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    if not is_call(node, MUL, ("mul", "__mul__")) or len(node.args) != 2 or node.kwargs:
        return None
    for act_node, up in (node.args, node.args[::-1]):
        if not isinstance(act_node, fx.Node) or not isinstance(up, fx.Node) or act_node is up:
            continue
        act = activation_of(act_node)
        if act is None or not act_node.args:
            continue
        gate = act_node.args[0]
        lg, lu = _plain_linear(gate), _plain_linear(up)
        if lg is None or lu is None or lg[0] is not lu[0]:
            continue
        wgv, wuv = fake_value(lg[1]), fake_value(lu[1])
        if wgv is None or wuv is None or not same_shape(wgv, wuv) or wgv.dtype != wuv.dtype:
            continue
        if not (only_user(gate, act_node) and only_user(act_node, node) and only_user(up, node)):
            continue
        node_id = f"g{gid}:{node.name}"
        with g.inserting_before(node):
            new = g.call_function(torch.ops.argus.gate_up.default, (lg[0], lg[1], lu[1], act, node_id))
        names = [gate.name, act_node.name, up.name, node.name]
        report.record_match(node_id, "gemm", " -> ".join(names))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        erase_unused(g, [node, act_node, gate, up])
        return Match("gemm", names)
    return None


def _static_rows(x: torch.Tensor) -> int | None:
    """The rows of a linear's input x (..., K), where every leading dim is a plain int (not symbolic)."""
    lead = x.shape[:-1]
    return math.prod(lead) if all(type(d) is int for d in lead) else None


def match_linear_cats(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Three bias-free linears of one input with at most GEMV_CAT_MAX_M rows known at compile time (an attention's
    q, k and v projections at decode) become one argus.linear_cat, its output sliced back into the three."""
    from ..kernels.policies import GEMV_CAT_MAX_M

    order = {n: i for i, n in enumerate(g.nodes)}
    by_input: dict[fx.Node, list[fx.Node]] = {}
    for n in g.nodes:
        lin = _plain_linear(n) if alive(n) and n.op in ("call_function", "call_method") and n not in amp else None
        if lin is not None and isinstance(lin[0], fx.Node) and isinstance(lin[1], fx.Node):
            by_input.setdefault(lin[0], []).append(n)
    matches = []
    for x, lins in by_input.items():
        xv = fake_value(x)
        ws = [fake_value(n.args[1]) for n in lins]
        if len(lins) != 3 or xv is None or any(w is None for w in ws):
            continue
        rows = _static_rows(xv)
        if rows is None or not 1 <= rows <= GEMV_CAT_MAX_M or xv.dim() < 2:
            continue
        if any(w.dtype != xv.dtype or w.shape[1] != xv.shape[-1] or type(w.shape[0]) is not int for w in ws):
            continue
        weights = [n.args[1] for n in lins]
        if any(order[w] > order[lins[0]] for w in weights):  # each weight must exist where the fused op goes
            continue
        node_id = f"g{gid}:{lins[0].name}"
        names = [n.name for n in lins]
        with g.inserting_before(lins[0]):
            cat = g.call_function(torch.ops.argus.linear_cat.default, (x, *weights, node_id))
            start = 0
            for n, w in zip(lins, ws):
                part = g.call_function(torch.ops.aten.slice.Tensor, (cat, -1, start, start + w.shape[0]))
                part.meta.update(n.meta)
                n.replace_all_uses_with(part)
                start += w.shape[0]
        report.record_match(node_id, "gemm", " + ".join(names))
        erase_unused(g, lins)
        matches.append(Match("gemm", names))
    return matches


def _as_batch(g: fx.Graph, n: fx.Node, full: tuple[int, ...], flat: tuple[int, int, int]) -> fx.Node:
    """n broadcast to `full` and its batch dims flattened: a view where they are n's own and contiguous, else the
    copy torch.matmul makes for them too. The new nodes carry their fake values, as Dynamo's do."""
    v = fake_value(n)
    assert v is not None
    if tuple(v.shape) != full:
        n, v = g.call_method("expand", (n, *full)), v.expand(full)
        n.meta["val"] = v
    out = g.call_method("reshape", (n, *flat))
    out.meta["val"] = v.reshape(flat)
    return out


def batched_matmul(g: fx.Graph, node: fx.Node, x: fx.Node, b: fx.Node, gid: int) -> Match | None:
    """matmul(x, b) with b batched, (..., M, K) @ (..., K, N) whose batch dims broadcast ((4, 1, M, K) @ (1, 8, K, N),
    or a 2-D x against a batch of b) -> argus::bmm over the broadcast batch flattened into one, its output viewed
    back. Static shapes only."""
    xs, bs = static_shape(x), static_shape(b)
    if xs is None or bs is None or xs[-1] != bs[-2]:
        return None
    try:
        batch = tuple(torch.broadcast_shapes(xs[:-2], bs[:-2]))
    except RuntimeError:
        return None
    m, k, n = xs[-2], xs[-1], bs[-1]
    nb = math.prod(batch)
    node_id = f"g{gid}:{node.name}"
    with g.inserting_before(node):
        a3 = _as_batch(g, x, (*batch, m, k), (nb, m, k))
        b3 = _as_batch(g, b, (*batch, k, n), (nb, k, n))
        mm = g.call_function(torch.ops.argus.bmm.default, (a3, b3, node_id))
        out = g.call_method("reshape", (mm, *batch, m, n))
    mm.meta.update(node.meta)
    mm.meta["val"] = fake_value(node).reshape(nb, m, n)
    out.meta.update(node.meta)
    report.record_match(node_id, "gemm", f"{node.name} (batch {'x'.join(map(str, batch))} broadcast)")
    node.replace_all_uses_with(out)
    erase_unused(g, [node])
    return Match("bmm", [node.name])


def replace_call(g: fx.Graph, node: fx.Node, kind: str, args: tuple, gid: int, names: list[str]) -> Match:
    node_id = f"g{gid}:{node.name}"
    with g.inserting_before(node):
        new = g.call_function(getattr(torch.ops.argus, kind).default, (*args, node_id))
    report.record_match(node_id, "gemm" if kind == "bmm" else kind, " -> ".join(names))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    erase_unused(g, [node])
    return Match(kind, names)


