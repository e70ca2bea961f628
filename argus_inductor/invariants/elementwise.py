"""The rules of constants, program ids, element-wise ops (the covers and online-softmax algebra through +, -, *, /,
maximum), selects, casts and shape changes.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import z3

from ..dsl.ir import Op
from ..dsl.lang import ACTIVATION_KINDS
from . import fills
from .base import CMP, InterpreterBase, kind_of
from .tags import (
    TRUE,
    AVal,
    Cov,
    Expr,
    Piece,
    Sums,
    Tag,
    Tags,
    as_int,
    ax,
    broadcast,
    conj,
    covers_union,
    done_key,
    each_key,
    expand,
    fresh,
    gated,
    is_pending,
    is_product,
    lines,
    mentions,
    mentions_prefix,
    merge_tags,
    moving_conjuncts,
    pieces_equal,
    reduced_dim,
    reshape,
    same,
    simp,
    subst,
    sums_union,
    to_bool,
    to_int,
    transpose,
)

# the element-wise ops a loop accumulates with, and the identity a term must hold where its mask is off
ACCUMULATES = {"add": fills.ZERO, "sub": fills.ZERO, "max": fills.NEGINF, "min": fills.POSINF, "mul": fills.ONE}


class Elementwise(InterpreterBase):
    def op_const(self, op: Op) -> None:
        v = op.attrs["value"]
        if isinstance(v, bool):
            self.put(op.result, AVal((), "bool", z3.BoolVal(v)))
        elif isinstance(v, int):
            self.put(op.result, AVal((), "int", z3.IntVal(v)))
        else:
            self.put(op.result, AVal((), "float", fconst=float(v), zero=(v == 0), cls=fills.const(float(v))))

    def op_constexpr(self, op: Op) -> None:
        v = self.consts[op.attrs["name"]]
        self.put(op.result, AVal((), "int", z3.IntVal(int(v))))

    def op_shape(self, op: Op) -> None:
        self.put(op.result, AVal((), "int", self.shapes[op.attrs["name"]]))

    def op_param(self, op: Op) -> None:
        k = kind_of(op.result.dtype)
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
        v, k = op.attrs["value"], kind_of(op.attrs["dtype"])
        if k == "bool":
            self.put(op.result, AVal(shape, k, z3.BoolVal(bool(v))))
        elif k == "int":
            self.put(op.result, AVal(shape, k, z3.IntVal(int(v))))
        else:
            v = float(v)
            self.put(op.result, AVal(shape, k, fconst=v, zero=(v == 0),
                                     maxof=Cov(None) if v == -math.inf else None, cls=fills.const(v)))

    # ---- elementwise ---------------------------------------------------------------------------------
    def op_binary(self, op: Op) -> None:
        o = op.attrs["op"]
        shape = self.shape_of(op.result)
        a, b = broadcast(self.get(op.args[0]), shape), broadcast(self.get(op.args[1]), shape)
        kind = kind_of(op.result.dtype)
        res = AVal(shape, kind, self.int_binary(o, a, b, kind), conj([a.live, b.live]),
                   merge_tags(a.tags, b.tags, both=kind == "float" and o == "mul"))
        if kind == "float" or o in ("add", "sub", "mul", "truediv", "max", "min"):
            self.float_binary(op, o, a, b, res)
        if kind == "float":  # an integer operand (a constexpr flag times 1.0) keeps its 0s and 1s
            ca, cb = (x.cls if x.kind == "float" else fills.of_int(x.val) for x in (a, b))
            res.cls = fills.binary(o, ca, cb) if o in fills.BINARY else fills.ANY
            if o in ACCUMULATES:
                self.check_accumulated_fill(op, o, a, b, ca, cb, shape)
        self.put(op.result, res)

    def check_accumulated_fill(self, op: Op, o: str, a: AVal, b: AVal, ca: fills.Classes | None,
                               cb: fills.Classes | None, shape: tuple[int, ...]) -> None:
        """A loop's running sum, max, min or product (`acc = maximum(acc, v)`, a pooling window's taps one per
        iteration) takes only its identity from a term that reads no input element at this iteration: the term's tags
        that move with the loop (its index along the accumulated dimension) are defined nowhere there (a masked
        load's lane, a where's other side). There the term must be 0 for a sum, -inf for a max, +inf for a min, 1
        for a product. Elements whose term reads no input at any iteration (padding rows) are left to the stores."""
        want = ACCUMULATES[o]
        if op.result.id not in self.yielded:  # not the loop's next accumulator (a prefix plus its carry, stored)
            return
        for acc, x, cx in ((a, b, cb), (b, a, ca)):
            if not acc.carried or x.carried or (o == "sub" and x is a):
                continue
            wrong = fills.bad(cx, want)
            moving = [t for alts in x.tags.values() for t in alts if mentions(t.expr, acc.carried)]
            loops = [lp for lp in self.loops if lp.it.decl().name() in acc.carried]
            if not moving or not loops or z3.is_false(wrong):
                continue
            counted = simp(z3.Or(*[t.when for t in moving]))
            other = [(lp.it, fresh("it")) for lp in loops]
            somewhere = conj([conj([v >= 0, v < lp.trip]) for lp, (_, v) in zip(loops, other)] +
                             [subst(counted, other)])
            watch = {f"cls:{c}": e for c, e in cx or fills.DATA if c != want}
            what = {"add": "sum", "sub": "sum", "max": "max", "min": "min", "mul": "product"}[o]

            def describe(w: dict[str, Any], what: str = what) -> str:
                held = [fills.SHOWN[c] for c in fills.ORDER if w.get(f"cls:{c}") is True] or ["another value"]
                fix = f"other={fills.LITERAL[want]}" if want in fills.LITERAL else "the identity"
                return (f"the loop's running {what} takes in a term that reads no input element at this iteration "
                        f"(masked, or outside the range), holding {held[0]}; a running {what} needs "
                        f"{fills.SHOWN[want]} there (give the masked load {fix}, or a where that puts "
                        f"{fills.SHOWN[want]} on those lanes)")
            self.check("reduction-fill", op, shape, conj([somewhere, z3.Not(counted), wrong]), describe, watch,
                       related=lines(*(t.src for t in moving)))

    def int_binary(self, o: str, a: AVal, b: AVal, kind: str) -> Expr | None:
        if a.val is None or b.val is None:
            return None
        x, y = a.val, b.val
        if o in ("and", "or", "xor") and z3.is_bool(x) and z3.is_bool(y):
            return simp({"and": z3.And, "or": z3.Or, "xor": z3.Xor}[o](x, y))
        if o in ("eq", "ne") and z3.is_bool(x) and z3.is_bool(y):
            return simp(x == y if o == "eq" else x != y)
        x, y = to_int(x), to_int(y)
        if o in CMP:
            return simp(CMP[o](x, y))
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
        moving = moving_conjuncts(x, acc)
        if not moving or not x.sums:
            return x
        sums = {d: cs if d.startswith("lost(") else tuple(tuple(gated(p, moving, acc.carried) for p in ps)
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
        moving = moving_conjuncts(x, acc)
        if not moving:
            return x.maxof
        return replace(x.maxof, pieces=tuple(gated(p, moving, acc.carried) for p in x.maxof.pieces))

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
        kind = kind_of(op.result.dtype)
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
        if kind == "float":
            res.cls = fills.unary(self.activation_name(op) if o == "activation" else o, x.cls)
        self.put(op.result, res)

    def activation_name(self, op: Op) -> str:
        """The function an `activation(x, kind)` applies under this policy (none, relu, gelu, silu, gelu_tanh)."""
        k = op.attrs["kind"]
        code = int(self.consts[k]) if isinstance(k, str) else int(k)
        return ACTIVATION_KINDS[code] if 0 <= code < len(ACTIVATION_KINDS) else "?"

    def op_where(self, op: Op) -> None:
        shape = self.shape_of(op.result)
        c, a, b = (broadcast(self.get(v), shape) for v in op.args)
        cv = to_bool(c.val) if c.val is not None else self.havoc("bool")
        res = self.select(cv, a, b, shape, kind_of(op.result.dtype), c.live)
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
        if kind == "float":
            res.cls = fills.select(cv, a.cls or fills.DATA, b.cls or fills.DATA)
        return res

    def op_cast(self, op: Op) -> None:
        x = self.get(op.args[0])
        kind = kind_of(op.attrs["dtype"])
        res = replace(x, kind=kind)
        if kind == "float":  # bits read as a float may be anything; an integer converted keeps its 0s and 1s
            res.cls = fills.ANY if op.attrs.get("bitcast") else x.cls if x.kind == "float" else fills.of_int(x.val)
        else:
            res.cls = None
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
