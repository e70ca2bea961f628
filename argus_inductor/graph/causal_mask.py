"""Prove that an attention mask a graph builds from sizes alone is the causal mask.

transformers builds its attention masks inside the traced graph (under torch.compile it cannot tell SDPA
`is_causal=True`): aranges of positions compared (`kv <= q`), and-ed with terms that are all true for an unpadded,
unpacked batch (a packed-sequence mask from position differences, a padding mask of ones). Such a mask costs the
attention kernel a mask tile per block and the causal skip of blocks above the diagonal: on the H100, Llama prefill
at 2048 tokens spent 0.25 ms a layer in attention against about 0.06 for the causal kernel.

`proves_causal(mask, q_len, kv_len)` evaluates the mask's subgraph symbolically: every tensor is a z3 expression of
its element's indices (an arange is its index, a gather substitutes the index tensors' expressions, a prefix sum of
a term proved zero everywhere is zero), the sizes are z3 integers, and z3 is asked for an element, at any sizes,
where the mask differs from `kv <= q` with q_len == kv_len. Only a subgraph whose inputs are sizes (no tensor
input: no user mask, no position ids passed in) is considered, and any op outside the small vocabulary below makes
the proof fail, which keeps the mask: the answer is "proved" or "not known", never a guess.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

Expr = Any  # a z3 expression
Fn = Callable[[list[Expr]], Expr]


class Unknown(Exception):
    """An op or an argument the prover does not model: the mask is not proved."""


@dataclass
class SymTensor:
    shape: list[Expr]  # z3 Int sizes
    f: Fn              # element indices -> z3 value (Int or Bool)


def _size_symbol(n: fx.Node) -> torch.SymInt | None:
    """The SymInt a placeholder stands for (a size of the graph), else None."""
    ev = n.meta.get("example_value", n.meta.get("val"))
    return ev if n.op == "placeholder" and isinstance(ev, torch.SymInt) else None


def _is_one(z3: Any, s: Expr) -> bool:
    """A size that is the literal 1 (a broadcast dimension)."""
    return z3.is_int_value(s) and s.as_long() == 1


# element-wise ops by name, for functions (operator.eq, torch.eq) and methods (x.eq(y), x.__eq__(y)) alike;
# `b` turns an operand into a z3 Bool
_BINARY: dict[str, Callable[[Any, Callable, Expr, Expr], Expr]] = {
    "add": lambda z3, b, x, y: x + y, "sub": lambda z3, b, x, y: x - y, "mul": lambda z3, b, x, y: x * y,
    "eq": lambda z3, b, x, y: x == y, "ne": lambda z3, b, x, y: x != y, "le": lambda z3, b, x, y: x <= y,
    "lt": lambda z3, b, x, y: x < y, "ge": lambda z3, b, x, y: x >= y, "gt": lambda z3, b, x, y: x > y,
    "and": lambda z3, b, x, y: z3.And(b(x), b(y)), "or": lambda z3, b, x, y: z3.Or(b(x), b(y)),
}
_BINARY_NAMES = {"logical_and": "and", "bitwise_and": "and", "logical_or": "or", "bitwise_or": "or"}
_FUNCTIONS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", torch.add: "add", torch.sub: "sub",
              operator.eq: "eq", operator.ne: "ne", operator.le: "le", operator.lt: "lt", operator.ge: "ge",
              operator.gt: "gt", torch.eq: "eq", torch.ne: "ne", torch.le: "le", torch.lt: "lt", torch.ge: "ge",
              torch.gt: "gt", operator.and_: "and", torch.logical_and: "and", torch.bitwise_and: "and",
              operator.or_: "or", torch.logical_or: "or", torch.bitwise_or: "or"}
_NOT = {operator.invert, torch.logical_not, torch.bitwise_not}
_NOT_METHODS = {"invert", "logical_not", "bitwise_not"}


class _Eval:
    def __init__(self) -> None:
        import z3

        self.z3 = z3
        self.env: dict[fx.Node, Any] = {}
        self.facts: list[Expr] = []        # what the traced graph guarantees (broadcast sizes agree, sizes >= 1)
        self.obligations: list[Expr] = []  # what must be proved of the element being read (gathers in bounds)

    # ---------------------------------------------------------------- values
    def size(self, x: Any) -> Expr:
        z3 = self.z3
        if isinstance(x, bool):
            raise Unknown("a bool where a size was expected")
        if isinstance(x, int):
            return z3.IntVal(x)
        if isinstance(x, fx.Node):
            v = self.value(x)
            if isinstance(v, SymTensor):
                raise Unknown("a tensor where a size was expected")
            return v
        raise Unknown(f"size {x!r}")

    def value(self, n: Any) -> Any:
        if not isinstance(n, fx.Node):
            if isinstance(n, bool):
                return self.z3.BoolVal(n)
            if isinstance(n, int):
                return self.z3.IntVal(n)
            raise Unknown(f"constant {n!r}")
        if n not in self.env:
            self.env[n] = self.node(n)
        return self.env[n]

    def tensor(self, n: Any) -> SymTensor:
        v = self.value(n)
        if isinstance(v, SymTensor):
            return v
        return SymTensor([], lambda idx, v=v: v)  # a scalar broadcasts

    # ---------------------------------------------------------------- broadcasting
    def broadcast(self, ts: list[SymTensor]) -> tuple[list[Expr], list[Fn]]:
        z3 = self.z3
        rank = max(len(t.shape) for t in ts)
        shape: list[Expr] = []
        for d in range(rank):
            dims = [t.shape[d - (rank - len(t.shape))] for t in ts if d - (rank - len(t.shape)) >= 0]
            wide = [s for s in dims if not _is_one(z3, s)]
            out = wide[0] if wide else z3.IntVal(1)
            for s in wide[1:]:
                self.facts.append(s == out)  # broadcasting sizes agree, or the graph would not have traced
            shape.append(out)

        def reader(t: SymTensor) -> Fn:
            off = rank - len(t.shape)

            def f(idx: list[Expr]) -> Expr:
                return t.f([z3.IntVal(0) if _is_one(z3, s) else idx[d + off] for d, s in enumerate(t.shape)])
            return f
        return shape, [reader(t) for t in ts]

    def binary(self, name: str, args: tuple) -> Any:
        """The element-wise op `name` of _BINARY (or its alias) on two operands."""
        fn = _BINARY[_BINARY_NAMES.get(name, name)]
        return self.elementwise(list(args), lambda x, y: fn(self.z3, self.as_bool, x, y))

    def elementwise(self, args: list[Any], op: Callable[..., Expr]) -> Any:
        if not any(isinstance(self.value(a), SymTensor) for a in args if isinstance(a, fx.Node)):
            return op(*[self.value(a) for a in args])  # size arithmetic
        ts = [self.tensor(a) for a in args]
        shape, readers = self.broadcast(ts)
        return SymTensor(shape, lambda idx: op(*[r(idx) for r in readers]))

    # ---------------------------------------------------------------- ops
    def node(self, n: fx.Node) -> Any:
        z3 = self.z3
        if n.op == "placeholder":
            if _size_symbol(n) is None:
                raise Unknown(f"input {n.name} is not a size")
            s = z3.Int(n.name)
            self.facts.append(s >= 1)
            return s
        if n.op == "call_method":
            return self.method(n)
        if n.op != "call_function":
            raise Unknown(f"{n.op} {n.target}")
        t, a, kw = n.target, n.args, n.kwargs
        if t is torch.arange:
            if kw.get("dtype") not in (None, torch.int64, torch.int32) or len(a) not in (1, 2) or \
                    kw.get("step", 1) != 1:
                raise Unknown("arange form")
            start, stop = (z3.IntVal(0), self.size(a[0])) if len(a) == 1 else (self.size(a[0]), self.size(a[1]))
            return SymTensor([z3.simplify(stop - start)], lambda idx: idx[0] + start)
        if t in _FUNCTIONS and len(a) == 2 and not kw:
            return self.binary(_FUNCTIONS[t], a)
        if t in _NOT and len(a) == 1:
            return self.elementwise(list(a), lambda x: z3.Not(self.as_bool(x)))
        if t is operator.getitem:
            return self.getitem(self.value(a[0]), a[1])
        if t is torch.diff:
            return self.diff(a[0], kw.get("dim", a[2] if len(a) > 2 else -1), kw.get("prepend"),
                             kw.get("n", a[1] if len(a) > 1 else 1))
        if t is torch.cumsum:
            return self.cumsum(a[0], kw.get("dim", a[1] if len(a) > 1 else None))
        if t is torch.unsqueeze:
            return self.unsqueeze(self.tensor(a[0]), a[1])
        raise Unknown(f"op {t}")

    def method(self, n: fx.Node) -> Any:
        z3 = self.z3
        name, a, kw = n.target, n.args, n.kwargs
        if name == "unsqueeze":
            return self.unsqueeze(self.tensor(a[0]), a[1] if len(a) > 1 else kw["dim"])
        if name == "expand":
            src = self.tensor(a[0])
            sizes = list(a[1]) if len(a) == 2 and isinstance(a[1], (list, tuple)) else list(a[1:])
            off = len(sizes) - len(src.shape)
            shape = []
            for d, s in enumerate(sizes):
                own = src.shape[d - off] if d >= off else None
                shape.append(own if isinstance(s, int) and s == -1 else self.size(s))
                if own is not None and not (isinstance(s, int) and s == -1) and not _is_one(z3, own):
                    self.facts.append(own == shape[-1])
            ones = [d for d in range(len(src.shape)) if _is_one(z3, src.shape[d])]

            def f(idx: list[Expr]) -> Expr:
                return src.f([z3.IntVal(0) if d in ones else idx[d + off] for d in range(len(src.shape))])
            return SymTensor(shape, f)
        if name == "new_ones":
            shape_arg = a[1] if len(a) > 1 else kw.get("size", ())
            sizes = list(shape_arg) if isinstance(shape_arg, (list, tuple)) else list(a[1:])
            dtype = kw.get("dtype")
            one = z3.BoolVal(True) if dtype is torch.bool else z3.IntVal(1)
            return SymTensor([self.size(s) for s in sizes], lambda idx: one)
        if name == "to":
            dtypes = [x for x in list(a[1:]) + list(kw.values()) if isinstance(x, torch.dtype)]
            if any(d not in (torch.bool,) for d in dtypes):
                raise Unknown("a cast other than to bool")
            v = self.tensor(a[0])
            return SymTensor(v.shape, lambda idx: self.as_bool(v.f(idx))) if dtypes else v
        if name == "size" and len(a) == 2 and isinstance(a[1], int):
            return self.tensor(a[0]).shape[a[1]]
        if name == "cumsum":
            return self.cumsum(a[0], a[1] if len(a) > 1 else kw.get("dim"))
        bare = name.strip("_")  # x.eq(y), x.__eq__(y), x.__and__(y) ...
        if _BINARY_NAMES.get(bare, bare) in _BINARY and len(a) == 2 and not kw:
            return self.binary(bare, a)
        if bare in _NOT_METHODS and len(a) == 1:
            return self.elementwise(list(a), lambda x: z3.Not(self.as_bool(x)))
        raise Unknown(f"method {name}")

    def provable(self, cond: Expr) -> bool:
        """Whether cond holds at every size the graph's facts allow."""
        s = self.z3.Solver()
        s.set("timeout", 2000)
        s.add(*self.facts, self.z3.Not(cond))
        return s.check() == self.z3.unsat

    def as_bool(self, x: Expr) -> Expr:
        z3 = self.z3
        return x if z3.is_bool(x) else x != 0

    def unsqueeze(self, t: SymTensor, dim: Any) -> SymTensor:
        if not isinstance(dim, int):
            raise Unknown("unsqueeze dim")
        rank = len(t.shape) + 1
        d = dim % rank
        shape = t.shape[:d] + [self.z3.IntVal(1)] + t.shape[d:]
        return SymTensor(shape, lambda idx: t.f(idx[:d] + idx[d + 1:]))

    def getitem(self, src: Any, index: Any) -> SymTensor:
        z3 = self.z3
        if not isinstance(src, SymTensor):
            raise Unknown("indexing a size")
        index = index if isinstance(index, tuple) else (index,)
        if index and all(isinstance(i, fx.Node) for i in index):  # advanced indexing by index tensors
            idx_ts = [self.tensor(i) for i in index]
            if len(idx_ts) > len(src.shape):
                raise Unknown("too many index tensors")
            shape, readers = self.broadcast(idx_ts)
            rest = src.shape[len(idx_ts):]

            def gather(idx: list[Expr]) -> Expr:
                head, tail = idx[:len(shape)], idx[len(shape):]
                at = [r(head) for r in readers]
                # each index read must lie inside the source (a negative one would wrap around): an obligation
                # proved with the rest, not an assumption
                self.obligations += [z3.And(i >= 0, i < s) for i, s in zip(at, src.shape)]
                return src.f(at + tail)
            return SymTensor(shape + rest, gather)
        # basic indexing: None, full or bounded slices, ints
        out_shape: list[Expr] = []
        plan: list[tuple[str, Any]] = []
        d = 0
        for i in index:
            if i is None:
                out_shape.append(z3.IntVal(1))
                plan.append(("new", None))
            elif i is Ellipsis:
                raise Unknown("ellipsis")
            elif isinstance(i, slice):
                if i.step not in (None, 1) or d >= len(src.shape):
                    raise Unknown("slice form")
                n = src.shape[d]
                if not (i.start is None or isinstance(i.start, int) and i.start >= 0) or \
                        isinstance(i.stop, int) and i.stop < 0:
                    raise Unknown("a negative or symbolic slice start, or a negative stop")
                start = z3.IntVal(i.start or 0)
                stop = n if i.stop is None else self.size(i.stop)
                stop = stop if self.provable(stop <= n) else z3.If(stop < n, stop, n)
                out_shape.append(z3.simplify(stop - start))
                plan.append(("slice", start))
                d += 1
            elif isinstance(i, int) and i >= 0:
                plan.append(("int", z3.IntVal(i)))
                d += 1
            else:
                raise Unknown(f"index {i!r}")
        for s in src.shape[d:]:
            out_shape.append(s)
            plan.append(("slice", z3.IntVal(0)))

        def f(idx: list[Expr]) -> Expr:
            own, k = [], 0
            for kind, v in plan:
                if kind == "new":
                    k += 1
                elif kind == "slice":
                    own.append(idx[k] + v)
                    k += 1
                else:
                    own.append(v)
            return src.f(own)
        return SymTensor(out_shape, f)

    def diff(self, x: Any, dim: Any, prepend: Any, n: Any) -> SymTensor:
        z3 = self.z3
        t = self.tensor(x)
        if n != 1 or not isinstance(dim, int) or dim % len(t.shape) != len(t.shape) - 1:
            raise Unknown("diff form")
        if prepend is None:
            raise Unknown("diff without prepend")
        p = self.tensor(prepend)
        if len(p.shape) != len(t.shape) or not self.provable(p.shape[-1] == 1):
            raise Unknown("diff prepend shape")
        def f(idx: list[Expr]) -> Expr:
            j = idx[-1]
            prev = z3.If(j == 0, p.f(idx[:-1] + [z3.IntVal(0)]), t.f(idx[:-1] + [j - 1]))
            return t.f(idx) - prev
        return SymTensor(list(t.shape), f)

    def cumsum(self, x: Any, dim: Any) -> SymTensor:
        """Only a prefix sum of a term proved zero (false) everywhere: zero everywhere."""
        z3 = self.z3
        t = self.tensor(x)
        if not isinstance(dim, int):
            raise Unknown("cumsum dim")
        idx = [z3.Int(f"_c{i}_{len(self.facts)}") for i in range(len(t.shape))]
        inside = [z3.And(i >= 0, i < s) for i, s in zip(idx, t.shape)]
        before = len(self.obligations)
        v = t.f(idx)
        owed, self.obligations = self.obligations[before:], self.obligations[:before]
        nonzero = v if z3.is_bool(v) else v != 0
        s = z3.Solver()
        s.set("timeout", 5000)
        s.add(*self.facts, *inside, z3.Or(nonzero, z3.Not(z3.And(*owed))))
        if s.check() != z3.unsat:
            raise Unknown("a prefix sum of a term not proved zero")
        return SymTensor(t.shape, lambda idx: z3.IntVal(0))


