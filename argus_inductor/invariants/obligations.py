"""Proof obligations: each one a z3 formula whose models are violations.

Per-op obligations (assertions, mma agreement, bounds, ...) are created by the interpreter as it
walks the IR. The kernel-wide ones (every output element written exactly once, split-k partial sums
partitioning the reduction) are built here from the recorded stores, by comparing two *instances*
of the kernel: copies of the program ids, loop counters and element coordinates.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import z3

from ..dsl.ir import Op
from .tags import (
    XV,
    AVal,
    Expr,
    Piece,
    Pieces,
    ax,
    conj,
    conjuncts,
    free_vars,
    is_pending,
    member,
    member_pos,
    mentions,
    presolved,
    simp,
    subst,
)

Watch = dict[str, Expr]
# names of the variables that belong to one execution (or one element) rather than to the shapes
INSTANCE_PREFIXES = ("_ax", "pid:", "it:", "uf:", "hv#", "crd:", "carried:", "param:", "opaque#")
Describe = Callable[[dict[str, Any]], str]


@dataclass
class LoopInfo:
    """One `for` loop around a program point: `var` = start + it * step, it in [0, trip)."""

    var: str
    it: Expr
    iv: Expr
    line: int
    trip: Expr
    domain: Expr
    bounds: list[Any] = field(default_factory=list)  # the IR values of start, stop, step


@dataclass
class Instance:
    """The free variables that name one execution of an op, for rendering a model."""

    pids: list[tuple[str, Expr]]
    loops: list[tuple[str, Expr, Expr]]  # (name, iteration value, iteration index)
    coords: list[Expr]
    shape: tuple[int, ...]
    bits: int = 32
    label: str = ""


@dataclass
class Obligation:
    kind: str
    op: Op
    formula: Expr
    describe: Describe
    instances: list[Instance] = field(default_factory=list)
    watch: Watch = field(default_factory=dict)
    # an easier formula whose unsatisfiability already proves the obligation (a guessed witness)
    shortcut: Expr | None = None
    related: tuple[int, ...] = ()  # other source lines the violation involves
    split: list[tuple[Expr, int]] = field(default_factory=list)  # small variables to case-split on
    # a quantifier-free formula equivalent to `formula`, built on demand when the shortcut does not prove it
    exact: Callable[[], Expr | None] | None = None


@dataclass
class Access:
    """A store or atomic_add, with everything needed to compare two executions of it."""

    op: Op
    kind: str  # "store" or "atomic"
    tensor: str
    shape: tuple[int, ...]
    addr: list[Expr]   # over the view's axis placeholders
    active: Expr       # the write happens (path, loop domains, masks)
    value: AVal
    loops: list[LoopInfo]
    bits: int
    # `active` without the conditions that read tensor contents: what the grid and the index math
    # alone would write (a block skipped because its data says so is not a border left unwritten)
    geometry: Expr | None = None


class Renamer:
    """Copies of the kernel's instance variables (program ids, loop counters, havoc values)."""

    def __init__(self, pids: list[tuple[str, Expr, Expr]], inst_vars: list[Expr]) -> None:
        self.pids = pids
        self.inst_vars = inst_vars

    def pairs(self, suffix: str) -> list[tuple[Expr, Expr]]:
        if not suffix:
            return []
        return [(v, z3.Const(f"{v.decl().name()}{suffix}", v.sort())) for v in self.inst_vars]

    def instance(self, acc: Access, suffix: str, label: str = "") -> tuple[list[tuple[Expr, Expr]], Expr, Instance,
                                                                           list[Expr]]:
        """(substitution, domain constraint, rendering info, universally quantifiable variables)."""
        ren = self.pairs(suffix)
        coords = [z3.Int(f"crd:{d}{suffix}#{acc.op.line}") for d in range(len(acc.shape))]
        sub = ren + [(ax(d), c) for d, c in enumerate(coords)]
        dom = [z3.And(c >= 0, c < n) for c, n in zip(coords, acc.shape)]
        for _, var, ext in self.pids:
            v = subst(var, ren)
            dom.append(z3.And(v >= 0, v < subst(ext, ren)))
        inst = Instance(pids=[(h, subst(var, ren)) for h, var, _ in self.pids],
                        loops=[(lp.var, subst(lp.iv, ren), subst(lp.it, ren)) for lp in acc.loops],
                        coords=coords, shape=acc.shape, bits=acc.bits, label=label)
        qvars = [b for _, b in ren] + coords
        return sub, conj(dom), inst, qvars


