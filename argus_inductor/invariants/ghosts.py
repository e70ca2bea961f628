"""The rules of the checker-only statements: tags, tag_of, assert_tag, assume, padding_lanes and zero_terms."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import z3

from ..dsl.ir import Op, Value
from . import fills
from .assumptions import parse_assumption
from .base import CheckerError, InterpreterBase, kind_of
from .describe import rng_text
from .tags import (
    PADDING_TAG,
    TRUE,
    AVal,
    Pieces,
    Tag,
    among,
    ax,
    broadcast,
    conj,
    conjuncts,
    cover_key,
    each_key,
    free_vars,
    fresh,
    lines,
    mentions,
    merge_pieces,
    simp,
    subst,
    to_bool,
    to_int,
)


class Ghosts(InterpreterBase):
    def op_tag(self, op: Op) -> None:
        x = self.get(op.args[0])
        tags = dict(x.tags)
        for name, e in zip(op.attrs["names"], op.args[1:]):
            ev = broadcast(self.get(e), x.shape)
            if ev.val is None:
                raise CheckerError(f"tag '{name}' is not an integer expression the checker can follow: tag with index "
                                   "arithmetic (aranges, program ids, loop variables, shapes, loaded index tensors), "
                                   "not data", op.line)
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
        k = [c for c in live_cs if among(c, named)]
        near = free_vars(cond)  # an auto-mask on other indices (a channel tile past C) stays a plain conjunct
        dropped = [c for c in auto if not among(c, named) and not among(c, mine) and free_vars(c) & near]
        user = [c for c in live_cs if not among(c, named) and not among(c, dropped)]
        if all(among(c, k) for c in named):
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
            if not covers:
                have = ", ".join(sorted(x.sums)) or "none"
                raise CheckerError(f"tag_of({what}, {name!r}): {what} holds no {kind} over {d} here (its reductions: "
                                   f"{have}); read the bound of a value that reduces over {d}", op.line)
            ps = self.outermost(op, what, name, d, covers)
        else:
            c = x.maxof if kind == "max" else x.scale
            if c is None or (c.dim not in (d, None)):
                role = "a running max" if kind == "max" else "normalised to a running max"
                raise CheckerError(f"tag_of({what}, {name!r}): {what} is not {role} over {d}"
                                   f"{f' (its max is over {c.dim})' if c is not None else ''}; read 'sum({d}).lo' of a "
                                   f"sum, or the tag of the value that is", op.line)
            ps = c.pieces
        ps = merge_pieces(ps)
        if not ps:
            return AVal(x.shape, "int", z3.IntVal(0), x.live)
        if len(ps) != 1 or ps[0].t is not None:
            raise CheckerError(f"tag_of({what}, {name!r}): the range is not one contiguous interval ({rng_text(ps)}), "
                               "so it has no single lo and hi: assert on each loop's part before they are joined",
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
            raise CheckerError(f"tag_of({what}, {name!r}): {what} carries no tag '{name}' here (it has: {have}): "
                               f"read one of those, or tag it first (tag({what}, {name}=...))", op.line)
        if len(alts) > 1:
            raise CheckerError(f"tag_of({what}, {name!r}) is ambiguous: its operands disagree on '{name}'; name the "
                               f"origin (e.g. 'T.{name}' for tensor T) or tag it explicitly", op.line)
        self.put(op.result, AVal(x.shape, "int", alts[0].expr, alts[0].when))

    def op_assert_tag(self, op: Op) -> None:
        p = self.get(op.args[0])
        if p.val is None:
            tags = ", ".join(f"tag_of({w.args[0].hint or 'x'}, {w.attrs['name']!r})" for w in _tag_of_ops(op.args[0]))
            raise CheckerError("assert_tag's predicate is not something the checker can evaluate"
                               f"{' (it reads ' + tags + ')' if tags else ''}: it compares data, not tags and "
                               "indices; compare integer tags, indices and shapes, e.g. tag_of(s, 'T') <= tag_of(s, "
                               "'S')", op.line)
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
        if not self.muted:  # an assertion its tags make hold nowhere at all is not a pass: checked after solving
            self.vacuity.append((op, p.shape, conj(self.ctx), p.live))

    def outermost(self, op: Op, what: str, name: str, d: str, covers: tuple[Pieces, ...]) -> Pieces:
        """Of several reductions over d that a value holds (a LayerNorm's variance sum holds its mean's and its own),
        the outermost: the one its latest reduction made (its source lines the last), said in a note."""
        if len(covers) == 1:
            return covers[0]
        last = [max((x for p in ps for x in p.src), default=0) for ps in covers]
        k = max(range(len(covers)), key=lambda i: last[i])
        self.notes.append(f"line {op.line}: tag_of({what}, {name!r}): {what} holds {len(covers)} reductions over {d} "
                          f"(made at lines {', '.join(str(x) for x in sorted(last))}); the outermost, line "
                          f"{last[k]}'s, is read")
        return covers[k]

    def op_assume(self, op: Op) -> None:
        if "text" in op.attrs:  # assume("nondecreasing(cu_seqlens)"): what the host guarantees, for every program
            if not self.muted:
                try:
                    self.assumes.append(parse_assumption(op.attrs["text"], self))
                except ValueError as e:
                    raise CheckerError(f"{e}; write e.g. assume(\"nondecreasing(cu_seqlens)\") or "
                                       "assume(\"cu_seqlens[i] <= cu_seqlens[i + 1]\")", op.line) from None
                self.assume_lines.append(op.line)
            return
        if self.float_sign_facts(op):
            return
        if self.muted:
            return
        p = self.get(op.args[0])
        if p.val is None:
            raise CheckerError("assume's predicate is not something the checker can evaluate (it compares data, "
                               "not indices, shapes or a float parameter with a constant): state facts about indices "
                               "and index tensors, or `assume(p > 0.0)` for a float parameter p", op.line)
        coords = [fresh(f"a{d}") for d in range(p.rank)]
        body = subst(z3.Implies(conj(self.ctx + [p.live]), to_bool(p.val)), [(ax(d), c) for d, c in enumerate(coords)])
        dom = [z3.And(c >= 0, c < n) for c, n in zip(coords, p.shape)]
        qv = [v for v in list(coords) + [lp.it for lp in self.loops] if mentions(body, v.decl().name())]
        # quantified over the elements and loop iterations; program ids stay free, so that the fact is
        # instantiated at the program(s) an obligation talks about (api.instantiate_assumes)
        self.assumes.append(z3.ForAll(qv, z3.Implies(conj(dom), body)) if qv else body)
        self.assume_lines.append(op.line)

    def float_sign_facts(self, op: Op) -> bool:
        """`assume(p > 0.0)` (and conjunctions of such) for a float parameter p: what the host guarantees of its sign
        (a p-norm's p, a softmax scale), so that p times an infinite fill keeps the fill's sign. The parameter's
        value class becomes positive from here on (state it before p's first use). False when the predicate is not of
        that form (then it is read as an assumption over integers)."""
        facts: list[Value] = []

        def read(v: Value) -> bool:
            o = v.owner
            if o is None:
                return False
            if o.kind == "binary" and o.attrs["op"] == "and":
                return all(read(a) for a in o.args)
            if o.kind != "binary" or o.attrs["op"] not in ("gt", "ge", "lt", "le"):
                return False
            a, b = o.args
            cmp = o.attrs["op"]
            if a.owner is not None and a.owner.kind == "const" and b.owner is not None and b.owner.kind == "param":
                a, b, cmp = b, a, {"gt": "lt", "ge": "le", "lt": "gt", "le": "ge"}[cmp]
            if a.owner is None or a.owner.kind != "param" or kind_of(a.dtype) != "float" or \
                    b.owner is None or b.owner.kind != "const":
                return False
            c = float(b.owner.attrs["value"])
            if not ((cmp == "gt" and c >= 0) or (cmp == "ge" and c > 0)):
                raise CheckerError(f"assume on float parameter '{a.owner.attrs['name']}': the checker reads only "
                                   "that it is positive (`p > 0.0`)", op.line)
            facts.append(a)
            return True

        if not read(op.args[0]):
            return False
        for v in facts:
            self.put(v, replace(self.get(v), cls=((fills.POS, TRUE),)))
        return True


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
