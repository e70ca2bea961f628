"""transformers' RMSNorm between two Argus GEMMs of a decode step, as one `argus::library("rms_norm_rounded")` call.

The form matched is the models' own (LlamaRMSNorm, MistralRMSNorm, MixtralRMSNorm, Qwen's):

    x32 = x.to(float32); r = rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps); out = weight * (x32 * r).to(x.dtype)

where x comes from an Argus op (a GEMM's residual epilogue), its rows are static and at most
kernels.rms_rounded.MAX_ROWS (a batch-1 decode step), and every use of `out` is an Argus op (directly or through a
slice or view): Inductor would fuse nothing into this norm there, and its one-program reduction takes 2 to 8 us by
the tile its tuning keeps. Where x is an embedding's rows (the first layer's norm), the embedding and the norm are one
`argus::embedding_rms_norm` call, whose packed result gives the rows (the residual stream) and the norm: Inductor's
kernel for the two took 3.1 to 8.6 us a Llama decode step on the H100 by the tile its tuning kept. eps is a number
or, under dynamic=True, `.item()` of a float tensor input (a SymFloat): the ops take it as a float argument, so the
value each call passes is the one its kernel adds. Runs with the "gemm" op kind, after the GEMM matchers."""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..kernels.rms_rounded import MAX_ROWS, embedding_rms_norm_reference
from ..ops import library as library_ops  # noqa: F401  (registers torch.ops.argus.rms_norm)
from ..runtime import reporting as report
from .library import mean_square
from .patterns import Match, alive, as_int, as_num, erase_unused, fake_value, is_argus_op, is_call

MUL = {operator.mul, torch.mul}
VIEWS = {operator.getitem}
VIEW_METHODS = ("view", "reshape", "contiguous")


def _cast(n: object, dtype: torch.dtype | None = None) -> fx.Node | None:
    """The input of `n` when n is x.to(dtype) (positional or keyword dtype) or x.float() for float32."""
    if not isinstance(n, fx.Node) or n.op != "call_method":
        return None
    if n.target == "float" and len(n.args) == 1 and not n.kwargs:
        return n.args[0] if dtype in (None, torch.float32) else None
    if n.target != "to":
        return None
    args = n.args[1:]
    to = n.kwargs.get("dtype", args[0] if len(args) == 1 else None)
    if not isinstance(to, torch.dtype) or set(n.kwargs) - {"dtype"} or len(args) > 1:
        return None
    return n.args[0] if dtype is None or to == dtype else None


def _feeds_argus(n: fx.Node, depth: int = 2) -> bool:
    """Every use of n is an Argus op, or a slice or view whose every use is (up to `depth` views deep)."""
    for u in n.users:
        if is_argus_op(u):
            continue
        if depth and (is_call(u, VIEWS, VIEW_METHODS)) and u.args and u.args[0] is n and _feeds_argus(u, depth - 1):
            continue
        return False
    return bool(n.users)


def _match(out: fx.Node) -> tuple[fx.Node, fx.Node, object, list[fx.Node]] | None:
    """(x, weight, eps: a number or the .item() of a float tensor, the nodes) when `out` is the norm."""
    if not is_call(out, MUL) or len(out.args) != 2 or out.kwargs:
        return None
    for w, cast in (out.args, reversed(out.args)):
        wv = fake_value(w)
        if wv is None or not isinstance(cast, fx.Node) or wv.dim() != 1:
            continue
        y32 = _cast(cast)
        if y32 is None or not is_call(y32, MUL) or len(y32.args) != 2 or len(y32.users) != 1 or len(cast.users) != 1:
            continue
        for x32, r in (y32.args, reversed(y32.args)):
            found = _rest(x32, r)
            if found is None:
                continue
            x, eps, nodes = found
            xv = fake_value(x)
            if xv is None or fake_value(cast).dtype != xv.dtype or wv.dtype != xv.dtype:
                continue
            if tuple(wv.shape) != (xv.shape[-1],):
                continue
            return x, w, eps, [out, cast, y32, *nodes]
    return None