def _opaque(e: Expr) -> bool:
    return any(n.startswith(("uf:", "hv#", "opaque#")) for n in free_vars(e))


def _fmt_addr(tensor: str, vals: Sequence[Any]) -> str:
    return f"{tensor}[{', '.join(str(v) for v in vals)}]"


def kernel_obligations(accesses: list[Access], ren: Renamer, extents: dict[str, list[Expr]],
                       dim_extent: Callable[[str], Expr | None],
                       index_lines: Callable[[Access], tuple[int, ...]] = lambda a: ()) -> list[Obligation]:
    """Each output element written exactly once; atomic partial sums partition their reductions."""
    out = _kernel_obligations(accesses, ren, extents, dim_extent)
    by_op = {id(a.op): a for a in accesses}
    for ob in out:
        acc = by_op.get(id(ob.op))
        if acc is not None:
            extra = [x for x in index_lines(acc) if x != ob.op.line and x not in ob.related]
            ob.related = ob.related + tuple(extra)
    return out


def _kernel_obligations(accesses: list[Access], ren: Renamer, extents: dict[str, list[Expr]],
                        dim_extent: Callable[[str], Expr | None]) -> list[Obligation]:
    out: list[Obligation] = []
    by_tensor: dict[str, list[Access]] = {}
    for a in accesses:
        by_tensor.setdefault(a.tensor, []).append(a)
    for tensor, accs in by_tensor.items():
        stores = [a for a in accs if a.kind == "store"]
        atomics = [a for a in accs if a.kind == "atomic"]
        for i, a in enumerate(stores):
            for b in stores[i:]:
                out.append(_write_once(tensor, a, b, ren))
        if accs and not any(_opaque(e) for a in accs for e in a.addr):
            out.append(_write_all(tensor, accs, ren, extents[tensor]))
        for i, a in enumerate(atomics):
            for b in atomics[i:]:
                ob = _atomic_overlap(tensor, a, b, ren)
                if ob is not None:
                    out.append(ob)
        dims = sorted({d for a in atomics for d in a.value.sums if not is_pending(d)})
        for a in atomics:
            for d in dims:
                if _single(a.value, d) is not None and dim_extent(d) is not None:
                    out.append(_atomic_complete(tensor, a, atomics, d, ren, dim_extent(d)))
    return out


def _splits(lemmas: list[Expr], insts: list[Instance], ren: Renamer, limit: int = 64) -> list[tuple[Expr, int]]:
    """Program ids with small concrete ranges that equal addresses do not pin down (a split-k index):
    solving each combination separately is far easier for z3 than the modular reasoning."""
    pinned = set()
    for lem in lemmas:
        pinned |= free_vars(lem)
    out: list[tuple[Expr, int]] = []
    total = 1
    for inst in insts:
        for (_, var), (_, _, ext) in zip(inst.pids, ren.pids):
            n = simp(subst(ext, ren.pairs(inst_suffix(var))))
            if var.decl().name() in pinned or not z3.is_int_value(n) or n.as_long() > 16:
                continue
            total *= max(n.as_long(), 1)
            out.append((var, n.as_long()))
    return out if 1 < total <= limit else []


def inst_suffix(var: Expr) -> str:
    name = var.decl().name()
    return name[name.index("'"):] if "'" in name else ""


def _write_once(tensor: str, a: Access, b: Access, ren: Renamer) -> Obligation:
    s1, d1, i1, _ = ren.instance(a, "", "first write")
    s2, d2, i2, _ = ren.instance(b, "'", "second write")
    same_addr = [subst(x, s1) == subst(y, s2) for x, y in zip(a.addr, b.addr)]
    lemmas = digit_lemmas(a, s1, b, s2, ren)
    parts = [d1, d2, subst(a.active, s1), subst(b.active, s2)] + same_addr + lemmas
    if a is b:
        diff = [p1 != p2 for (_, p1), (_, p2) in zip(i1.pids, i2.pids)]
        diff += [l1[2] != l2[2] for l1, l2 in zip(i1.loops, i2.loops)]
        diff += [c1 != c2 for c1, c2 in zip(i1.coords, i2.coords)]
        parts.append(z3.Or(*diff) if diff else z3.BoolVal(False))
    watch = {f"addr{d}": subst(x, s1) for d, x in enumerate(a.addr)}

    def describe(w: dict[str, Any]) -> str:
        addr = _fmt_addr(tensor, [w[f"addr{d}"] for d in range(len(a.addr))])
        if a is b:
            return f"{addr} is written twice (by two different program/element pairs)"
        return f"{addr} is written both by the {a.op.kind} at line {a.op.line} and by the one at line {b.op.line}"

    return Obligation("write-once", b.op, conj(parts), describe, [i1, i2], watch,
                      split=_splits(lemmas, [i1, i2], ren))


