"""Abstract interpretation of a kernel's IR over the tag domain, collecting proof obligations.

One pass over the IR computes an `AVal` for every SSA value. Loops are summarised by induction:
the body runs once on the initial values (to discover what each iteration contributes), the
carried values are generalised to their form at iteration `it` (an integer grows linearly, a
reduction cover is the union of the earlier iterations' contributions), and the body runs again
on that form; the obligations of this second run hold for every iteration, and the induction step
(the body maps the form at `it` to the form at `it + 1`) becomes an obligation too.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import z3

from ..dsl.ir import Block, KernelIR, Op, TensorParam, Value, walk_block
from ..dsl.policy import Policy
from ..dsl.types import TileType
from .obligations import Access, Instance, LoopInfo, Obligation, Renamer, required
from .tags import (
    FALSE,
    TRUE,
    XV,
    AVal,
    Cov,
    Expr,
    Piece,
    Pieces,
    Sums,
    Tag,
    Tags,
    as_int,
    ax,
    broadcast,
    conj,
    conjuncts,
    cover_key,
    covers_union,
    done_key,
    each_key,
    end_to_end,
    expand,
    free_vars,
    fresh,
    is_pending,
    is_product,
    is_uniform,
    lines,
    lost_key,
    member,
    member_pos,
    mentions,
    mentions_prefix,
    merge_pieces,
    merge_tags,
    pieces_equal,
    reduced_dim,
    remap_axes,
    reshape,
    same,
    simp,
    subst,
    sums_union,
    to_bool,
    to_int,
    transpose,
    xcond,
)


class CheckerError(Exception):
    """The kernel's assertions cannot be checked as written (e.g. tag_of names a missing tag)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Staging:
    """How a pipelined loop stages one load: `buffers` ring slots, the load for iteration it+distance
    issued at iteration it, and the tiles of the last `readers` iterations possibly still being read
    (an asynchronous mma that has not retired)."""

    buffers: int
    distance: int
    readers: int = 0


StagingHook = Callable[[Policy, Op, Op], Staging | None]


def default_staging(policy: Policy, loop: Op, load: Op) -> Staging | None:
    """Triton's software pipelining: num_stages buffers, loads issued num_stages - 1 iterations ahead; a
    warp-specialized policy's loops stage as its Gluon lowering does (warp_specialized_staging)."""
    if policy.warp_specialize:
        return warp_specialized_staging(policy, loop, load)
    if policy.num_stages <= 1:
        return None
    return Staging(buffers=policy.num_stages, distance=policy.num_stages - 1, readers=0)


def mmas_reading(loop: Op, load: Op) -> list[Op]:
    """The loop body's mma ops that read the tile `load` makes, through any ops that only reshape it (trans,
    cast), in body order."""
    seen = {id(load.result)}
    out = []
    for op in loop.blocks[0].ops:
        if op.kind == "mma" and any(id(a) in seen for a in op.args):
            out.append(op)
        elif op.kind in ("trans", "cast", "reshape") and any(id(a) in seen for a in op.args):
            seen.update(id(r) for r in op.results)
    return out


def only_accumulates(loop: Op, mma: Op) -> bool:
    """Whether the body uses `mma`'s result only by handing it to the next iteration (an accumulator the
    iteration does not read again; statements for the checker aside), so a lowering may leave that mma in flight
    across the iteration's end."""
    body = loop.blocks[0]
    out = id(mma.result)
    used = any(id(a) == out for op in body.ops if not op.checker_only for a in op.args)
    return not used and any(id(y) == out for y in body.yields)


def warp_specialized_staging(policy: Policy, loop: Op, load: Op) -> Staging | None:
    """The ring of the Hopper lowerings (argus_inductor.hopper): a loader warp fills `num_stages` slots ahead of the
    consumers, each slot guarded by an "empty" barrier that every consumer arrives on once the wgmma reading the
    slot has retired. An mma whose result only accumulates (the iteration does not read it) is left in flight while
    the consumers issue the next iteration's first one (a GEMM: block j's products while block j - 1's finish;
    attention: Q K_j^T together with P_{j-1} V_{j-1}): a tile that such an mma reads is released only in the next
    iteration (`readers` = 1); a tile read only by mma whose result the iteration needs (attention's Q K^T), in its
    own. The loader may refill a slot as soon as it is released, so at iteration it it may have issued the load of
    iteration it + num_stages - 1 - readers."""
    mmas = mmas_reading(loop, load)
    if not mmas or policy.num_stages < 2:  # a Gluon ring has two slots or more; one slot pipelines nothing
        return None
    readers = 1 if any(only_accumulates(loop, m) for m in mmas) else 0
    return Staging(buffers=policy.num_stages, distance=policy.num_stages - 1 - readers, readers=readers)


_CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _kind(dtype: Any) -> str:
    return "bool" if dtype.kind == "bool" else ("int" if dtype.is_int else "float")


def _bits(dtype: Any) -> int:
    return int(getattr(dtype, "bits", 32) or 32)


