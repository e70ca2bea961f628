"""The attention family: scaled_dot_product_attention in every form Dynamo records and transformers' eager
softmax(Q K^T * scale [+ mask]) V, with the GQA key/value repetition looked through -> argus::attention /
argus::attention_mask (a size-only boolean mask proved causal becomes is_causal: causal_mask.py).
"""
from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..kernels.attention import MASKED_SCORE
from ..runtime import reporting as report
from .patterns import (
    ADD,
    DIV,
    DROPOUT,
    MUL,
    REPEAT_INTERLEAVE,
    SDPA_ARGS,
    SOFTMAX,
    TRANSPOSE,
    Match,
    as_int,
    as_num,
    bind,
    erase_unused,
    fake_value,
    is_call,
    known_eq,
    log,
    only_user,
    same_shape,
)


def _strip_repeat(n: Any) -> tuple[Any, int]:
    """Look through a GQA key/value repetition along dim 1 (head h reads kv head h // rep): transformers'
    repeat_kv (x[:, :, None].expand(b, hk, rep, s, d).reshape(b, hk * rep, s, d)) and
    repeat_interleave(x, rep, dim=1). Returns (the un-repeated node, rep), rep 1 when there is none."""
    if not isinstance(n, fx.Node):
        return n, 1
    if is_call(n, REPEAT_INTERLEAVE, ("repeat_interleave",)):
        a = bind(n, ["input", "repeats", "dim"])
        rep, dim, src = as_int(a.get("repeats")), a.get("dim"), a.get("input", n.args[0] if n.args else None)
        sv = fake_value(src)
        if rep and sv is not None and sv.dim() == 4 and dim in (1, -3) and "output_size" not in a:
            return src, rep
        return n, 1
    if not is_call(n, {torch.reshape}, ("reshape", "view")):
        return n, 1
    e = n.args[0]
    if not is_call(e, set(), ("expand",)):
        return n, 1
    u = e.args[0]
    src = None
    if is_call(u, {operator.getitem}):
        idx = u.args[1]
        if isinstance(idx, tuple) and 3 <= len(idx) <= 5 and idx[2] is None and all(
                isinstance(s, slice) and s == slice(None) for i, s in enumerate(idx) if i != 2):
            src = u.args[0]
    elif is_call(u, {torch.unsqueeze}, ("unsqueeze",)) and len(u.args) > 1 and u.args[1] == 2:
        src = u.args[0]
    sv, ev, nv = fake_value(src), fake_value(e), fake_value(n)
    if src is None or sv is None or ev is None or nv is None or sv.dim() != 4 or ev.dim() != 5 or nv.dim() != 4:
        return n, 1
    rep = as_int(ev.shape[2])
    if rep is None or not known_eq(ev.shape[1], sv.shape[1]) or not known_eq(nv.shape[1],
                                                                                             sv.shape[1] * rep):
        return n, 1
    if not all(known_eq(ev.shape[i], sv.shape[j]) for i, j in ((0, 0), (3, 2), (4, 3))):
        return n, 1
    return src, rep


def _qkv_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or not (q.dtype == k.dtype == v.dtype):
        return False
    if not same_shape(k, v) or not known_eq(q.shape[-1], k.shape[-1]) or not known_eq(q.shape[0], k.shape[0]):
        return False
    h, hk = as_int(q.shape[1]), as_int(k.shape[1])
    return h is not None and hk is not None and hk > 0 and h % hk == 0


def _transposed_next(n: fx.Node) -> bool:
    """Whether `n`'s only use is its transpose(1, 2), maybe after a reshape to its own shape (how transformers hands
    attention's output to the output projection): then the op writes its output in (Z, S, H, D) memory
    (ops.attention_out)."""
    users = list(n.users)
    if len(users) != 1 or users[0].kwargs:
        return False
    t = users[0]
    nv, tv = fake_value(n), fake_value(t)
    if is_call(t, {torch.reshape}, ("reshape", "view")) and nv is not None and tv is not None and same_shape(nv, tv):
        return _transposed_next(t)  # transformers 5's sdpa_attention_forward reshapes to the same shape first
    if not (is_call(t, {torch.transpose}, ("transpose",)) and len(t.args) == 3 and t.args[0] is n):
        return False
    return {d % 4 if isinstance(d, int) else d for d in t.args[1:]} == {1, 2}


def _additive_mask(g: fx.Graph, mask: Any, anchor: fx.Node) -> Any:
    """A bool attention mask as the additive float mask the kernels read, converted in the graph as mask_operand
    converts it (torch.where(mask, 0.0, MASKED_SCORE)), once for every attention op of that mask, so Inductor fuses
    the conversion into the kernel that builds the mask. Converted inside the op, it cost a decode step a launch a
    layer and that launch two scalar fills (torch.where's scalar operands on the device): six launches and about
    7 us of Llama decode's GPU time."""
    mv = fake_value(mask)
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
                    scale: float | None, gid: int, names: list[str], squeeze: bool = False,
                    nan_rows: bool = False) -> Match:
    node_id = f"g{gid}:{anchor.name}"
    with g.inserting_before(anchor):
        if squeeze:
            q, k, v = (g.call_method("unsqueeze", (t, 0)) for t in (q, k, v))
            if mask is not None:
                mv = fake_value(mask)
                if mv is not None and mv.dim() == 3:
                    mask = g.call_method("unsqueeze", (mask, 0))
        positions = not squeeze and _transposed_next(anchor)
        if mask is not None:
            mask = _additive_mask(g, mask, anchor)
            new = g.call_function(torch.ops.argus.attention_mask.default,
                                  (q, k, v, mask, scale, node_id, positions, *((True,) if nan_rows else ())))
        else:
            new = g.call_function(torch.ops.argus.attention.default,
                                  (q, k, v, causal, scale, node_id, positions, *((True,) if nan_rows else ())))
        out = g.call_method("squeeze", (new, 0)) if squeeze else new
    report.record_match(node_id, "attention", " -> ".join(names))
    out.meta.update(anchor.meta)
    anchor.replace_all_uses_with(out)
    erase_unused(g, [anchor])
    return Match("attention", names)