def _write_all(tensor: str, accs: list[Access], ren: Renamer, exts: list[Expr]) -> Obligation:
    addr = [z3.Int(f"{tensor}_addr{d}") for d in range(len(exts))]
    inbox = [z3.And(x >= 0, x < e) for x, e in zip(addr, exts)]
    writes = []
    qvars: list[Expr] = []
    for k, a in enumerate(accs):
        sub, dom, _, qv = ren.instance(a, f"~{k}")
        qvars += qv
        act = a.geometry if a.geometry is not None else a.active
        writes.append(conj([dom, subst(act, sub)] + [subst(x, sub) == y for x, y in zip(a.addr, addr)]))
    formula = conj(inbox + [z3.ForAll(qvars, z3.Not(z3.Or(*writes)))])
    watch = {f"addr{d}": x for d, x in enumerate(addr)}
    geo = [replace(a, active=a.geometry) if a.geometry is not None else a for a in accs]
    wit = [w for w in (_witness_write(a, addr, ren) for a in geo) if w is not None]
    shortcut = conj(inbox + [z3.Not(z3.Or(*wit))]) if wit else None

    def exact() -> Expr | None:
        # a small grid of concrete size: which program writes an address is solved program by program, so the
        # query has no quantifier left (a grouped program order's div, mod and min, the Triton tutorial's, is then
        # decided, either way: an address no program writes is a counterexample)
        every = [_enumerated_writes(a, addr, ren) for a in geo]
        return conj(inbox + [z3.Not(z3.Or(*every))]) if all(e is not None for e in every) else None

    def describe(w: dict[str, Any]) -> str:
        return f"{_fmt_addr(tensor, [w[f'addr{d}'] for d in range(len(addr))])} is never written: no program and " \
               f"element of the grid stores to it"

    return Obligation("write-all", accs[0].op, formula, describe, [], watch, shortcut, exact=exact)


# the most programs a write-all obligation enumerates (a specialized grid); a larger grid keeps the quantified query
ENUMERATE_PROGRAMS = 1024


def _enumerated_writes(acc: Access, addr: list[Expr], ren: Renamer) -> Expr | None:
    """'Some execution of acc writes addr', exactly and without a quantifier, for a grid of concrete size: each
    program's address is solved for its element (and loop iteration) as _witness_write does, with the program ids
    fixed. None where the grid is symbolic or too large, or some program's address cannot be solved that way."""
    sizes = []
    for _, var, e in ren.pids:
        n = simp(e)
        if not z3.is_int_value(n):
            return None
        sizes.append((var, max(0, n.as_long())))
    total = 1
    for _, n in sizes:
        total *= n
    if total > ENUMERATE_PROGRAMS:
        return None
    ext, _, names = _access_names(acc, ren)
    names = names - {v.decl().name() for v, _ in sizes}
    alts = []
    for combo in itertools.product(*[range(n) for _, n in sizes]):
        fix = [(v, z3.IntVal(c)) for (v, _), c in zip(sizes, combo)]
        one = replace(acc, addr=[simp(subst(x, fix)) for x in acc.addr], active=simp(subst(acc.active, fix)))
        if z3.is_false(one.active):
            continue
        assign = solve_witness(list(zip(one.addr, addr)), ext, names)
        if assign is None:
            return None
        h = _witness_holds(one, assign, ren, [e == a for e, a in zip(one.addr, addr)])
        if h is None:
            return None
        alts.append(h)
    return z3.Or(*alts) if len(alts) > 1 else (alts[0] if alts else z3.BoolVal(False))


def _linear(e: Expr, names: set[str]) -> tuple[dict[str, tuple[Expr, Expr]], Expr] | None:
    """e = sum(coef * var) + rest over the variables named in `names`; None if not linear in them."""
    if not free_vars(e) & names:
        return {}, e
    if z3.is_const(e) and e.decl().name() in names:
        return {e.decl().name(): (z3.IntVal(1), e)}, z3.IntVal(0)
    if z3.is_add(e) or z3.is_sub(e):
        terms: dict[str, tuple[Expr, Expr]] = {}
        rest: Expr = z3.IntVal(0)
        for k, c in enumerate(e.children()):
            f = _linear(c, names)
            if f is None:
                return None
            sign = -1 if z3.is_sub(e) and k > 0 else 1
            for n, (coef, v) in f[0].items():
                old = terms[n][0] if n in terms else z3.IntVal(0)
                terms[n] = (simp(old + sign * coef), v)
            rest = rest + sign * f[1]
        return terms, simp(rest)
    if z3.is_mul(e):
        kids = e.children()
        dep = [c for c in kids if free_vars(c) & names]
        if len(dep) != 1:
            return None
        factor: Expr = z3.IntVal(1)
        for c in kids:
            if c is not dep[0] and not c.eq(dep[0]):
                factor = factor * c
        f = _linear(dep[0], names)
        if f is None:
            return None
        return {n: (simp(coef * factor), v) for n, (coef, v) in f[0].items()}, simp(f[1] * factor)
    return None