def _rest(x32: object, r: object) -> tuple[fx.Node, object, list[fx.Node]] | None:
    """(x, eps, the nodes the match replaces) when r = rsqrt(mean(x32^2, -1, keepdim=True) + eps) and
    x32 = x.to(float32) (the statistics: library_match.mean_square)."""
    if not (is_call(r, {torch.rsqrt}, ("rsqrt",)) and len(r.users) == 1):
        return None
    x = _cast(x32, torch.float32)
    if x is None or len(x32.users) != 2:
        return None
    found = mean_square(r.args[0], x32, adds=())
    if found is None or found[1] != [fake_value(x32).dim() - 1]:
        return None
    eps, _, stats = found
    nodes = [r, *stats, x32]
    if as_num(eps) is not None:
        return x, float(eps), nodes
    if isinstance(eps, fx.Node) and eps.op == "call_method" and eps.target == "item":
        sv = fake_value(eps.args[0])
        if sv is not None and sv.numel() == 1 and sv.is_floating_point():
            return x, eps, nodes
    return None


def rewrite_decode_norms(g: fx.Graph, gid: int, amp: set[fx.Node]) -> list[Match]:
    """Rewrite each RMSNorm of the graph that sits between Argus ops at a few static rows."""
    out = []
    for node in list(g.nodes):
        if not alive(node) or node in amp:
            continue
        found = _match(node)
        if found is None:
            continue
        x, w, eps, nodes = found
        xv = fake_value(x)
        emb = _embedding(x)
        if not (is_argus_op(x) or emb) or any(as_int(s) is None for s in xv.shape) or xv.dim() < 1:
            continue
        if math.prod(int(s) for s in xv.shape[:-1]) > MAX_ROWS or not _feeds_argus(node) or amp.intersection(nodes):
            continue
        node_id = f"g{gid}:{node.name}"
        if emb is not None:
            if _rewrite_embedding_norm(g, node, x, emb, w, eps, nodes, node_id):
                out.append(Match("gemm", [n.name for n in reversed(nodes)]))
            continue
        with g.inserting_before(node):
            new = g.call_function(torch.ops.argus.rms_norm.default, (x, w, eps, node_id))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        names = [n.name for n in reversed(nodes)]
        report.record_match(node_id, "gemm", "rms_norm " + " -> ".join(names))
        erase_unused(g, nodes)
        out.append(Match("gemm", names))
    return out


def _embedding(x: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(ids, table) when x = F.embedding(ids, table) with no max_norm (which would renormalize the table's rows in
    place); padding_idx, scale_grad_by_freq and sparse only change gradients."""
    if not (isinstance(x, fx.Node) and x.op == "call_function" and x.target is F.embedding):
        return None
    names = ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
    bound = dict(zip(names, x.args)) | dict(x.kwargs)
    ids, table = bound.get("input"), bound.get("weight")
    iv, tv, xv = fake_value(ids), fake_value(table), fake_value(x)
    if bound.get("max_norm") is not None or iv is None or tv is None or xv is None:
        return None
    if iv.dtype not in (torch.int32, torch.int64) or tv.dim() != 2 or tv.dtype != xv.dtype:
        return None
    return ids, table


def _rewrite_embedding_norm(g: fx.Graph, node: fx.Node, x: fx.Node, emb: tuple[fx.Node, fx.Node], w: fx.Node,
                            eps: object, nodes: list[fx.Node], node_id: str) -> bool:
    """The embedding x and the norm `node` of it as one argus::embedding_rms_norm call: its out[1] for the norm's
    uses, out[0] for the embedding's other uses (the residual stream), which must all come after the norm."""
    order = {n: i for i, n in enumerate(g.nodes)}
    if any(order[u] < order[node] for u in x.users if u not in nodes):
        return False
    ids, table = emb
    with fake_value(x).fake_mode:  # shapes and dtypes only (eps may be a SymFloat's .item() node)
        pv = embedding_rms_norm_reference(fake_value(ids), fake_value(table), fake_value(w), 1e-6)
    with g.inserting_before(node):
        packed = g.call_function(torch.ops.argus.embedding_rms_norm.default, (ids, table, w, eps, node_id))
        rows = g.call_function(operator.getitem, (packed, 0))
        normed = g.call_function(operator.getitem, (packed, 1))
    for new, val in ((packed, pv), (rows, pv[0]), (normed, pv[1])):
        new.meta.update({key: v for key, v in node.meta.items() if key not in ("example_value", "val")})
        new.meta["example_value"] = val
    node.replace_all_uses_with(normed)
    names = [x.name] + [n.name for n in reversed(nodes)]
    erase_unused(g, nodes)
    x.replace_all_uses_with(rows)
    g.erase_node(x)
    report.record_match(node_id, "gemm", "embedding_rms_norm " + " -> ".join(names))
    return True


__all__ = ["rewrite_decode_norms"]
