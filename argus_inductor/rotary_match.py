"""The rotary embedding's cos and sin tables as one `argus::library("rotary_table")` call.

Matches `emb = cat((f, f), -1)` followed by `emb.cos()` and `emb.sin()` (transformers' rotary embeddings: Llama,
Mistral, Mixtral, Qwen), over float32 angles. Inductor would inline both into every q and k rotation that reads
them (kernels/rotary.py says when and what it costs); the call computes them once. It returns both packed in one
float32 tensor, and two views give the graph's cos and sin back; the scaling and cast after them are untouched.
A decode step's tables (at most DECODE_ROWS positions known at compile time) stay Inductor's. Runs with the
"attention" op kind."""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from . import reporting as report
from .kernels.rotary import MAX_WIDTH, rotary_reference
from .library_match import _dims
from .library_ops import canonical_args
from .matchers import Match, _alive, _bind, _drop, _int, _is, _val

CAT = {torch.cat, torch.concat, torch.concatenate}
COS = {torch.cos, torch.Tensor.cos}
SIN = {torch.sin, torch.Tensor.sin}


# a decode step's tables: a few positions, which Inductor's rotations compute inline for less than a launch costs
DECODE_ROWS = 16


def _angles(node: fx.Node) -> bool:
    """Whether `node` is cat((f, f), dim=-1) of float32 angles with a static last dim of at most MAX_WIDTH, more
    than DECODE_ROWS rows of them (or a number unknown at compile time: a prefill of any length)."""
    if not _is(node, CAT, ("cat",)):
        return False
    a = _bind(node, ["tensors", "dim"])
    parts, v = a.get("tensors"), _val(node)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or parts[0] is not parts[1] or v is None:
        return False
    width = _int(v.shape[-1]) if v.dim() >= 1 else None
    lead = [_int(d) for d in v.shape[:-1]]
    if None not in lead and math.prod(lead) <= DECODE_ROWS:
        return False
    return (v.dtype == torch.float32 and width is not None and 1 <= width <= MAX_WIDTH
            and _dims(a.get("dim", 0), v.dim()) == [v.dim() - 1])


def _trig(emb: fx.Node, ops: set, name: str) -> fx.Node | None:
    """The one `name` (cos or sin) of `emb` among its users, taking nothing else."""
    found = [u for u in emb.users if _is(u, ops, (name,)) and tuple(u.args) == (emb,) and not u.kwargs]
    return found[0] if len(found) == 1 else None


def rewrite_rotary_tables(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Rewrite each cos/sin pair of rotary angles (outside autocast regions) into one rotary_table call."""
    out = []
    for emb in list(g.nodes):
        if not _alive(emb) or emb in amp or not _angles(emb):
            continue
        cos, sin = _trig(emb, COS, "cos"), _trig(emb, SIN, "sin")
        if cos is None or sin is None or cos in amp or sin in amp:
            continue
        node_id = f"g{gid}:{cos.name}"
        ev = _val(emb)
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
        _drop(g, [cos, sin])
        out.append(Match("attention", names))
    return out


__all__ = ["rewrite_rotary_tables"]