def mixed_radix(e: Expr, extents: dict[str, Expr], names: set[str]) -> tuple[list[tuple[int, str]], Expr] | None:
    """e = rest + sum(c_k * v_k) with c_0 = 1 and c_{k+1} = c_k * extent(v_k): then e determines
    every v_k (all but the last bounded by their extents). Returns the (coef, name) digits and rest."""
    f = _linear(simp(e), names)
    if f is None or not f[0]:
        return None
    coefs = []
    for n, (c, _) in f[0].items():
        c = simp(c)
        if not z3.is_int_value(c) or c.as_long() <= 0:
            return None
        coefs.append((c.as_long(), n))
    coefs.sort()
    if coefs[0][0] != 1:
        return None
    for k in range(len(coefs) - 1):
        c, n = coefs[k]
        ext = simp(extents[n]) if n in extents else None
        if ext is None or not z3.is_int_value(ext) or c * ext.as_long() != coefs[k + 1][0]:
            return None
    return coefs, f[1]


def digit_lemmas(a: Access, s1: list, b: Access, s2: list, ren: Renamer) -> list[Expr]:
    """Equal addresses written through the same mixed-radix index expression have equal digits
    (32*pm + i == 32*pm' + i' with i, i' < 32 gives pm == pm' and i == i'): consequences the solver
    finds hard to rediscover when the extents are symbolic."""
    if len(a.addr) != len(b.addr):
        return []
    ext, _, names = _access_names(a, ren)
    out = []
    inst = {v.decl().name(): v for v in ren.inst_vars}
    for ea, eb in zip(a.addr, b.addr):
        ma, mb = mixed_radix(ea, ext, names), mixed_radix(eb, ext, names)
        if ma is None or mb is None or ma[0] != mb[0] or not same_expr(ma[1], mb[1]):
            continue
        for _, n in ma[0]:
            v = ax(int(n[3:])) if n.startswith("_ax") else inst[n]
            out.append(subst(v, s1) == subst(v, s2))
    return out


