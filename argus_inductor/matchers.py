"""Pattern matchers over the graph Dynamo hands the backend. Matched subgraphs become torch.ops.argus.*
calls; every other node is left for Inductor.

Passes, in order (each sees the graph the previous one left):

1. moe: the nodes of a transformers sparse-MoE experts module (found through the nn_module_stack that
   Dynamo records, e.g. MixtralExperts, Qwen2MoeExperts, Qwen3MoeExperts, DeepseekV3Experts) whose
   implementation traced into the graph (transformers' grouped_mm / batched_mm experts) -> argus::moe.
2. attention: scaled_dot_product_attention in every form Dynamo records (positional or keyword
   arguments, scale, enable_gqa, is_causal, a mask, 3-D inputs), and the hand-written
   softmax(Q K^T * scale [+ mask]) V of transformers' eager attention, with the GQA key/value
   repetition (repeat_kv's expand+reshape, repeat_interleave) looked through.
3. gate*up: act(linear(x, Wg)) * linear(x, Wu) -> argus::gate_up (one kernel, two accumulators).
4. gemm: linear, matmul, mm, addmm, bmm, with the activation that follows and a residual add after it.
"""
from __future__ import annotations

import itertools
import logging
import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from . import ops  # noqa: F401  (registers torch.ops.argus.*)
from .kernels.attention import MASKED_SCORE
from .runtime import reporting as report

log = logging.getLogger("argus_inductor")
_GRAPH_IDS = itertools.count()
_SAID: set[str] = set()

LIBRARY_KINDS = ("conv", "norm", "scan", "pool", "reduce", "loss", "pointwise")
LINEAR = {torch._C._nn.linear, F.linear}
MATMUL = {torch.matmul, operator.matmul, torch.mm}
BMM = {torch.bmm}
ADDMM = {torch.addmm}
ADD = {operator.add, torch.add, torch.Tensor.add}
MUL = {operator.mul, torch.mul, torch.Tensor.mul}
DIV = {operator.truediv, torch.div, torch.true_divide}
SDPA = {F.scaled_dot_product_attention, getattr(torch._C._nn, "scaled_dot_product_attention", None)} - {None}
SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax}
DROPOUT = {F.dropout, torch.dropout}
TRANSPOSE = {torch.transpose, torch.Tensor.transpose}
REPEAT_INTERLEAVE = {torch.repeat_interleave, torch.Tensor.repeat_interleave}
SILU = {F.silu, torch.nn.functional.silu, torch.ops.aten.silu.default}
ACTIVATIONS = {torch.relu: "relu", F.relu: "relu", F.silu: "silu", F.gelu: "gelu"}
METHOD_ACTS = {"relu": "relu"}
SDPA_ARGS = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]


@dataclass
class Match:
    kind: str
    nodes: list[str]


def _say_once(msg: str) -> None:
    if msg not in _SAID:
        _SAID.add(msg)
        log.warning(msg)


