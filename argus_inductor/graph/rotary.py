"""The rotary embedding's cos and sin tables as one `argus::library("rotary_table")` call, and a decode step's q and
k rotation with its KV-cache write as one `argus::rope_cache` call.

Matches `emb = cat((f, f), -1)` followed by `emb.cos()` and `emb.sin()` (transformers' rotary embeddings: Llama,
Mistral, Mixtral, Qwen), over float32 angles. Inductor would inline both into every q and k rotation that reads
them (kernels/rotary.py says when and what it costs); the call computes them once. It returns both packed in one
float32 tensor, and two views give the graph's cos and sin back; the scaling and cast after them are untouched.
A decode step's tables (at most DECODE_ROWS positions known at compile time) stay Inductor's. Runs with the
"attention" op kind.

A decode step of one position rotates q and k (`q * cos + rotate_half(q) * sin`, rotate_half(x) = cat(-x2, x1) of
its halves) and writes the rotated k and the v into its layer's static cache (`keys.index_copy_(2, position, k)`,
`values.index_copy_(2, position, v)`: transformers' StaticCache layers). Inductor makes three launches of that; one
`argus::rope_cache` call (kernels/rotary.py) makes one: it returns q rotated and writes the caches in place."""
from __future__ import annotations

import logging
import math
import operator
from typing import Any

import torch
import torch.fx as fx

from ..kernels.rotary import MAX_WIDTH, rope_cache_problem, rotary_reference
from ..ops.library import canonical_args
from ..runtime import reporting as report
from .patterns import ADD, MUL, Match, alive, as_int, bind, dims_arg, erase_unused, fake_value, is_call, known_eq

log = logging.getLogger("argus_inductor")
CAT = {torch.cat, torch.concat, torch.concatenate}
NEG = {operator.neg, torch.neg, torch.Tensor.neg}
COS = {torch.cos, torch.Tensor.cos}
SIN = {torch.sin, torch.Tensor.sin}


# a decode step's tables: a few positions, which Inductor's rotations compute inline for less than a launch costs
DECODE_ROWS = 16


def _angles(node: fx.Node) -> bool:
    """Whether `node` is cat((f, f), dim=-1) of float32 angles with a static last dim of at most MAX_WIDTH, more
    than DECODE_ROWS rows of them (or a number unknown at compile time: a prefill of any length)."""
    if not is_call(node, CAT, ("cat",)):
        return False
    a = bind(node, ["tensors", "dim"])
    parts, v = a.get("tensors"), fake_value(node)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or parts[0] is not parts[1] or v is None:
        return False
    width = as_int(v.shape[-1]) if v.dim() >= 1 else None
    lead = [as_int(d) for d in v.shape[:-1]]
    if None not in lead and math.prod(lead) <= DECODE_ROWS:
        return False
    return (v.dtype == torch.float32 and width is not None and 1 <= width <= MAX_WIDTH
            and dims_arg(a.get("dim", 0), v.dim()) == [v.dim() - 1])


def _trig(emb: fx.Node, ops: set, name: str) -> fx.Node | None:
    """The one `name` (cos or sin) of `emb` among its users, taking nothing else."""
    found = [u for u in emb.users if is_call(u, ops, (name,)) and tuple(u.args) == (emb,) and not u.kwargs]
    return found[0] if len(found) == 1 else None