def solve_witness(eqs: list[tuple[Expr, Expr]], extents: dict[str, Expr], names: set[str]
                  ) -> dict[str, Expr] | None:
    """Solve `expr == target` equations for the named variables, when each expression is a
    mixed-radix number in them (v0 + n0 * v1 + n0 * n1 * v2 + ..., v_k in [0, n_k)) or a div/mod pair
    (zh // H, zh % H). Returns terms for the variables (in the targets), or None."""
    assign: dict[str, Expr] = {}
    divmod_: dict[str, dict[str, tuple[Expr, Expr]]] = {}
    # `v // X` and `v % X` of a variable v are digits of their own (zh // H, zh % H): name them
    pseudo: dict[str, tuple[str, str, Expr]] = {}

    def digits(e: Expr) -> Expr:
        if (z3.is_app_of(e, z3.Z3_OP_IDIV) or z3.is_app_of(e, z3.Z3_OP_MOD)) and z3.is_const(e.arg(0)) \
                and e.arg(0).decl().name() in names and not free_vars(e.arg(1)) & names:
            kind = "div" if z3.is_app_of(e, z3.Z3_OP_IDIV) else "mod"
            name = f"_{kind}:{e.arg(0).decl().name()}"
            pseudo[name] = (kind, e.arg(0).decl().name(), e.arg(1))
            return z3.Int(name)
        if z3.is_app(e) and e.num_args():
            kids = [digits(c) for c in e.children()]
            if any(not k.eq(c) for k, c in zip(kids, e.children())):
                return e.decl()(*kids)
        return e

    eqs = [(digits(simp(e)), a) for e, a in eqs]
    names = set(names) | set(pseudo)
    extents = dict(extents)
    for name, (kind, v, x) in pseudo.items():  # zh % H < H; zh // H < cdiv(extent of zh, H)
        if kind == "mod":
            extents[name] = x
        elif v in extents:
            extents[name] = simp((extents[v] + x - 1) / x)
    for e, a in eqs:
        f = _linear(e, names)
        if f is None:
            return None
        terms, rest = f
        for n in [n for n in terms if n in extents and same_expr(extents[n], z3.IntVal(1))]:
            assign[n] = z3.IntVal(0)  # a digit of extent 1 (a loop of one trip, a grid of one program) is 0
            del terms[n]
        if not terms:
            continue
        t = simp(a - rest)
        sym = {n: simp(c) for n, (c, _) in terms.items() if not z3.is_int_value(simp(c))}
        if sym:  # one digit with a symbolic radix: v * c + u  ->  v = t / c, u = t % c (checked later)
            ones = [n for n, (c, _) in terms.items() if same_expr(c, z3.IntVal(1))]
            if len(terms) != 2 or len(sym) != 1 or len(ones) != 1:
                return None
            (v, c), = sym.items()
            assign[ones[0]], assign[v] = t % c, t / c
            continue
        coefs = []
        for n, (c, _) in terms.items():
            c = simp(c)
            if c.as_long() <= 0:
                return None
            coefs.append((c.as_long(), n))
        coefs.sort()
        # a lowest digit of weight c > 1 (od = qd * SD + rd with the phase rd a constant of an unrolled loop):
        # the guess t / c is checked with the rest like every guess (the caller substitutes it back), so an address
        # it cannot write (t - rest not a multiple of c) is simply not witnessed by this access
        for k, (c, n) in enumerate(coefs):
            if k + 1 < len(coefs):
                ext = simp(extents[n]) if n in extents else None
                if ext is None or not z3.is_int_value(ext) or c * ext.as_long() != coefs[k + 1][0]:
                    return None
                assign[n] = (t / c) % ext.as_long() if c > 1 else t % ext.as_long()
            else:
                assign[n] = t / c if c > 1 else t
    for name, (kind, v, x) in pseudo.items():
        if name in assign:
            divmod_.setdefault(v, {})[kind] = (assign.pop(name), x)
    for v, dm in divmod_.items():
        if set(dm) != {"div", "mod"} or not same_expr(dm["div"][1], dm["mod"][1]):
            return None
        assign[v] = dm["div"][0] * dm["div"][1] + dm["mod"][0]
    return assign


def _access_names(acc: Access, ren: Renamer) -> tuple[dict[str, Expr], dict[str, Expr], set[str]]:
    coords = {f"_ax{d}": z3.IntVal(n) for d, n in enumerate(acc.shape)}
    inst = {v.decl().name(): v for v in ren.inst_vars}
    ext = dict(coords)
    for _, var, e in ren.pids:
        ext[var.decl().name()] = e
    for lp in acc.loops:
        ext[lp.it.decl().name()] = lp.trip
    return ext, inst, set(coords) | set(inst)


def _witness_holds(acc: Access, assign: dict[str, Expr], ren: Renamer, extra: list[Expr]) -> Expr | None:
    """'The execution named by `assign` is a real one and makes `extra` true'; None if `assign`
    leaves a variable the access depends on undetermined."""
    ext, inst, names = _access_names(acc, ren)
    used = set()
    for e in acc.addr + [acc.active] + extra:
        used |= free_vars(e) & names
    if not used <= set(assign):
        return None
    sub = [(ax(int(n[3:])) if n.startswith("_ax") else inst[n], t) for n, t in assign.items() if n in names]
    dom = [z3.And(t >= 0, t < ext[n]) for n, t in assign.items() if n.startswith("_ax")]
    for _, var, e in ren.pids:
        if var.decl().name() in assign:
            t = assign[var.decl().name()]
            dom.append(z3.And(t >= 0, t < subst(e, sub)))
    return conj(dom + [subst(acc.active, sub)] + [subst(e, sub) for e in extra])


def _witness_write(acc: Access, addr: list[Expr], ren: Renamer) -> Expr | None:
    """Guess which execution writes address `addr` and return 'that execution writes addr'."""
    ext, _, names = _access_names(acc, ren)
    assign = solve_witness(list(zip(acc.addr, addr)), ext, names)
    if assign is None:
        return None
    return _witness_holds(acc, assign, ren, [e == a for e, a in zip(acc.addr, addr)])


