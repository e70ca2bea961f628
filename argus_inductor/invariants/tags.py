"""The symbolic tag domain: what the checker knows about every element of a tile.

An abstract value (`AVal`) describes all elements of a tile at once. Its expressions are z3 terms over
*axis placeholders* `_ax0, _ax1, ...` (the element's coordinate along each axis of this tile), program
ids, loop iteration counters, shape symbols and uninterpreted functions (the contents of integer
tensors). Shape-changing operations (expand, trans, broadcast, reduce) substitute placeholders.

What an element carries:
- `val`: its exact value, for integer and boolean tiles (indices, masks); None for data.
- `live`: where the element holds meaningful data (a masked-off load lane does not).
- `tags`: named integer expressions (`A.K`, `K`, user tags) with the condition (`when`) under which
  they are defined; several alternatives when two operands disagree.
- `sums`: per reduced dimension, the set of indices already summed into the element (`Piece`s:
  intervals with a condition over the placeholder `_x`, possibly a union over earlier loop
  iterations). Besides a dimension `K`, keys `prod(K)` (products), `done(K)` (a non-linear function
  of a finished sum), `each(K)` (indices a loop accumulated element-wise, completed by a sum across
  them after the loop) and `lost(K)` (indices a loop mixed in a way nobody followed).
- `maxof` / `scale` / `ratio` / `diff`: the online-softmax algebra. A running max covers an index
  range (`maxof`); `exp(s - m)` is a value normalised to that max (`scale`); `exp(m_old - m_new)`
  is a rescaling factor (`ratio`). Adding values normalised to different maxima is an error.
- `cls`: for float tiles, the value classes (-inf, 0, 1, +inf, finite, NaN) each element may be in
  (fills.py): what a lane that reads no input holds, so a reduction can be checked to take only its
  identity there.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import z3
import z3.z3core as _Z3
from z3.z3 import _to_expr_ref as _to_expr  # z3's wrapper of a term by its sort (as z3.substitute returns it)

Expr = z3.ExprRef
TRUE = z3.BoolVal(True)
FALSE = z3.BoolVal(False)
_TRUE_ID, _FALSE_ID = TRUE.get_id(), FALSE.get_id()
XV = z3.Int("_x")  # the reduced index in a cover's condition
_AX = [z3.Int(f"_ax{d}") for d in range(8)]
_counter = itertools.count()


def ax(d: int) -> z3.ArithRef:
    """The placeholder for an element's coordinate along axis `d` of its own tile."""
    return _AX[d]


def fresh(prefix: str, sort: z3.SortRef | None = None) -> Expr:
    return z3.Const(f"{prefix}#{next(_counter)}", sort if sort is not None else z3.IntSort())


def simp(e: Expr) -> Expr:
    return z3.simplify(e)


def subst(e: Expr, pairs: Sequence[tuple[Expr, Expr]]) -> Expr:
    """z3.substitute(e, *pairs), the same term, through z3's C API: z3's own checks each pair through its Python
    wrappers (17 us a call against 7 here), and the checker substitutes thousands of times a kernel. A pair whose
    sides differ in sort makes z3 raise, as z3.substitute does."""
    if not pairs:
        return e
    ctx, n = e.ctx, len(pairs)
    frm = (z3.Ast * n)(*[a.as_ast() for a, _ in pairs])
    to = (z3.Ast * n)(*[b.as_ast() for _, b in pairs])
    return _to_expr(_Z3.Z3_substitute(ctx.ref(), e.as_ast(), n, frm, to), ctx)


def same(a: Expr | None, b: Expr | None) -> bool:
    """Structural equality of two z3 terms (after simplification)."""
    if a is None or b is None:
        return a is b
    return a.eq(b) or simp(a).eq(simp(b))


