"""Rows that no output reads, not computed.

A causal LM's prefill returns the logits of its last position only (transformers' `logits_to_keep=1`, what
generation asks for): the graph computes the final norm, and before it the last layer's MLP or experts, its
attention output projection, its attention for every query and its query projection, on every position of every
sequence, and then slices one row out of them. Each of those ops computes a row of its output from the same row of
its input (a linear, an RMSNorm, a residual add, an MoE block over tokens; attention from its own query row and all
keys), so the slice can move up to where the rows are still needed in full (the last layer's input, which its key
and value projections read): the ops above it then run on the kept rows only. llama.cpp builds its graphs this way
(`inp_out_ids` on the last layer). An encoder's pooler that reads one position (`hidden[:, 0]`, a CLS token) is
the same case with the row's dimension dropped.

The pass walks the graph backwards from such a slice. A node is computed on the kept rows only where every one of
its users reads only those rows of it, and its op is one whose rows are independent along that dimension (the
vocabulary below). The rows are tracked through views that merge or split dimensions (an MoE block flattens batch
and sequence into tokens), as `Keep`: along dimension `dim`, the positions whose index modulo `inner` falls in the
slice. A node that is still needed in full (read by another user) gives its pruned users a slice of itself.

Attention: the kept query rows attend to all keys, under the graph's mask sliced to those rows. The last query row
of a causal mask sees every key, so a mask proved causal (causal_mask.proves the graph's mask) is dropped there,
and `is_causal=True` becomes False. Other query rows of a causal attention keep their rows of the mask.

Nothing changes where fewer than one heavy op (a linear, a matmul, an attention, an MoE block) would shrink.
"""
from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..runtime import reporting as report
from .patterns import SDPA, SDPA_ARGS, Match, alive, as_int, bind, dims_arg, erase_unused, fake_value, is_moe, known_eq

log = logging.getLogger("argus_inductor")


@dataclass(frozen=True, eq=False)
class Keep:
    """The rows a node is computed on: along `dim`, the positions i with (i mod inner) in the slice [start,
    start + length) of range(inner) (a negative start counts from the end of it). `inner` is the dimension's size
    where the slice is of the dimension itself, a factor of it where the dimension merges several (tokens of a
    batch: inner is the sequence length)."""

    dim: int
    inner: Any  # int or SymInt
    start: int
    length: int

    def same(self, other: Keep) -> bool:
        return (self.dim == other.dim and self.start == other.start and self.length == other.length
                and known_eq(self.inner, other.inner))

    def at(self, dim: int, inner: Any = None) -> Keep:
        return Keep(dim, self.inner if inner is None else inner, self.start, self.length)

    def stop(self) -> int | None:
        end = self.start + self.length
        return None if self.start < 0 and end >= 0 else end


ELEMENTWISE_FNS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow,
    operator.iadd, operator.isub, operator.imul, operator.itruediv,
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.rsqrt, torch.sqrt, torch.exp, torch.tanh,
    torch.sigmoid, torch.pow, torch.cos, torch.sin, torch.abs,
    F.silu, F.gelu, F.relu, torch.relu, F.sigmoid, F.tanh,
}
ACTIVATION_FNS = {F.silu, F.relu}  # whose second positional argument is `inplace`
IN_PLACE_FNS = {operator.iadd, operator.isub, operator.imul, operator.itruediv}
ELEMENTWISE_METHODS = {
    "add", "sub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "tanh", "sigmoid", "cos", "sin", "abs",
    "float", "half", "bfloat16", "to", "type", "contiguous", "clone", "relu",
}
REDUCTIONS = {"mean", "sum", "amax", "amin"}  # methods and torch functions of these names, over a given dim
SOFTMAX_FNS = {F.softmax, F.log_softmax, torch.softmax, torch.log_softmax}
LINEAR_FNS = {F.linear, torch._C._nn.linear}
MATMUL_FNS = {torch.matmul, operator.matmul}
NORM_FNS = {F.layer_norm, torch.layer_norm} | ({F.rms_norm} if hasattr(F, "rms_norm") else set())
VIEWS = {"view", "reshape"}


def _name(n: fx.Node) -> str:
    if n.op == "call_method":
        return str(n.target)
    return getattr(n.target, "__name__", str(n.target))


def _norm_dim(d: Any, rank: int) -> int | None:
    d = as_int(d)
    if d is None or not -rank <= d < max(rank, 1):
        return None
    return d % rank if rank else 0