def _witness_cover(acc: Access, addr: list[Expr], x: Expr, pieces: Pieces, ren: Renamer) -> Expr | None:
    """Guess the execution of `acc` (and its loop iteration) whose partial sum at `addr` includes x."""
    ext, _, names = _access_names(acc, ren)
    alts = []
    for p in pieces:
        width = simp(p.hi - p.lo)
        if not z3.is_int_value(width):
            return None
        u = z3.Int(f"_u#{id(p)}")
        pn = set(names) | {u.decl().name()} | ({p.t.decl().name()} if p.t is not None else set())
        pe = dict(ext)
        pe[u.decl().name()] = width
        if p.t is not None:
            pe[p.t.decl().name()] = p.count
        eqs = list(zip(acc.addr, addr)) + [(p.lo + u, x)]
        assign = solve_witness(eqs, pe, pn)
        if assign is None:
            return None
        tt = assign.pop(p.t.decl().name(), None) if p.t is not None else None
        assign.pop(u.decl().name(), None)
        body = Piece(p.lo, p.hi, p.cond)
        if p.t is not None:
            if tt is None:
                return None
            body = body.map(lambda e, tt=tt, t=p.t: subst(e, [(t, tt)]))
            inner = conj([tt >= 0, tt < p.count, body.member(x)])
        else:
            inner = body.member(x)
        h = _witness_holds(acc, assign, ren, [e == a for e, a in zip(acc.addr, addr)] + [inner])
        if h is None:
            return None
        alts.append(h)
    return z3.Or(*alts) if alts else None


def same_expr(a: Expr, b: Expr) -> bool:
    return simp(a).eq(simp(b))


def _identity_equal(a: AVal, b: AVal, s1: list, s2: list) -> list[Expr]:
    parts = []
    for name in sorted(set(a.tags) & set(b.tags)):
        if "." in name:
            continue
        for t1 in a.tags[name]:
            for t2 in b.tags[name]:
                parts.append(z3.Or(z3.Not(subst(t1.when, s1)), z3.Not(subst(t2.when, s2)),
                                   subst(t1.expr, s1) == subst(t2.expr, s2)))
    return parts


def _single(v: AVal, d: str) -> Pieces | None:
    cs = v.sums.get(d, ())
    return cs[0] if len(cs) == 1 else None


def _atomic_overlap(tensor: str, a: Access, b: Access, ren: Renamer) -> Obligation | None:
    common = sorted(d for d in set(a.value.sums) & set(b.value.sums)
                    if not is_pending(d) and _single(a.value, d) is not None and _single(b.value, d) is not None)
    if not common:
        return None
    s1, d1, i1, _ = ren.instance(a, "", "first partial sum")
    s2, d2, i2, _ = ren.instance(b, "'", "second partial sum")
    parts = [d1, d2, subst(a.active, s1), subst(b.active, s2)]
    parts += [subst(x, s1) == subst(y, s2) for x, y in zip(a.addr, b.addr)]
    lemmas = digit_lemmas(a, s1, b, s2, ren)
    parts += lemmas
    if a is b:
        diff = [p1 != p2 for (_, p1), (_, p2) in zip(i1.pids, i2.pids)]
        diff += [l1[2] != l2[2] for l1, l2 in zip(i1.loops, i2.loops)]
        diff += [c1 != c2 for c1, c2 in zip(i1.coords, i2.coords)]
        parts.append(z3.Or(*diff) if diff else z3.BoolVal(False))
    parts += _identity_equal(a.value, b.value, s1, s2)
    xs = {}
    for d in common:
        x = z3.Int(f"x_{d}#{a.op.line}")
        xs[d] = x
        p1 = tuple(p.map(lambda e, s=s1: subst(e, s)) for p in _single(a.value, d))
        p2 = tuple(p.map(lambda e, s=s2: subst(e, s)) for p in _single(b.value, d))
        parts += [member_pos(p1, x), member_pos(p2, x)]
    watch = {f"addr{k}": subst(x, s1) for k, x in enumerate(a.addr)}
    watch.update({f"x_{d}": x for d, x in xs.items()})

    def describe(w: dict[str, Any]) -> str:
        addr = _fmt_addr(tensor, [w[f"addr{k}"] for k in range(len(a.addr))])
        red = ", ".join(f"{d} index {w[f'x_{d}']}" for d in xs)
        return f"two partial sums added into {addr} both include {red}: the reduction is counted twice"

    related = tuple(dict.fromkeys(x for d in xs for p in _single(a.value, d) + _single(b.value, d) for x in p.src))
    return Obligation("atomic-overlap", b.op, conj(parts), describe, [i1, i2], watch, related=related,
                      split=_splits(lemmas, [i1, i2], ren))