def is_true(e: Expr) -> bool:
    """z3.is_true, by the term's id (z3 shares equal terms, so True has one): z3's own asks for the term's decl
    through its Python wrappers, about 4 us a call, and the checker asks it of every conjunct it builds."""
    if e.ctx is not TRUE.ctx:  # a term of another context: its ids are its own
        return z3.is_true(e)
    return _Z3.Z3_get_ast_id(e.ctx.ref(), e.as_ast()) == _TRUE_ID


def is_false(e: Expr) -> bool:
    if e.ctx is not FALSE.ctx:
        return z3.is_false(e)
    return _Z3.Z3_get_ast_id(e.ctx.ref(), e.as_ast()) == _FALSE_ID


def _connect(make: Callable[..., object], ps: Sequence[Expr]) -> Expr:
    """And or Or of z3 booleans through z3's C API: z3.And checks and coerces its arguments in Python, about 70 us
    for six conjuncts against 4 here."""
    ctx = ps[0].ctx
    return z3.BoolRef(make(ctx.ref(), len(ps), (z3.Ast * len(ps))(*[p.as_ast() for p in ps])), ctx)


def conj(parts: Iterable[Expr]) -> Expr:
    ps = [p for p in parts if not is_true(p)]
    if any(is_false(p) for p in ps):
        return FALSE
    return ps[0] if len(ps) == 1 else connect(z3.Z3_OP_AND, ps)


def connect(kind: int, ps: Sequence[Expr]) -> Expr:
    """z3.And(*ps) (kind Z3_OP_AND) or z3.Or(*ps) (Z3_OP_OR), the same term, built through the C API."""
    if not ps:
        return TRUE if kind == z3.Z3_OP_AND else FALSE
    return _connect(_Z3.Z3_mk_and if kind == z3.Z3_OP_AND else _Z3.Z3_mk_or, ps)


# Equalities solved and values propagated before the SMT core. The implications a loop's fixpoint asks (fills.py: a
# guard of a dozen conjuncts, most of them definitions of one index in terms of others) took 23 ms each on average and
# up to 140 ms, near the 200 ms past which an implication reads as false, and take about 1 ms so (98 queries of
# Mixtral's template kernels: 2.16 s -> 0.09 s, the same verdicts); most obligations (obligations.py) prove faster so.
_PRESOLVE = z3.Then("simplify", "propagate-values", "solve-eqs", "smt")


def presolved(timeout_ms: int, *facts: Expr) -> bool:
    """Whether the presolving z3 shows `facts` unsatisfiable within `timeout_ms` (False: sat, or it could not tell)."""
    s = _PRESOLVE.solver()
    s.set("timeout", timeout_ms)
    s.add(*facts)
    return s.check() == z3.unsat


def app_kind(e: Expr) -> int | None:
    """The kind of the operator at the top of `e` (z3.Z3_OP_AND, ...), None where `e` is not an application (a
    quantifier, a bound variable): one query, where z3.is_and and its kin build wrappers for each."""
    ctx, a = e.ctx.ref(), e.as_ast()
    if _Z3.Z3_get_ast_kind(ctx, a) != z3.Z3_APP_AST:
        return None
    return _Z3.Z3_get_decl_kind(ctx, _Z3.Z3_get_app_decl(ctx, a))


def conjuncts(e: Expr) -> list[Expr]:
    """Top-level conjuncts of a boolean term."""
    if app_kind(e) == z3.Z3_OP_AND:
        out: list[Expr] = []
        for c in e.children():
            out.extend(conjuncts(c))
        return out
    return [] if is_true(e) else [e]


_VARS: dict[int, tuple[Expr, frozenset[str]]] = {}  # a term's id -> (a term that keeps it alive, its names)


def free_vars(e: Expr) -> frozenset[str]:
    """Names of the constants and uninterpreted functions a term mentions (memoised for each subterm).

    Walks z3's terms through its C API, not its Python wrappers: a wrapper a subterm (two reference-count calls,
    a kind query, a decl) made this the checker's costliest walk. A subterm's entry keeps `e`, which owns it, alive,
    so its id is not given to another term while the entry stands (z3 shares equal terms: one id, one term)."""
    if e.ctx is not TRUE.ctx:  # ids are a context's own: the memo holds the checker's (z3's main context)
        return _names(e.ctx_ref(), e.as_ast(), e, {})
    if len(_VARS) > 1_000_000:
        _VARS.clear()
    return _names(e.ctx_ref(), e.as_ast(), e, _VARS)