class Interpreter:
    def __init__(self, ir: KernelIR, policy: Policy, consts: dict[str, Any], shapes: dict[str, Expr],
                 staging: StagingHook | None = default_staging) -> None:
        self.ir = ir
        self.policy = policy
        self.consts = consts
        self.shapes = shapes
        self.staging = staging
        self.tensors: dict[str, TensorParam] = {p.name: p for p in ir.tensors}
        self.env: dict[int, AVal] = {}
        self.ctx: list[Expr] = []
        # a load's result: its tile indices' in-bounds conditions, and the user's mask (zero_terms)
        self.auto_masks: dict[int, tuple[list[Expr], Expr]] = {}
        self.loops: list[LoopInfo] = []
        self.muted = 0
        self.obligations: list[Obligation] = []
        self.accesses: list[Access] = []
        self.assumes: list[Expr] = []
        self.assume_lines: list[int] = []  # the source line of each of `assumes`
        self.pids: list[tuple[str, Expr, Expr]] = []
        self.background: list[Expr] = []
        self.inst_vars: list[Expr] = []
        self.ufs: dict[str, z3.FuncDeclRef] = {}
        self.notes: list[str] = []
        self.unfollowed: list[str] = []  # what no proof may rest on: reported as undecided
        self.arg_owner: dict[int, Op] = {}
        for op in ir.walk():
            for blk in op.blocks:
                for a in blk.args:
                    self.arg_owner[a.id] = op

    def index_lines(self, acc: Access) -> tuple[int, ...]:
        """Where a write's address comes from: its index computations and the launch grid."""
        grid = (self.ir.grid.line,) if self.ir.grid is not None else ()
        return lines(self.def_lines(acc.op.args[:acc.op.attrs["nidx"]]), grid)

    def def_lines(self, values: list[Value], depth: int = 0) -> tuple[int, ...]:
        """The source lines that define these values (looking through shape-only wrappers and the
        branches of an `if` that produced them)."""
        out: list[int] = []
        for v in values:
            seen = 0
            op = v.owner or self.arg_owner.get(v.id)
            while op is not None and op.kind in ("expand", "broadcast_to", "trans", "cast", "reshape") and seen < 8:
                v = op.args[0]
                op = v.owner or self.arg_owner.get(v.id)
                seen += 1
            if op is not None and op.kind == "if" and v in op.results and depth < 4:
                i = op.results.index(v)
                out += self.def_lines([b.yields[i] for b in op.blocks if i < len(b.yields)], depth + 1)
            elif op is not None and op.kind not in ("const", "constexpr", "shape", "param"):
                out.append(op.line)
        return lines(out)

    # ---- driver ---------------------------------------------------------------------------------------
    def run(self) -> None:
        self.block(self.ir.body)

    def renamer(self) -> Renamer:
        return Renamer(self.pids, self.inst_vars)

    def block(self, block: Block) -> None:
        for op in block.ops:
            handler = getattr(self, f"op_{op.kind}", None)
            if handler is None:
                raise CheckerError(f"the checker has no rule for '{op.kind}'", op.line)
            handler(op)

    def get(self, v: Value) -> AVal:
        return self.env[v.id]

    def put(self, v: Value, a: AVal) -> None:
        self.env[v.id] = a

    def dim(self, d: Any) -> int:
        return int(self.consts[d]) if isinstance(d, str) else int(d)

    def shape_of(self, v: Value) -> tuple[int, ...]:
        return tuple(self.dim(d) for d in v.shape) if isinstance(v.type, TileType) else ()

    def extent(self, tensor: str, d: int) -> Expr:
        return self.shapes[self.tensors[tensor].dims[d]]

    def uf(self, tensor: str) -> z3.FuncDeclRef:
        if tensor not in self.ufs:
            n = len(self.tensors[tensor].dims)
            self.ufs[tensor] = z3.Function(f"uf:{tensor}", *([z3.IntSort()] * n), z3.IntSort())
        return self.ufs[tensor]

    def havoc(self, kind: str) -> Expr:
        v = fresh("hv", z3.BoolSort() if kind == "bool" else z3.IntSort())
        self.inst_vars.append(v)
        return v

    # ---- obligations ------------------------------------------------------------------------------------
    def instance(self, shape: tuple[int, ...], bits: int = 32, label: str = "") -> tuple[list, Instance, Expr]:
        coords = [z3.Int(f"crd:{d}#{next(_ids)}") for d in range(len(shape))]
        sub = [(ax(d), c) for d, c in enumerate(coords)]
        dom = conj([z3.And(c >= 0, c < n) for c, n in zip(coords, shape)])
        inst = Instance(pids=[(h, v) for h, v, _ in self.pids],
                        loops=[(lp.var, lp.iv, lp.it) for lp in self.loops],
                        coords=coords, shape=shape, bits=bits, label=label)
        return sub, inst, dom

    def check(self, kind: str, op: Op, shape: tuple[int, ...], body: Expr,
              describe: Callable[[dict[str, Any]], str], watch: dict[str, Expr] | None = None,
              bits: int = 32, related: tuple[int, ...] = ()) -> None:
        """An obligation over one element of a tile of `shape`: `body` (over the axis placeholders)
        describes a violation at that element."""
        if self.muted or z3.is_false(body):
            return
        sub, inst, dom = self.instance(shape, bits)
        formula = conj([dom] + self.ctx + [subst(body, sub)])
        w = {k: subst(e, sub) for k, e in (watch or {}).items()}
        self.obligations.append(Obligation(kind, op, formula, describe, [inst], w,
                                           related=tuple(x for x in related if x != op.line)))

    # ---- scalars and constants -----------------------------------------------------------------------
    def op_const(self, op: Op) -> None:
        v = op.attrs["value"]
        if isinstance(v, bool):
            self.put(op.result, AVal((), "bool", z3.BoolVal(v)))
        elif isinstance(v, int):
            self.put(op.result, AVal((), "int", z3.IntVal(v)))
        else:
            self.put(op.result, AVal((), "float", fconst=float(v), zero=(v == 0)))

    def op_constexpr(self, op: Op) -> None:
        v = self.consts[op.attrs["name"]]
        self.put(op.result, AVal((), "int", z3.IntVal(int(v))))

    def op_shape(self, op: Op) -> None:
        self.put(op.result, AVal((), "int", self.shapes[op.attrs["name"]]))

    def op_param(self, op: Op) -> None:
        k = _kind(op.result.dtype)
        if k == "int":
            self.put(op.result, AVal((), "int", z3.Int(f"param:{op.attrs['name']}")))
        else:
            self.put(op.result, AVal((), k))

    def op_tile_grid(self, op: Op) -> None:
        for i, (e, r) in enumerate(zip(op.args, op.results)):
            ext = self.get(e).val
            assert ext is not None
            name = r.hint or f"pid{i}"
            var = z3.Int(f"pid:{name}")
            self.pids.append((name, var, ext))
            self.inst_vars.append(var)
            self.background.append(z3.And(var >= 0, var < ext))
            self.put(r, AVal((), "int", var))

    def op_arange(self, op: Op) -> None:
        self.put(op.result, AVal((self.dim(op.attrs["n"]),), "int", ax(0)))

    def op_full(self, op: Op) -> None:
        shape = tuple(self.dim(d) for d in op.attrs["shape"])
        v, k = op.attrs["value"], _kind(op.attrs["dtype"])
        if k == "bool":
            self.put(op.result, AVal(shape, k, z3.BoolVal(bool(v))))
        elif k == "int":
            self.put(op.result, AVal(shape, k, z3.IntVal(int(v))))
        else:
            v = float(v)
            self.put(op.result, AVal(shape, k, fconst=v, zero=(v == 0),
                                     maxof=Cov(None) if v == -math.inf else None))

    # ---- elementwise ---------------------------------------------------------------------------------
    def op_binary(self, op: Op) -> None:
        o = op.attrs["op"]
        shape = self.shape_of(op.result)
        a, b = broadcast(self.get(op.args[0]), shape), broadcast(self.get(op.args[1]), shape)
        kind = _kind(op.result.dtype)
        res = AVal(shape, kind, self.int_binary(o, a, b, kind), conj([a.live, b.live]),
                   merge_tags(a.tags, b.tags, both=kind == "float" and o == "mul"))
        if kind == "float" or o in ("add", "sub", "mul", "truediv", "max", "min"):
            self.float_binary(op, o, a, b, res)
        self.put(op.result, res)

    def int_binary(self, o: str, a: AVal, b: AVal, kind: str) -> Expr | None:
        if a.val is None or b.val is None:
            return None
        x, y = a.val, b.val
        if o in ("and", "or", "xor") and z3.is_bool(x) and z3.is_bool(y):
            return simp({"and": z3.And, "or": z3.Or, "xor": z3.Xor}[o](x, y))
        if o in ("eq", "ne") and z3.is_bool(x) and z3.is_bool(y):
            return simp(x == y if o == "eq" else x != y)
        x, y = to_int(x), to_int(y)
        if o in _CMP:
            return simp(_CMP[o](x, y))
        if kind != "int":
            return None
        if o == "add":
            r = x + y
        elif o == "sub":
            r = x - y
        elif o == "mul":
            r = x * y
        elif o == "floordiv":
            r = x / y
        elif o == "mod":
            r = x % y
        elif o == "cdiv":
            r = (x + y - 1) / y
        elif o == "max":
            r = z3.If(x >= y, x, y)
        elif o == "min":
            r = z3.If(x <= y, x, y)
        elif o in ("shl", "shr") and as_int(y) is not None:
            r = x * (2 ** as_int(y)) if o == "shl" else x / (2 ** as_int(y))
        else:
            return None
        return simp(r)

    def float_binary(self, op: Op, o: str, a: AVal, b: AVal, res: AVal) -> None:
        """Covers and the online-softmax algebra through +, -, *, /, maximum, minimum."""
        if o in ("add", "sub"):
            if a.zero and b.zero:
                res.zero = True
                return
            if res.kind == "float":  # a sum has a term where either side has one (a zero side has none)
                res.live = b.live if a.zero else a.live if b.zero else simp(z3.Or(a.live, b.live))
            self.additive(op, a, b, res, sub=(o == "sub"))
        elif o in ("mul", "truediv"):
            if a.zero or (o == "mul" and b.zero):
                res.zero = True
                return
            res.sums = sums_union(a.sums, b.sums)
            if o == "mul" and any(is_product(d) for d in (*a.sums, *b.sums)):
                res.sums = self.multiply_covers(op, a, b, res.shape)
            if o == "truediv":
                self.divide(op, a, b, res)
            else:
                self.multiply(op, a, b, res)
            for x, y in ((a, b), (b, a)):
                if y.plain and not (o == "truediv" and x is b):
                    res.maxof = res.maxof or x.maxof
                    res.diff = res.diff or x.diff
        elif o in ("max", "min"):
            if a.maxof and b.maxof:  # a term's moving lane mask gates its part of a running max (moving_lanes)
                res.maxof = self.moving_max(a, b).union(self.moving_max(b, a))
            res.sums = sums_union(a.sums, b.sums)

    def additive(self, op: Op, a: AVal, b: AVal, res: AVal, sub: bool) -> None:
        a, b = self.loop_points(op, a, b, res.shape), self.loop_points(op, b, a, res.shape)
        if a.zero:
            self.copy_props(b, res)
            return
        if b.zero:
            self.copy_props(a, res)
            return
        res.sums = self.accumulate(op, a, b, res.shape)
        if a.scale and b.scale:
            self.check_same_cover(op, a.scale, b.scale, res.shape,
                                  "adds a value normalised to the running max over {d} in {a} to one normalised "
                                  "to the max over {d} in {b}", conj([a.live, b.live]))
        res.scale = a.scale or b.scale
        if sub:
            if b.maxof and not a.maxof and not a.scale:
                res.diff = (None, b.maxof)
            elif a.maxof and b.maxof:
                res.diff = (a.maxof, b.maxof)
        else:
            res.maxof = a.maxof if not b.maxof else (b.maxof if not a.maxof else None)

    def loop_points(self, op: Op, x: AVal, acc: AVal, shape: tuple[int, ...]) -> AVal:
        """x as a term added to a loop's accumulator: each tensor dimension whose index in x moves with the iteration of
        a loop that carries the accumulator (and which the accumulator is not tagged with) adds that index to
        `each(dim)`, the indices the accumulator's element has summed over the loop so far. A term whose factors are
        at different indices of the dimension (acc += A[:, k] * B[k + 1, :]) is checked by joint_tag."""
        points: Sums = {}
        for name, alts in x.tags.items():
            if name not in self.shapes or each_key(name) in x.sums:
                continue
            accumulating = each_key(name) in acc.sums  # acc already sums indices of `name` element-wise
            if name in acc.tags and not accumulating:
                continue  # two tiles at the same index of `name`: element-wise, not an accumulation
            if len(alts) > 1 and all(same(t.expr, alts[0].expr) for t in alts):
                continue  # one index under the conditions of a where's branches: not followed (mark_lost)
            if accumulating or any(mentions(t.expr, acc.carried) for t in alts):
                t = self.joint_tag(op, name, alts, shape)
                points[each_key(name)] = ((Piece(t.expr, simp(t.expr + 1), t.when, src=t.src),),)
        x = replace(x, sums={**x.sums, **points}) if points else x
        return self.moving_lanes(x, acc)

    def moving_lanes(self, x: AVal, acc: AVal) -> AVal:
        """x as a term added to a loop's accumulator, with the conjuncts of its `live` that move with a loop carrying
        the accumulator (a lane mask `(rm < 2 + k)[:, None]`, `k < 16`: a term in some iterations only) moved into
        the conditions of its covers. A cover keeps only what names the reduced index and leaves lane masks to
        `live`, but a loop's summary keeps `live` only where it does not move (generalize): such a conjunct would be
        lost, and a lane that missed the terms of some iterations would read as having summed them all. In the
        cover's condition it is unioned over the iterations with the indices, so each lane covers the blocks of
        the iterations where it was live. A cover is gated only by the conjuncts that move with a loop it moves with:
        over the iterations of another loop it is the same set, whole wherever the lane was live once."""
        moving = _moving(x, acc)
        if not moving or not x.sums:
            return x
        sums = {d: cs if d.startswith("lost(") else tuple(tuple(_gated(p, moving, acc.carried) for p in ps)
                                                           for ps in cs)
                for d, cs in x.sums.items()}
        return replace(x, sums=sums)

    def moving_max(self, x: AVal, acc: AVal) -> Cov:
        """x's running-max cover as a term of `maximum(acc, x)`, with acc carried by a loop: the conjuncts of x's
        `live` that move with that loop gate its pieces, as moving_lanes does for a sum's. A lane a moving mask
        killed in some iterations (a load with `other=-inf`) took no index of those iterations' blocks into its
        max; without the gate the loop's summary (which keeps only the conjuncts of `live` that do not move)
        would read it as the max over them all."""
        assert x.maxof is not None
        moving = _moving(x, acc)
        if not moving:
            return x.maxof
        return replace(x.maxof, pieces=tuple(_gated(p, moving, acc.carried) for p in x.maxof.pieces))

    def copy_props(self, src: AVal, res: AVal) -> None:
        res.sums, res.maxof, res.scale, res.ratio, res.diff = src.sums, src.maxof, src.scale, src.ratio, src.diff

    def multiply(self, op: Op, a: AVal, b: AVal, res: AVal) -> None:
        for x, y in ((a, b), (b, a)):
            if x.scale and y.ratio:
                self.check_same_cover(op, x.scale, y.ratio[0], res.shape,
                                      "rescales a value normalised to the running max over {d} in {a} by a "
                                      "factor that starts from the max over {d} in {b}", conj([a.live, b.live]))
                res.scale = y.ratio[1]
                return
        if a.ratio and b.ratio:
            if a.ratio[1].equal(b.ratio[0]):
                res.ratio = (a.ratio[0], b.ratio[1])
            return
        if a.scale and b.scale:
            return
        res.scale = a.scale or b.scale or (a.ratio[1] if a.ratio else None) or (b.ratio[1] if b.ratio else None)
        if (a.ratio and b.plain) or (b.ratio and a.plain):
            res.scale = None
            res.ratio = a.ratio or b.ratio

    def divide(self, op: Op, a: AVal, b: AVal, res: AVal) -> None:
        for d in sorted(set(a.sums) & set(b.sums)):
            ua = [c for c in a.sums[d] if not any(pieces_equal(c, x) for x in b.sums[d])]
            ub = [c for c in b.sums[d] if not any(pieces_equal(c, x) for x in a.sums[d])]
            if len(ua) == 1 and len(ub) == 1 and not is_pending(d):
                self.check_same_pieces(op, d, ua[0], ub[0], res.shape,
                                       "divides a value summed over {d} in {a} by one summed over {d} in {b}",
                                       conj([a.live, b.live]))
        if a.scale and b.scale:
            self.check_same_cover(op, a.scale, b.scale, res.shape,
                                  "normalises a value relative to the running max over {d} in {a} by a sum "
                                  "relative to the max over {d} in {b}", conj([a.live, b.live]))
            res.scale = None
        elif a.scale and b.sums and not b.scale:
            def describe(w: dict[str, Any]) -> str:
                return "divides a value normalised to a running max by a sum that was not normalised to it"
            self.check("softmax-scale", op, res.shape, conj([a.live, b.live]), describe,
                       related=lines(a.scale.lines(), *(p.src for cs in b.sums.values() for c in cs for p in c)))
        elif a.scale:
            res.scale = a.scale

    def op_unary(self, op: Op) -> None:
        x = self.get(op.args[0])
        o = op.attrs["op"]
        kind = _kind(op.result.dtype)
        sums = x.sums
        if kind == "float" and o != "neg":  # f(partial sum) is no partial sum: the reductions under it are done
            sums = {}
            for d, cs in x.sums.items():
                key = done_key(d) if reduced_dim(d) == d else d  # a plain dimension's cover
                sums[key] = covers_union(sums.get(key, ()), cs)
        res = AVal(x.shape, kind, live=x.live, tags=dict(x.tags), sums=sums)
        if o == "not" and x.val is not None:
            res.val = simp(z3.Not(to_bool(x.val)))
        elif o in ("exp", "exp2") and x.diff:
            pos, neg = x.diff
            neg = Cov(neg.dim, neg.pieces, lines(neg.src, (op.line,)))
            if pos is None:
                res.scale = neg
            else:
                res.ratio = (Cov(pos.dim, pos.pieces, lines(pos.src, (op.line,))), neg)
        elif o in ("abs", "relu") and x.val is not None and kind == "int":
            res.val = simp(z3.If(x.val >= 0, x.val, -x.val if o == "abs" else z3.IntVal(0)))
        self.put(op.result, res)

    def op_where(self, op: Op) -> None:
        shape = self.shape_of(op.result)
        c, a, b = (broadcast(self.get(v), shape) for v in op.args)
        cv = to_bool(c.val) if c.val is not None else self.havoc("bool")
        res = self.select(cv, a, b, shape, _kind(op.result.dtype), c.live)
        why = lines((op.line,), self.def_lines([op.args[0]]))  # the mask that decides which tags hold
        res.tags = {n: tuple(Tag(t.expr, t.when, lines(t.src, why)) for t in alts) for n, alts in res.tags.items()}
        self.put(op.result, res)

    def select(self, cv: Expr, a: AVal, b: AVal, shape: tuple[int, ...], kind: str, clive: Expr = TRUE,
               branch: bool = False) -> AVal:
        """where(cv, a, b) element-wise, or (branch=True) the merge of an `if`'s two results."""
        val = None
        if a.val is not None and b.val is not None:
            x, y = a.val, b.val
            if z3.is_bool(x) != z3.is_bool(y):
                x, y = to_int(x), to_int(y)
            val = simp(z3.If(cv, x, y))
        tags: Tags = {}
        for name in set(a.tags) | set(b.tags):
            ta, tb = a.tags.get(name, ()), b.tags.get(name, ())
            if len(ta) == 1 and len(tb) == 1:
                ea = ta[0].expr if same(ta[0].expr, tb[0].expr) else z3.If(cv, ta[0].expr, tb[0].expr)
                tags[name] = (Tag(ea, z3.If(cv, ta[0].when, tb[0].when), lines(ta[0].src, tb[0].src)),)
            else:
                tags[name] = tuple(Tag(t.expr, conj([cv, t.when]), t.src) for t in ta) + \
                    tuple(Tag(t.expr, conj([z3.Not(cv), t.when]), t.src) for t in tb)
        res = AVal(shape, kind, val, conj([clive, z3.If(cv, a.live, b.live)]), tags)
        res.zero = a.zero and b.zero
        res.sums = sums_union(a.sums, b.sums)
        # A where whose condition picks lanes by their position alone (`arange(BM) == r`, putting a row's result
        # into its lane) decides per element which side's sums it holds. One that moves with a loop
        # (`where(k + BK < K, acc + s, acc)`) is left to the loop summary, which checks the union; one that reads
        # data (`where(tgt != ignore, loss, 0.0)`: an ignored row's loss is 0 by definition) keeps the union.
        by_lane = not branch and mentions_prefix(cv, ("_ax",)) and not mentions_prefix(cv, ("it:", "t#", "uf:", "hv#"))
        for d in set(a.sums) | set(b.sums):
            ca, cb = a.sums.get(d, ()), b.sums.get(d, ())
            if (branch or by_lane) and len(ca) == len(cb) == 1 and not pieces_equal(ca[0], cb[0]):
                # which branch ran, or which side an element took, decides what was summed there
                res.sums[d] = ((*(replace(p, cond=conj([p.cond, cv])) for p in ca[0]),
                                *(replace(p, cond=conj([p.cond, z3.Not(cv)])) for p in cb[0])),)
            elif by_lane and len(ca) + len(cb) == 1 and (b.zero if ca else a.zero):
                # a sum on one side and a zero fill on the other: the elements that took the zero summed nothing
                c, keep = (ca[0], cv) if ca else (cb[0], z3.Not(cv))
                res.sums[d] = (tuple(replace(p, cond=conj([p.cond, keep])) for p in c),)
        for f in ("maxof", "scale"):
            ca, cb = getattr(a, f), getattr(b, f)
            if ca and cb:
                setattr(res, f, ca if ca.equal(cb) else None)
            elif ca and (b.plain or b.zero):
                setattr(res, f, ca)
            elif cb and (a.plain or a.zero):
                setattr(res, f, cb)
        res.diff = a.diff if b.plain else (b.diff if a.plain else None)
        return res

    def op_cast(self, op: Op) -> None:
        x = self.get(op.args[0])
        kind = _kind(op.attrs["dtype"])
        res = replace(x, kind=kind)
        if op.attrs.get("bitcast"):  # the bits read as another type: no arithmetic relation survives
            res.val = None
        elif x.val is not None:
            if kind == "float":
                res.val = None
            elif kind == "int":
                res.val = to_int(x.val)
            elif kind == "bool":
                res.val = to_bool(x.val)
        elif kind in ("int", "bool"):
            res.val = None
        self.put(op.result, res)

    # ---- shape changes --------------------------------------------------------------------------------
    def op_expand(self, op: Op) -> None:
        self.put(op.result, expand(self.get(op.args[0]), op.attrs["axis"]))

    def op_broadcast_to(self, op: Op) -> None:
        self.put(op.result, broadcast(self.get(op.args[0]), self.shape_of(op.result)))

    def op_reshape(self, op: Op) -> None:
        self.put(op.result, reshape(self.get(op.args[0]), self.shape_of(op.result)))

    def op_trans(self, op: Op) -> None:
        self.put(op.result, transpose(self.get(op.args[0])))

    # ---- reductions --------------------------------------------------------------------------------------
    def eliminate(self, op: Op, x: AVal, r: Expr, n: int, shape: tuple[int, ...]
                  ) -> tuple[Tags, dict[str, Tag], Expr, Sums]:
        """Split x (with the reduced axis, of extent n, already renamed to `r`; `shape` the result's) into what survives
        the reduction: (tags independent of r, tags that depend on r, live conjuncts without r, sums without r). A tag
        that depends on r with alternatives at different indices (misaligned factors) is read by joint_tag."""
        rn = r.decl().name()
        keep: Tags = {}
        inner: dict[str, Tag] = {}
        for name, alts in x.tags.items():
            if any(mentions(t.expr, rn) for t in alts):
                inner[name] = alts[0] if "." in name else self.joint_tag(op, name, alts, shape, r, n)
            else:
                keep[name] = tuple(Tag(t.expr, conj([c for c in conjuncts(t.when) if not mentions(c, rn)]), t.src)
                                   for t in alts)
        live = conj([c for c in conjuncts(x.live) if not mentions(c, rn)])
        sums: Sums = {}
        for d, cs in x.sums.items():
            kept = []
            for ps in cs:
                new = []
                for p in ps:
                    if mentions(p.lo, rn) or mentions(p.hi, rn):
                        self.notes.append(f"a cover of {d} varies along a reduced axis; dropped")
                        break
                    new.append(replace(p, cond=conj([c for c in conjuncts(p.cond) if not mentions(c, rn)])))
                else:
                    kept.append(tuple(new))
            if kept:
                sums[d] = tuple(kept)
        return keep, inner, live, sums

    def joint_tag(self, op: Op, name: str, alts: tuple[Tag, ...], shape: tuple[int, ...], r: Expr | None = None,
                  n: int = 0) -> Tag:
        """The one tag of `name` under which a term with these alternatives is added up: by a reduction over r in
        [0, n), or (r None) by a loop's accumulation. Alternatives at different indices come from operands at
        different indices of `name` (the split-KV merge's w[c] * Acc[c + 1]): a product has a term at an index only
        where every factor is at it, so no one alternative says which index the sum covers. Checked: wherever all of
        them hold, their indices agree (else the counterexample names both); the term is then at that index, under
        all their conditions together (for a sum's operands, whose terms are separate, that is narrower than what
        was added: the reduction is reported incomplete, never wrongly proved)."""
        if len(alts) == 1 or all(same(t.expr, alts[0].expr) for t in alts):
            return alts[0]
        when = conj([t.when for t in alts])
        src = lines(*(t.src for t in alts))
        what = ("the loop's accumulation" if r is None else
                {"mma": "the mma", "scan": "the scan"}.get(op.kind, f"the {op.attrs.get('op', 'reduction')}"))
        rng = [] if r is None else [r >= 0, r < n]
        for i, t1 in enumerate(alts):
            for t2 in alts[i + 1:]:
                if same(t1.expr, t2.expr):
                    continue
                watch = {"a": t1.expr, "b": t2.expr, **({"r": r} if r is not None else {})}

                def describe(w: dict[str, Any], t1: Tag = t1, t2: Tag = t2) -> str:
                    at = f", at position {w['r']} of the reduced axis" if "r" in w else ""
                    return (f"{what} adds up products whose factors are at different {name} indices: {name} index "
                            f"{w['a']}{_from(t1)} times {name} index {w['b']}{_from(t2)}{at}; a product has a term at "
                            "an index only where all its factors are at it")
                self.check("product-agreement", op, shape, conj(rng + [when, t1.expr != t2.expr]), describe, watch,
                           related=src)
        return Tag(alts[0].expr, when, src)

    def reduce_each(self, op: Op, x: AVal, r: Expr, n: int, shape: tuple[int, ...], summing: bool) -> Sums:
        """Take out of x (reduced axis renamed to r) the element-wise accumulations (`each(K)`, `lost(K)`) whose
        indices move along r, and return the covers of K that a sum over r completes from them.

        A piece of each(K) is one point e(r) (from every earlier iteration t of its loop, for a union): its union
        over r in [0, n) must be [e(0), e(0) + n), each index once, and different iterations must not share an
        index. What cannot be followed this way (a maximum or a scan across such points, a `lost` mark) is
        reported as undecided: no proof rests on it."""
        rn = r.decl().name()
        out: Sums = {}
        for key in [k for k in x.sums if is_pending(k)]:
            moving = [ps for ps in x.sums[key] if any(mentions(e, rn) for p in ps for e in p.exprs)]
            if not moving:
                continue
            x.sums = {**x.sums, key: tuple(ps for ps in x.sums[key] if not any(ps is m for m in moving))}
            if not x.sums[key]:
                del x.sums[key]
            d = reduced_dim(key)
            if key.startswith("each(") and all(p.t is None for ps in moving for p in ps) and not summing:
                continue  # this iteration's points only: the reduction follows them by the tag itself
            for ps in moving:
                pieces = self.each_to_cover(op, d, ps, r, n, shape) if key.startswith("each(") and summing else None
                if pieces is None:
                    what = {"reduce": "the reduction", "mma": "the mma", "scan": "the scan"}.get(op.kind, op.kind)
                    self.unfollowed.append(f"line {op.line}: {what} runs across the {d} indices a loop accumulated "
                                           "element-wise, in a form the checker does not follow (not a sum of them)")
                else:
                    out[d] = covers_union(out.get(d, ()), (pieces,))
        return out

    def each_to_cover(self, op: Op, d: str, ps: Pieces, r: Expr, n: int, shape: tuple[int, ...]) -> Pieces | None:
        rn = r.decl().name()
        out: list[Piece] = []
        for p in ps:
            if as_int(p.hi - p.lo) != 1 or not mentions(p.lo, rn):
                return None
            q = self.cover_piece(op, d, Tag(p.lo, p.cond, p.src), r, n, shape)
            if p.t is not None:
                q = replace(q, t=p.t, count=p.count)
                self.check_iterations_disjoint(op, d, q, q.count, shape)
                # blocks laid end to end: one interval, the form a sum inside the loop gets (generalize_cover)
                q = end_to_end(q, p.t, p.count, q.src) or q
            out.append(q)
        for i, p in enumerate(out):
            for q in out[i + 1:]:
                x = fresh(f"x_{d}")

                def describe(w: dict[str, Any]) -> str:
                    return f"the reduction adds {d} index {w['x']} twice: once from each of two accumulations"
                self.check("reduction-once", op, shape, conj([member_pos((p,), x), member_pos((q,), x)]), describe,
                           {"x": x}, related=lines(p.src, q.src))
        return merge_pieces(out)

    def cover_piece(self, op: Op, name: str, tag: Tag, r: Expr, n: int, shape: tuple[int, ...]) -> Piece:
        """The indices along `name` a reduction over r in [0, n) visits, checking each is visited once."""
        t = tag.expr
        nxt = subst(t, [(r, r + 1)])
        if not same(simp(nxt - t), z3.IntVal(1)):
            w0, w1 = tag.when, subst(tag.when, [(r, r + 1)])

            def describe(w: dict[str, Any], name: str = name) -> str:
                return (f"the reduction visits {name} index {w['t0']} at position {w['r']} and {w['t1']} at "
                        f"position {w['r'] + 1}: not each index of a contiguous range exactly once")
            self.check("reduction-once", op, shape, conj([r >= 0, r + 1 < n, w0, w1, nxt != t + 1]), describe,
                       {"t0": t, "t1": nxt, "r": r}, related=tag.src)
        lo = simp(subst(t, [(r, z3.IntVal(0))]))
        return Piece(lo, simp(lo + n), xcond(subst(tag.when, [(r, XV - lo)])), src=lines(tag.src, (op.line,)))

    def op_reduce(self, op: Op) -> None:
        x = self.get(op.args[0])
        axis, o = op.attrs["axis"], op.attrs["op"]
        n = x.shape[axis]
        shape = x.shape[:axis] + x.shape[axis + 1:]
        r = fresh("_r")
        pairs = [(d, ax(d) if d < axis else (r if d == axis else ax(d - 1))) for d in range(x.rank)]
        x2 = remap_axes(x, pairs, shape)
        each = self.reduce_each(op, x2, r, n, shape, o == "sum")
        tags, inner, live, sums = self.eliminate(op, x2, r, n, shape)
        res = AVal(shape, _kind(op.result.dtype), None, live, tags, sums_union(sums, each))
        covers = {name: self.cover_piece(op, name, t, r, n, shape) for name, t in inner.items()
                  if "." not in name and name not in each}
        if o in ("sum", "prod"):
            for name, p in covers.items():
                res.sums = sums_union(res.sums, {cover_key(o, name): ((p,),)})
            res.scale = x.scale if o == "sum" else None
            res.zero = x.zero
        elif covers:
            name = self.primary(list(covers))
            res.maxof = Cov(name, (covers[name],), (op.line,))
            res.scale = x.scale
        self.put(op.result, res)

    def op_scan(self, op: Op) -> None:
        """cumsum / cumprod: element j covers, along each dimension tagged on the scan axis, the indices of
        elements 0..j of the axis (j..n-1 when reversed): a cover with the condition `_x <= own index`
        (`>=` reversed), so that a store must prove the whole prefix (suffix) up to its element included."""
        x = self.get(op.args[0])
        axis, o, rev = op.attrs["axis"], op.attrs["op"], op.attrs["reverse"]
        n, shape = x.shape[axis], x.shape
        r = fresh("_r")
        x2 = remap_axes(x, [(d, r if d == axis else ax(d)) for d in range(x.rank)], shape)
        self.reduce_each(op, x2, r, n, shape, False)
        _, inner, _, _ = self.eliminate(op, x2, r, n, shape)
        res = AVal(shape, _kind(op.result.dtype), None, x.live, dict(x.tags), x.sums)
        key = "prod" if o == "cumprod" else "sum"
        for name, t in inner.items():
            if "." in name:
                continue
            p = self.cover_piece(op, name, t, r, n, shape)
            own = subst(t.expr, [(r, ax(axis))])
            bound = XV >= own if rev else XV <= own
            piece = Piece(p.lo, p.hi, conj([p.cond, bound]), src=p.src)
            res.sums = sums_union(res.sums, {cover_key(key, name): ((piece,),)})
        res.zero = x.zero and o == "cumsum"
        self.put(op.result, res)

    def primary(self, names: list[str]) -> str:
        syms = [n for n in names if n in self.shapes]
        return sorted(syms or names)[0]

    def op_mma(self, op: Op) -> None:
        A, B = self.get(op.args[0]), self.get(op.args[1])
        bm, bk = A.shape
        bn = B.shape[1]
        shape = (bm, bn)
        r = fresh("_r")
        A2 = remap_axes(A, [(0, ax(0)), (1, r)], shape)
        B2 = remap_axes(B, [(0, r), (1, ax(1))], shape)
        each = sums_union(self.reduce_each(op, A2, r, bk, shape, True), self.reduce_each(op, B2, r, bk, shape, True))
        ta, ia, la, sa = self.eliminate(op, A2, r, bk, shape)
        tb, ib, lb, sb = self.eliminate(op, B2, r, bk, shape)
        self.mma_agreement(op, A2, B2, r, bk, shape)
        inner_names = set(ia) | set(ib)
        tags = merge_tags({k: v for k, v in ta.items() if k not in inner_names},
                          {k: v for k, v in tb.items() if k not in inner_names})
        res = AVal(shape, "float", None, conj([la, lb]), tags, sums_union(sums_union(sa, sb), each))
        for name in sorted(n for n in inner_names if "." not in n and n not in each):
            ref = ia.get(name) or ib[name]
            when = conj([t.when for t in (ia.get(name), ib.get(name)) if t is not None])
            srcs = [t.src for t in (ia.get(name), ib.get(name)) if t is not None]
            p = self.cover_piece(op, name, Tag(ref.expr, when, lines(*srcs)), r, bk, shape)
            res.sums = sums_union(res.sums, {name: ((p,),)})
        if A.scale and not B.scale:
            res.scale = A.scale
        elif B.scale and not A.scale:
            res.scale = B.scale
        if len(op.args) > 2:
            acc = self.get(op.args[2])
            out = AVal(shape, "float", None, conj([acc.live, res.live]) if not acc.zero else res.live,
                       merge_tags(acc.tags, res.tags) if not acc.zero else res.tags)
            self.additive(op, acc, res, out, sub=False)
            res = out
        self.put(op.result, res)

    def mma_agreement(self, op: Op, A2: AVal, B2: AVal, r: Expr, bk: int, shape: tuple[int, ...]) -> None:
        rn = r.decl().name()
        dep_a = {n for n, alts in A2.tags.items() if any(mentions(t.expr, rn) for t in alts)}
        dep_b = {n for n, alts in B2.tags.items() if any(mentions(t.expr, rn) for t in alts)}
        short_a = {n for n in dep_a if "." not in n}
        short_b = {n for n in dep_b if "." not in n}
        shared = {n for n in set(A2.tags) & set(B2.tags) if "." not in n}
        if short_a and short_b and not short_a & short_b and not shared & (dep_a | dep_b):
            def describe(w: dict[str, Any]) -> str:
                return (f"mma's operands share no reduction tag (A's inner index is tagged {sorted(short_a)}, "
                        f"B's {sorted(short_b)}): name the shared dimension identically")
            self.check("mma-agreement", op, shape, TRUE, describe, related=self.def_lines(op.args[:2]))
        for name in sorted(set(A2.tags) & set(B2.tags)):
            if "." in name:
                continue
            both_uniform = all(is_uniform(t.expr) and not mentions(t.expr, rn) for t in A2.tags[name] + B2.tags[name])
            if name not in dep_a and name not in dep_b and not both_uniform:
                continue
            for t1 in A2.tags[name]:
                for t2 in B2.tags[name]:
                    if same(t1.expr, t2.expr):
                        continue

                    def describe(w: dict[str, Any], name: str = name) -> str:
                        return (f"mma multiplied A's {name} index {w['a']} with B's {name} index {w['b']} "
                                f"(inner position {w['r']})")
                    body = conj([r >= 0, r < bk, t1.when, t2.when, t1.expr != t2.expr])
                    self.check("mma-agreement", op, shape, body, describe, {"a": t1.expr, "b": t2.expr, "r": r},
                               related=lines(self.def_lines(op.args[:2]), t1.src, t2.src))

    # ---- covers --------------------------------------------------------------------------------------------
    def dim_extent(self, name: str) -> Expr | None:
        if reduced_dim(name) != name:
            return self.dim_extent(reduced_dim(name))
        if name in self.shapes:
            return self.shapes[name]
        if "." in name:
            t, d = name.split(".", 1)
            d = d.split("@")[0]
            if t in self.tensors and d in self.shapes:
                return self.shapes[d]
        return None

    def accumulate(self, op: Op, a: AVal, b: AVal, shape: tuple[int, ...], joins_products: bool = False) -> Sums:
        """Covers of a + b. Per dimension, covers both operands share are the same reduction; if each
        side has one more, they are two partial sums of one reduction: they join, and must not overlap.
        With `joins_products` it is a * b instead: product covers join that way, sum covers do not."""
        out: Sums = {}
        pairs: list[tuple[str, Pieces, Pieces]] = []
        for d in sorted(set(a.sums) | set(b.sums)):
            ca, cb = a.sums.get(d, ()), b.sums.get(d, ())
            if is_product(d) != joins_products or d.startswith(("lost(", "done(")):  # products join by *, sums by +
                out[d] = covers_union(ca, cb)
                continue
            ua = [c for c in ca if not any(pieces_equal(c, x) for x in cb)]
            ub = [c for c in cb if not any(pieces_equal(c, x) for x in ca)]
            common = tuple(c for c in ca if not any(c is u for u in ua))
            if len(ua) == 1 and len(ub) == 1:
                out[d] = common + (merge_pieces(ua[0] + ub[0]),)
                pairs.append((d, ua[0], ub[0]))
            else:
                out[d] = common + tuple(ua) + tuple(ub)
        if pairs and not any(self.trivially_disjoint(pa, pb) for _, pa, pb in pairs):
            xs = {d: fresh(f"x_{d}") for d, _, _ in pairs}
            parts = [a.live, b.live]
            for d, pa, pb in pairs:
                parts += [member_pos(pa, xs[d]), member_pos(pb, xs[d])]

            def describe(w: dict[str, Any]) -> str:
                idx = ", ".join(f"{d} index {w[d]}" for d in xs)
                if joins_products:
                    return f"multiplies two partial products that both include {idx}: that index is counted twice"
                return f"adds two partial sums that both include {idx}: that index is counted twice"
            self.check("reduction-once", op, shape, conj(parts), describe, dict(xs),
                       related=lines(*(p.src for _, pa, pb in pairs for p in pa + pb)))
        return out

    def multiply_covers(self, op: Op, a: AVal, b: AVal, shape: tuple[int, ...]) -> Sums:
        """Covers of a * b: partial products (prod / cumprod covers) join like partial sums under +."""
        if a.zero or b.zero:
            return sums_union(a.sums, b.sums)
        return self.accumulate(op, a, b, shape, joins_products=True)

    def trivially_disjoint(self, a: Pieces, b: Pieces) -> bool:
        return all(p.t is None and q.t is None and (same(p.hi, q.lo) or same(q.hi, p.lo)) for p in a for q in b)

    def check_same_pieces(self, op: Op, d: str, a: Pieces, b: Pieces, shape: tuple[int, ...], text: str,
                          live: Expr = TRUE) -> None:
        if pieces_equal(a, b):
            return
        x = fresh(f"x_{d}")
        ext = self.dim_extent(d)
        rng = [live, x >= 0] + ([x < ext] if ext is not None else [])

        def describe(w: dict[str, Any]) -> str:
            return text.format(d=d, a=_rng(a), b=_rng(b)) + f" ({d} index {w['x']} is in one and not the other)"
        self.check("reduction-range", op, shape, conj(rng + [member(a, x) != member(b, x)]), describe, {"x": x},
                   related=lines(*(p.src for p in a + b)))

    def check_same_cover(self, op: Op, a: Cov, b: Cov, shape: tuple[int, ...], text: str,
                         live: Expr = TRUE) -> None:
        d = a.dim or b.dim or "?"
        if a.equal(b):
            return
        x = fresh(f"x_{d}")
        ext = self.dim_extent(d)
        rng = [live, x >= 0] + ([x < ext] if ext is not None else [])

        def describe(w: dict[str, Any]) -> str:
            return text.format(d=d, a=_rng(a.pieces), b=_rng(b.pieces)) + \
                f" ({d} index {w['x']} is in one range and not the other)"
        self.check("softmax-scale", op, shape, conj(rng + [member(a.pieces, x) != member(b.pieces, x)]), describe,
                   {"x": x}, related=lines(a.lines(), b.lines()))

    # ---- memory -------------------------------------------------------------------------------------------
    def view(self, op: Op, nidx: int) -> tuple[TensorParam, list[AVal], tuple[int, ...]]:
        t = self.tensors[op.attrs["tensor"]]
        idx = [self.get(a) for a in op.args[:nidx]]
        shape = tuple(i.shape[0] for i in idx if i.rank == 1)
        return t, idx, shape

    def address(self, op: Op, t: TensorParam, idx: list[AVal], shape: tuple[int, ...], user_mask: AVal | None,
                ) -> tuple[list[Expr], list[Expr], Tags, Expr]:
        """Per-dimension index terms, auto-masks of tile indices, tags inherited from index tiles,
        and the user's mask (all over the access's axis placeholders)."""
        addr: list[Expr] = []
        masks: list[Expr] = []
        inherited: Tags = {}
        pos = 0
        for d, iv in enumerate(idx):
            ext = self.extent(t.name, d)
            if iv.rank == 1:
                m = remap_axes(iv, [(0, ax(pos))], shape)
                pos += 1
                e = m.val if m.val is not None else fresh("opaque")
                masks += [e >= 0, e < ext]
                inherited = merge_tags(inherited, m.tags)
            else:
                e = iv.val if iv.val is not None else fresh("opaque")
                inherited = merge_tags(inherited, broadcast(iv, shape).tags if shape else iv.tags)
            addr.append(e)
        um = TRUE
        if user_mask is not None:
            mv = broadcast(user_mask, shape)
            um = to_bool(mv.val) if mv.val is not None else self.havoc("bool")
        return addr, masks, inherited, um

    def scalar_bounds(self, op: Op, t: TensorParam, idx: list[AVal], addr: list[Expr], active: Expr,
                      shape: tuple[int, ...]) -> None:
        if op.ghost:
            return
        for d, (iv, e) in enumerate(zip(idx, addr)):
            if iv.rank:
                continue
            ext = self.extent(t.name, d)
            if as_int(e) is not None and as_int(ext) is not None and 0 <= as_int(e) < as_int(ext):
                continue
            dim = t.dims[d]

            def describe(w: dict[str, Any], dim: str = dim, d: int = d) -> str:
                return (f"{op.kind} reads {t.name} at {dim} index {w['idx']} (dimension {d}), outside [0, {w['ext']}): "
                        "scalar indices are not masked")
            self.check("out-of-bounds", op, shape, conj([active, z3.Not(z3.And(e >= 0, e < ext))]), describe,
                       {"idx": e, "ext": ext}, related=self.def_lines([op.args[d]]))

    def op_load(self, op: Op) -> None:
        nidx = len(op.args) - (1 if op.attrs["has_mask"] else 0)
        t, idx, shape = self.view(op, nidx)
        um = self.get(op.args[nidx]) if op.attrs["has_mask"] else None
        addr, masks, inherited, umask = self.address(op, t, idx, shape, um)
        live = conj(masks + [umask])
        self.auto_masks[op.result.id] = (masks, umask)  # zero_terms tells them from the user's mask
        self.scalar_bounds(op, t, idx, addr, live, shape)
        tags: Tags = dict(inherited)
        for d, dim in enumerate(t.dims):
            tag = (Tag(addr[d], live, lines((op.line,), self.def_lines([op.args[d]]))),)
            q = f"{t.name}.{dim}" if t.dims.count(dim) == 1 else f"{t.name}.{dim}@{d}"
            tags[q] = tag
            if t.dims.count(dim) == 1:
                tags[dim] = tag
        kind = _kind(op.result.dtype)
        val = None
        if kind in ("int", "bool"):
            other = op.attrs.get("other", 0)
            u = self.uf(t.name)(*addr)
            val = simp(z3.If(live, u, z3.IntVal(int(other)))) if kind == "int" else simp(z3.And(live, u != 0))
        self.put(op.result, AVal(shape, kind, val, live, tags))

    def write(self, op: Op, kind: str) -> None:
        nidx = op.attrs["nidx"]
        t, idx, shape = self.view(op, nidx)
        um = self.get(op.args[nidx + 1]) if op.attrs["has_mask"] else None
        addr, masks, _, umask = self.address(op, t, idx, shape, um)
        value = broadcast(self.get(op.args[nidx]), shape)
        active = conj(masks + [umask])
        self.scalar_bounds(op, t, idx, addr, active, shape)
        bits = _bits(op.args[nidx].dtype)
        for d, dim in enumerate(t.dims):
            if t.dims.count(dim) != 1:
                continue
            for tag in value.tags.get(dim, ()):
                if same(tag.expr, addr[d]):
                    continue

                def describe(w: dict[str, Any], dim: str = dim) -> str:
                    return (f"{op.kind} writes the element whose {dim} tag is {w['tag']} to {t.name}'s {dim} index "
                            f"{w['addr']}")
                self.check("store-coordinates", op, shape, conj([active, tag.when, tag.expr != addr[d]]), describe,
                           {"tag": tag.expr, "addr": addr[d]}, bits, lines(tag.src, self.def_lines([op.args[d]])))
        if kind == "store":
            # a lane the kernel named padding may be left an empty sum (no live term), never a partial one
            owed = conj([active, z3.Not(z3.And(padding(value), z3.Not(value.live)))])
            for d, cs in value.sums.items():
                if is_pending(d) and not self.accumulated_reduction(d, cs, t):
                    continue
                for ps in cs:
                    self.check_complete(op, reduced_dim(d) if is_pending(d) else d, ps, owed, shape, bits, addr,
                                        value.live)
            if value.maxof and value.maxof.dim:
                self.check_complete(op, value.maxof.dim, value.maxof.pieces, owed, shape, bits, addr, value.live)
        if not self.muted:
            parts = self.ctx + conjuncts(active)
            geometry = conj([c for c in parts if not any(n.startswith(("uf:", "hv#")) for n in _names(c))])
            self.accesses.append(Access(op, kind, t.name, shape, addr, conj(parts), value,
                                        list(self.loops), bits, geometry))

    def accumulated_reduction(self, key: str, cs: tuple[Pieces, ...], t: TensorParam) -> bool:
        """Whether a loop's element-wise accumulation (each(K)) stored as is is a reduction over K that must be
        complete: K is not a dimension of the output, and where its indices start is the same for every element and
        every program (a gathered window, like a convolution's input rows, moves with the output position and is
        the window's, not all of K). A cover whose end alone names the program (a loop run for K times a flag of
        the program's, as a segment's loop of gemv_cat could be) is still all of K wherever it is stored: it was
        exempt once, and a loop that skipped its first block proved."""
        if not key.startswith("each(") or reduced_dim(key) in t.dims:
            return False
        return not any(mentions_prefix(e, ("_ax", "pid:")) for ps in cs for p in ps for e in (p.lo, p.count)
                       if e is not None)

    def check_complete(self, op: Op, d: str, ps: Pieces, active: Expr, shape: tuple[int, ...], bits: int,
                       addr: list[Expr] | None = None, live: Expr = TRUE) -> None:
        """A stored element's reduction over d covers all of [0, extent) (but the indices its masks relate to the
        element: a causal row). `live`: where the stored value has a term at all. A cover keeps only the conditions
        on the reduced index; a mask conjunct that kills a whole lane (`(rm < 2)[:, None]`, a padding row) without
        naming the index leaves that lane's value live nowhere, so its reduction covered nothing: reported, unless
        the kernel named the lane padding (`padding_lanes`; the caller takes such empty lanes out of `active`)."""
        ext = self.dim_extent(d)
        if ext is None:
            return
        if addr is not None and z3.is_true(simp(required(ps, XV))):
            # a partial result stored at an address indexed by the same program (or iteration) that
            # chooses where its part of the reduction starts (block sums, split-k partials) need not be complete
            part = {n for p in ps for e in (p.lo,) + ((p.count,) if p.count is not None else ())
                    for n in _names(e) if n.startswith(("pid:", "it:"))}
            where = {n for e in addr for n in _names(e) if n.startswith(("pid:", "it:"))}
            if part & where:
                return
        x = fresh(f"x_{d}")

        watch: dict[str, Expr] = {"x": x, "ext": ext, "live": live}
        for i, p in enumerate(ps):
            if p.t is None:
                watch[f"lo{i}"], watch[f"hi{i}"] = p.lo, p.hi
                watch[f"on{i}"] = conj([c for c in conjuncts(p.cond) if not mentions(c, "_x")])

        def describe(w: dict[str, Any]) -> str:
            here = [(f"[{w[f'lo{i}']}, {w[f'hi{i}']})" if w[f"on{i}"] is not False else None) if f"lo{i}" in w
                    else _rng((p,)) for i, p in enumerate(ps)]
            dn = reduced_dim(d)
            what = f"{op.kind} writes a value whose {'product' if is_product(d) else 'reduction'} over {dn}"
            if w["live"] is False or not [h for h in here if h is not None]:
                return (f"{what} covered nothing at this element ({dn} index {w['x']} of [0, {w['ext']}) left out): "
                        "a mask kills its lane in every term, or a where gave it a side that summed nothing, and "
                        "the kernel did not name it padding (padding_lanes)")
            return (f"{what} never included {dn} index {w['x']} of [0, {w['ext']}) "
                    f"(it covers {' and '.join(h for h in here if h is not None)})")
        self.check("reduction-complete", op, shape,
                   conj([active, x >= 0, x < ext, required(ps, x), z3.Not(z3.And(live, member(ps, x)))]), describe,
                   watch, bits, lines(*(p.src for p in ps)))

    def op_store(self, op: Op) -> None:
        self.write(op, "store")

    def op_atomic_add(self, op: Op) -> None:
        self.write(op, "atomic")

    # ---- tags and assertions ------------------------------------------------------------------------------
    def op_tag(self, op: Op) -> None:
        x = self.get(op.args[0])
        tags = dict(x.tags)
        for name, e in zip(op.attrs["names"], op.args[1:]):
            ev = broadcast(self.get(e), x.shape)
            if ev.val is None:
                raise CheckerError(f"tag '{name}' is not an integer expression the checker can follow", op.line)
            tags[name] = (Tag(to_int(ev.val), conj([x.live, ev.live]), (op.line,)),)
        self.put(op.args[0], replace(x, tags=tags))

    def op_padding_lanes(self, op: Op) -> None:
        """padding_lanes(x, lanes): the kernel's word that x's elements where `lanes` holds are padding (rows no
        consumer reads as results), so a store of x may leave their reductions empty: where such an element has no
        live term at all, the store owes no reduction; a padding lane that summed part of the range is still
        reported (padding is left empty, never half summed), and one that summed all of it needs no excuse.

        Why a named annotation and not a store mask: the MoE kernels store their padding rows (zeros, an empty sum
        where the routed row's load is masked off) and later kernels read them whole (moe_down's Hin rows, the
        Gluon lowerings' TMA tiles), so masking the store would change what those rows hold. The checker cannot
        tell a padding row from a dropped real row by itself: both are lanes every load kills. The annotation is
        carried as a tag (`PADDING_TAG`, dotted so that no reduction or mma reads it as an index), so it follows
        the value through element-wise ops to the store; it emits nothing in the lowerings (a ghost op)."""
        x = self.get(op.args[0])
        p = broadcast(self.get(op.args[1]), x.shape)
        if p.val is None:
            raise CheckerError("padding_lanes' predicate is not something the checker can evaluate", op.line)
        tag = Tag(to_int(to_bool(p.val)), p.live, (op.line,))
        self.put(op.args[0], replace(x, tags={**x.tags, PADDING_TAG: (tag,)}))

    def op_zero_terms(self, op: Op) -> None:
        """zero_terms(x, cond): the kernel's word that x, a term of a sum, is zero by the op's definition where cond
        is false (a convolution tap off the input reads zero padding; off its stride, or past the kernel, no input
        meets it), so that a lane the load's mask kills there took that term, as a zero, all the same. A trusted
        claim, like padding_lanes: the checker cannot tell a tap that is zero by definition from a dropped one, both
        are a mask conjunct that moves with the tap loop, and without the claim such a lane reads as a partial sum
        (moving_lanes). Only cond's part of the mask is excused: x's `live` L = U & K & A, with K the conjuncts of
        the user's mask that are cond's, U the user's others and A the load's auto-masks (its tile indices inside
        the tensor), becomes U & (K | ~cond), so
          - a conjunct of the mask that is not cond's (a real tap dropped, `& (t != 1)`) still gates the term's
            covers wherever cond holds (where cond is false it gates them too: conservative);
          - A's conjuncts that share a variable with cond are dropped where cond is false (a tap off the input
            indexes outside the flattened image, or wraps into its neighbour: zero by the claim either way), and
            where cond holds they must hold: a "zero-terms" obligation, decided by z3 with the other checks, that
            such a term's index is inside the tensor (else the load masked a term the claim does not excuse). The
            other auto-masks (a channel tile's lanes past C) stay in U.
        The value, its tags and the checks made at the load are unchanged; it emits nothing in the lowerings (a
        ghost op)."""
        x = self.get(op.args[0])
        p = broadcast(self.get(op.args[1]), x.shape)
        if p.val is None:
            raise CheckerError("zero_terms' predicate is not something the checker can evaluate", op.line)
        cond = to_bool(p.val)
        auto, umask = self.auto_masks.get(op.args[0].id, ([], TRUE))
        named, mine = conjuncts(cond), conjuncts(umask)
        live_cs = conjuncts(x.live)
        k = [c for c in live_cs if _among(c, named)]
        near = free_vars(cond)  # an auto-mask on other indices (a channel tile past C) stays a plain conjunct
        dropped = [c for c in auto if not _among(c, named) and not _among(c, mine) and free_vars(c) & near]
        user = [c for c in live_cs if not _among(c, named) and not _among(c, dropped)]
        if all(_among(c, k) for c in named):
            live = conj(user)  # every conjunct of cond is one of the mask's: K | ~cond holds everywhere
        else:
            live = conj(user + [simp(z3.Or(conj(k), z3.Not(cond)))])
        shape = x.shape
        if dropped:
            def describe(w: dict[str, Any]) -> str:
                return ("zero_terms excuses this term only where its condition is false, but here the condition "
                        "holds and the load's index lies outside the tensor: the load masked a term that is not "
                        "zero by definition")
            self.check("zero-terms", op, shape, conj([p.live, cond] + user + [z3.Not(conj(dropped))]), describe,
                       related=self.def_lines([op.args[0], op.args[1]]))
        self.put(op.args[0], replace(x, live=live))

    def cover_bound(self, op: Op, x: AVal, name: str) -> AVal | None:
        """tag_of(x, "sum(T).lo") / "max(T).hi" / "scale(T).lo": a bound of the range of T that x has summed
        over, that its running max covers, or that the max it is normalised to covers. "each(T).lo" / ".hi": of the
        T indices loops added into x element-wise (a window's rows summed row by row); an element that took one of
        them must have taken every index in between (checked here), so that a kernel can assert its whole window
        was summed."""
        m = re.fullmatch(r"(sum|prod|max|scale|each)\((\w+)\)\.(lo|hi)", name)
        if m is None:
            return None
        kind, d, end = m.groups()
        what = op.args[0].hint or "the tile"
        if kind in ("sum", "prod", "each"):
            covers = x.sums.get(each_key(d) if kind == "each" else cover_key(kind, d), ())
            if len(covers) != 1:
                raise CheckerError(f"tag_of({what}, {name!r}): {what} has {len(covers)} reductions over {d}, not one",
                                   op.line)
            ps = covers[0]
        else:
            c = x.maxof if kind == "max" else x.scale
            if c is None or (c.dim not in (d, None)):
                role = "a running max" if kind == "max" else "normalised to a running max"
                raise CheckerError(f"tag_of({what}, {name!r}): {what} is not {role} over {d}", op.line)
            ps = c.pieces
        ps = merge_pieces(ps)
        if not ps:
            return AVal(x.shape, "int", z3.IntVal(0), x.live)
        if len(ps) != 1 or ps[0].t is not None:
            raise CheckerError(f"tag_of({what}, {name!r}): the range is not one contiguous interval ({_rng(ps)})",
                               op.line)
        p = ps[0]
        if kind == "each":  # an element that took one index in the range took them all (a dead lane none)
            i, j = fresh(f"x_{d}"), fresh(f"y_{d}")

            def describe(w: dict[str, Any]) -> str:
                return (f"{what} accumulated {d} indices [{w['lo']}, {w['hi']}) only in part: index {w['x']} was "
                        f"added, index {w['y']} between them was not")
            self.check("reduction-range", op, x.shape,
                       conj([x.live, i >= p.lo, i < p.hi, j >= p.lo, j < p.hi, p.member(i), z3.Not(p.member(j))]),
                       describe, {"x": i, "y": j, "lo": p.lo, "hi": p.hi}, related=p.src)
        return AVal(x.shape, "int", simp(p.lo if end == "lo" else p.hi), x.live)

    def op_tag_of(self, op: Op) -> None:
        x = self.get(op.args[0])
        name = op.attrs["name"]
        bound = self.cover_bound(op, x, name)
        if bound is not None:
            self.put(op.result, bound)
            return
        alts = x.tags.get(name, ())
        what = op.args[0].hint or "the tile"
        if not alts:
            have = ", ".join(sorted(x.tags)) or "none"
            raise CheckerError(f"tag_of({what}, {name!r}): {what} carries no tag '{name}' here (it has: {have})",
                               op.line)
        if len(alts) > 1:
            raise CheckerError(f"tag_of({what}, {name!r}) is ambiguous: its operands disagree on '{name}'; name the "
                               f"origin (e.g. 'T.{name}' for tensor T) or tag it explicitly", op.line)
        self.put(op.result, AVal(x.shape, "int", alts[0].expr, alts[0].when))

    def op_assert_tag(self, op: Op) -> None:
        p = self.get(op.args[0])
        if p.val is None:
            raise CheckerError("assert_tag's predicate is not something the checker can evaluate", op.line)
        watch = {}
        for w in _tag_of_ops(op.args[0]):
            v = broadcast(self.get(w.result), p.shape)
            watch[f"{w.args[0].hint or 'x'}.{w.attrs['name']}"] = v.val
        for val in _named_inputs(op.args[0]):  # kernel values the predicate mentions (e.g. the head h)
            a = self.get(val)
            if a.kind == "int" and a.val is not None and val.hint not in watch and len(a.shape) <= len(p.shape):
                watch[val.hint] = broadcast(a, p.shape).val
        msg = op.attrs.get("msg") or ""

        def describe(w: dict[str, Any]) -> str:
            vals = ", ".join(f"{k} = {v}" for k, v in w.items())
            return f"assert_tag fails{': ' + msg if msg else ''}" + (f" ({vals})" if vals else "")
        srcs = [t.src for w in _tag_of_ops(op.args[0]) for t in self.get(w.args[0]).tags.get(w.attrs["name"], ())]
        self.check("assert-tag", op, p.shape, conj([p.live, z3.Not(to_bool(p.val))]), describe, watch,
                   related=lines(*srcs))

    def op_assume(self, op: Op) -> None:
        if self.muted:
            return
        p = self.get(op.args[0])
        if p.val is None:
            raise CheckerError("assume's predicate is not something the checker can evaluate", op.line)
        coords = [fresh(f"a{d}") for d in range(p.rank)]
        body = subst(z3.Implies(conj(self.ctx + [p.live]), to_bool(p.val)), [(ax(d), c) for d, c in enumerate(coords)])
        dom = [z3.And(c >= 0, c < n) for c, n in zip(coords, p.shape)]
        qv = [v for v in list(coords) + [lp.it for lp in self.loops] if mentions(body, v.decl().name())]
        # quantified over the elements and loop iterations; program ids stay free, so that the fact is
        # instantiated at the program(s) an obligation talks about (api.instantiate_assumes)
        self.assumes.append(z3.ForAll(qv, z3.Implies(conj(dom), body)) if qv else body)
        self.assume_lines.append(op.line)

    # ---- control flow ---------------------------------------------------------------------------------------
    def op_if(self, op: Op) -> None:
        c = self.get(op.args[0])
        cv = simp(to_bool(c.val)) if c.val is not None else self.havoc("bool")
        if z3.is_true(cv) or z3.is_false(cv):
            blk = op.blocks[0 if z3.is_true(cv) else 1]
            self.block(blk)
            for r, y in zip(op.results, blk.yields):
                self.put(r, self.get(y))
            return
        outs = []
        for blk, cond in zip(op.blocks, (cv, z3.Not(cv))):
            self.ctx.append(cond)
            try:
                self.block(blk)
            finally:
                self.ctx.pop()
            outs.append([self.get(y) for y in blk.yields])
        for r, a, b in zip(op.results, outs[0], outs[1]):
            self.put(r, a if a is b else self.select(cv, a, b, a.shape, a.kind, branch=True))

    def op_for(self, op: Op) -> None:
        # a bound the checker cannot name (a sum over a loaded tile) is an unknown integer: the loop is read for
        # every start and stop it may take
        start, stop, step = (v if v is not None else self.havoc("int") for v in (self.get(a).val for a in op.args[:3]))
        inits = [self.get(a) for a in op.args[3:]]
        if op.attrs.get("static") and not op.attrs.get("symbolic") and \
                all(as_int(v) is not None for v in (start, stop, step)):
            self.unroll(op, range(as_int(start), as_int(stop), as_int(step)), inits)
            return
        var = op.attrs.get("var", "i")
        it = z3.Int(f"it:{var}@{op.line}#{next(_ids)}")
        self.inst_vars.append(it)
        iv = simp(start + it * step)
        trip = simp(z3.If(stop > start, (stop - start + step - 1) / step, 0))
        info = LoopInfo(var, it, iv, op.line, trip, z3.And(it >= 0, it < trip), list(op.args[:3]))
        heads = inits
        if inits:
            syms: list[Expr | None] = []
            heads1 = []
            for i, a in enumerate(inits):
                if a.kind in ("int", "bool") and a.val is not None:
                    x = fresh(f"carried:{op.attrs['carried'][i]}", a.val.sort())
                    syms.append(x)
                    heads1.append(replace(a, val=x))
                else:
                    syms.append(None)
                    heads1.append(replace(a, carried=a.carried | {it.decl().name()}))
            self.muted += 1
            try:
                r1 = self.loop_body(op, info, heads1)
            finally:
                self.muted -= 1
            heads = self.generalize(info, inits, syms, r1)
        r3 = self.loop_body(op, info, heads)
        self.loops.append(info)
        self.ctx.append(info.domain)
        try:
            self.check_staging(op, info)
            self.check_induction(op, info, heads, r3)
        finally:
            self.ctx.pop()
            self.loops.pop()
        for h in heads:
            for d, cs in h.sums.items():
                if is_pending(d):
                    continue  # checked where a reduction completes it (reduce_each)
                for p in (p for ps in cs for p in ps):
                    if p.t is not None and p.count is not None and same(p.count, it):
                        self.check_iterations_disjoint(op, d, p, info.trip, info=info)
        for r, init, head in zip(op.results, inits, heads):
            self.put(r, self.exit_value(info, init, head))

    def unroll(self, op: Op, values: range, inits: list[AVal]) -> None:
        cur = inits
        body = op.blocks[0]
        for v in values:
            self.put(body.args[0], AVal((), "int", z3.IntVal(v)))
            for a, h in zip(body.args[1:], cur):
                self.put(a, h)
            self.block(body)
            cur = [self.get(y) for y in body.yields]
        for r, c in zip(op.results, cur):
            self.put(r, c)

    def loop_body(self, op: Op, info: LoopInfo, heads: list[AVal]) -> list[AVal]:
        body = op.blocks[0]
        self.put(body.args[0], AVal((), "int", info.iv))
        for a, h in zip(body.args[1:], heads):
            self.put(a, h)
        self.loops.append(info)
        self.ctx.append(info.domain)
        try:
            self.block(body)
        finally:
            self.ctx.pop()
            self.loops.pop()
        return [self.get(y) for y in body.yields]

    def generalize(self, info: LoopInfo, inits: list[AVal], syms: list[Expr | None], r1: list[AVal]) -> list[AVal]:
        """The carried values' form at iteration `it`, guessed from one symbolic iteration."""
        it = info.it
        names = [it.decl().name()] + [s.decl().name() for s in syms if s is not None]

        def free(e: Expr) -> bool:
            return not mentions(e, names)

        heads = [AVal(i.shape, i.kind, carried=i.carried | {it.decl().name()}) for i in inits]
        for h, i, x, r in zip(heads, inits, syms, r1):
            if x is None:
                continue
            if r.val is not None and r.val.eq(x):
                h.val = i.val
            elif r.val is not None and i.kind == "int" and free(d := simp(r.val - x)):
                h.val = simp(i.val + it * d)
            else:
                h.val = self.havoc(i.kind)
        sub = [(x, h.val) for x, h in zip(syms, heads) if x is not None]
        for h, i, r in zip(heads, inits, r1):
            r = r.map(lambda e: subst(e, sub)) if sub else r
            h.tags = {n: alts for n, alts in r.tags.items()
                      if all(free(t.expr) and free(t.when) for t in alts)}
            if i.zero:  # an accumulator from zero keeps a tag the same every iteration where one term was live
                h.tags.update(self.invariant_tags(info, r, h, free))
            if free(r.live) or not i.zero:
                h.live = r.live if free(r.live) else i.live
            else:  # from zero, r.live is one iteration's term's: its conjuncts that do not move hold wherever any did
                h.live = conj([c for c in conjuncts(r.live) if free(c)])
            for d, cs in r.sums.items():
                gen = []
                for ps in cs:
                    # the initial cover this one extends (if any): its pieces are a subset of ours
                    keys = {p.key() for p in ps}
                    base = next((c for c in i.sums.get(d, ()) if {p.key() for p in c} <= keys), ())
                    g = self.generalize_cover(info, base, ps, d)
                    if g is not None:
                        gen.append(g)
                if gen:
                    h.sums[d] = tuple(gen)
            for f in ("maxof", "scale"):
                cr, ci = getattr(r, f), getattr(i, f)
                if cr is not None:
                    g = self.generalize_cover(info, ci.pieces if ci else (), cr.pieces, cr.dim or "?")
                    if g is not None:
                        setattr(h, f, Cov(cr.dim, g, cr.src))
            if i.kind == "float":
                self.mark_lost(info, r, h, free)
        return heads

    def invariant_tags(self, info: LoopInfo, r: AVal, h: AVal, free: Callable[[Expr], bool]) -> Tags:
        """Tags of a loop's accumulator (from zero) whose index is the same every iteration but whose condition
        moves with it (an inner column loop's mask, under a row index): after iterations 0..it-1 the element took
        that index wherever some iteration's condition held; the first iteration's condition, once the loop has
        run, is a part of that, so the tag is kept under it (never claimed where no term was live)."""
        it = info.it
        out: Tags = {}
        for n, alts in r.tags.items():
            if n in h.tags or len(alts) != 1 or not free(alts[0].expr) or free(alts[0].when):
                continue
            t = alts[0]
            first = simp(subst(t.when, [(it, z3.IntVal(0))]))
            if free(first):
                out[n] = (Tag(t.expr, conj([it >= 1, info.trip >= 1, first]), t.src),)
        return out

    def mark_lost(self, info: LoopInfo, r: AVal, h: AVal, free: Callable[[Expr], bool]) -> None:
        """A carried tile whose elements take a new index of a tensor dimension each iteration, with no
        `each` accumulation that follows it (a running maximum, a selection, an accumulation whose form the
        checker could not generalize), gets a `lost` mark of where the index moves: a reduction across it
        after the loop is undecided, not proved."""
        moving: dict[str, list[Expr]] = {}
        for name, alts in r.tags.items():
            if name in self.shapes and each_key(name) not in h.sums and any(not free(t.expr) for t in alts):
                moving.setdefault(name, []).extend(t.expr for t in alts)
        for key, cs in r.sums.items():
            if key.startswith("each(") and len(h.sums.get(key, ())) < len(cs):
                moving.setdefault(reduced_dim(key), []).extend(p.lo for ps in cs for p in ps)
        for name, exprs in moving.items():
            marks = []
            for e in exprs:
                anywhere = [(z3.Int(n), fresh("somewhen")) for n in free_vars(e) if n.startswith(("it:", "t#"))]
                lo = simp(subst(e, anywhere))
                marks.append((Piece(lo, simp(lo + 1), src=(info.line,)),))
            h.sums[lost_key(name)] = covers_union(h.sums.get(lost_key(name), ()), tuple(marks))

    def generalize_cover(self, info: LoopInfo, init: Pieces, result: Pieces, d: str) -> Pieces | None:
        it = info.it
        itn = it.decl().name()
        keys = {p.key() for p in init}
        new = [p for p in result if p.key() not in keys]
        if not new:
            return result
        if all(not mentions(e, itn) for p in new for e in p.exprs):
            return merge_pieces(result)
        if len(new) != 1 or new[0].t is not None:
            self.notes.append(f"line {info.line}: the loop's contribution to {d} is not one interval; not tracked")
            return None
        p = new[0]
        src = lines((info.line,), self.def_lines(info.bounds), p.src)
        joined = end_to_end(p, it, it, src)  # iterations 0..it-1 so far
        if joined is not None:
            return merge_pieces(tuple(init) + (joined,))
        if same(p.lo, subst(p.hi, [(it, it + 1)])) and not mentions(p.cond, itn):  # walking a range downwards
            hi0 = simp(subst(p.hi, [(it, z3.IntVal(0))]))
            return merge_pieces(tuple(init) + (Piece(p.hi, hi0, p.cond, src=src),))
        t = fresh("t")
        return merge_pieces(tuple(init) + (Piece(subst(p.lo, [(it, t)]), subst(p.hi, [(it, t)]),
                                                 subst(p.cond, [(it, t)]), t, it, src),))

    def check_induction(self, op: Op, info: LoopInfo, heads: list[AVal], outs: list[AVal]) -> None:
        """The body maps each carried cover's form at iteration it to its form at it + 1."""
        it = info.it
        itn = it.decl().name()
        nxt = [(it, it + 1)]
        for name, h, r in zip(op.attrs["carried"], heads, outs):
            covers: list[tuple[str, Pieces, list[Pieces]]] = []
            for d, cs in h.sums.items():
                for ps in cs:
                    covers.append((d, ps, list(r.sums.get(d, ()))))
            for f in ("maxof", "scale"):
                ch, cr = getattr(h, f), getattr(r, f)
                if ch is not None and ch.dim is not None:
                    covers.append((ch.dim, ch.pieces, [cr.pieces] if cr else []))
            nexts: dict[str, list[Pieces]] = {}
            for d, hp, cands in covers:
                if not any(mentions(e, itn) for p in hp for e in p.exprs):
                    continue
                hn_l: list[Piece] = []
                for p in hp:
                    if p.t is not None and p.count is not None and same(p.count, it):
                        at = [(p.t, it)]  # the union over t < it + 1 is the union over t < it plus t = it
                        hn_l += [p, Piece(subst(p.lo, at), subst(p.hi, at), subst(p.cond, at))]
                    else:
                        hn_l.append(p.map(lambda e: subst(e, nxt)))
                hn = merge_pieces(hn_l)
                nexts.setdefault(d, []).append(hn)
                if any(pieces_equal(hn, c) for c in cands):
                    continue
                moving = [c for c in cands if any(mentions(e, itn) for p in c for e in p.exprs)]
                rp = (moving or cands or [()])[0]
                x, rng = self.some_index(d)

                def describe(w: dict[str, Any], name: str = name, d: str = d, hn: Pieces = hn, rp: Pieces = rp) -> str:
                    return (f"after this iteration '{name}' covers {d} in {_rng(rp)}, but the loop as a whole implies "
                            f"{_rng(hn)} ({d} index {w['x']} differs): the carried value drops or repeats earlier "
                            "iterations")
                self.check("loop-summary", op, (), conj(rng + [member(rp, x) != member(hn, x)]), describe, {"x": x},
                           related=lines(*(p.src for p in rp + hn)))
            for d, hns in nexts.items():  # a cover the body leaves behind the loop's (where(c, acc + s, acc))
                for c in r.sums.get(d, ()):
                    if any(pieces_equal(c, hn) for hn in hns) or not any(mentions(e, itn) for p in c for e in p.exprs):
                        continue
                    x, rng = self.some_index(d)

                    def stale(w: dict[str, Any], name: str = name, d: str = d, c: Pieces = c) -> str:
                        return (f"after this iteration '{name}' may cover {d} in {_rng(c)} only ({d} index {w['x']} "
                                "missing): the iteration's contribution is not always added")
                    differs = z3.Or(*[member(c, x) != member(hn, x) for hn in hns])
                    self.check("loop-summary", op, (), conj(rng + [differs]), stale, {"x": x},
                               related=lines(*(p.src for p in c)))

    def some_index(self, d: str) -> tuple[Expr, list[Expr]]:
        """A fresh index of dimension d and what bounds it: [0, extent) where the extent is known, else >= 0."""
        x = fresh(f"x_{d}")
        ext = self.dim_extent(d)
        return x, [x >= 0] + ([x < ext] if ext is not None else [])

    def check_iterations_disjoint(self, op: Op, d: str, p: Piece, count: Expr, shape: tuple[int, ...] = (),
                                  info: LoopInfo | None = None) -> None:
        """Two iterations t1 < t2 < count of a loop union `p` do not include the same index of d (a reduction counts
        each index once). With the loop's `info`, the counterexample names them by the loop variable's values."""
        assert p.t is not None
        t1, t2, x = fresh("t1"), fresh("t2"), fresh(f"x_{d}")
        p1, p2 = (Piece(subst(p.lo, [(p.t, t)]), subst(p.hi, [(p.t, t)]), subst(p.cond, [(p.t, t)])) for t in (t1, t2))
        body = conj([t1 >= 0, t1 < t2, t2 < count, p1.member(x), p2.member(x)])
        if info is not None:
            watch = {"iv1": subst(info.iv, [(info.it, t1)]), "iv2": subst(info.iv, [(info.it, t2)]), "x": x}

            def describe(w: dict[str, Any]) -> str:
                return (f"iterations {info.var}={w['iv1']} and {info.var}={w['iv2']} both include {d} index "
                        f"{w['x']}: the loop counts it twice")
        else:
            watch = {"t1": t1, "t2": t2, "x": x}

            def describe(w: dict[str, Any]) -> str:
                return (f"iterations {w['t1']} and {w['t2']} of the loop both add {d} index {w['x']} to the element: "
                        "counted twice")
        self.check("reduction-once", op, shape, body, describe, watch, related=p.src)

    def exit_value(self, info: LoopInfo, init: AVal, head: AVal) -> AVal:
        trip = info.trip
        if as_int(trip) == 0:
            return init
        out = head.map(lambda e: subst(e, [(info.it, trip)]))
        out.carried = init.carried
        pos = simp(trip > 0)
        if not z3.is_true(pos):
            out.live = simp(z3.If(pos, out.live, init.live))
            tags: Tags = {}
            for n, alts in out.tags.items():
                ia = init.tags.get(n, ())
                if len(ia) == len(alts) and all(same(a.expr, b.expr) for a, b in zip(ia, alts)):
                    tags[n] = alts
                else:
                    tags[n] = tuple(Tag(t.expr, conj([pos, t.when]), t.src) for t in alts)
            out.tags = tags
        if head.val is not None and any(n.startswith("hv#") for n in _names(head.val)):
            out.val = self.havoc(head.kind)
        return out

    # ---- pipelining ------------------------------------------------------------------------------------------
    def check_staging(self, op: Op, info: LoopInfo) -> None:
        if self.staging is None or self.muted:
            return
        body = op.blocks[0]
        for ld in body.ops:
            if ld.kind != "load" or ld.ghost or not ld.result.is_tile:
                continue
            st = self.staging(self.policy, op, ld)
            if st is None:
                continue
            reader = _first_user(body, ld.result)
            it, j = info.it, fresh("j")
            ahead = it + st.distance
            body_f = conj([ahead < info.trip, j >= 0, j < info.trip, j >= it - st.readers, j < ahead,
                           ahead % st.buffers == j % st.buffers])
            ivj, iva = subst(info.iv, [(it, j)]), subst(info.iv, [(it, ahead)])

            def describe(w: dict[str, Any], st: Staging = st, ld: Op = ld, reader: Op | None = reader) -> str:
                who = f"the {reader.kind} at line {reader.line}" if reader is not None else "its reader"
                return (f"the load at line {ld.line}, issued {st.distance} iteration(s) ahead for "
                        f"{info.var}={w['ahead']}, overwrites ring buffer {w['slot']} of {st.buffers} while the "
                        f"tile of {info.var}={w['j']} in it may still be read by {who}")
            self.check("pipeline-stage", ld, (), body_f, describe,
                       {"ahead": iva, "j": ivj, "slot": j % st.buffers},
                       related=lines((op.line,), (reader.line,) if reader is not None else ()))


