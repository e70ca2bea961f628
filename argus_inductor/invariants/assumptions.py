"""Preconditions a host guarantees, read as z3 facts: over shape symbols and constexprs, and quantified over the
elements of integer (index) tensors.

    "H % HK == 0"                       shapes
    "0 <= block_expert <= E"            a tensor name alone stands for every one of its elements
    "cu_seqlens[i] <= cu_seqlens[i + 1]"  a lower-case name that is no shape, constexpr or tensor is a variable,
                                        quantified over every value where each element the fact reads exists
    "implies(i <= j, rank[i] <= rank[j])"
    "nondecreasing(cu_seqlens)"         every pair i <= j: T[i] <= T[j] (sorted; what a variable-length batch's offsets
                                        and rows sorted by expert are); "increasing(T)" strictly
    "permutation(sorted_ids)"           T holds each of 0 .. n-1 exactly once (n its extent): in range, one-to-one

The same text is accepted by verify(assumptions=...), `argus verify --assume` and, inside a kernel, `assume("...")`
(a string: the kernel's word for what its host guarantees about its index tensors, for every program).
"""
from __future__ import annotations

import ast
from typing import Any, Protocol

import z3

from .exprs import to_z3
from .tags import fresh


class Scope(Protocol):
    """What a fact's names are resolved against (the interpreter)."""

    shapes: dict[str, Any]
    consts: dict[str, Any]
    tensors: dict[str, Any]

    def uf(self, tensor: str) -> z3.FuncDeclRef: ...


SHAPES = ("nondecreasing", "sorted", "increasing", "permutation")


def parse_assumption(text: str, scope: Scope) -> z3.BoolRef:
    """A precondition over shape symbols, constexprs and integer tensors, as a z3 fact (quantified where it speaks
    of every element)."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"assumption {text!r} is not a Python expression: {e.msg}") from None
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in SHAPES:
        return _named(text, tree, scope)
    qvars: dict[str, z3.ArithRef] = {}   # free lower-case names: quantified variables
    bounds: list[z3.BoolRef] = []        # every element read exists
    elems: dict[str, z3.ArithRef] = {}   # a bare tensor name: every one of its elements

    def int_tensor(n: str) -> Any:
        t = scope.tensors.get(n)
        return t if t is not None and t.dtype_kind == "int" else None

    def name(n: str) -> Any:
        if n in scope.shapes:
            return scope.shapes[n]
        if n in scope.consts:
            return z3.IntVal(int(scope.consts[n]))
        t = int_tensor(n)
        if t is not None:
            if n not in elems:
                idx = [fresh(f"{n}_i{d}") for d in range(len(t.dims))]
                qvars.update({v.decl().name(): v for v in idx})
                bounds.extend(z3.And(i >= 0, i < scope.shapes[d]) for i, d in zip(idx, t.dims))
                elems[n] = scope.uf(n)(*idx)
            return elems[n]
        if n.islower() or n.startswith("_"):
            if n not in qvars:
                qvars[n] = z3.Int(f"q:{n}")
            return qvars[n]
        raise ValueError(f"assumption {text!r}: unknown name '{n}' (use shape symbols, constexprs, integer tensors, "
                         "or lower-case names for the elements the fact is about)")

    def element(n: str, idx: list[Any]) -> Any:
        t = int_tensor(n)
        if t is None or len(idx) != len(t.dims):
            raise ValueError(f"assumption {text!r}: {n}[...] is not an element of an integer tensor of this kernel")
        bounds.extend(z3.And(i >= 0, i < scope.shapes[d]) for i, d in zip(idx, t.dims))
        return scope.uf(n)(*idx)

    body = to_z3(tree, name, element,
                 lambda n: ValueError(f"assumption {text!r}: unsupported expression '{ast.unparse(n)}'"))
    if qvars:
        return z3.ForAll(list(qvars.values()), z3.Implies(z3.And(*bounds) if bounds else z3.BoolVal(True), body))
    return body


def _named(text: str, call: ast.Call, scope: Scope) -> z3.BoolRef:
    kind = call.func.id  # type: ignore[attr-defined]
    if len(call.args) != 1 or not isinstance(call.args[0], ast.Name):
        raise ValueError(f"assumption {text!r}: {kind}(T) names one integer tensor")
    n = call.args[0].id
    t = scope.tensors.get(n)
    if t is None or t.dtype_kind != "int" or len(t.dims) != 1:
        raise ValueError(f"assumption {text!r}: {n} is not a one-dimensional integer tensor of this kernel")
    f, ext = scope.uf(n), scope.shapes[t.dims[0]]
    i, j = z3.Int(f"q:{n}_i"), z3.Int(f"q:{n}_j")
    both = z3.And(i >= 0, i < ext, j >= 0, j < ext)
    if kind in ("nondecreasing", "sorted"):
        return z3.ForAll([i, j], z3.Implies(z3.And(both, i <= j), f(i) <= f(j)))
    if kind == "increasing":
        return z3.ForAll([i, j], z3.Implies(z3.And(both, i < j), f(i) < f(j)))
    # permutation: every value in [0, n) and no two elements equal (onto follows for n values in [0, n); z3 is not
    # told, as no obligation over scattered addresses needs it: write-all is not checked through index tensors)
    return z3.And(z3.ForAll([i], z3.Implies(z3.And(i >= 0, i < ext), z3.And(f(i) >= 0, f(i) < ext))),
                  z3.ForAll([i, j], z3.Implies(z3.And(both, f(i) == f(j)), i == j)))


__all__ = ["parse_assumption", "SHAPES"]