def size_only(mask: fx.Node) -> bool:
    """The mask's subgraph reads no tensor input (its placeholders are sizes): a function of the shapes alone."""
    seen: set[fx.Node] = set()
    stack = [mask]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            if _size_symbol(n) is None:
                return False
        elif n.op in ("get_attr", "call_module"):
            return False
        stack.extend(n.all_input_nodes)
    return True


def _as_z3(ev: _Eval, x: Any, env: dict[str, Expr]) -> Expr | None:
    """A query/key length from the tensors' shapes as a z3 size: an int, or a SymInt whose expression is a
    placeholder symbol of the mask's graph."""
    z3 = ev.z3
    if isinstance(x, int):
        return z3.IntVal(x)
    if isinstance(x, torch.SymInt):
        v = x.node.maybe_as_int()
        if v is not None:
            return z3.IntVal(v)
        name = str(x.node.expr)
        return env.get(name)
    return None


def proves_causal(mask: fx.Node, q_len: Any, kv_len: Any) -> bool:
    """Whether `mask` is, at every size the graph can run with, a boolean (B|1, H|1, q_len, kv_len) mask with
    element [.., q, kv] = kv <= q, and q_len == kv_len (SDPA's is_causal, top-left aligned)."""
    return why_not_causal(mask, q_len, kv_len) is None