_ids = iter(range(1, 1 << 62))


PADDING_TAG = "padding.lanes"  # the tag padding_lanes attaches: 1 on the lanes it names


def padding(v: AVal) -> Expr:
    """Where v's elements were named padding (padding_lanes): by every operand that carries the name."""
    alts = v.tags.get(PADDING_TAG, ())
    return conj([z3.And(t.when, t.expr != 0) for t in alts]) if alts else FALSE


def _moving(x: AVal, acc: AVal) -> list[Expr]:
    """The conjuncts of term x's `live` that move with a loop carrying the accumulator acc (a lane mask
    `(rm < 2 + k)[:, None]`): what moving_lanes and moving_max gate x's covers with."""
    return [c for c in conjuncts(x.live) if mentions(c, acc.carried)]


def _gated(p: Piece, moving: list[Expr], carried: frozenset[str]) -> Piece:
    """p with the conjuncts of `moving` (a term's `live`, moving with a loop in `carried`) that move with a loop p
    itself moves with added to its condition (Interpreter.moving_lanes)."""
    loops = carried & {n for e in p.exprs for n in free_vars(e)}
    have = conjuncts(simp(p.cond))
    return replace(p, cond=conj([p.cond] + [c for c in moving if free_vars(c) & loops and not _among(c, have)]))


