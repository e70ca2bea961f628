"""Small Python expressions as z3 terms: what a host's assumption (assumptions.py) and an op's read set
(readsets.py) are written in. Integers and booleans, names, elements of integer tensors (`T[i, j]`),
+ - * // %, not, and, or, comparisons (chained), `x if c else y`, `implies(a, b)`, and the stored value's tags
(`X.D`, `tag("name")`) where the caller reads them."""
from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import z3

from .tags import Expr

_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
_ARITH: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a / b, ast.Mod: lambda a, b: a % b}


def boolean(e: Any) -> Expr:
    """`e` as a z3 boolean (an integer is true where it is not 0)."""
    if isinstance(e, bool):
        return z3.BoolVal(e)
    return e if z3.is_bool(e) else e != 0


def to_z3(tree: ast.expr, name: Callable[[str], Any], element: Callable[[str, list[Any]], Any],
          unsupported: Callable[[ast.expr], Exception], tag: Callable[[str], Any] | None = None) -> Any:
    """`tree` as a z3 term: `name` resolves plain names, `element(tensor, indices)` an integer tensor's element,
    `tag` a tag of the stored value (None: tags are not part of this language); `unsupported(node)` is raised for
    anything else."""

    def ev(n: ast.expr) -> Any:
        if isinstance(n, ast.Constant) and isinstance(n.value, bool):
            return z3.BoolVal(n.value)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return z3.IntVal(n.value)
        if isinstance(n, ast.Name):
            return name(n.id)
        if tag is not None and isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            return tag(f"{n.value.id}.{n.attr}")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            if tag is not None and n.func.id == "tag" and len(n.args) == 1 and isinstance(n.args[0], ast.Constant):
                return tag(str(n.args[0].value))
            if n.func.id == "implies" and len(n.args) == 2:
                return z3.Implies(boolean(ev(n.args[0])), boolean(ev(n.args[1])))
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
            idx = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            return element(n.value.id, [ev(i) for i in idx])
        if isinstance(n, ast.BinOp) and type(n.op) in _ARITH:
            return _ARITH[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp):
            x = ev(n.operand)
            if isinstance(n.op, ast.USub):
                return -x
            if isinstance(n.op, ast.Not):
                return z3.Not(boolean(x))
        if isinstance(n, ast.BoolOp):
            xs = [boolean(ev(v)) for v in n.values]
            return z3.And(*xs) if isinstance(n.op, ast.And) else z3.Or(*xs)
        if isinstance(n, ast.IfExp):
            return z3.If(boolean(ev(n.test)), ev(n.body), ev(n.orelse))
        if isinstance(n, ast.Compare) and all(type(o) in _COMPARE for o in n.ops):
            parts, left = [], ev(n.left)
            for o, c in zip(n.ops, n.comparators):
                right = ev(c)
                parts.append(_COMPARE[type(o)](left, right))
                left = right
            return z3.And(*parts) if len(parts) > 1 else parts[0]
        raise unsupported(n)

    return ev(tree)


__all__ = ["boolean", "to_z3"]
