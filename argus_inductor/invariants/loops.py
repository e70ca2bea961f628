"""The rules of control flow: ifs, static unrolling, and range loops summarised by induction (the carried values
generalised to iteration `it`, the induction step checked), with the pipelined-load staging check.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import z3

from ..dsl.ir import Op
from . import fills
from .base import InterpreterBase, next_id
from .describe import rng_text
from .obligations import LoopInfo
from .staging import Staging, first_user
from .tags import (
    TRUE,
    AVal,
    Cov,
    Expr,
    Piece,
    Pieces,
    Sums,
    Tag,
    Tags,
    as_int,
    conj,
    conjuncts,
    covers_union,
    each_key,
    empty_piece,
    end_to_end,
    free_vars,
    fresh,
    is_pending,
    lines,
    lost_key,
    member,
    mentions,
    merge_pieces,
    pieces_equal,
    reduced_dim,
    same,
    simp,
    subst,
    sums_union,
    to_bool,
)

# How many iterations of (nested) static_range loops the checker unrolls; a longer one is read as a range loop
STATIC_UNROLL_LIMIT = 1024


class Loops(InterpreterBase):
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
                all(as_int(v) is not None for v in (start, stop, step)) and as_int(step) != 0:
            values = range(as_int(start), as_int(stop), as_int(step))
            if self.unrolled * len(values) <= STATIC_UNROLL_LIMIT:
                self.unroll(op, values, inits)
                return
            # an unrolling this long (or this deep inside other unrolled loops) would stall the checker: the loop is
            # read as a range loop instead, one symbolic iteration for all (as unrolled_range is), which is sound
            self.notes.append(f"line {op.line}: static_range of {len(values)} iterations is checked as a range loop "
                              f"(one symbolic iteration for all), not unrolled: the checker unrolls at most "
                              f"{STATIC_UNROLL_LIMIT} iterations of nested static loops")
        var = op.attrs.get("var", "i")
        it = z3.Int(f"it:{var}@{op.line}#{next_id()}")
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
            heads = [self.monotone_bound(info, op, i, h, init, r)
                     for i, (h, init, r) in enumerate(zip(heads, inits, r1))]
        mark = self.snapshot()
        for attempt in range(3):
            r3 = self.loop_body(op, info, heads)
            wider = self.class_fixpoint(info, heads, r3, everything=attempt == 1) if attempt < 2 else None
            if wider is None:
                break
            self.restore(mark)  # the obligations of this pass rested on classes that were not inductive: again
            heads = wider
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
        self.unrolled *= max(1, len(values))
        try:
            for v in values:
                self.put(body.args[0], AVal((), "int", z3.IntVal(v)))
                for a, h in zip(body.args[1:], cur):
                    self.put(a, h)
                self.block(body)
                cur = [self.get(y) for y in body.yields]
        finally:
            self.unrolled //= max(1, len(values))
        for r, c in zip(op.results, cur):
            self.put(r, c)

    def loop_body(self, op: Op, info: LoopInfo, heads: list[AVal]) -> list[AVal]:
        body = op.blocks[0]
        self.put(body.args[0], AVal((), "int", info.iv))
        for a, h in zip(body.args[1:], heads):
            self.put(a, h)
        self.loops.append(info)
        self.ctx.append(info.domain)
        outer = self.yielded
        self.yielded = outer | {y.id for y in body.yields}
        try:
            self.block(body)
        finally:
            self.ctx.pop()
            self.loops.pop()
            self.yielded = outer
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
                h.cls = fills.join(i.cls or fills.DATA, self.across_iterations(info, r.cls))
        return heads

    def across_iterations(self, info: LoopInfo, cls: fills.Classes | None) -> fills.Classes:
        """A carried value's classes at one iteration with what moves with the loop (its counter, the values the body
        made afresh) over-approximated away: the classes it may take at any iteration."""
        names = {n for _, e in cls or () for n in free_vars(e)
                 if n == info.it.decl().name() or n.startswith(("hv#", "t#", "carried:"))}
        return fills.widen(cls, names) or fills.DATA

    def monotone_bound(self, info: LoopInfo, op: Op, i: int, head: AVal, init: AVal, r1: AVal) -> AVal:
        """A running maximum (`m = maximum(m, x)`) is -inf at iteration it only if it was -inf before the loop and after
        its first iteration (a max never falls): the head's -inf kept to that, instead of anywhere (a causal row whose
        later key blocks are all masked still has the first block's max: no -inf - -inf there). A running minimum,
        +inf alike."""
        body = op.blocks[0]
        y = body.yields[i].owner if i < len(body.yields) else None
        if head.kind != "float" or y is None or y.kind != "binary" or y.attrs["op"] not in ("max", "min") or \
                not any(a.id == body.args[i + 1].id for a in y.args):
            return head
        c = fills.NEGINF if y.attrs["op"] == "max" else fills.POSINF
        it, zero = info.it, z3.IntVal(0)
        first = dict(r1.cls or fills.DATA).get(c, z3.BoolVal(False))
        before = dict(init.cls or fills.DATA).get(c, z3.BoolVal(False))
        if z3.is_false(before) and z3.is_false(first):
            return head
        bound = simp(z3.Or(z3.And(it == 0, before), z3.And(it >= 1, subst(first, [(it, zero)]))))
        cls = [(k, bound if k == c else e) for k, e in head.cls or fills.DATA]
        return replace(head, cls=fills.normal(cls))

    def class_fixpoint(self, info: LoopInfo, heads: list[AVal], outs: list[AVal], everything: bool = False
                       ) -> list[AVal] | None:
        """The heads with the classes an iteration's result may take beyond what the head allowed made possible anywhere
        (the guess from one iteration was not inductive: `acc = acc + 1.0` from 0 gives 1, then a finite value); None
        when every head holds: the head at it + 1 allows what iteration it leaves. `everything`: a head that still
        grows (after one widening) may be anything, which holds whatever an iteration does."""
        grown = []
        changed = False
        given = conj([info.it >= 0, info.it < info.trip])
        for h, o in zip(heads, outs):
            if h.kind != "float":
                grown.append(h)
                continue
            nxt = dict(fills.map_classes(h.cls, lambda e: subst(e, [(info.it, info.it + 1)])) or fills.DATA)
            extra = [c for c, e in o.cls or fills.DATA if not fills.included(((c, e),), ((c, nxt[c]),) if c in nxt
                                                                              else (), given)]
            if not extra:
                grown.append(h)
                continue
            changed = True
            grown.append(replace(h, cls=fills.ANY if everything else
                                 fills.normal([*(h.cls or fills.DATA), *((c, TRUE) for c in extra)])))
        return grown if changed else None

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
                    return (f"after this iteration '{name}' covers {d} in {rng_text(rp)}, but the loop as a whole "
                            f"implies {rng_text(hn)} ({d} index {w['x']} differs): the carried value drops or repeats "
                            "earlier iterations")
                self.check("loop-summary", op, (), conj(rng + [member(rp, x) != member(hn, x)]), describe, {"x": x},
                           related=lines(*(p.src for p in rp + hn)))
            for d, hns in nexts.items():  # a cover the body leaves behind the loop's (where(c, acc + s, acc))
                for c in r.sums.get(d, ()):
                    if any(pieces_equal(c, hn) for hn in hns) or not any(mentions(e, itn) for p in c for e in p.exprs):
                        continue
                    x, rng = self.some_index(d)

                    def stale(w: dict[str, Any], name: str = name, d: str = d, c: Pieces = c) -> str:
                        return (f"after this iteration '{name}' may cover {d} in {rng_text(c)} only ({d} index "
                                f"{w['x']} missing): the iteration's contribution is not always added")
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
            return self.never_ran(info, init, head)
        out = head.map(lambda e: subst(e, [(info.it, trip)]))
        out.carried = init.carried
        pos = simp(trip > 0)
        if not z3.is_true(pos):
            out.live = simp(z3.If(pos, out.live, init.live))
            if out.kind == "float":
                out.cls = fills.select(pos, out.cls or fills.DATA, init.cls or fills.DATA)
            tags: Tags = {}
            for n, alts in out.tags.items():
                ia = init.tags.get(n, ())
                if len(ia) == len(alts) and all(same(a.expr, b.expr) for a, b in zip(ia, alts)):
                    tags[n] = alts
                else:
                    tags[n] = tuple(Tag(t.expr, conj([pos, t.when]), t.src) for t in alts)
            out.tags = tags
        if head.val is not None and any(n.startswith("hv#") for n in free_vars(head.val)):
            out.val = self.havoc(head.kind)
        return out

    def never_ran(self, info: LoopInfo, init: AVal, head: AVal) -> AVal:
        """What a loop that runs zero times (at these shapes) leaves in a carried value: its initial value, plus an
        empty cover of each reduction the loop would have added to it (`range(0, K - BK, BK)` at K = BK, or
        `range(0, 0, BK)`), so that a store of it reports a reduction that covered nothing instead of none at all. A
        later loop that does add the terms (attention's diagonal loop after an empty block loop) joins them to the
        empty cover as to any partial sum."""
        itn = info.it.decl().name()

        def grows(ps: Pieces) -> bool:  # a cover the loop extends each iteration (not each term's own reduction)
            return any(mentions(e, itn) for p in ps for e in p.exprs)
        gained: Sums = {}
        for d, cs in head.sums.items():
            if not d.startswith(("done(", "each(", "lost(")) and any(grows(ps) for ps in cs) and \
                    len(cs) > len(init.sums.get(d, ())):  # not a partial sum the value held before the loop
                gained[d] = ((empty_piece(info.line),),)
        maxof = init.maxof
        if head.maxof is not None and head.maxof.dim is not None and grows(head.maxof.pieces) and \
                (init.maxof is None or init.maxof.dim is None):
            maxof = Cov(head.maxof.dim, (empty_piece(info.line),), (info.line,))
        if not gained and maxof is init.maxof:
            return init
        self.notes.append(f"line {info.line}: the loop runs zero times at these shapes; the reductions it would add "
                          "cover nothing")
        return replace(init, sums=sums_union(init.sums, gained), maxof=maxof, zero=False)

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
            reader = first_user(body, ld.result)
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