def _names(ctx: object, a: object, owner: Expr, memo: dict[int, tuple[Expr, frozenset[str]]]) -> frozenset[str]:
    key = _Z3.Z3_get_ast_id(ctx, a)
    hit = memo.get(key)
    if hit is not None:
        return hit[1]
    kind = _Z3.Z3_get_ast_kind(ctx, a)
    out: set[str] = set()
    if kind == z3.Z3_APP_AST:
        for i in range(_Z3.Z3_get_app_num_args(ctx, a)):
            out |= _names(ctx, _Z3.Z3_get_app_arg(ctx, a, i), owner, memo)
        decl = _Z3.Z3_get_app_decl(ctx, a)
        if _Z3.Z3_get_decl_kind(ctx, decl) == z3.Z3_OP_UNINTERPRETED:
            out.add(_Z3.Z3_get_symbol_string(ctx, _Z3.Z3_get_decl_name(ctx, decl)))
    elif kind == z3.Z3_QUANTIFIER_AST:
        out |= _names(ctx, _Z3.Z3_get_quantifier_body(ctx, a), owner, memo)
    res = frozenset(out)
    memo[key] = (owner, res)
    return res


def mentions(e: Expr, names: Iterable[str] | str) -> bool:
    fv = free_vars(e)
    if isinstance(names, str):
        return names in fv
    return any(n in fv for n in names)


def mentions_prefix(e: Expr, prefixes: tuple[str, ...]) -> bool:
    return any(n.startswith(prefixes) for n in free_vars(e))


def is_uniform(e: Expr) -> bool:
    """True when the term does not depend on the element's coordinates."""
    return not mentions_prefix(e, ("_ax",))


def as_int(e: Expr | None) -> int | None:
    if e is None:
        return None
    s = simp(e)
    return s.as_long() if z3.is_int_value(s) else None


def to_bool(e: Expr) -> Expr:
    return e if z3.is_bool(e) else e != 0