def _tensor_inputs(n: fx.Node) -> list[fx.Node]:
    return [a for a in n.all_input_nodes if isinstance(fake_value(a), torch.Tensor)]


def _shape_args(n: fx.Node) -> list[Any]:
    rest = list(n.args[1:])
    if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
        return list(rest[0])
    return rest


Demands = dict[fx.Node, "Keep | None"]  # per tensor input: the rows it is read at, or None (read whole: broadcast)


class _Rule:
    """How one node computes its kept rows: what rows of each tensor input it reads, and its new arguments."""

    def __init__(self, demands: Demands, rebuild: Any = None, heavy: str = "") -> None:
        self.demands = demands
        self.rebuild = rebuild  # (args, kwargs) -> (args, kwargs) after the inputs were substituted; None: same
        self.heavy = heavy


def _aligned(out: torch.Tensor, keep: Keep, inputs: list[fx.Node]) -> Demands | None:
    """Broadcasting inputs of an op whose output is `out`: each reads the kept rows along its aligned dimension,
    or all of itself where that dimension is 1 (or missing)."""
    demands: Demands = {}
    for a in inputs:
        av = fake_value(a)
        d = keep.dim - (out.dim() - av.dim())
        if d < 0 or known_eq(av.shape[d], 1) and not known_eq(out.shape[keep.dim], 1):
            demands[a] = None
        elif known_eq(av.shape[d], out.shape[keep.dim]):
            demands[a] = keep.at(d)
        else:
            return None
    return demands


def _view_input_keep(out: torch.Tensor, inp: torch.Tensor, keep: Keep) -> Keep | None:
    """The rows of a view's input that hold `keep` of its output: the input dimension whose end falls where the
    kept output dimension's does (equal products of the dimensions up to them), of which `inner` is a factor."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    target = math.prod(out.shape[:keep.dim + 1])
    prod: Any = 1
    for d, size in enumerate(inp.shape):
        prod = prod * size
        if known_eq(prod, target):
            try:
                divides = bool(statically_known_true(size % keep.inner == 0))
            except Exception:
                divides = False
            return keep.at(d) if divides or known_eq(size, keep.inner) else None
    return None


def _new_size(size: Any, keep: Keep) -> int | None:
    """The kept dimension's size: length, times the factor the dimension has beyond `inner` (None: not static)."""
    if known_eq(size, keep.inner):
        return keep.length
    outer = size // keep.inner if isinstance(size, int) and isinstance(keep.inner, int) else None
    return None if outer is None else outer * keep.length