def rewrite_rotary_tables(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Rewrite each cos/sin pair of rotary angles (outside autocast regions) into one rotary_table call."""
    out = []
    for emb in list(g.nodes):
        if not alive(emb) or emb in amp or not _angles(emb):
            continue
        cos, sin = _trig(emb, COS, "cos"), _trig(emb, SIN, "sin")
        if cos is None or sin is None or cos in amp or sin in amp:
            continue
        node_id = f"g{gid}:{cos.name}"
        ev = fake_value(emb)
        with ev.fake_mode:
            pv = rotary_reference(ev)
        with g.inserting_before(emb.next):  # right after emb: before both cos and sin, which read it
            packed = g.call_function(torch.ops.argus.library.default,
                                     ("rotary_table", [emb], canonical_args({}), node_id))
            cos_t = g.call_function(operator.getitem, (packed, 0))
            sin_t = g.call_function(operator.getitem, (packed, 1))
        for new, val, like in ((packed, pv, cos), (cos_t, pv[0], cos), (sin_t, pv[1], sin)):
            new.meta.update({key: v for key, v in like.meta.items() if key != "example_value"})
            new.meta["example_value"] = val
        cos.replace_all_uses_with(cos_t)
        sin.replace_all_uses_with(sin_t)
        names = [emb.name, cos.name, sin.name]
        report.record_match(node_id, "rotary", "table " + " -> ".join(names))  # shown apart from attention ops
        erase_unused(g, [cos, sin])
        out.append(Match("attention", names))
    return out


# ------------------------------------------------------------------------- rotation and KV-cache write


def _factors(node: fx.Node) -> tuple[Any, Any] | None:
    if not is_call(node, MUL, ("mul",)) or len(node.args) != 2 or node.kwargs:
        return None
    return node.args[0], node.args[1]


def _half(node: Any, x: fx.Node, first: bool, half: int) -> bool:
    """Whether `node` is x[..., :half] (first) or x[..., half:]."""
    if not is_call(node, {operator.getitem}) or node.args[0] is not x:
        return False
    idx = node.args[1]
    if not isinstance(idx, tuple) or len(idx) != 2 or idx[0] is not Ellipsis or not isinstance(idx[1], slice):
        return False
    sl = idx[1]
    bounds_ok = sl.start in (None, 0) and sl.stop == half if first else sl.start == half and sl.stop is None
    return bounds_ok and sl.step in (None, 1)


def _rotate_half_of(node: Any, half: int) -> fx.Node | None:
    """x where `node` is cat((-x[..., half:], x[..., :half]), dim=-1)."""
    if not is_call(node, CAT, ("cat",)):
        return None
    a = bind(node, ["tensors", "dim"])
    parts, dim = a.get("tensors"), a.get("dim", 0)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or dim not in (-1, 3):
        return None
    neg, first = parts
    if not is_call(neg, NEG, ("neg",)) or len(neg.args) != 1 or not isinstance(first, fx.Node):
        return None
    x = first.args[0] if first.args else None
    if not isinstance(x, fx.Node) or not _half(first, x, True, half) or not _half(neg.args[0], x, False, half):
        return None
    return x


def _rope_of(node: Any) -> tuple[fx.Node, fx.Node, fx.Node] | None:
    """(x, cos, sin) where `node` is x * cos + rotate_half(x) * sin (the products in either order)."""
    if not is_call(node, ADD, ("add",)) or len(node.args) != 2 or node.kwargs:
        return None
    v = fake_value(node)
    width = as_int(v.shape[-1]) if v is not None and v.dim() == 4 else None
    if width is None or width % 2:
        return None
    for plain, rotated in (node.args, node.args[::-1]):
        if not isinstance(plain, fx.Node) or not isinstance(rotated, fx.Node):
            continue
        pf, rf = _factors(plain), _factors(rotated)
        if pf is None or rf is None:
            continue
        for rot, sin in (rf, rf[::-1]):
            x = _rotate_half_of(rot, width // 2)
            if x is None or not isinstance(sin, fx.Node):
                continue
            for a, cos in (pf, pf[::-1]):
                if a is x and isinstance(cos, fx.Node):
                    return x, cos, sin
    return None


def _cache_write(node: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node] | None:
    """(cache, position, value) where `node` is cache.index_copy_(2, position, value), its result unused."""
    if node.op != "call_method" or node.target != "index_copy_" or node.users:
        return None
    a = bind(node, ["self", "dim", "index", "source"])
    cache, index, value = a.get("self"), a.get("index"), a.get("source")
    if a.get("dim") not in (2, -2) or not all(isinstance(n, fx.Node) for n in (cache, index, value)):
        return None
    return cache, index, value


def _static_operands(vals: list[torch.Tensor]) -> bool:
    """Whether the operands' heads, positions and head dims are known at compile time (the batch and the caches'
    length may be symbolic: the kernel takes them at run time)."""
    return all(t.dim() == 4 and all(as_int(t.shape[i]) is not None for i in (1, 3)) for t in vals) and \
        all(as_int(t.shape[2]) is not None for t in vals[:5])


def rewrite_rope_cache_writes(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Rewrite each decode position's q and k rotation with its two cache writes into one rope_cache call."""
    out = []
    writes = [(n, w) for n in g.nodes if (w := _cache_write(n)) is not None and n not in amp]
    for kn, (keys, index, k_embed) in writes:
        order = {n: i for i, n in enumerate(g.nodes)}  # afresh: a rewrite before this one added nodes
        vn = next((n for n, w in writes if w[1] is index and w[0] is not keys and n is not kn), None)
        if vn is None or not alive(kn) or not alive(vn) or len(k_embed.users) != 1:
            continue
        values, _, v = _cache_write(vn)  # type: ignore[misc]
        rope = _rope_of(k_embed)
        if rope is None:
            continue
        k, cos, sin = rope
        qs = [u for u in cos.users if u is not k_embed and u.users and _rotates_another(u, cos, sin, k)]
        if len(qs) != 1:
            continue
        q_embed = next(iter(qs[0].users))
        q = _rope_of(q_embed)[0]  # type: ignore[index]
        first, last = sorted((kn, vn), key=order.get)
        between = [n for n in g.nodes if order[first] < order[n] < order[last]]
        if any(keys in n.all_input_nodes or values in n.all_input_nodes for n in between):
            continue  # a read of a cache between the two writes: moving the second write would change it
        inputs = (q, k, v, cos, sin, keys, values, index)
        if any(order[n] > order[first] for n in inputs) or any(order[u] < order[first] for u in q_embed.users):
            continue
        vals = [fake_value(n) for n in inputs]
        if any(t is None for t in vals) or not _static_operands(vals[:7]) or q_embed in amp:
            continue
        qv = vals[0]
        if not all(known_eq(t.shape[0], qv.shape[0]) for t in (vals[1], vals[2], vals[5], vals[6])):
            continue
        try:
            with qv.fake_mode:
                problem = rope_cache_problem(*vals)  # type: ignore[arg-type]
        except Exception as e:  # a symbolic size the check cannot decide
            problem = f"{type(e).__name__}: {e}"
        if problem:
            log.debug("argus: %s stays Inductor's: %s", kn.name, problem)
            continue
        node_id = f"g{gid}:{q_embed.name}"
        with g.inserting_before(first):
            new = g.call_function(torch.ops.argus.rope_cache.default, (*inputs, node_id))
        new.meta.update({key: val for key, val in q_embed.meta.items() if key != "example_value"})
        with qv.fake_mode:
            new.meta["example_value"] = torch.empty_like(qv, dtype=torch.promote_types(qv.dtype, vals[3].dtype))
        q_embed.replace_all_uses_with(new)
        names = [q_embed.name, k_embed.name, kn.name, vn.name]
        report.record_match(node_id, "rope", "rotate q, k; write k, v: " + ", ".join(names))
        g.erase_node(kn)
        g.erase_node(vn)
        erase_unused(g, [q_embed, k_embed])
        out.append(Match("rope_cache", names))
    return out


def _rotates_another(mul: fx.Node, cos: fx.Node, sin: fx.Node, k: fx.Node) -> bool:
    """Whether `mul` (a user of cos) is the plain product of another tensor's rotation by the same cos and sin."""
    if len(mul.users) != 1:
        return False
    add = next(iter(mul.users))
    rope = _rope_of(add)
    return rope is not None and rope[1] is cos and rope[2] is sin and rope[0] is not k


__all__ = ["rewrite_rotary_tables", "rewrite_rope_cache_writes"]
