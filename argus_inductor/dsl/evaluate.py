"""Evaluate scalar IR expressions on the host (grid extents, static conditions)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import LaunchError
from .ir import Op, Value

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "max": max, "min": min, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "and": lambda a, b: a & b,
    "or": lambda a, b: a | b, "cdiv": lambda a, b: -(-a // b),
}


def _trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero, as Triton (and C) do."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _apply(op: Op, args: list[Any]) -> Any:
    if op.kind == "cast":
        if op.attrs.get("bitcast"):
            raise LaunchError("a bitcast cannot be evaluated before launch")
        return float(args[0]) if op.attrs["dtype"].is_float else int(args[0])
    o = op.attrs["op"]
    a, b = args
    if o in ("floordiv", "mod") and isinstance(a, int) and isinstance(b, int):
        q = _trunc_div(a, b)
        return q if o == "floordiv" else a - q * b
    if o not in _BINARY:
        raise LaunchError(f"'{o}' cannot be evaluated before launch")
    return _BINARY[o](a, b)


def eval_scalar(v: Value, env: dict[str, Any]) -> Any:
    """Evaluate a scalar IR expression on concrete symbol and constexpr values."""
    return compile_scalar(v)(env)


def compile_scalar(v: Value) -> Callable[[dict[str, Any]], Any]:
    """A function env -> value for a scalar IR expression, built once and called per launch."""
    op = v.owner
    if op is None:
        raise LaunchError(f"cannot evaluate {v!r} on the host")
    k = op.kind
    if k == "const":
        c = op.attrs["value"]
        return lambda env: c
    if k in ("shape", "constexpr", "param"):
        name = op.attrs["name"]
        return lambda env: env[name]
    if k in ("cast", "binary"):
        subs = [compile_scalar(a) for a in op.args]
        return lambda env: _apply(op, [f(env) for f in subs])
    raise LaunchError(f"grid extent uses '{k}', which cannot be evaluated before launch")