def _atomic_complete(tensor: str, a: Access, atomics: list[Access], dim: str, ren: Renamer,
                     ext: Expr) -> Obligation:
    s0, d0, i0, _ = ren.instance(a, "", "a partial sum")
    x = z3.Int(f"x_{dim}#{a.op.line}")
    pieces0 = tuple(p.map(lambda e: subst(e, s0)) for p in _single(a.value, dim))
    req = required(pieces0, x)
    addr0 = [subst(e, s0) for e in a.addr]
    covered = []
    qvars: list[Expr] = []
    for k, b in enumerate(atomics):
        if _single(b.value, dim) is None:
            continue
        c, qv = _contributes(b, k, addr0, x, _single(b.value, dim), ren)
        covered.append(c)
        qvars += qv
    pre = [d0, subst(a.active, s0), x >= 0, x < ext, req]
    body = z3.Not(z3.Or(*covered))
    formula = conj(pre + [z3.ForAll(qvars, body) if qvars else body])
    # usually the partial sum itself is complete; else guess which partition holds x (split-k)
    wit = [w for w in (_witness_cover(b, addr0, x, _single(b.value, dim), ren) for b in atomics
                       if _single(b.value, dim) is not None) if w is not None]
    shortcut = conj(pre + [z3.Not(z3.Or(member(pieces0, x), *wit))])
    watch = {f"addr{k}": e for k, e in enumerate(addr0)}
    watch["x"] = x

    def describe(w: dict[str, Any]) -> str:
        addr = _fmt_addr(tensor, [w[f"addr{k}"] for k in range(len(addr0))])
        return f"no partial sum added into {addr} includes {dim} index {w['x']}: the split reduction misses it"

    return Obligation("atomic-complete", a.op, formula, describe, [i0], watch, shortcut,
                      tuple(dict.fromkeys(x for p in pieces0 for x in p.src)))


def _contributes(b: Access, k: int, addr0: list[Expr], x: Expr, pieces: Pieces, ren: Renamer,
                 unroll: int = 16) -> tuple[Expr, list[Expr]]:
    """'Some execution of b adds a partial sum including x into addr0', with as few quantified
    variables as possible: those the address determines are solved for, small concrete program-id
    ranges are unrolled, and only the rest are left to quantify."""
    ext, inst, names = _access_names(b, ren)
    part = solve_witness(list(zip(b.addr, addr0)), ext, names) or {}
    exprs = b.addr + [b.active] + [e for p in pieces for e in p.exprs]
    used = set()
    for e in exprs:
        used |= free_vars(e) & names
    if not set(part) <= names or not used & set(part):
        part = {}
    sub, dom, _, qv = ren.instance(b, f"~{k}")
    rename = dict((a.decl().name(), bb) for a, bb in sub)
    fixed = [(ax(int(n[3:])) if n.startswith("_ax") else inst[n], t) for n, t in part.items()]
    doms = [z3.And(t >= 0, t < ext[n]) for n, t in part.items() if n.startswith("_ax")]
    for _, var, e in ren.pids:
        if var.decl().name() in part:
            t = part[var.decl().name()]
            doms.append(z3.And(t >= 0, t < subst(e, fixed)))
    rest = [(ax(int(n[3:])) if n.startswith("_ax") else inst[n], rename[n]) for n in used - set(part) if n in rename]
    both = fixed + rest
    pb = tuple(p.map(lambda e: subst(e, both)) for p in pieces)
    body = conj(doms + [subst(dom, []) if not part else z3.BoolVal(True), subst(b.active, both), member(pb, x)] +
                [subst(e, both) == y for e, y in zip(b.addr, addr0)])
    if not part:
        return body, qv
    # pids left free: unroll small concrete ranges, quantify the others
    free = {n for n in used - set(part)}
    alts = [body]
    left: list[Expr] = []
    for _, var, e in ren.pids:
        n = var.decl().name()
        if n not in free:
            continue
        v = rename[n]
        size = simp(e)
        if z3.is_int_value(size) and size.as_long() <= unroll:
            alts = [subst(f, [(v, z3.IntVal(i))]) for f in alts for i in range(size.as_long())]
        else:
            alts = [conj([f, v >= 0, v < e]) for f in alts]
            left.append(v)
    for n in free:
        if not any(var.decl().name() == n for _, var, _ in ren.pids) and n in rename:
            left.append(rename[n])
    return (z3.Or(*alts) if len(alts) > 1 else alts[0]), left