def match_sdpa(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    a = bind(node, SDPA_ARGS)
    if a.get("dropout_p", 0.0) not in (0, 0.0) or not isinstance(a.get("is_causal", False), bool):
        return None
    scale = a.get("scale")
    if scale is not None and as_num(scale) is None:
        return None
    mask = a.get("attn_mask")
    if mask is not None and (a.get("is_causal") or not isinstance(mask, fx.Node)):
        return None
    q = a["query"]
    k, rk = _strip_repeat(a["key"])
    v, rv = _strip_repeat(a["value"])
    if rk != rv:
        k, v = a["key"], a["value"]
    qv, kv, vv = fake_value(q), fake_value(k), fake_value(v)
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
    if mask is not None and getattr(fake_value(mask), "dtype", None) == torch.bool:
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
    xv = fake_value(n.args[0]) if n.args and isinstance(n.args[0], fx.Node) else None
    if xv is None or xv.dim() != 4:
        return None
    if is_call(n, TRANSPOSE, ("transpose",)):
        dims = {d % 4 for d in n.args[1:3] if isinstance(d, int)}
        return n.args[0] if dims == {2, 3} else None
    if is_call(n, {torch.permute}, ("permute",)):
        perm = n.args[1] if len(n.args) == 2 and isinstance(n.args[1], (tuple, list)) else n.args[1:]
        return n.args[0] if tuple(d % 4 for d in perm) == (0, 1, 3, 2) else None
    if n.op == "call_function" and n.target is getattr and n.args[1] == "mT":
        return n.args[0]
    return None


def match_eager_attention(g: fx.Graph, node: fx.Node, gid: int) -> Match | None:
    """matmul(softmax(matmul(q, k^T) * scale [+ mask]) [.to(dtype)] [dropout(p=0)], v)."""
    if not is_call(node, {torch.matmul, operator.matmul}, ("matmul", "__matmul__")) or len(node.args) != 2:
        return None
    chain = [node]
    p, v_rep = node.args
    cur = p
    while isinstance(cur, fx.Node):
        if is_call(cur, DROPOUT, ("dropout",)):
            d = bind(cur, ["input", "p", "training", "inplace"])
            if d.get("p", 0.5) not in (0, 0.0) and d.get("training", True) is not False:
                return None
        elif is_call(cur, set(), ("to", "type_as", "float", "half", "bfloat16")):
            pass
        else:
            break
        chain.append(cur)
        cur = cur.args[0]
    sm = cur
    if not is_call(sm, SOFTMAX, ("softmax",)):
        return None
    s = bind(sm, ["input", "dim", "_stacklevel", "dtype"] if sm.op == "call_function" and sm.target is F.softmax
              else ["input", "dim", "dtype"])
    dim = s.get("dim")
    scores = s.get("input", sm.args[0])
    sv = fake_value(scores)
    if sv is None or sv.dim() != 4 or not isinstance(dim, int) or dim % 4 != 3:
        return None
    chain.append(sm)
    mask = None
    cur = scores
    if is_call(cur, ADD, ("add",)) and len(cur.args) == 2 and not cur.kwargs:
        for lhs, rhs in (cur.args, cur.args[::-1]):
            if isinstance(rhs, fx.Node) and fake_value(rhs) is not None and isinstance(lhs, fx.Node):
                mask, nxt = rhs, lhs
                break
        else:
            return None
        chain.append(cur)
        cur = nxt
    scale = 1.0
    if is_call(cur, MUL, ("mul",)) and len(cur.args) == 2:
        c0, c1 = as_num(cur.args[0]), as_num(cur.args[1])
        if c1 is not None and isinstance(cur.args[0], fx.Node):
            scale, nxt = c1, cur.args[0]
        elif c0 is not None and isinstance(cur.args[1], fx.Node):
            scale, nxt = c0, cur.args[1]
        else:
            return None
        chain.append(cur)
        cur = nxt
    elif is_call(cur, DIV, ("div", "__truediv__")) and len(cur.args) == 2 and as_num(cur.args[1]):
        scale = 1.0 / as_num(cur.args[1])  # type: ignore[operator]
        chain.append(cur)
        cur = cur.args[0]
    if not is_call(cur, {torch.matmul, operator.matmul}, ("matmul", "__matmul__")) or len(cur.args) != 2:
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
    qv, kv, vv = fake_value(q), fake_value(k), fake_value(v)
    if qv is None or kv is None or vv is None or not _qkv_ok(qv, kv, vv) or not math.isfinite(scale):
        return None
    # Every intermediate must feed only the next step (an attention-weights output keeps the aten path).
    for later, earlier in zip(chain, chain[1:]):
        if not only_user(earlier, later):
            return None
    names = [n.name for n in reversed(chain)]
    # softmax then matmul: a row whose every score is -inf is NaN (SDPA's is zero)
    return _emit_attention(g, node, q, k, v, mask, False, scale, gid, names, nan_rows=True)


