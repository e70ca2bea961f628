"""The read-set obligations of a store: the stored value's input tags and reductions against its op's read set
(readsets.ReadSet), with counterexamples in the checker's usual form (program, iteration, element, thread, line)
naming the input coordinate read or missed."""
from __future__ import annotations

from typing import Any

import z3

from ..dsl.ir import Op, TensorParam
from .base import CheckerError, InterpreterBase
from .exprs import boolean
from .obligations import required
from .readsets import ReadSet, SpecError, alternatives, evaluate, names_in
from .tags import AVal, Expr, Pieces, conj, fresh, is_pending, lines, member, reduced_dim


class ReadChecks(InterpreterBase):
    def check_read_set(self, op: Op, rs: ReadSet, t: TensorParam, value: AVal, addr: list[Expr], active: Expr,
                       owed: Expr, shape: tuple[int, ...], bits: int, kind: str) -> None:
        """Prove the facts and (for a store) the reductions of `rs` at this write."""
        if len(set(t.dims)) != len(t.dims):
            raise CheckerError(f"the read set of {rs.op or 'the op'} names output {t.name}, whose dimensions repeat "
                               f"({', '.join(t.dims)}): its coordinates have no names", op.line)
        coords = {d.lower(): a for d, a in zip(t.dims, addr)}
        for fact in rs.facts:
            self.read_fact(op, rs, fact, t, value, coords, active, shape, bits)
        if kind == "store":
            self.read_reductions(op, rs, t, value, coords, owed, shape, bits)

    def spec_env(self, rs: ReadSet, text: str, coords: dict[str, Expr], extra: dict[str, Expr] | None = None
                 ) -> tuple[Any, Any]:
        def name(n: str) -> Any:
            if extra and n in extra:
                return extra[n]
            if n in coords:
                return coords[n]
            if n in self.shapes:
                return self.shapes[n]
            if n in self.consts and isinstance(self.consts[n], (int, bool)):
                return z3.IntVal(int(self.consts[n]))
            raise SpecError(f"`{text}` names '{n}', which is no coordinate of the output ({', '.join(coords)}), "
                            "shape symbol or integer constexpr of this kernel")

        def element(tensor: str, idx: list[Expr]) -> Expr:
            if tensor not in self.tensors or self.tensors[tensor].dtype_kind != "int" or \
                    len(idx) != len(self.tensors[tensor].dims):
                raise SpecError(f"`{text}` reads {tensor}[...]: not an integer tensor of this kernel with "
                                f"{len(idx)} dimension(s)")
            return self.uf(tensor)(*idx)
        return name, element

    def read_fact(self, op: Op, rs: ReadSet, fact: str, t: TensorParam, value: AVal, coords: dict[str, Expr],
                  active: Expr, shape: tuple[int, ...], bits: int) -> None:
        try:
            wanted, _ = names_in(fact)
        except SpecError as e:
            raise CheckerError(f"the read set of {rs.op or 'the op'}: {e}", op.line) from None
        missing = sorted(n for n in wanted if not value.tags.get(n))
        if missing:
            self.unfollowed.append(f"line {op.line}: {rs.op or 'the op'} reads `{fact}`, but the value stored into "
                                   f"{t.name} carries no tag {', '.join(missing)}: the checker cannot tell which "
                                   "element of it was read")
            return
        name, element = self.spec_env(rs, fact, coords)
        for choice in alternatives(value.tags, sorted(wanted)):
            try:
                pred = boolean(evaluate(fact, name, lambda n, choice=choice: choice[n].expr, element))
            except SpecError as e:
                raise CheckerError(f"the read set of {rs.op or 'the op'}: {e}", op.line) from None
            when = conj([tg.when for tg in choice.values()])
            watch = {n: tg.expr for n, tg in choice.items()}
            watch.update({f"@{c}": e for c, e in coords.items()})

            def describe(w: dict[str, Any], fact: str = fact) -> str:
                at = ", ".join(str(w[f"@{c}"]) for c in coords)
                got = ", ".join(f"{n} = {w[n]}" for n in sorted(wanted))
                return (f"{t.name}[{at}] reads {got}, but {rs.op or 'the op'} reads `{fact}` there: the element is "
                        "computed from the wrong input element")
            self.check("read-set", op, shape, conj([active, when, z3.Not(pred)]), describe, watch, bits,
                       lines(*(tg.src for tg in choice.values())))

    def stored_reductions(self, t: TensorParam, value: AVal) -> list[tuple[str, Pieces]]:
        """(dimension, cover) of every reduction a stored value carries that a read set speaks about."""
        out = []
        for key, cs in value.sums.items():
            if key.startswith("lost("):
                continue
            if is_pending(key) and not self.accumulated_reduction(key, cs, t):
                continue
            out += [(reduced_dim(key), ps) for ps in cs]
        if value.maxof is not None and value.maxof.dim:
            out.append((value.maxof.dim, value.maxof.pieces))
        return [(d, ps) for d, ps in out if self.dim_extent(d) is not None]

    def read_reductions(self, op: Op, rs: ReadSet, t: TensorParam, value: AVal, coords: dict[str, Expr], owed: Expr,
                        shape: tuple[int, ...], bits: int) -> None:
        spec = rs.reduced
        found = self.stored_reductions(t, value)
        what = rs.op or "the op"
        where = ", ".join(f"{{@{c}}}" for c in coords)
        for d, ps in found:
            ext = self.dim_extent(d)
            assert ext is not None
            x = fresh(f"x_{d}")
            watch: dict[str, Expr] = {"x": x, "in": conj([value.live, member(ps, x)])}
            watch.update({f"@{c}": e for c, e in coords.items()})
            if d not in spec:
                def extra(w: dict[str, Any], d: str = d) -> str:
                    at = where.format(**w)
                    return (f"{t.name}[{at}] sums (or takes the max) over {d}, index {w['x']} among them, but {what} "
                            f"reduces over {', '.join(spec) or 'nothing'}: a reduction over the wrong axis")
                self.check("read-set", op, shape, conj([owed, x >= 0, x < ext, value.live, member(ps, x)]), extra,
                           watch, bits, lines(*(p.src for p in ps)))
                continue
            pred = self.spec_predicate(op, rs, d, spec[d], coords, x)

            def describe(w: dict[str, Any], d: str = d, text: str = spec[d]) -> str:
                at = where.format(**w)
                rule = f"`{text}`" if text else f"all of [0, {d})"
                if w["in"] is True:
                    return (f"{t.name}[{at}]'s reduction over {d} includes {d} index {w['x']}, which {what} does not "
                            f"read there (it reads {rule})")
                return (f"{t.name}[{at}]'s reduction over {d} never includes {d} index {w['x']}, which {what} "
                        f"reads there (it reads {rule})")
            inside = conj([value.live, member(ps, x)])
            # an index the kernel's own masks require is the completeness obligation's (check_complete): here the
            # indices read that the op does not, and those the op reads that the kernel's masks leave out
            wrong = z3.Or(z3.And(inside, z3.Not(pred)), z3.And(pred, z3.Not(inside), z3.Not(required(ps, x))))
            self.check("read-set", op, shape, conj([owed, x >= 0, x < ext, wrong]), describe, watch,
                       bits, lines(*(p.src for p in ps)))
        have = {d for d, _ in found}
        for d, text in spec.items():
            ext = self.dim_extent(d)
            if d in have or ext is None:
                continue
            x = fresh(f"x_{d}")
            pred = self.spec_predicate(op, rs, d, text, coords, x)
            watch = {"x": x, **{f"@{c}": e for c, e in coords.items()}}

            def absent(w: dict[str, Any], d: str = d) -> str:
                at = where.format(**w)
                return (f"{t.name}[{at}] takes no reduction over {d} at all, but {what} reads {d} index {w['x']} "
                        "there (and the rest of its range)")
            self.check("read-set", op, shape, conj([owed, x >= 0, x < ext, pred]), absent, watch, bits)

    def spec_predicate(self, op: Op, rs: ReadSet, d: str, text: str, coords: dict[str, Expr], x: Expr) -> Expr:
        if not text:
            return z3.BoolVal(True)
        name, element = self.spec_env(rs, text, coords, {d.lower(): x})
        try:
            return boolean(evaluate(text, name, lambda n: self.no_tag(rs, text, n), element))
        except SpecError as e:
            raise CheckerError(f"the read set of {rs.op or 'the op'}: {e}", op.line) from None

    def no_tag(self, rs: ReadSet, text: str, n: str) -> Expr:
        raise SpecError(f"`{text}`: a reduction's range is stated over coordinates and shapes, not tags ({n})")


__all__ = ["ReadChecks"]
