"""Value classes of float elements: what a lane that reads no input element holds, so that a reduction over it can be
checked to take only its identity there.

A masked load's lanes past the mask hold its `other` (0 unless given); a `where`'s else branch holds what it says.
Those values flow through arithmetic like any other, so `x - mean` on a padded lane of zeros is no longer zero and
`exp(x - m)` of a lane of -inf is zero again. The interpreter tracks, per element, which of a few classes the
element may be in, each with the condition (over the element's coordinates, program ids, loop counters, shapes)
under which it may be:

    -inf, 0, 1, +inf   the constants a fill is made of (the identities of max, sum, prod, min)
    finite             any finite value: what data is (inputs are finite; arithmetic on finite data is taken to stay
                       finite: no overflow, no division of data by zero)
    nan                not a number (-inf - -inf, 0 * inf, ...)

`Classes` is a tuple of (class, may-condition) pairs: an over-approximation, so that a lane the checker says may
hold only the identity does hold only the identity (a reduction's obligation rests on it); a lane it cannot tell is
said to be possibly anything else (a false alarm at worst, never a missed bug).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

import z3

from .tags import FALSE, TRUE, Expr, app_kind, conj, connect, free_vars, presolved, simp, subst

NEGINF, ZERO, ONE, POS, POSINF, FINITE, NAN = "-inf", "0", "1", "positive", "+inf", "finite", "nan"
ORDER = (NEGINF, ZERO, ONE, POS, POSINF, FINITE, NAN)
INF = (NEGINF, POSINF)
POSITIVE = (ONE, POS)  # finite and > 0 (what exp of data is, a sum of them, a normaliser)
Classes = tuple[tuple[str, Expr], ...]
DATA: Classes = ((FINITE, TRUE),)
ANY: Classes = tuple((c, TRUE) for c in ORDER)

# the identity a reduction needs on the lanes that read no input element
IDENTITY = {"sum": ZERO, "max": NEGINF, "min": POSINF, "prod": ONE, "argmax": NEGINF, "argmin": POSINF}
# how a class is written in a message (and as a load's `other`)
SHOWN = {NEGINF: "-inf", ZERO: "0.0", ONE: "1.0", POS: "a positive value", POSINF: "+inf",
         FINITE: "a finite (data) value", NAN: "NaN"}
LITERAL = {NEGINF: "-inf", ZERO: "0.0", ONE: "1.0", POSINF: "inf"}


def of_value(v: float) -> str:
    """The class of a float constant."""
    if math.isnan(v):
        return NAN
    if v == -math.inf:
        return NEGINF
    if v == math.inf:
        return POSINF
    return ZERO if v == 0 else ONE if v == 1 else POS if v > 0 else FINITE


def const(v: float) -> Classes:
    return ((of_value(v), TRUE),)


def of_int(v: Expr | None) -> Classes | None:
    """The classes of an integer or boolean value converted to float: 0 where it is 0, 1 where it is 1."""
    if v is None:
        return None
    x = z3.If(v, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(v) else v
    return normal([(ZERO, x == 0), (ONE, x == 1), (FINITE, z3.And(x != 0, x != 1))])


def normal(pairs: Iterable[tuple[str, Expr]]) -> Classes:
    """One entry per class (conditions joined by Or), simplified, the ones that cannot hold dropped, in ORDER."""
    acc: dict[str, list[Expr]] = {}
    for c, e in pairs:
        if not z3.is_false(e):
            acc.setdefault(c, []).append(e)
    out = []
    for c in ORDER:
        if c in acc:
            es = acc[c]
            e = TRUE if any(z3.is_true(x) for x in es) else simp(z3.Or(*es) if len(es) > 1 else es[0])
            if not z3.is_false(e):
                out.append((c, e))
    return tuple(out)


def join(a: Classes, b: Classes) -> Classes:
    """What an element may be when it is one of two values (a loop's iterations, an if's branches)."""
    return normal(a + b)


def select(cond: Expr, a: Classes, b: Classes) -> Classes:
    """where(cond, a, b) element-wise."""
    return normal([(c, conj([cond, e])) for c, e in a] + [(c, conj([z3.Not(cond), e])) for c, e in b])


def map_classes(cls: Classes | None, f: Callable[[Expr], Expr]) -> Classes | None:
    return None if cls is None else tuple((c, f(e)) for c, e in cls)


# ---- the arithmetic of classes -----------------------------------------------------------------------------------
def _neg(a: str) -> str:
    return {NEGINF: POSINF, POSINF: NEGINF, ONE: FINITE, POS: FINITE}.get(a, a)


def _add(a: str, b: str) -> set[str]:
    if NAN in (a, b) or {a, b} == {NEGINF, POSINF}:
        return {NAN}
    if a in INF:
        return {a}
    if b in INF:
        return {b}
    if a == ZERO:
        return {b}
    if b == ZERO:
        return {a}
    return {POS} if a in POSITIVE and b in POSITIVE else {FINITE}


def _mul(a: str, b: str) -> set[str]:
    if NAN in (a, b):
        return {NAN}
    if ZERO in (a, b):
        return {NAN} if a in INF or b in INF else {ZERO}
    if a == ONE:
        return {b}
    if b == ONE:
        return {a}
    if a in INF and b in INF:
        return {POSINF if a == b else NEGINF}
    if a in INF or b in INF:
        inf, other = (a, b) if a in INF else (b, a)
        return {inf} if other in POSITIVE else {NEGINF, POSINF, NAN}  # a finite factor's sign (or zero) unknown
    return {POS} if a in POSITIVE and b in POSITIVE else {FINITE}


def _div(a: str, b: str) -> set[str]:
    if NAN in (a, b) or (a in INF and b in INF) or (a == ZERO and b == ZERO):
        return {NAN}
    if b == ONE:
        return {a}
    if b == ZERO:
        return {NEGINF, POSINF, NAN}
    if b in INF:
        return {ZERO}
    if a in INF:
        return {a} if b in POSITIVE else {NEGINF, POSINF}
    if a == ZERO:
        return {ZERO}
    return {POS} if a in POSITIVE and b in POSITIVE else {FINITE}


def _max(a: str, b: str) -> set[str]:
    if NAN in (a, b):
        return {NAN, FINITE, a, b}
    if a == NEGINF:
        return {b}
    if b == NEGINF:
        return {a}
    if POSINF in (a, b):
        return {POSINF}
    if a == b:
        return {a}
    return {POS} if a in POSITIVE or b in POSITIVE else {FINITE}


def _min(a: str, b: str) -> set[str]:
    if NAN in (a, b):
        return {NAN, FINITE, a, b}
    if a == POSINF:
        return {b}
    if b == POSINF:
        return {a}
    if NEGINF in (a, b):
        return {NEGINF}
    if a == b:
        return {a}
    return {POS} if a in POSITIVE and b in POSITIVE else {FINITE}


BINARY: dict[str, Callable[[str, str], set[str]]] = {
    "add": _add, "sub": lambda a, b: _add(a, _neg(b)), "mul": _mul, "truediv": _div, "max": _max, "min": _min}

# unary functions: the class each input class becomes; an input class not listed becomes a finite value, NaN stays NaN
_UNARY: dict[str, dict[str, str]] = {
    "exp": {NEGINF: ZERO, ZERO: ONE, ONE: POS, POS: POS, FINITE: POS, POSINF: POSINF},
    "log": {ZERO: NEGINF, ONE: ZERO, POSINF: POSINF, NEGINF: NAN},
    "sqrt": {ZERO: ZERO, ONE: ONE, POS: POS, POSINF: POSINF, NEGINF: NAN},
    "rsqrt": {ZERO: POSINF, ONE: ONE, POS: POS, POSINF: ZERO, NEGINF: NAN},
    "abs": {NEGINF: POSINF, ZERO: ZERO, ONE: ONE, POS: POS, POSINF: POSINF},
    "relu": {NEGINF: ZERO, ZERO: ZERO, ONE: ONE, POS: POS, POSINF: POSINF},
    "sigmoid": {NEGINF: ZERO, ZERO: POS, ONE: POS, POS: POS, FINITE: POS, POSINF: ONE},
    "tanh": {ZERO: ZERO, ONE: POS, POS: POS, POSINF: ONE},
    "erf": {ZERO: ZERO, ONE: POS, POS: POS, POSINF: ONE},
    "sin": {ZERO: ZERO, NEGINF: NAN, POSINF: NAN},
    "cos": {ZERO: ONE, NEGINF: NAN, POSINF: NAN},
    "silu": {ZERO: ZERO, ONE: POS, POS: POS, NEGINF: NAN, POSINF: POSINF},
    "gelu": {ZERO: ZERO, ONE: POS, POS: POS, NEGINF: NAN, POSINF: POSINF},
    "none": {NEGINF: NEGINF, ZERO: ZERO, ONE: ONE, POS: POS, POSINF: POSINF},
}
_UNARY.update({"exp2": _UNARY["exp"], "log2": _UNARY["log"], "gelu_tanh": _UNARY["gelu"]})


def _unary_one(o: str, a: str) -> set[str]:
    if a == NAN:
        return {NAN}
    if o not in _UNARY:  # an op the table does not know: anything its input's class could become
        return set(ORDER)
    return {_UNARY[o].get(a, FINITE)}


def binary(o: str, a: Classes | None, b: Classes | None) -> Classes:
    """The classes of a `o` b element-wise (o one of add, sub, mul, truediv, max, min)."""
    f = BINARY[o]
    pairs = []
    for ca, pa in a or DATA:
        for cb, pb in b or DATA:
            both = conj([pa, pb])
            pairs += [(c, both) for c in f(ca, cb)]
    return normal(pairs)


def unary(o: str, a: Classes | None) -> Classes:
    return normal([(c, e) for ca, e in a or DATA for c in _unary_one(o, ca)])


# ---- reductions --------------------------------------------------------------------------------------------------
def project(e: Expr, names: frozenset[str] | set[str], positive: bool = True) -> Expr:
    """e with every atom that mentions one of `names` replaced by True (positive) or False: an over-approximation of
    `exists names: e` (positive=True), read through And, Or, Not and boolean If."""
    names = frozenset(names)
    if len(_PROJECTED) > 200_000:
        _PROJECTED.clear()

    def go(e: Expr, positive: bool) -> Expr:
        if not (free_vars(e) & names):
            return e
        key = (e.get_id(), positive, names)
        hit = _PROJECTED.get(key)
        if hit is not None and hit[0].eq(e):
            return hit[1]
        kind = app_kind(e)
        if kind in (z3.Z3_OP_AND, z3.Z3_OP_OR):
            out = connect(kind, [go(c, positive) for c in e.children()])
        elif kind == z3.Z3_OP_NOT:
            out = z3.Not(go(e.arg(0), not positive))
        elif kind == z3.Z3_OP_IMPLIES:
            out = z3.Or(go(z3.Not(e.arg(0)), positive), go(e.arg(1), positive))
        elif kind == z3.Z3_OP_ITE and z3.is_bool(e):
            c, x, y = e.children()
            out = z3.Or(z3.And(go(c, positive), go(x, positive)), z3.And(go(z3.Not(c), positive), go(y, positive)))
        else:
            out = TRUE if positive else FALSE
        _PROJECTED[key] = (e, out)  # e kept alive, so its id is not reused while the entry stands
        return out
    return go(e, positive)


_PROJECTED: dict[tuple[int, bool, frozenset[str]], tuple[Expr, Expr]] = {}


def widen(cls: Classes | None, names: frozenset[str] | set[str]) -> Classes | None:
    """The classes with the conditions that mention `names` (a loop's counters) over-approximated away: what holds at
    every iteration when it holds at one."""
    if cls is None:
        return None
    return normal((c, simp(project(e, names))) for c, e in cls)


def included(a: Classes | None, b: Classes | None, given: Expr = TRUE) -> bool:
    """Whether every class a may take, b may take under a condition at least as weak (b's condition True or the same
    term, or z3 shows a's implies it where `given` holds)."""
    bd = dict(b or DATA)
    for c, e in a or DATA:
        if z3.is_false(simp(e)):
            continue
        if c not in bd:
            if _implies(conj([given, e]), FALSE):
                continue
            return False
        if not (z3.is_true(bd[c]) or simp(bd[c]).eq(simp(e)) or _implies(conj([given, e]), bd[c])):
            return False
    return True


def _implies(a: Expr, b: Expr) -> bool:
    """Whether a -> b is valid (z3, briefly; False when it cannot tell)."""
    return presolved(200, a, z3.Not(b))


def _fold(o: str, classes: Iterable[str], n: int) -> set[str]:
    """The classes a reduction `o` over n lanes may give when its lanes take each of `classes` at least once."""
    f = {"sum": _add, "max": _max, "min": _min, "prod": _mul}[o]
    cs = sorted(set(classes), key=ORDER.index)
    if len(cs) > n:
        return set()
    start: set[str] = {cs[0]}
    for c in cs[1:]:
        start = {r for s in start for r in f(s, c)}
    out, todo = set(start), list(start)
    while todo and len(cs) < n:  # repeats of any of the classes
        s = todo.pop()
        for c in cs:
            for r in f(s, c):
                if r not in out:
                    out.add(r)
                    todo.append(r)
    return out


def reduce(o: str, cls: Classes | None, r: Expr, n: int) -> Classes:
    """The classes of a reduction `o` (sum, max, min, prod) over lanes r in [0, n) of values of classes `cls` (over r):
    a class every lane may take gives its fold (all lanes -inf: a max of -inf); lanes of several classes give the fold
    of a mix. "Every lane" is over-approximated by the first and last lane, "some lane" by dropping what names r."""
    if o not in ("sum", "max", "min", "prod"):
        return DATA
    rn = {r.decl().name()}
    items = [(c, e) for c, e in cls or DATA]
    every = {c: conj([subst(e, [(r, z3.IntVal(0))]), subst(e, [(r, z3.IntVal(n - 1))])]) for c, e in items}
    some = {c: simp(project(e, rn)) for c, e in items}
    pairs = []
    for c, _ in items:
        pairs += [(x, every[c]) for x in _fold(o, [c], n)]
    names = [c for c, _ in items]
    for k in range(2, len(names) + 1):
        for group in itertools.combinations(names, k):
            cond = conj([some[c] for c in group])
            pairs += [(x, cond) for x in _fold(o, group, n)]
    return normal(pairs)


def scan(o: str, cls: Classes | None, r: Expr, n: int) -> Classes:
    """The classes of a prefix scan (cumsum, cumprod): any fold of any lanes' classes (over-approximated)."""
    base = "sum" if o == "cumsum" else "prod"
    rn = {r.decl().name()}
    items = [(c, simp(project(e, rn))) for c, e in cls or DATA]
    pairs = []
    names = [c for c, _ in items]
    some = dict(items)
    for k in range(1, len(names) + 1):
        for group in itertools.combinations(names, k):
            pairs += [(x, conj([some[c] for c in group])) for x in _fold(base, group, n)]
    return normal(pairs)


def bad(cls: Classes | None, want: str) -> Expr:
    """Where an element may hold something other than `want`."""
    es = [e for c, e in cls or DATA if c != want]
    return simp(z3.Or(*es)) if len(es) > 1 else (es[0] if es else FALSE)


def bad_outside(cls: Classes | None, allowed: tuple[str, ...]) -> Expr:
    """Where an element may hold something outside `allowed`."""
    es = [e for c, e in cls or DATA if c not in allowed]
    return simp(z3.Or(*es)) if len(es) > 1 else (es[0] if es else FALSE)
