"""The rules of loads, stores and atomic adds: addresses and their masks, scalar bounds, store coordinates, and a
stored reduction's completeness.
"""
from __future__ import annotations

from typing import Any

import z3

from ..dsl.ir import Op, TensorParam
from . import fills
from .base import InterpreterBase, bits_of, kind_of
from .describe import rng_text
from .obligations import Access, required
from .tags import (
    TRUE,
    XV,
    AVal,
    Expr,
    Pieces,
    Tag,
    Tags,
    as_int,
    ax,
    broadcast,
    conj,
    conjuncts,
    free_vars,
    fresh,
    is_empty_piece,
    is_pending,
    is_product,
    lines,
    member,
    mentions,
    mentions_prefix,
    merge_tags,
    padding,
    reduced_dim,
    remap_axes,
    same,
    simp,
    to_bool,
)


class Memory(InterpreterBase):
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
        kind = kind_of(op.result.dtype)
        val = None
        if kind in ("int", "bool"):
            other = op.attrs.get("other", 0)
            u = self.uf(t.name)(*addr)
            val = simp(z3.If(live, u, z3.IntVal(int(other)))) if kind == "int" else simp(z3.And(live, u != 0))
        # a float lane past the mask holds the load's `other` (0 unless given): its value class, for the reductions
        cls = fills.select(live, fills.DATA, fills.const(float(op.attrs.get("other", 0)))) if kind == "float" else None
        self.put(op.result, AVal(shape, kind, val, live, tags, cls=cls))

    def write(self, op: Op, kind: str) -> None:
        nidx = op.attrs["nidx"]
        t, idx, shape = self.view(op, nidx)
        um = self.get(op.args[nidx + 1]) if op.attrs["has_mask"] else None
        addr, masks, _, umask = self.address(op, t, idx, shape, um)
        value = broadcast(self.get(op.args[nidx]), shape)
        active = conj(masks + [umask])
        self.scalar_bounds(op, t, idx, addr, active, shape)
        bits = bits_of(op.args[nidx].dtype)
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
        # a lane the kernel named padding may be left an empty sum (no live term), never a partial one
        owed = conj([active, z3.Not(z3.And(padding(value), z3.Not(value.live)))])
        for rs in self.reads:  # the op's read sets: what each element must read (what completeness leaves open)
            if rs.output == t.name:
                self.check_read_set(op, rs, t, value, addr, active, owed, shape, bits, kind)
        if kind == "store":
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
            geometry = conj([c for c in parts if not any(n.startswith(("uf:", "hv#")) for n in free_vars(c))])
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
                    for n in free_vars(e) if n.startswith(("pid:", "it:"))}
            where = {n for e in addr for n in free_vars(e) if n.startswith(("pid:", "it:"))}
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
                    else rng_text((p,)) for i, p in enumerate(ps)]
            dn = reduced_dim(d)
            what = f"{op.kind} writes a value whose {'product' if is_product(d) else 'reduction'} over {dn}"
            if ps and all(is_empty_piece(p) for p in ps):
                loops = ", ".join(str(x) for p in ps for x in p.src)
                return (f"{what} covered nothing ({dn} index {w['x']} of [0, {w['ext']}) left out): the loop at line "
                        f"{loops} that adds its terms runs zero times at these shapes, so the reduction is empty, "
                        "not complete")
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