def _view_rule(n: fx.Node, keep: Keep) -> _Rule | None:
    out, x = fake_value(n), n.args[0]
    if not isinstance(x, fx.Node) or fake_value(x) is None:
        return None
    ik = _view_input_keep(out, fake_value(x), keep)
    if ik is None:
        return None
    old = _shape_args(n)
    if len(old) != out.dim() or not all(isinstance(o, (int, fx.Node)) for o in old):
        return None  # x.view(dtype) reinterprets bytes: not a shape
    shape: list[Any] = []
    for d, size in enumerate(out.shape):
        if d == keep.dim:
            new = _new_size(size, keep)
            shape.append(-1 if new is None else new)
        elif as_int(size) is not None:
            shape.append(as_int(size))
        elif isinstance(old[d], fx.Node):
            shape.append(old[d])
        else:
            return None
    if shape.count(-1) > 1:
        return None

    def rebuild(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (args[0], tuple(shape)), {}
    return _Rule({x: ik}, rebuild)


def _full_index(idx: Any, rank: int) -> list[Any]:
    """A tensor index as one entry per input dimension (None entries add an output dimension and take none): the
    ellipsis expanded, the dimensions it leaves out as full slices."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    named = sum(1 for i in idx if i is not None and i is not Ellipsis)
    full: list[Any] = []
    for i in idx:
        if i is Ellipsis:
            full.extend([slice(None)] * (rank - named))
        else:
            full.append(i)
    full.extend([slice(None)] * (rank - sum(1 for i in full if i is not None)))
    return full


def _getitem_rule(n: fx.Node, keep: Keep) -> _Rule | None:
    x, idx = n.args
    xv = fake_value(x)
    if not isinstance(x, fx.Node):
        return None
    if xv is None:  # a tuple's element (topk's values or indices): the tuple node reads the same rows
        return _Rule({x: keep}) if isinstance(idx, int) and _is_tuple_op(x) else None
    full = _full_index(idx, xv.dim())
    if any(isinstance(i, fx.Node) for i in full):
        return None
    d_in = d_out = 0  # walk input and output dimensions together
    for i in full:
        if i is None:
            if d_out == keep.dim:
                return None
            d_out += 1
            continue
        if isinstance(i, int):
            d_in += 1
            continue
        if not isinstance(i, slice):
            return None
        if d_out == keep.dim:
            if i != slice(None):
                return None
            return _Rule({x: keep.at(d_in)})
        d_in += 1
        d_out += 1
    return None


def _is_tuple_op(n: fx.Node) -> bool:
    return n.op in ("call_function", "call_method") and _name(n) == "topk"


def _sdpa_rule(n: fx.Node, keep: Keep) -> _Rule | None:
    a = bind(n, SDPA_ARGS)
    q, mask = a["query"], a.get("attn_mask")
    qv = fake_value(q)
    if not isinstance(q, fx.Node) or qv is None or keep.dim != qv.dim() - 2 or \
            not known_eq(qv.shape[-2], keep.inner) or a.get("dropout_p", 0.0) not in (0, 0.0):
        return None
    causal = a.get("is_causal", False)
    if not isinstance(causal, bool):
        return None
    kv = fake_value(a["key"])
    last_row = keep.start == -1 and keep.length == 1 and kv is not None and known_eq(kv.shape[-2], qv.shape[-2])
    demands: Demands = {q: keep}
    drop_mask = False
    if causal or (isinstance(mask, fx.Node) and last_row and _proved_causal(mask, qv, kv)):
        if not last_row:
            return None  # the kept rows of top-left causal attention need a mask of their own
        drop_mask = mask is not None
    elif isinstance(mask, fx.Node):
        mv = fake_value(mask)
        if mv is None:
            return None
        md = mv.dim() - 2
        if md < 0:
            return None
        if known_eq(mv.shape[md], qv.shape[-2]) and not known_eq(mv.shape[md], 1):
            demands[mask] = keep.at(md)
        elif not known_eq(mv.shape[md], 1):
            return None
        else:
            demands[mask] = None
    elif mask is not None:
        return None
    for name in ("key", "value"):
        if isinstance(a[name], fx.Node):
            demands.setdefault(a[name], None)

    def rebuild(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        b = dict(zip(SDPA_ARGS, args))
        b.update(kwargs)
        if causal or drop_mask:
            b["is_causal"] = False
            b["attn_mask"] = None
        return (b.pop("query"), b.pop("key"), b.pop("value")), b
    return _Rule(demands, rebuild, heavy="sdpa")


def _proved_causal(mask: fx.Node, qv: torch.Tensor, kv: torch.Tensor | None) -> bool:
    if kv is None or getattr(fake_value(mask), "dtype", None) != torch.bool:
        return False
    from .causal_mask import why_not_causal

    try:
        return why_not_causal(mask, qv.shape[-2], kv.shape[-2]) is None
    except Exception:  # z3 missing or the prover's own failure: the mask stays
        return False


def _rule(n: fx.Node, keep: Keep) -> _Rule | None:
    """How `n` computes only the rows `keep` of its output, or None where its op cannot."""
    if n.op not in ("call_function", "call_method"):
        return None
    out = fake_value(n)
    name = _name(n)
    if out is None:
        if _is_tuple_op(n):  # topk: both outputs have the input's shape, and it selects along its own dim
            xv = fake_value(n.args[0])
            dim = n.kwargs.get("dim", n.args[2] if len(n.args) > 2 else -1)
            if xv is None or _norm_dim(dim, xv.dim()) in (None, keep.dim):
                return None
            return _Rule({n.args[0]: keep})
        return None
    if keep.dim >= out.dim():
        return None
    if n.kwargs.get("inplace") or (n.op == "call_function" and n.target in ACTIVATION_FNS and len(n.args) > 1
                                   and n.args[1] is True):
        return None  # F.relu(x, inplace=True) and the like: x's other rows would keep their old values
    inputs = _tensor_inputs(n)
    if n.op == "call_function" and n.target is operator.getitem:
        return _getitem_rule(n, keep)
    if n.op == "call_function" and n.target is F.dropout:  # identity unless it draws a random mask
        b = bind(n, ["input", "p", "training", "inplace"])
        if (b.get("p", 0.5) not in (0, 0.0) and b.get("training", True) is not False) or b.get("inplace"):
            return None
        demands = _aligned(out, keep, inputs)
        return None if demands is None else _Rule(demands)
    if (n.op == "call_function" and n.target in ELEMENTWISE_FNS) or \
            (n.op == "call_method" and name in ELEMENTWISE_METHODS):
        if (n.op == "call_function" and n.target in IN_PLACE_FNS) and not isinstance(n.args[0], fx.Node):
            return None
        demands = _aligned(out, keep, inputs)
        return None if demands is None else _Rule(demands)
    if name in REDUCTIONS or (n.op == "call_function" and n.target in SOFTMAX_FNS) or \
            (n.op == "call_method" and name in ("softmax", "log_softmax")):
        x = n.args[0]
        xv = fake_value(x)
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
        if xv is None or dim is None:
            return None
        dims = dims_arg(dim, xv.dim())
        if dims is None or len(inputs) != 1:
            return None
        keepdim = name not in REDUCTIONS or n.kwargs.get("keepdim", n.args[2] if len(n.args) > 2 else False)
        kept = [d for d in range(xv.dim()) if keepdim or d not in dims]
        d_in = kept[keep.dim] if keep.dim < len(kept) else None
        if d_in is None or d_in in dims:
            return None
        return _Rule({x: keep.at(d_in)})
    if n.op == "call_function" and n.target in NORM_FNS:  # normalized over trailing dims, weights broadcast
        x, shape = n.args[0], n.args[1] if len(n.args) > 1 else n.kwargs.get("normalized_shape")
        xv = fake_value(x)
        if xv is None or not isinstance(shape, (list, tuple)) or keep.dim >= xv.dim() - len(shape):
            return None
        return _Rule({a: (keep if a is x else None) for a in inputs})
    if n.op == "call_function" and (n.target in LINEAR_FNS or n.target in MATMUL_FNS):
        x, w = n.args[0], n.args[1]
        xv, wv = fake_value(x), fake_value(w)
        if xv is None or wv is None or xv.dim() != out.dim() or keep.dim >= xv.dim() - 1:
            return None
        if n.target in MATMUL_FNS and wv.dim() > 2 and keep.dim != xv.dim() - 2:
            return None  # a batched right operand has the kept batch dimension too; its rows are x's alone
        demands = {x: keep}
        for a in inputs[1:]:
            if a is x:
                return None
            demands[a] = None
        return _Rule(demands, heavy="linear" if n.target in LINEAR_FNS else "matmul")
    if n.op == "call_function" and n.target is torch.cat:
        tensors = n.args[0]
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0)
        if _norm_dim(dim, out.dim()) in (None, keep.dim) or not isinstance(tensors, (list, tuple)):
            return None
        return _Rule({t: keep for t in tensors if isinstance(t, fx.Node)})
    if n.op == "call_method" and name in VIEWS or (n.op == "call_function" and n.target is torch.reshape):
        return _view_rule(n, keep)
    if n.op == "call_method" and name == "transpose" or (n.op == "call_function" and n.target is torch.transpose):
        d0, d1 = (_norm_dim(d, out.dim()) for d in n.args[1:3])
        if d0 is None or d1 is None:
            return None
        d_in = {d0: d1, d1: d0}.get(keep.dim, keep.dim)
        return _Rule({n.args[0]: keep.at(d_in)})
    if n.op == "call_method" and name == "unsqueeze":
        u = _norm_dim(n.args[1], out.dim())
        if u is None or u == keep.dim:
            return None
        return _Rule({n.args[0]: keep.at(keep.dim if keep.dim < u else keep.dim - 1)})
    if n.op == "call_function" and n.target in SDPA:
        return _sdpa_rule(n, keep)
    if n.op == "call_function" and is_moe(n.target) and keep.dim == 0:
        # tokens in, tokens out: hidden (N, H), top-k weights and ids (N, k)
        demands = {a: keep for a in n.args[:3] if isinstance(a, fx.Node)}
        for a in n.all_input_nodes:
            demands.setdefault(a, None)
        return _Rule(demands, heavy="moe")
    return None


def _start(n: fx.Node) -> tuple[fx.Node, Keep, bool] | None:
    """A slice `x[..., a:b, ...]` of static length, of fewer rows than x has, along one dimension, or one row
    `x[..., i, ...]` (a pooler's first or last position): x, its kept rows, and whether the row's dimension goes."""
    if n.op != "call_function" or n.target is not operator.getitem:
        return None
    x, idx = n.args
    xv, out = fake_value(x), fake_value(n)
    if not isinstance(x, fx.Node) or x.op not in ("call_function", "call_method") or xv is None or out is None:
        return None
    if len(x.users) != 1:  # x read whole elsewhere (x[..., :h] of rotate_half): its rows all stay, no walk needed
        return None
    idx = _full_index(idx, xv.dim())
    if len(idx) != xv.dim() or any(not isinstance(i, (slice, int)) or isinstance(i, bool) for i in idx):
        return None
    partial = [d for d, i in enumerate(idx) if i != slice(None)]
    if len(partial) != 1:
        return None
    d = partial[0]
    if isinstance(idx[d], int):  # x[:, i]: the row i, its dimension dropped
        i, size = idx[d], as_int(xv.shape[d])
        if size is not None and not (-size <= i < size and size > 1):
            return None
        return x, Keep(d, xv.shape[d], i, 1), True
    s = idx[d]
    start = 0 if s.start is None else as_int(_val_or(s.start))
    stop = None if s.stop is None else as_int(_val_or(s.stop))
    length = as_int(out.shape[d])
    if start is None or (s.stop is not None and stop is None) or s.step not in (None, 1) or length is None:
        return None
    if (start < 0 and stop is not None) or (start >= 0 and (stop is None or stop - start != length)):
        return None
    if start < 0 and -start != length:
        return None
    size = as_int(xv.shape[d])
    if length < 1 or (size is not None and length >= size):
        return None
    return x, Keep(d, xv.shape[d], start, length), False


def _val_or(x: Any) -> Any:
    if isinstance(x, fx.Node):
        return x.meta.get("example_value", x.meta.get("val"))
    return x


def _plan(g: fx.Graph, x: fx.Node, keep: Keep, full: set[fx.Node]) -> tuple[dict[fx.Node, Keep],
                                                                          dict[fx.Node, _Rule]]:
    """Which nodes compute only their kept rows (walking back from x, the sliced node, in reverse graph order so
    that every user is decided before its inputs), each with its rule. Nodes in `full` are computed whole."""
    wanted: dict[fx.Node, list[Keep | None]] = {x: [keep]}
    pruned: dict[fx.Node, Keep] = {}
    rules: dict[fx.Node, _Rule] = {}
    order = list(g.nodes)
    pos = {n: i for i, n in enumerate(order)}
    for n in reversed(order[:pos[x] + 1]):
        asks = wanted.get(n)
        if not asks or n in full:
            continue
        k = asks[0]
        users_ok = len(asks) == len(n.users)  # every user asked (users that read n whole ask nothing)
        if k is None or not users_ok or any(a is None or not a.same(k) for a in asks):
            continue
        rule = _rule(n, k)
        if rule is None:
            continue
        pruned[n] = k
        rules[n] = rule
        for a, dk in rule.demands.items():
            if dk is not None:
                wanted.setdefault(a, []).append(dk)
    return pruned, rules


def _fixpoint(g: fx.Graph, x: fx.Node, keep: Keep) -> tuple[dict[fx.Node, Keep], dict[fx.Node, _Rule]] | None:
    """_plan, with the nodes it cannot build computed whole, until none is left: a pruned node that would read a
    grouped slice (rows of a merged dimension) of a node kept whole where no graph input gives the group's size,
    and an in-place op on a node kept whole (its other rows would keep their old values). None: x itself is not
    pruned."""
    full: set[fx.Node] = set()
    while True:
        pruned, rules = _plan(g, x, keep, full)
        if x not in pruned:
            return None
        bad = [n for n, r in rules.items() for a, dk in r.demands.items()
               if dk is not None and a not in pruned and not known_eq(fake_value(a).shape[dk.dim], dk.inner)
               and _size_arg(g, dk.inner) is None]
        bad += [n for n, r in rules.items() if n.op == "call_function" and n.target in IN_PLACE_FNS
                and n.args[0] not in pruned]
        if not bad:
            return pruned, rules
        full.update(bad)


def _size_arg(g: fx.Graph, size: Any) -> int | fx.Node | None:
    """`size` as a graph argument: the int, or the graph input Dynamo passes that size symbol in (None: none)."""
    if as_int(size) is not None:
        return as_int(size)
    for n in g.nodes:
        if n.op != "placeholder":
            break
        v = _val_or(n)
        if isinstance(v, torch.SymInt) and known_eq(v, size):
            return n
    return None


def _fake(n: fx.Node, like: fx.Node) -> None:
    """The new node's example value, from its arguments' (in the graph's fake mode), and `like`'s other meta."""
    n.meta.update({k: v for k, v in like.meta.items() if k not in ("example_value", "val")})
    vals = [v for a in n.all_input_nodes if isinstance(v := fake_value(a), torch.Tensor)]
    mode = getattr(vals[0], "fake_mode", None) if vals else None
    args = fx.map_arg(n.args, _val_or)
    kwargs = fx.map_arg(n.kwargs, _val_or)
    if mode is None:
        return
    with mode:
        if n.op == "call_method":
            v = getattr(args[0], n.target)(*args[1:], **kwargs)
        else:
            v = n.target(*args, **kwargs)
    n.meta["example_value"] = v


def prune_unread_rows(g: fx.Graph, gid: int) -> list[Match]:
    """Compute only the rows a slice keeps of each chain of row-wise ops that ends in it (module docstring)."""
    out: list[Match] = []
    for s in list(g.nodes):
        if not alive(s):
            continue
        start = _start(s)
        if start is None:
            continue
        x, keep, drops_dim = start
        plan = _fixpoint(g, x, keep)
        if plan is None:
            continue
        pruned, rules = plan
        heavy = [n for n in pruned if rules[n].heavy]
        if not heavy:
            continue
        _rewrite(g, s, x, pruned, rules, keep.dim if drops_dim else None)
        names = [n.name for n in heavy]
        node_id = f"g{gid}:rows:{s.name}"
        report.record_rewrite(node_id, "rows", "rows of " + ", ".join(names),
                              f"{len(pruned)} nodes on the {keep.length} row(s) of dim {keep.dim} that {s.name} keeps")
        log.info("argus: %s keeps %d row(s); %d nodes computed on those rows only (%s)", s.name, keep.length,
                 len(pruned), ", ".join(names))
        out.append(Match("rows", names))
    return out


def _rewrite(g: fx.Graph, s: fx.Node, x: fx.Node, pruned: dict[fx.Node, Keep], rules: dict[fx.Node, _Rule],
             drop: int | None) -> None:
    """Build the pruned nodes beside the ones they replace, hand the slice's users the pruned x (with the kept
    row's dimension `drop` removed, for x[:, i]), and erase what nothing reads any more."""
    new: dict[fx.Node, fx.Node] = {}
    slices: list[tuple[fx.Node, Keep, fx.Node]] = []  # Keep holds SymInts: compared with same(), not hashed

    def sliced(a: fx.Node, k: Keep) -> fx.Node:
        for b, bk, node in slices:
            if b is a and bk.same(k):
                return node
        idx = tuple([slice(None)] * k.dim + [slice(k.start, k.stop())])
        if known_eq(fake_value(a).shape[k.dim], k.inner):
            with g.inserting_after(a):
                node = g.call_function(operator.getitem, (a, idx))
            _fake(node, a)
        else:  # rows of a merged dimension (tokens of a batch): split it, slice the inner part, merge again
            with g.inserting_after(a):
                split = g.call_method("unflatten", (a, k.dim, (-1, _size_arg(g, k.inner))))
            _fake(split, a)
            with g.inserting_after(split):
                part = g.call_function(operator.getitem, (split, (slice(None),) + idx))
            _fake(part, a)
            with g.inserting_after(part):
                node = g.call_method("flatten", (part, k.dim, k.dim + 1))
            _fake(node, a)
        slices.append((a, k, node))
        return node

    for n in list(g.nodes):
        if n not in pruned:
            continue
        rule = rules[n]

        def sub(a: fx.Node) -> fx.Node:
            if a in new:
                return new[a]
            dk = rule.demands.get(a)
            return a if dk is None else sliced(a, dk)
        args = fx.map_arg(n.args, sub)
        kwargs = fx.map_arg(n.kwargs, sub)
        if rule.rebuild is not None:
            args, kwargs = rule.rebuild(args, kwargs)
        with g.inserting_after(n):
            m = g.create_node(n.op, n.target, tuple(args), dict(kwargs))
        _fake(m, n)
        new[n] = m
    result = new[x]
    if drop is not None:  # x[:, i] keeps one row and drops its dimension: the pruned x has that one row
        with g.inserting_after(result):
            result = g.call_function(operator.getitem, (new[x], (slice(None),) * drop + (0,)))
        _fake(result, s)
    s.replace_all_uses_with(result)
    g.erase_node(s)
    erase_unused(g, [n for n in g.nodes if n in pruned])  # graph order: popped last first, each after its users


__all__ = ["Keep", "prune_unread_rows"]
