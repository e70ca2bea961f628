"""The rules of reductions, scans and mma: which indices each result element covers, checked to be each index once, and
how partial sums join.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from ..dsl.ir import Op
from . import fills
from .base import InterpreterBase, kind_of
from .describe import from_line, rng_text
from .tags import (
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
    conj,
    conjuncts,
    cover_key,
    covers_union,
    end_to_end,
    fresh,
    is_pending,
    is_product,
    is_uniform,
    lines,
    member,
    member_pos,
    mentions,
    merge_pieces,
    merge_tags,
    pieces_equal,
    reduced_dim,
    remap_axes,
    same,
    simp,
    subst,
    sums_union,
    xcond,
)


class Reductions(InterpreterBase):
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
                            f"{w['a']}{from_line(t1)} times {name} index {w['b']}{from_line(t2)}{at}; a product has a "
                            "term at an index only where all its factors are at it")
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
        res = AVal(shape, kind_of(op.result.dtype), None, live, tags, sums_union(sums, each))
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
        if x.kind == "float" and o in fills.IDENTITY:
            self.check_fill(op, o, x2.cls, inner, r, n, shape, related=self.def_lines([op.args[0]]))
            if res.kind == "float":
                res.cls = fills.reduce(o, x2.cls, r, n)
        self.put(op.result, res)

    def check_fill(self, op: Op, o: str, cls: fills.Classes | None, inner: dict[str, Tag], r: Expr, n: int,
                   shape: tuple[int, ...], what: str = "", related: tuple[int, ...] = ()) -> None:
        """A reduction `o` over r in [0, n) takes only its identity (0 for a sum, -inf for a max, ...) on the lanes that
        read no input element: those where no tag of the reduced axis holds (a masked load's lane past the mask, a
        where's other side). `cls` (over r) says what each lane may hold; the counterexample names the element, the
        lane's index along the reduced dimension and the fill it holds. Elements none of whose lanes read an input
        (a padding row) are left to the stores' obligations."""
        want = fills.IDENTITY[o]
        wrong = fills.bad(cls, want)
        if not inner or z3.is_false(wrong):
            return
        counted = z3.Or(*[t.when for t in inner.values()]) if len(inner) > 1 else next(iter(inner.values())).when
        r2 = fresh("_r")
        somewhere = subst(counted, [(r, r2)])
        if o == "max":  # a lane of 0 (or -inf) cannot raise a max whose lanes that read inputs are all positive
            low = z3.Not(fills.bad_outside(cls, (fills.NEGINF, fills.ZERO)))
            high = subst(z3.Not(fills.bad_outside(cls, (*fills.POSITIVE, fills.POSINF))), [(r, r2)])
            wrong = conj([wrong, z3.Not(z3.And(low, high))])
        names = sorted(inner, key=lambda k: ("." in k, k))
        dim = names[0]
        watch: dict[str, Expr] = {"x": inner[dim].expr, "lane": r}
        watch.update({f"cls:{c}": e for c, e in cls or fills.DATA if c != want})
        what = what or f"the {o}"

        def describe(w: dict[str, Any]) -> str:
            held = [fills.SHOWN[c] for c in fills.ORDER if w.get(f"cls:{c}") is True] or ["a value other than that"]
            fix = f"other={fills.LITERAL[want]}" if want in fills.LITERAL else "the identity"
            return (f"{what} over {dim} takes in {dim} index {w['x']} (lane {w['lane']} of the reduced axis), which "
                    f"reads no input element (masked, or outside the range), holding {held[0]}; a {o} needs "
                    f"{fills.SHOWN[want]} there (give the masked load {fix}, or a where that puts "
                    f"{fills.SHOWN[want]} on those lanes)")
        self.check("reduction-fill", op, shape,
                   conj([r >= 0, r < n, r2 >= 0, r2 < n, somewhere, z3.Not(counted), wrong]), describe, watch,
                   related=lines(related, *(t.src for t in inner.values())))

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
        res = AVal(shape, kind_of(op.result.dtype), None, x.live, dict(x.tags), x.sums)
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
        if res.kind == "float":
            res.cls = fills.scan(o, x2.cls, r, n)
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
        # each product's lanes that read no pair of input elements must be 0 (a masked operand's fill)
        products = fills.binary("mul", A2.cls, B2.cls)
        pairs = {}
        for name in inner_names:
            ts = [t for t in (ia.get(name), ib.get(name)) if t is not None]
            pairs[name] = Tag(ts[0].expr, conj([t.when for t in ts]), lines(*(t.src for t in ts)))
        self.check_fill(op, "sum", products, pairs, r, bk, shape, what="the mma's sum of products",
                        related=self.def_lines(op.args[:2]))
        res.cls = fills.reduce("sum", products, r, bk)
        if len(op.args) > 2:
            acc = self.get(op.args[2])
            out = AVal(shape, "float", None, conj([acc.live, res.live]) if not acc.zero else res.live,
                       merge_tags(acc.tags, res.tags) if not acc.zero else res.tags)
            self.additive(op, acc, res, out, sub=False)
            out.cls = fills.binary("add", acc.cls, res.cls)
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
            return text.format(d=d, a=rng_text(a), b=rng_text(b)) + f" ({d} index {w['x']} is in one and not the other)"
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
            return text.format(d=d, a=rng_text(a.pieces), b=rng_text(b.pieces)) + \
                f" ({d} index {w['x']} is in one range and not the other)"
        self.check("softmax-scale", op, shape, conj(rng + [member(a.pieces, x) != member(b.pieces, x)]), describe,
                   {"x": x}, related=lines(a.lines(), b.lines()))