def _among(e: Expr, es: list[Expr]) -> bool:
    """Whether e is one of es, structurally (z3 terms compared by `same`, not by ids of temporaries that z3 may
    free and reuse)."""
    return any(same(e, c) for c in es)


def _names(e: Expr) -> frozenset[str]:
    return free_vars(e)


def pretty(e: Expr) -> str:
    """A term as a person would write it: variable names without the checker's prefixes and ids."""
    text = " ".join(str(simp(e)).split())
    text = re.sub(r"\b(?:pid|it|crd|param|carried|uf):", "", text)
    return re.sub(r"#\d+", "", text)


def _from(t: Tag) -> str:
    """Where a tag comes from, for a message: " (line L)", the line of the load (or tag) that made it."""
    return f" (line {t.src[0]})" if t.src else ""


def _rng(ps: Pieces) -> str:
    if not ps:
        return "nothing"
    parts = []
    for p in ps:
        s = f"[{pretty(p.lo)}, {pretty(p.hi)})"
        if p.t is not None and p.count is not None:
            s = f"the union over t < {pretty(p.count)} of {s}"
            if any(mentions(c, p.t.decl().name()) and not mentions(c, "_x") for c in conjuncts(p.cond)):
                s += " in the iterations t whose mask was on at this element"  # a lane mask that moves (moving_lanes)
        parts.append(s)
    return " and ".join(parts)


def _tag_of_ops(v: Value) -> list[Op]:
    out: list[Op] = []
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        op = x.owner
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        if op.kind == "tag_of":
            out.append(op)
            continue
        stack.extend(op.args)
    return list(reversed(out))


def _named_inputs(v: Value) -> list[Value]:
    """Named, non-constant kernel values a ghost expression reads directly."""
    out: list[Value] = []
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        op = x.owner
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        if not op.ghost:
            if x.hint and op.kind not in ("const", "constexpr", "shape") and x not in out:
                out.append(x)
            continue
        if op.kind != "tag_of":
            stack.extend(op.args)
    return out


def _first_user(block: Block, v: Value) -> Op | None:
    derived = {v.id}
    for op in walk_block(block):
        if any(a.id in derived for a in op.args):
            if op.kind in ("cast", "trans", "expand", "broadcast_to", "reshape"):
                derived.update(r.id for r in op.results)
                continue
            return op
    return None


__all__ = ["Interpreter", "CheckerError", "Staging", "StagingHook", "default_staging"]