def to_int(e: Expr) -> Expr:
    return z3.If(e, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(e) else e


# ---- covers --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Piece:
    """Indices x with lo <= x < hi and cond(x) (cond over the placeholder `_x`).

    With `t` set, the piece is a union over earlier loop iterations: lo/hi/cond mention `t`, and the
    set is { x | exists t in [0, count): lo(t) <= x < hi(t) and cond(t, x) }.
    """

    lo: Expr
    hi: Expr
    cond: Expr = TRUE
    t: Expr | None = None
    count: Expr | None = None
    src: tuple[int, ...] = ()  # source lines that produced it (loads, reductions, loops)

    def map(self, f: Callable[[Expr], Expr]) -> Piece:
        return Piece(f(self.lo), f(self.hi), f(self.cond), self.t,
                     f(self.count) if self.count is not None else None, self.src)

    def member(self, x: Expr) -> Expr:
        body = conj([self.lo <= x, x < self.hi, subst(self.cond, [(XV, x)])])
        if self.t is None:
            return body
        assert self.count is not None
        strided = self.strided()
        if strided is not None:  # x in base + t*stride + [0, width) for some t < count: no quantifier needed
            base, stride, width = strided
            t = (x - base) / stride
            return conj([x >= base, (x - base) % stride < width, t < self.count,
                         subst(self.cond, [(self.t, t), (XV, x)])])
        return z3.Exists([self.t], z3.And(self.t >= 0, self.t < self.count, body))

    def strided(self) -> tuple[Expr, int, int] | None:
        """(base, stride, width) when lo(t) = base + stride * t and hi - lo = width <= stride."""
        if self.t is None:
            return None
        base = simp(subst(self.lo, [(self.t, z3.IntVal(0))]))
        stride = simp(subst(self.lo, [(self.t, z3.IntVal(1))]) - base)
        width = simp(self.hi - self.lo)
        if not (z3.is_int_value(stride) and z3.is_int_value(width)):
            return None
        st, w = stride.as_long(), width.as_long()
        if st <= 0 or w > st or not same(simp(base + st * self.t), simp(self.lo)):
            return None
        return base, st, w

    def key(self) -> tuple[int, ...]:
        parts = [simp(self.lo), simp(self.hi), simp(self.cond)]
        if self.t is not None and self.count is not None:
            parts += [self.t, simp(self.count)]
        return tuple(p.get_id() for p in parts)

    @property
    def exprs(self) -> list[Expr]:
        return [self.lo, self.hi, self.cond] + ([self.count] if self.count is not None else [])


Pieces = tuple[Piece, ...]


def lines(*srcs: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(x for s in srcs for x in s))


def xcond(e: Expr) -> Expr:
    """Keep the conjuncts of a cover's condition that constrain the reduced index `_x`; the others
    describe the element (a row mask), not which indices it covers. A condition that is False covers no index (a
    product of factors live on disjoint lanes: the conjunction of their conditions), not every index: it is kept."""
    s = simp(e)
    if z3.is_false(s):
        return FALSE
    return conj([c for c in conjuncts(s) if mentions(c, "_x")])

# Per reduced dimension, the covers of the separate reductions an element depends on: one cover is
# one reduction (its partial sums accumulate into it); two reductions over the same dimension (the
# mean and the variance of a LayerNorm) stay two covers, each of which must be complete.
Sums = dict[str, tuple[Pieces, ...]]


# The keys of `sums` besides a plain dimension `K`: `prod(K)`, `each(K)`, `lost(K)` and `done(K)`.
def cover_key(kind: str, dim: str) -> str:
    """The `sums` key of a reduction over `dim`: the dimension itself for sums, `prod(dim)` for products."""
    return f"prod({dim})" if kind == "prod" else dim


def is_product(key: str) -> bool:
    """Whether a `sums` key holds a product cover (partial products join by *, not by +)."""
    return key.startswith("prod(") and key.endswith(")")


# Element-wise accumulation over a loop (`acc = acc + v`, v's tag K moving with the iteration) is
# tracked under `each(K)`: per element, the K indices summed into it so far, a point each iteration.
# A later reduction across the axis those points move along turns it into a cover of K (the K reduction
# was split between the loop and the reduction). Where such a tag moved but no sum followed it (a
# running maximum, a selection), `lost(K)` marks that the element mixes K indices the checker did not
# follow: a reduction across them is reported as undecided rather than proved.
def each_key(dim: str) -> str:
    return f"each({dim})"


def lost_key(dim: str) -> str:
    return f"lost({dim})"


def is_pending(key: str) -> bool:
    """Whether a `sums` key records an element-wise accumulation (not yet a reduction a store must complete)."""
    return key.startswith(("each(", "lost(")) and key.endswith(")")


def done_key(dim: str) -> str:
    """The key of covers a non-linear function was applied to (log of a sum): they stay the cover of a finished
    reduction that a store must complete, but no longer join another partial sum of that dimension."""
    return f"done({dim})"


def reduced_dim(key: str) -> str:
    """The dimension a `sums` key is about (`K` for `K`, `prod(K)`, `each(K)`, `lost(K)` and `done(K)`)."""
    return key[5:-1] if key.startswith(("prod(", "each(", "lost(", "done(")) and key.endswith(")") else key


def end_to_end(p: Piece, t: Expr, upto: Expr, src: tuple[int, ...]) -> Piece | None:
    """The union over t in [0, upto) of p's blocks as one interval [lo(0), lo(upto)), where each block ends where
    the next begins (hi(t) = lo(t + 1)) and the condition does not move with t; else None."""
    if not same(p.hi, subst(p.lo, [(t, t + 1)])) or mentions(p.cond, t.decl().name()):
        return None
    return Piece(simp(subst(p.lo, [(t, z3.IntVal(0))])), simp(subst(p.lo, [(t, upto)])), p.cond, src=src)


def empty_piece(line: int) -> Piece:
    """The cover of a reduction whose loop ran zero times (at line `line`): no index at all. It stands for the
    reduction until a later partial sum joins it (merge_pieces then drops it)."""
    return Piece(z3.IntVal(0), z3.IntVal(0), FALSE, src=(line,))


def is_empty_piece(p: Piece) -> bool:
    return p.t is None and z3.is_false(p.cond)


def merge_pieces(pieces: Iterable[Piece]) -> Pieces:
    """Drop duplicates (and pieces that hold no index, next to others) and join adjacent plain intervals with the same
    condition."""
    pieces = list(pieces)
    if any(not is_empty_piece(p) for p in pieces):
        pieces = [p for p in pieces if not is_empty_piece(p)]
    out: list[Piece] = []
    seen: set[tuple[int, ...]] = set()
    for p in pieces:
        k = p.key()
        if k not in seen:
            seen.add(k)
            out.append(p)
    changed = True
    while changed:
        changed = False
        for i, a in enumerate(out):
            for j, b in enumerate(out):
                if i == j or a.t is not None or b.t is not None or not same(a.cond, b.cond):
                    continue
                if same(a.hi, b.lo):
                    out[i] = Piece(a.lo, b.hi, a.cond, src=lines(a.src, b.src))
                    del out[j]
                    changed = True
                    break
            if changed:
                break
    return tuple(out)


def covers_union(a: tuple[Pieces, ...], b: tuple[Pieces, ...]) -> tuple[Pieces, ...]:
    out = list(a)
    for c in b:
        if not any(pieces_equal(c, x) for x in out):
            out.append(c)
    return tuple(out)


def sums_union(a: Sums, b: Sums) -> Sums:
    out = dict(a)
    for d, cs in b.items():
        out[d] = covers_union(out.get(d, ()), cs)
    return out


def map_sums(s: Sums, f: Callable[[Piece], Piece]) -> Sums:
    return {d: tuple(tuple(f(p) for p in c) for c in cs) for d, cs in s.items()}


def member(pieces: Pieces, x: Expr) -> Expr:
    if not pieces:
        return FALSE
    return z3.Or(*[p.member(x) for p in pieces]) if len(pieces) > 1 else pieces[0].member(x)


def member_pos(pieces: Pieces, x: Expr) -> Expr:
    """`member` for positive positions of an existential query: loop unions get fresh iteration
    variables instead of an Exists (equivalent there, and much easier for the solver)."""
    alts = []
    for p in pieces:
        if p.t is None:
            alts.append(p.member(x))
            continue
        assert p.count is not None
        t = fresh("t")
        q = p.map(lambda e, t=t, pt=p.t: subst(e, [(pt, t)]))
        alts.append(conj([t >= 0, t < q.count, Piece(q.lo, q.hi, q.cond).member(x)]))
    if not alts:
        return FALSE
    return z3.Or(*alts) if len(alts) > 1 else alts[0]


def pieces_equal(a: Pieces, b: Pieces) -> bool:
    return {p.key() for p in merge_pieces(a)} == {p.key() for p in merge_pieces(b)}


@dataclass(frozen=True, eq=False)
class Cov:
    """A cover of one named dimension (None for the empty cover of a fresh running max)."""

    dim: str | None
    pieces: Pieces = ()
    src: tuple[int, ...] = ()

    def map(self, f: Callable[[Expr], Expr]) -> Cov:
        return Cov(self.dim, tuple(p.map(f) for p in self.pieces), self.src)

    def union(self, other: Cov) -> Cov | None:
        if self.dim is not None and other.dim is not None and self.dim != other.dim:
            return None
        return Cov(self.dim or other.dim, merge_pieces(self.pieces + other.pieces), lines(self.src, other.src))

    def lines(self) -> tuple[int, ...]:
        return lines(self.src, *(p.src for p in self.pieces))

    def equal(self, other: Cov) -> bool:
        return (self.dim == other.dim or not self.pieces or not other.pieces) and \
            pieces_equal(self.pieces, other.pieces)


# ---- tags and abstract values --------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Tag:
    expr: Expr
    when: Expr = TRUE
    src: tuple[int, ...] = ()

    def map(self, f: Callable[[Expr], Expr]) -> Tag:
        return Tag(f(self.expr), f(self.when), self.src)


Tags = dict[str, tuple[Tag, ...]]


def merge_tags(a: Tags, b: Tags, both: bool = False) -> Tags:
    """Union of two operands' tags; a name both carry with different expressions keeps both (a store must match
    each; a reduction or a loop's accumulation over the name reads them together and checks that they agree:
    Interpreter.joint_tag). A name both carry with the same expression holds where either says it does (a sum's
    element reads that position where either term does: `where(x < 0, 0.0, x) + y` is at y's position even where
    its first term is the constant), or, with `both`, where both do (a product has a term only where both operands
    do, as an mma's operands')."""
    out: Tags = dict(a)
    for name, alts in b.items():
        if name not in out:
            out[name] = alts
            continue
        cur = list(out[name])
        for t in alts:
            i = next((i for i, c in enumerate(cur) if same(t.expr, c.expr)), None)
            if i is None:
                cur.append(t)
            else:
                c = cur[i]
                when = z3.And(c.when, t.when) if both else z3.Or(c.when, t.when)
                cur[i] = Tag(c.expr, simp(when), tuple(dict.fromkeys(c.src + t.src)))
        out[name] = tuple(cur)
    return out


@dataclass(eq=False)
class AVal:
    shape: tuple[int, ...]
    kind: str  # "int", "bool" or "float"
    val: Expr | None = None
    live: Expr = TRUE
    tags: Tags = field(default_factory=dict)
    sums: Sums = field(default_factory=dict)
    maxof: Cov | None = None
    scale: Cov | None = None
    ratio: tuple[Cov, Cov] | None = None
    diff: tuple[Cov | None, Cov] | None = None
    zero: bool = False
    fconst: float | None = None
    carried: frozenset[str] = frozenset()  # the iteration counters of the loops that carry this value (an accumulator)
    # float elements: the value classes (fills.py) each may be in, with the condition it may; None: finite data
    cls: tuple[tuple[str, Expr], ...] | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def map(self, f: Callable[[Expr], Expr]) -> AVal:
        """Apply `f` to every term (used for coordinate remapping and substitution)."""
        return replace(
            self,
            val=f(self.val) if self.val is not None else None,
            live=f(self.live),
            tags={n: tuple(t.map(f) for t in alts) for n, alts in self.tags.items()},
            sums=map_sums(self.sums, lambda p: p.map(f)),
            maxof=self.maxof.map(f) if self.maxof else None,
            scale=self.scale.map(f) if self.scale else None,
            ratio=(self.ratio[0].map(f), self.ratio[1].map(f)) if self.ratio else None,
            diff=((self.diff[0].map(f) if self.diff[0] else None), self.diff[1].map(f)) if self.diff else None,
            cls=tuple((c, f(e)) for c, e in self.cls) if self.cls is not None else None,
        )

    def exprs(self) -> list[Expr]:
        out = [self.live] + ([self.val] if self.val is not None else [])
        for alts in self.tags.values():
            for t in alts:
                out += [t.expr, t.when]
        for cs in self.sums.values():
            for c in cs:
                for p in c:
                    out += p.exprs
        for c in (self.maxof, self.scale):
            if c:
                for p in c.pieces:
                    out += p.exprs
        return out

    @property
    def plain(self) -> bool:
        """No cover or softmax structure: a constant, a parameter or raw data."""
        return not (self.sums or self.maxof or self.scale or self.ratio or self.diff)

    def tag(self, name: str) -> tuple[Tag, ...]:
        return self.tags.get(name, ())


def remap_axes(v: AVal, pairs: Sequence[tuple[int, Expr]], shape: tuple[int, ...]) -> AVal:
    """Substitute axis placeholders simultaneously: `(d, e)` replaces `_ax{d}` with `e`."""
    sub = [(ax(d), e) for d, e in pairs if not e.eq(ax(d))]
    out = v.map(lambda e: subst(e, sub)) if sub else replace(v)
    out.shape = shape
    return out


def broadcast(v: AVal, shape: tuple[int, ...]) -> AVal:
    """Numpy broadcasting: align right; an extent-1 axis stretched to n reads coordinate 0."""
    if v.shape == shape:
        return v
    r, big = len(v.shape), len(shape)
    pairs: list[tuple[int, Expr]] = []
    for i in range(r):
        j = i + big - r
        pairs.append((i, z3.IntVal(0) if v.shape[i] == 1 and shape[j] != 1 else ax(j)))
    return remap_axes(v, pairs, shape)


def expand(v: AVal, axis: int) -> AVal:
    pairs = [(d, ax(d + 1) if d >= axis else ax(d)) for d in range(v.rank)]
    return remap_axes(v, pairs, v.shape[:axis] + (1,) + v.shape[axis:])


def transpose(v: AVal) -> AVal:
    return remap_axes(v, [(0, ax(1)), (1, ax(0))], (v.shape[1], v.shape[0]))


def reshape(v: AVal, shape: tuple[int, ...]) -> AVal:
    """Same elements in row-major order, new extents."""
    if [s for s in v.shape if s != 1] == [s for s in shape if s != 1]:
        # only unit axes inserted or removed: map the non-unit axes in order
        src = [d for d, s in enumerate(v.shape) if s != 1]
        dst = [d for d, s in enumerate(shape) if s != 1]
        pairs = [(d, z3.IntVal(0)) for d, s in enumerate(v.shape) if s == 1]
        pairs += [(a, ax(b)) for a, b in zip(src, dst)]
        return remap_axes(v, pairs, shape)
    lin: Expr = z3.IntVal(0)
    for d, n in enumerate(shape):
        lin = lin * n + ax(d)
    pairs = []
    stride = 1
    for d in reversed(range(v.rank)):
        pairs.append((d, (lin / stride) % v.shape[d]))
        stride *= v.shape[d]
    return remap_axes(v, pairs, shape)


# ---- lane masks and padding ---------------------------------------------------------------------------
PADDING_TAG = "padding.lanes"  # the tag padding_lanes attaches: 1 on the lanes it names


def padding(v: AVal) -> Expr:
    """Where v's elements were named padding (padding_lanes): by every operand that carries the name."""
    alts = v.tags.get(PADDING_TAG, ())
    return conj([z3.And(t.when, t.expr != 0) for t in alts]) if alts else FALSE


def moving_conjuncts(x: AVal, acc: AVal) -> list[Expr]:
    """The conjuncts of term x's `live` that move with a loop carrying the accumulator acc (a lane mask
    `(rm < 2 + k)[:, None]`): what moving_lanes and moving_max gate x's covers with."""
    return [c for c in conjuncts(x.live) if mentions(c, acc.carried)]


def gated(p: Piece, moving: list[Expr], carried: frozenset[str]) -> Piece:
    """p with the conjuncts of `moving` (a term's `live`, moving with a loop in `carried`) that move with a loop p
    itself moves with added to its condition (the interpreter's moving_lanes)."""
    loops = carried & {n for e in p.exprs for n in free_vars(e)}
    have = conjuncts(simp(p.cond))
    return replace(p, cond=conj([p.cond] + [c for c in moving if free_vars(c) & loops and not among(c, have)]))


def among(e: Expr, es: list[Expr]) -> bool:
    """Whether e is one of es, structurally (z3 terms compared by `same`, not by ids of temporaries that z3 may
    free and reuse)."""
    return any(same(e, c) for c in es)
