"""Evaluate scalar IR expressions on the host (grid extents, static conditions)."""
from __future__ import annotations

from typing import Any

from .errors import LaunchError
from .ir import Value


def eval_scalar(v: Value, env: dict[str, Any]) -> Any:
    """Evaluate a scalar IR expression (grid extents) on concrete symbol and constexpr values."""
    op = v.owner
    if op is None:
        raise LaunchError(f"cannot evaluate {v!r} on the host")
    k = op.kind
    if k == "const":
        return op.attrs["value"]
    if k in ("shape", "constexpr", "param"):
        return env[op.attrs["name"]]
    if k == "cast":
        x = eval_scalar(op.args[0], env)
        return float(x) if op.attrs["dtype"].is_float else int(x)
    if k == "binary":
        a, b = (eval_scalar(x, env) for x in op.args)
        o = op.attrs["op"]
        if o == "cdiv":
            return -(-a // b)
        if o in ("floordiv", "mod") and isinstance(a, int) and isinstance(b, int):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C semantics, like Triton
            return q if o == "floordiv" else a - q * b
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "truediv": lambda: a / b,
                "max": lambda: max(a, b), "min": lambda: min(a, b), "lt": lambda: a < b, "le": lambda: a <= b,
                "gt": lambda: a > b, "ge": lambda: a >= b, "eq": lambda: a == b, "ne": lambda: a != b,
                "and": lambda: a & b, "or": lambda: a | b}[o]()
    raise LaunchError(f"grid extent uses '{k}', which cannot be evaluated before launch")