def why_not_causal(mask: fx.Node, q_len: Any, kv_len: Any) -> str | None:
    """None where proves_causal holds, else why the mask is not proved causal."""
    if not size_only(mask):
        return "it reads a tensor input"
    try:
        ev = _Eval()
        z3 = ev.z3
        m = ev.tensor(mask)
        if len(m.shape) != 4:
            return f"it has {len(m.shape)} dimensions"
        # the graph's size symbols, by the names shape expressions use
        env = {str(sym.node.expr): v for n, v in ev.env.items() if (sym := _size_symbol(n)) is not None}
        q, kv = _as_z3(ev, q_len, env), _as_z3(ev, kv_len, env)
        if q is None or kv is None:
            return "the query or key length is not a size of the graph"
        idx = [z3.Int(f"_i{d}") for d in range(4)]
        inside = [z3.And(i >= 0, i < s) for i, s in zip(idx, m.shape)]
        value = m.f(idx)
        if not z3.is_bool(value):
            return "its elements are not booleans"
        s = z3.Solver()
        s.set("timeout", 5000)
        # sizes line up (mask's query and key extents are the attention's), query and key lengths agree, and some
        # element in range differs from kv <= q
        s.add(*ev.facts, *inside)
        s.add(z3.Or(m.shape[2] != q, m.shape[3] != kv, q != kv, value != (idx[3] <= idx[2]),
                    z3.Not(z3.And(*ev.obligations))))
        verdict = s.check()
        return None if verdict == z3.unsat else f"z3 says {verdict}: {s.model() if verdict == z3.sat else ''}"
    except Unknown as e:
        return f"the prover does not model {e}"
    except Exception as e:  # a malformed graph for the prover's model (or no z3): not proved
        return f"{type(e).__name__}: {e}"