def required(pieces: tuple, x: Expr) -> Expr:
    """Indices a reduction must include: those its masks relate to the element (e.g. causal).

    A condition that restricts the reduced index by itself (`k < K - 1`) is not a requirement:
    dropping indices that way is exactly the bug to find. Nor is one that does not name the index (a lane mask,
    `rm < 2`): it says which elements got a term, not which indices they owe.
    """
    keep = []
    for p in pieces:  # pieces from different loops (e.g. below and on a causal diagonal): all must agree
        keep += [c for c in conjuncts(p.cond)
                 if (p.t is None or not free_vars(c) & {p.t.decl().name()})
                 and mentions(c, "_x") and any(n.startswith(INSTANCE_PREFIXES) for n in free_vars(c) - {"_x"})]
    return subst(conj(keep), [(XV, x)])


# ---- solving -----------------------------------------------------------------------------------------
@dataclass
class Outcome:
    obligation: Obligation
    status: str  # "proved", "violated" or "unknown"
    model: z3.ModelRef | None = None
    seconds: float = 0.0
    reason: str = ""  # why an "unknown" stayed unknown (z3's reason, or the budget)


def solve(ob: Obligation, background: list[Expr], timeout_ms: int, deadline: float | None = None) -> Outcome:
    """Decide one obligation: proved (unsat), violated (a model) or unknown (z3 gave up, or `deadline`, a
    time.perf_counter() value, passed between the queries of a case split)."""
    t0 = time.perf_counter()
    f = simp(ob.formula) if not _has_quantifier(ob.formula) else ob.formula
    if z3.is_false(f):
        return Outcome(ob, "proved", None, time.perf_counter() - t0)
    if ob.shortcut is not None:
        s = z3.Solver()
        s.set("timeout", timeout_ms)
        s.add(*background)
        s.add(ob.shortcut)
        if s.check() == z3.unsat:
            return Outcome(ob, "proved", None, time.perf_counter() - t0)
    if ob.exact is not None:
        g = ob.exact()
        if g is not None:
            f = g
    if not ob.split and presolved(min(timeout_ms, _PRESOLVE_MS), *background, f):
        return Outcome(ob, "proved", None, time.perf_counter() - t0)
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*background)
    s.add(f)
    if ob.split:
        unknown: str | bool = False
        for combo in itertools.product(*[range(n) for _, n in ob.split]):
            if deadline is not None and time.perf_counter() >= deadline:
                return Outcome(ob, "unknown", None, time.perf_counter() - t0, "the time budget ran out")
            s.push()
            s.add(*[v == c for (v, _), c in zip(ob.split, combo)])
            r = s.check()
            if r == z3.sat:
                return Outcome(ob, "violated", s.model(), time.perf_counter() - t0)
            if r == z3.unknown:
                unknown = unknown or _reason(s, timeout_ms, ob)
            s.pop()
        return Outcome(ob, "unknown" if unknown else "proved", None, time.perf_counter() - t0, unknown or "")
    r = s.check()
    dt = time.perf_counter() - t0
    if r == z3.unsat:
        return Outcome(ob, "proved", None, dt)
    if r == z3.sat:
        return Outcome(ob, "violated", s.model(), dt)
    return Outcome(ob, "unknown", None, dt, _reason(s, timeout_ms, ob))


# An unsplit obligation is first asked of the presolving z3 (tags.presolved) for at most a tenth of a second, and its
# unsat taken as the proof; anything else goes to z3's default solver as before (it finds the models the
# counterexamples are read from, and on some planted bugs the presolved query runs out of time where it does not).
_PRESOLVE_MS = 100


def _reason(s: z3.Solver, timeout_ms: int, ob: Obligation) -> str:
    """Why z3 left an obligation unknown, for a person: its own reason, the time limit, what makes it hard."""
    why = s.reason_unknown()
    what = "z3 ran out of its time limit" if why in ("timeout", "canceled") else f"z3 gave up ({why})"
    if why in ("timeout", "canceled"):
        what += f" ({timeout_ms} ms)"
    hard = []
    if _has_quantifier(ob.formula):
        hard.append("the query quantifies over program ids or elements")
    if any(n.startswith(("uf:",)) for n in free_vars(ob.formula)):
        hard.append("it reads the contents of index tensors")
    return what + (": " + "; ".join(hard) if hard else "")


_QUANTIFIED = z3.Probe("has-quantifiers")


def _has_quantifier(e: Expr) -> bool:
    """Whether `e` holds a quantifier anywhere: z3's own probe, which walks the term in C. A walk through z3's
    Python wrappers, asked for every obligation, made the checker's proof of Mixtral's template kernels (tokens 1, 8
    and 2048, sm_90) 6.8 s on this project's CPU machine instead of 6.3."""
    g = z3.Goal(ctx=e.ctx)
    g.add(e)
    return _QUANTIFIED(g) > 0
