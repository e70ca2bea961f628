"""The checker's own walks over z3 terms (invariants/tags.py), which go through z3's C API for speed, against z3's
Python API doing the same: the names a term mentions, its top operator, True and False, And and Or, substitution. The names
are memoised by term id, so terms made and dropped by the thousand must never be answered with another's names."""
from __future__ import annotations

import gc
import random

import z3

from argus_inductor.invariants.tags import (
    FALSE,
    TRUE,
    app_kind,
    conj,
    conjuncts,
    connect,
    free_vars,
    is_false,
    is_true,
    subst,
)


def _names_slowly(e: z3.ExprRef) -> frozenset[str]:
    out: set[str] = set()
    for c in (e.body(),) if z3.is_quantifier(e) else e.children():
        out |= _names_slowly(c)
    if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
        out.add(e.decl().name())
    return frozenset(out)


def test_names_of_constants_functions_and_quantified_terms() -> None:
    x, y = z3.Ints("x y")
    f = z3.Function("uf:idx", z3.IntSort(), z3.IntSort())
    assert free_vars(z3.And(x + f(y) > 3, y < 2)) == {"x", "y", "uf:idx"}
    assert free_vars(z3.ForAll([x], x > y)) == {"y"}  # the bound variable is not a name the term mentions
    assert free_vars(z3.IntVal(3)) == frozenset() and free_vars(TRUE) == frozenset()


def test_terms_made_and_dropped_by_the_thousand_get_their_own_names() -> None:
    rng = random.Random(7)
    pool = [z3.Int(f"v{i}") for i in range(40)]
    for _ in range(3000):
        a, b, c = rng.sample(pool, 3)
        e = z3.If(a > rng.randint(0, 9), b + c, b * 2) == a if rng.random() < 0.5 else z3.Or(a < b, c > 3)
        assert free_vars(e) == _names_slowly(e), e
        del e
        if rng.random() < 0.01:
            gc.collect()  # dropped terms free their ids for the next ones z3 makes


def test_top_operator_truth_and_connectives_match_z3() -> None:
    x, y = z3.Ints("x y")
    parts = [x > 1, y < 2, x != y]
    assert connect(z3.Z3_OP_AND, parts).eq(z3.And(*parts)) and connect(z3.Z3_OP_OR, parts).eq(z3.Or(*parts))
    assert connect(z3.Z3_OP_AND, []).eq(TRUE) and connect(z3.Z3_OP_OR, []).eq(FALSE)
    assert app_kind(z3.And(*parts)) == z3.Z3_OP_AND and app_kind(z3.Not(x > 1)) == z3.Z3_OP_NOT
    assert app_kind(z3.ForAll([x], x > y)) is None
    assert is_true(z3.BoolVal(True)) and is_true(z3.simplify(x == x)) and not is_true(x > 1)
    assert is_false(z3.BoolVal(False)) and not is_false(TRUE) and not is_false(x > 1)
    assert conj([TRUE, x > 1, TRUE]).eq(x > 1) and conj([x > 1, FALSE]).eq(FALSE) and conj([]).eq(TRUE)
    assert [c.sexpr() for c in conjuncts(z3.And(x > 1, z3.And(y < 2, TRUE)))] == ["(> x 1)", "(< y 2)"]


def test_a_term_of_another_z3_context_is_not_answered_from_the_main_contexts_memo() -> None:
    main = z3.Int("m0") + z3.Int("m1") > 2
    assert free_vars(main) == {"m0", "m1"}
    other = z3.Context()
    for i in range(50):  # its ids start where the main context's did: the same numbers, other terms
        e = z3.Int(f"o{i}", other) * 2 > z3.Int("p", other)
        assert free_vars(e) == {f"o{i}", "p"}
    assert is_true(z3.BoolVal(True, other)) and is_false(z3.BoolVal(False, other))
    assert not is_true(z3.BoolVal(False, other)) and not is_false(z3.Bool("q", other))


def test_substitution_is_z3s_term_and_kind() -> None:
    x, y = z3.Ints("x y")
    b = z3.Bool("b")
    f = z3.Function("uf:t", z3.IntSort(), z3.IntSort())
    cases = [((x * 3 + y) % 7 - f(x), [(x, z3.IntVal(4)), (y, x + 1)]), (x, [(x, z3.IntVal(5))]),
             (z3.And(b, x < y), [(b, TRUE), (y, z3.IntVal(2))]), (x + y, [])]
    for e, pairs in cases:
        got, want = subst(e, pairs), z3.substitute(e, *pairs) if pairs else e
        assert got.eq(want) and type(got) is type(want), (got, want)
    assert subst(x, [(x, z3.IntVal(5))]).as_long() == 5  # a numeral comes back as one
    try:
        subst(x, [(x, TRUE)])
    except z3.Z3Exception:
        pass
    else:
        raise AssertionError("a pair of two sorts must be refused, as z3.substitute refuses it")