def _val(n: Any) -> torch.Tensor | None:
    if not isinstance(n, fx.Node):
        return None
    v = n.meta.get("example_value", n.meta.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def _known_eq(a: Any, b: Any) -> bool:
    """a == b, decided without adding a guard (symbolic sizes count only when provably equal)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(a == b))
    except Exception:
        return False


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == b.dim() and all(_known_eq(x, y) for x, y in zip(a.shape, b.shape))


def _int(x: Any) -> int | None:
    """x as an int: an int, or a SymInt the shape environment has pinned to one (transformers' static cache
    traces its key/value sizes as SymInts that guards fix to constants), else None."""
    if isinstance(x, torch.SymInt):
        x = x.node.maybe_as_int()
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _is(node: Any, targets: set, methods: tuple[str, ...] = ()) -> bool:
    return isinstance(node, fx.Node) and ((node.op == "call_function" and node.target in targets)
                                          or (node.op == "call_method" and node.target in methods))


def _bind(node: fx.Node, names: list[str]) -> dict[str, Any]:
    a = dict(zip(names, node.args))
    a.update(node.kwargs)
    return a


def _alive(n: fx.Node) -> bool:
    return not getattr(n, "_erased", False)


def is_argus_op(n: object) -> bool:
    """Whether `n` is a call of one of Argus's ops (torch.ops.argus.*)."""
    return isinstance(n, fx.Node) and n.op == "call_function" and str(n.target).startswith("argus.")


def _only_user(n: fx.Node, user: fx.Node) -> bool:
    return list(n.users) == [user]


def _pure(n: fx.Node) -> bool:
    """Whether erasing `n` once it has no users changes nothing (no mutation, no side effect)."""
    if n.op not in ("call_function", "call_method"):
        return False
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    if name.endswith("_") and not name.startswith("__"):
        return False
    if n.target in (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv):
        return False
    try:
        return not n.is_impure()
    except Exception:
        return False


def _drop(g: fx.Graph, nodes: Iterable[fx.Node]) -> None:
    """Erase `nodes` (which must have no users) and then every input of theirs that is left unused and
    pure. Not a whole-graph dead-code pass: that would drop in-place updates such as copy_ or scatter_
    that Dynamo records without users."""
    work = list(nodes)
    while work:
        n = work.pop()
        if not _alive(n) or n.users or (n.op not in ("call_function", "call_method")):
            continue
        inputs = list(n.all_input_nodes)
        g.erase_node(n)
        work.extend(i for i in inputs if _alive(i) and not i.users and _pure(i))


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


def _under_autocast(g: fx.Graph) -> set[fx.Node]:
    """The nodes inside an enabled torch.autocast region (Dynamo records `_enter_autocast(device, dtype, enabled,
    cache)` ... `_exit_autocast(enter)` around them). Autocast runs a matmul or attention there in its own dtype
    (float32 operands, a bfloat16 product); an Argus op has no autocast kernel and would return its operands' dtype,
    so the matchers leave these nodes to Inductor."""
    stacks: dict[Any, list[bool]] = {}
    opened: dict[fx.Node, Any] = {}
    inside: set[fx.Node] = set()
    for n in g.nodes:
        name = getattr(n.target, "__name__", "") if n.op == "call_function" else ""
        if name == "_enter_autocast" and n.args:
            enabled = n.args[2] if len(n.args) > 2 else n.kwargs.get("enabled", True)
            stacks.setdefault(n.args[0], []).append(bool(enabled))
            opened[n] = n.args[0]
        elif name == "_exit_autocast" and n.args and n.args[0] in opened:
            stack = stacks.get(opened[n.args[0]])
            if stack:
                stack.pop()
        elif any(stack and stack[-1] for stack in stacks.values()):
            inside.add(n)
    return inside


def rewrite(gm: fx.GraphModule, enabled: Iterable[str], moe_regions: bool = True,
            prune_rows: bool = True) -> list[Match]:
    """Rewrite matched subgraphs in place; returns what was matched. Nothing inside an enabled autocast region
    is matched (_under_autocast). `prune_rows`: once the experts regions are argus::moe calls, compute only the
    rows a final slice keeps of the row-wise ops before it (row_pruning: a prefill's last layer on its last
    position), so the GEMM and attention matchers see those shapes."""
    enabled = tuple(enabled)
    gid = next(_GRAPH_IDS)
    g = gm.graph
    matches: list[Match] = []
    amp = _under_autocast(g)
    if "moe" in enabled and moe_regions:
        matches += _match_moe_regions(g, gid, amp)
    if prune_rows:  # after the experts regions became argus::moe calls, whose rows (tokens) are independent
        from .row_pruning import prune_unread_rows

        pruned = prune_unread_rows(g, gid)
        if pruned:
            matches += pruned
            amp = _under_autocast(g)  # the new nodes sit beside the ones they replace, in the same regions
    if "moe" in enabled:
        from .router_match import rewrite_routers

        matches += rewrite_routers(g, gid, amp)
    if "attention" in enabled:
        for node in list(g.nodes):
            if not _alive(node) or node.op not in ("call_function", "call_method") or node in amp:
                continue
            m = _match_sdpa(g, node, gid) if _is(node, SDPA) else _match_eager_attention(g, node, gid)
            if m:
                matches.append(m)
        from .rotary_match import rewrite_rope_cache_writes, rewrite_rotary_tables

        matches += rewrite_rotary_tables(g, gid, amp)  # the rotary tables the attention's q and k are rotated by
        matches += rewrite_rope_cache_writes(g, gid, amp)  # a decode step's q, k rotation and KV-cache write
    changed = False
    if "gemm" in enabled:
        _einsum_as_matmul(g, amp)
        changed = _outer_products_as_mul(g, amp)
        for node in list(g.nodes):
            if _alive(node) and node.op in ("call_function", "call_method") and node not in amp:
                m = _match_gate_up(g, node, gid)
                if m:
                    matches.append(m)
        matches += _match_linear_cats(g, gid, amp)
        for node in list(g.nodes):
            if _alive(node) and node.op in ("call_function", "call_method") and node not in amp:
                m = _match_gemm(g, node, gid)
                if m:
                    matches.append(m)
        from .norm_match import rewrite_decode_norms

        matches += rewrite_decode_norms(g, gid, amp)  # RMSNorms between the GEMMs just rewritten, at decode
    library = [k for k in enabled if k in LIBRARY_KINDS]
    if library:
        from .library_match import rewrite_library

        matches += rewrite_library(g, gid, tuple(library), amp)
    if matches or changed:
        g.lint()
        gm.recompile()
    return matches


# ------------------------------------------------------------------------------------------------ GEMM


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


def _einsum_as_matmul(g: fx.Graph, amp: set[fx.Node]) -> None:
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
        act = _activation(users[0])
        if act is not None and users[0].args[0] is node:
            return act, users[0]
    return "none", None


def _residual_of(last: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(the add node, the residual) when `last`'s only user adds a tensor of its own shape and dtype."""
    users = list(last.users)
    if len(users) != 1:
        return None
    u = users[0]
    if not _is(u, ADD, ("add",)) or len(u.args) != 2 or u.kwargs:
        return None
    other = u.args[1] if u.args[0] is last else u.args[0]
    if other is last or not isinstance(other, fx.Node):
        return None
    rv, ov = _val(other), _val(last)
    if rv is None or ov is None or rv.dtype != ov.dtype or rv.device != ov.device or not _same_shape(rv, ov):
        return None
    return u, other


def _outer_product(node: fx.Node) -> bool:
    """A product whose reduced dim is statically 1 (rotary embeddings' `inv_freq @ position_ids`): each output
    element is one multiply. Left to Inductor (as a broadcast multiply: _outer_products_as_mul)."""
    if not node.args:
        return False
    a = _val(node.args[1] if _is(node, ADDMM) else node.args[0])
    return a is not None and a.dim() >= 2 and _known_eq(a.shape[-1], 1)


def _outer_products_as_mul(g: fx.Graph, amp: set[fx.Node]) -> bool:
    """Rewrite matmul/bmm of a reduced dim 1 into the broadcast multiply it is ((.., M, 1) * (.., 1, N): one
    product, one rounding, the same values), so Inductor fuses it into its consumers (torch 2.13's decomposition
    does this for bmm; torch 2.11's Inductor calls cuBLAS). The rotary embedding's is read by the cos and sin of
    every q and k element: as a GEMM its materialized (1, 64, S) product is read there with a transposed index, and
    costs a launch (the q rotary took 34 us a layer at Llama-3-8B's 1x2048 on the H100 against max-autotune's 15).
    Returns whether the graph changed; `amp`: nodes under autocast, left alone."""
    changed = False
    for node in list(g.nodes):
        if node in amp or not (_is(node, MATMUL | BMM, ("matmul", "mm", "bmm", "__matmul__")) and len(node.args) == 2
                and not node.kwargs and _outer_product(node)):
            continue
        av, bv = _val(node.args[0]), _val(node.args[1])
        if bv is None or bv.dim() < 2 or av.dim() != bv.dim() or not _known_eq(bv.shape[-2], 1):
            continue
        with g.inserting_before(node):
            new = g.call_function(torch.mul, tuple(node.args))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        g.erase_node(node)
        changed = True
    return changed


def _match_gemm(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    if _outer_product(node):
        return None
    bias = None
    if _is(node, LINEAR):
        x, w = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        wt = None
        wv = _val(w)
        if wv is None or wv.dim() != 2:
            return None
    elif _is(node, MATMUL, ("matmul", "mm", "__matmul__")):
        x, b = node.args[0], node.args[1]
        xv, bv = _val(x), _val(b)
        if xv is None or bv is None:
            return None
        if xv.dim() == 3 and bv.dim() == 3 and _known_eq(xv.shape[0], bv.shape[0]):
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
    _drop(g, ([res[0]] if res else []) + ([act_node] if act_node is not None else []) + [node])
    return Match("gemm", names)


def _plain_linear(n: Any) -> tuple[fx.Node, fx.Node] | None:
    """(x, weight) of a bias-free linear(x, weight) with a 2-D weight."""
    if not _is(n, LINEAR):
        return None
    bias = n.args[2] if len(n.args) > 2 else n.kwargs.get("bias")
    wv = _val(n.args[1])
    if bias is not None or wv is None or wv.dim() != 2:
        return None
    return n.args[0], n.args[1]


def _match_gate_up(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    if not _is(node, MUL, ("mul", "__mul__")) or len(node.args) != 2 or node.kwargs:
        return None
    for act_node, up in (node.args, node.args[::-1]):
        if not isinstance(act_node, fx.Node) or not isinstance(up, fx.Node) or act_node is up:
            continue
        act = _activation(act_node)
        if act is None or not act_node.args:
            continue
        gate = act_node.args[0]
        lg, lu = _plain_linear(gate), _plain_linear(up)
        if lg is None or lu is None or lg[0] is not lu[0]:
            continue
        wgv, wuv = _val(lg[1]), _val(lu[1])
        if wgv is None or wuv is None or not _same_shape(wgv, wuv) or wgv.dtype != wuv.dtype:
            continue
        if not (_only_user(gate, act_node) and _only_user(act_node, node) and _only_user(up, node)):
            continue
        node_id = f"g{gid}:{node.name}"
        with g.inserting_before(node):
            new = g.call_function(torch.ops.argus.gate_up.default, (lg[0], lg[1], lu[1], act, node_id))
        names = [gate.name, act_node.name, up.name, node.name]
        report.record_match(node_id, "gemm", " -> ".join(names))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        _drop(g, [node, act_node, gate, up])
        return Match("gemm", names)
    return None


def _static_rows(x: torch.Tensor) -> int | None:
    """The rows of a linear's input x (..., K), where every leading dim is a plain int (not symbolic)."""
    lead = x.shape[:-1]
    return math.prod(lead) if all(type(d) is int for d in lead) else None


def _match_linear_cats(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Three bias-free linears of one input with at most GEMV_CAT_MAX_M rows known at compile time (an attention's
    q, k and v projections at decode) become one argus.linear_cat, its output sliced back into the three."""
    from .kernels.policies import GEMV_CAT_MAX_M

    order = {n: i for i, n in enumerate(g.nodes)}
    by_input: dict[fx.Node, list[fx.Node]] = {}
    for n in g.nodes:
        lin = _plain_linear(n) if _alive(n) and n.op in ("call_function", "call_method") and n not in amp else None
        if lin is not None and isinstance(lin[0], fx.Node) and isinstance(lin[1], fx.Node):
            by_input.setdefault(lin[0], []).append(n)
    matches = []
    for x, lins in by_input.items():
        xv = _val(x)
        ws = [_val(n.args[1]) for n in lins]
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
        _drop(g, lins)
        matches.append(Match("gemm", names))
    return matches


def _replace(g: fx.Graph, node: fx.Node, kind: str, args: tuple, gid: int, names: list[str]) -> Match:
    node_id = f"g{gid}:{node.name}"
    with g.inserting_before(node):
        new = g.call_function(getattr(torch.ops.argus, kind).default, (*args, node_id))
    report.record_match(node_id, "gemm" if kind == "bmm" else kind, " -> ".join(names))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    _drop(g, [node])
    return Match(kind, names)


# ------------------------------------------------------------------------------------------- attention


def _strip_repeat(n: Any) -> tuple[Any, int]:
    """Look through a GQA key/value repetition along dim 1 (head h reads kv head h // rep): transformers'
    repeat_kv (x[:, :, None].expand(b, hk, rep, s, d).reshape(b, hk * rep, s, d)) and
    repeat_interleave(x, rep, dim=1). Returns (the un-repeated node, rep), rep 1 when there is none."""
    if not isinstance(n, fx.Node):
        return n, 1
    if _is(n, REPEAT_INTERLEAVE, ("repeat_interleave",)):
        a = _bind(n, ["input", "repeats", "dim"])
        rep, dim, src = _int(a.get("repeats")), a.get("dim"), a.get("input", n.args[0] if n.args else None)
        sv = _val(src)
        if rep and sv is not None and sv.dim() == 4 and dim in (1, -3) and "output_size" not in a:
            return src, rep
        return n, 1
    if not _is(n, {torch.reshape}, ("reshape", "view")):
        return n, 1
    e = n.args[0]
    if not _is(e, set(), ("expand",)):
        return n, 1
    u = e.args[0]
    src = None
    if _is(u, {operator.getitem}):
        idx = u.args[1]
        if isinstance(idx, tuple) and 3 <= len(idx) <= 5 and idx[2] is None and all(
                isinstance(s, slice) and s == slice(None) for i, s in enumerate(idx) if i != 2):
            src = u.args[0]
    elif _is(u, {torch.unsqueeze}, ("unsqueeze",)) and len(u.args) > 1 and u.args[1] == 2:
        src = u.args[0]
    sv, ev, nv = _val(src), _val(e), _val(n)
    if src is None or sv is None or ev is None or nv is None or sv.dim() != 4 or ev.dim() != 5 or nv.dim() != 4:
        return n, 1
    rep = _int(ev.shape[2])
    if rep is None or not _known_eq(ev.shape[1], sv.shape[1]) or not _known_eq(nv.shape[1],
                                                                                             sv.shape[1] * rep):
        return n, 1
    if not all(_known_eq(ev.shape[i], sv.shape[j]) for i, j in ((0, 0), (3, 2), (4, 3))):
        return n, 1
    return src, rep


def _qkv_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or not (q.dtype == k.dtype == v.dtype):
        return False
    if not _same_shape(k, v) or not _known_eq(q.shape[-1], k.shape[-1]) or not _known_eq(q.shape[0], k.shape[0]):
        return False
    h, hk = _int(q.shape[1]), _int(k.shape[1])
    return h is not None and hk is not None and hk > 0 and h % hk == 0


def _transposed_next(n: fx.Node) -> bool:
    """Whether `n`'s only use is its transpose(1, 2), maybe after a reshape to its own shape (how transformers hands
    attention's output to the output projection): then the op writes its output in (Z, S, H, D) memory
    (ops.attention_out)."""
    users = list(n.users)
    if len(users) != 1 or users[0].kwargs:
        return False
    t = users[0]
    nv, tv = _val(n), _val(t)
    if _is(t, {torch.reshape}, ("reshape", "view")) and nv is not None and tv is not None and _same_shape(nv, tv):
        return _transposed_next(t)  # transformers 5's sdpa_attention_forward reshapes to the same shape first
    if not (_is(t, {torch.transpose}, ("transpose",)) and len(t.args) == 3 and t.args[0] is n):
        return False
    return {d % 4 if isinstance(d, int) else d for d in t.args[1:]} == {1, 2}


def _additive_mask(g: fx.Graph, mask: Any, anchor: fx.Node) -> Any:
    """A bool attention mask as the additive float mask the kernels read, converted in the graph as mask_operand
    converts it (torch.where(mask, 0.0, MASKED_SCORE)), once for every attention op of that mask, so Inductor fuses
    the conversion into the kernel that builds the mask. Converted inside the op, it cost a decode step a launch a
    layer and that launch two scalar fills (torch.where's scalar operands on the device): six launches and about
    7 us of Llama decode's GPU time."""
    mv = _val(mask)
    if not isinstance(mask, fx.Node) or mv is None or mv.dtype != torch.bool:
        return mask
    earlier = set()
    for n in g.nodes:  # a conversion made for an earlier attention op of the same mask
        if n is anchor:
            break
        earlier.add(n)
    for u in mask.users:
        if u in earlier and u.target is torch.where and u.args == (mask, 0.0, MASKED_SCORE) and not u.kwargs:
            return u
    with g.inserting_before(anchor):
        new = g.call_function(torch.where, (mask, 0.0, MASKED_SCORE))
    new.meta["example_value"] = mv.new_empty(mv.shape, dtype=torch.float32)  # where(bool, float, float): float32
    return new


def _emit_attention(g: fx.Graph, anchor: fx.Node, q: Any, k: Any, v: Any, mask: Any, causal: bool,
                    scale: float | None, gid: int, names: list[str], squeeze: bool = False) -> Match:
    node_id = f"g{gid}:{anchor.name}"
    with g.inserting_before(anchor):
        if squeeze:
            q, k, v = (g.call_method("unsqueeze", (t, 0)) for t in (q, k, v))
            if mask is not None:
                mv = _val(mask)
                if mv is not None and mv.dim() == 3:
                    mask = g.call_method("unsqueeze", (mask, 0))
        positions = not squeeze and _transposed_next(anchor)
        if mask is not None:
            mask = _additive_mask(g, mask, anchor)
            new = g.call_function(torch.ops.argus.attention_mask.default,
                                  (q, k, v, mask, scale, node_id, positions))
        else:
            new = g.call_function(torch.ops.argus.attention.default, (q, k, v, causal, scale, node_id, positions))
        out = g.call_method("squeeze", (new, 0)) if squeeze else new
    report.record_match(node_id, "attention", " -> ".join(names))
    out.meta.update(anchor.meta)
    anchor.replace_all_uses_with(out)
    _drop(g, [anchor])
    return Match("attention", names)


def _match_sdpa(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    a = _bind(node, SDPA_ARGS)
    if a.get("dropout_p", 0.0) not in (0, 0.0) or not isinstance(a.get("is_causal", False), bool):
        return None
    scale = a.get("scale")
    if scale is not None and _num(scale) is None:
        return None
    mask = a.get("attn_mask")
    if mask is not None and (a.get("is_causal") or not isinstance(mask, fx.Node)):
        return None
    q = a["query"]
    k, rk = _strip_repeat(a["key"])
    v, rv = _strip_repeat(a["value"])
    if rk != rv:
        k, v = a["key"], a["value"]
    qv, kv, vv = _val(q), _val(k), _val(v)
    if qv is None or kv is None or vv is None:
        return None
    squeeze = qv.dim() == 3 and kv.dim() == 3 and vv.dim() == 3
    if squeeze:
        qv, kv, vv = qv.unsqueeze(0), kv.unsqueeze(0), vv.unsqueeze(0)
    if not _qkv_ok(qv, kv, vv):
        return None
    if qv.shape[1] != kv.shape[1] and not a.get("enable_gqa", False) and rk == 1:
        return None  # aten would refuse it; so do we
    causal = bool(a.get("is_causal", False))
    if mask is not None and getattr(_val(mask), "dtype", None) == torch.bool:
        from .causal_mask import why_not_causal

        why = why_not_causal(mask, qv.shape[-2], kv.shape[-2])
        if why is None:  # built in the graph from sizes alone, and causal at every size
            log.info("argus: the mask of %s is proved causal at every size; it runs as is_causal", node.name)
            mask, causal = None, True
        else:
            log.info("argus: the mask of %s stays a mask: not proved causal (%s)", node.name, str(why)[:300])
    return _emit_attention(g, node, q, k, v, mask, causal,
                           None if scale is None else float(scale), gid, [node.name], squeeze)


def _transposed_last2(n: Any) -> Any:
    """x for x.transpose(-2, -1) (any spelling) of a 4-D x, else None."""
    if not isinstance(n, fx.Node):
        return None
    xv = _val(n.args[0]) if n.args and isinstance(n.args[0], fx.Node) else None
    if xv is None or xv.dim() != 4:
        return None
    if _is(n, TRANSPOSE, ("transpose",)):
        dims = {d % 4 for d in n.args[1:3] if isinstance(d, int)}
        return n.args[0] if dims == {2, 3} else None
    if _is(n, {torch.permute}, ("permute",)):
        perm = n.args[1] if len(n.args) == 2 and isinstance(n.args[1], (tuple, list)) else n.args[1:]
        return n.args[0] if tuple(d % 4 for d in perm) == (0, 1, 3, 2) else None
    if n.op == "call_function" and n.target is getattr and n.args[1] == "mT":
        return n.args[0]
    return None


def _match_eager_attention(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    """matmul(softmax(matmul(q, k^T) * scale [+ mask]) [.to(dtype)] [dropout(p=0)], v)."""
    if not _is(node, {torch.matmul, operator.matmul}, ("matmul", "__matmul__")) or len(node.args) != 2:
        return None
    chain = [node]
    p, v_rep = node.args
    cur = p
    while isinstance(cur, fx.Node):
        if _is(cur, DROPOUT, ("dropout",)):
            d = _bind(cur, ["input", "p", "training", "inplace"])
            if d.get("p", 0.5) not in (0, 0.0) and d.get("training", True) is not False:
                return None
        elif _is(cur, set(), ("to", "type_as", "float", "half", "bfloat16")):
            pass
        else:
            break
        chain.append(cur)
        cur = cur.args[0]
    sm = cur
    if not _is(sm, SOFTMAX, ("softmax",)):
        return None
    s = _bind(sm, ["input", "dim", "_stacklevel", "dtype"] if sm.op == "call_function" and sm.target is F.softmax
              else ["input", "dim", "dtype"])
    dim = s.get("dim")
    scores = s.get("input", sm.args[0])
    sv = _val(scores)
    if sv is None or sv.dim() != 4 or not isinstance(dim, int) or dim % 4 != 3:
        return None
    chain.append(sm)
    mask = None
    cur = scores
    if _is(cur, ADD, ("add",)) and len(cur.args) == 2 and not cur.kwargs:
        for lhs, rhs in (cur.args, cur.args[::-1]):
            if isinstance(rhs, fx.Node) and _val(rhs) is not None and isinstance(lhs, fx.Node):
                mask, nxt = rhs, lhs
                break
        else:
            return None
        chain.append(cur)
        cur = nxt
    scale = 1.0
    if _is(cur, MUL, ("mul",)) and len(cur.args) == 2:
        c0, c1 = _num(cur.args[0]), _num(cur.args[1])
        if c1 is not None and isinstance(cur.args[0], fx.Node):
            scale, nxt = c1, cur.args[0]
        elif c0 is not None and isinstance(cur.args[1], fx.Node):
            scale, nxt = c0, cur.args[1]
        else:
            return None
        chain.append(cur)
        cur = nxt
    elif _is(cur, DIV, ("div", "__truediv__")) and len(cur.args) == 2 and _num(cur.args[1]):
        scale = 1.0 / _num(cur.args[1])  # type: ignore[operator]
        chain.append(cur)
        cur = cur.args[0]
    if not _is(cur, {torch.matmul, operator.matmul}, ("matmul", "__matmul__")) or len(cur.args) != 2:
        return None
    chain.append(cur)
    q, kt = cur.args
    k_rep = _transposed_last2(kt)
    if k_rep is None:
        return None
    chain.append(kt)
    k, rk = _strip_repeat(k_rep)
    v, rv = _strip_repeat(v_rep)
    if rk != rv:
        k, v = k_rep, v_rep
    qv, kv, vv = _val(q), _val(k), _val(v)
    if qv is None or kv is None or vv is None or not _qkv_ok(qv, kv, vv) or not math.isfinite(scale):
        return None
    # Every intermediate must feed only the next step (an attention-weights output keeps the aten path).
    for later, earlier in zip(chain, chain[1:]):
        if not _only_user(earlier, later):
            return None
    names = [n.name for n in reversed(chain)]
    return _emit_attention(g, node, q, k, v, mask, False, scale, gid, names)


# -------------------------------------------------------------------------------------------------- MoE


def _experts_class(cls: Any) -> bool:
    name = getattr(cls, "__name__", str(cls))
    return name.endswith("Experts") and "Shared" not in name


def _match_moe_regions(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
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
    outs = [n for n in body if any(u not in inside for u in n.users) and _val(n) is not None]
    tensors = [a for a in ext if _val(a) is not None]
    weights3d = [p for p in params + tensors if (_val(p) is not None and _val(p).dim() == 3)]
    others = [t for t in tensors if t not in weights3d]

    def refuse(why: str) -> None:
        _say_once(f"argus: MoE experts module {where} left to Inductor: {why}")

    if len(outs) != 1 or not body:
        return refuse("it is not whole in this graph (its implementation breaks the graph, as transformers' "
                      "eager experts loop does); call argus_inductor.optimize(model) before torch.compile")
    if len(weights3d) != 2 or len(others) != 3 or any(_val(p).dim() != 3 for p in params):
        return refuse(f"expected two stacked expert weights and three inputs, found {len(weights3d)} and "
                      f"{len(others)} (biases, or another layout)")
    a, b = (_val(w) for w in weights3d)
    w1, w2 = None, None
    for x, y, nx, ny in ((a, b, weights3d[0], weights3d[1]), (b, a, weights3d[1], weights3d[0])):
        if x.shape[0] == y.shape[0] and x.shape[1] == 2 * y.shape[2] and x.shape[2] == y.shape[1]:
            w1, w2 = nx, ny
    if w1 is None:
        return refuse(f"weights {tuple(a.shape)} and {tuple(b.shape)} are not (E, 2I, H) and (E, H, I)")
    hd = _val(w1).shape[2]
    hidden = ids = tw = None
    for t in others:
        tv = _val(t)
        if tv.dim() == 2 and not tv.is_floating_point() and ids is None:
            ids = t
        elif tv.dim() == 2 and tv.is_floating_point() and _known_eq(tv.shape[1], hd) and hidden is None:
            hidden = t
        elif tv.dim() == 2 and tv.is_floating_point() and tw is None:
            tw = t
    if hidden is None or ids is None or tw is None or not _known_eq(_val(ids).shape[1], _val(tw).shape[1]):
        return refuse("its inputs are not hidden (T, H), top-k ids and top-k weights (T, k)")
    if not any(_is(n, SILU, ("silu",)) or any("SiLU" in getattr(c, "__name__", str(c))
                                             for _, c in (n.meta.get("nn_module_stack") or {}).values())
               for n in body):
        return refuse("its activation is not SiLU")
    if any(_is(n, {operator.getitem}) and isinstance(n.args[1], tuple) and any(
            isinstance(s, slice) and s.step not in (None, 1) for s in n.args[1]) for n in body):
        return refuse("its gate/up rows are interleaved")
    if any(not _pure(n) and n.args and isinstance(n.args[0], fx.Node) and n.args[0] not in inside for n in body):
        return refuse("it updates a tensor from outside it in place")
    out = outs[0]
    ov, hv = _val(out), _val(hidden)
    if ov is None or not _same_shape(ov, hv):
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
