"""Expressions: constants, names, operators, attributes, subscripts (tensor views and tile axes) and calls, with
the argument helpers every operation uses."""
from __future__ import annotations

import ast
import builtins
import math
from typing import Any

from ..ir import Value
from ..types import DTYPES, AnyDType, Dim, DType, TensorDType, TileType, bool_, broadcast_shapes, float32, promote
from .core import (
    CMPOPS,
    MATH,
    MISSING,
    REDUCTIONS,
    SCANS,
    UNSUPPORTED_FIX,
    FrontendBase,
    TensorRef,
    ViewRef,
    binop_name,
    shape_text,
    vtype,
)


class ExpressionReader(FrontendBase):
    """Reads an expression into a Value (or a TensorRef/ViewRef, a tuple, a dtype, a string)."""

    def expr(self, node: ast.expr, statement: bool = False) -> Any:
        self.line = getattr(node, "lineno", self.line)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return self.const(node.value, node)
            if isinstance(node.value, str):
                return node.value
            raise self.err(f"the constant {node.value!r} has no DSL meaning", "use numbers", node)
        if isinstance(node, ast.Name):
            v = self.lookup(node.id, node)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not isinstance(v, Value):
                return self.const(v, node)
            return v
        if isinstance(node, ast.Tuple):
            return tuple(self.expr(e) for e in node.elts)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):
                raise self.err("the ** operator is not supported", "multiply explicitly (x * x) or use exp/log",
                               node)
            if isinstance(node.op, ast.MatMult):
                raise self.err("the @ operator is not supported", "use mma(a, b) for tile matrix products", node)
            return self.binary(binop_name(self, node.op, node), self.expr(node.left), self.expr(node.right),
                               node)
        if isinstance(node, ast.UnaryOp):
            x = self.expr(node.operand)
            if isinstance(node.op, ast.USub):
                if isinstance(x, Value) and x.owner is not None and x.owner.kind == "const":
                    return self.const(-x.owner.attrs["value"], node)
                return self.binary("sub", self.const(0, node), x, node)
            if isinstance(node.op, ast.UAdd):
                return x
            if isinstance(node.op, (ast.Not, ast.Invert)):
                v = self.value(x, node)
                if isinstance(node.op, ast.Not) and v.dtype != bool_:
                    raise self.err("`not` needs a boolean", "compare first, e.g. `not (x > 0)`", node)
                return self.emit("unary", [v], {"op": "not" if v.dtype == bool_ else "invert"},
                                 [v.type], node).result
        if isinstance(node, ast.BoolOp):
            vals = [self.value(self.expr(v), v) for v in node.values]
            out = vals[0]
            for v in vals[1:]:
                out = self.binary("and" if isinstance(node.op, ast.And) else "or", out, v, node)
            return out
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.err("chained comparisons are not supported", "write (a < b) & (b < c)", node)
            op = type(node.ops[0])
            if op not in CMPOPS:
                raise self.err(f"comparison '{op.__name__}' is not supported", "use <, <=, >, >=, == or !=", node)
            return self.binary(CMPOPS[op], self.expr(node.left), self.expr(node.comparators[0]), node)
        if isinstance(node, ast.IfExp):
            raise self.err("conditional expressions are not supported", "use where(cond, a, b)", node)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node, statement)
        name = type(node).__name__
        raise self.err(f"unsupported Python construct '{name.lower()}' in a kernel",
                       UNSUPPORTED_FIX.get(name, "rewrite it with DSL operations"), node)

    def value(self, x: Any, node: ast.AST, what: str = "an operand") -> Value:
        if isinstance(x, bool | int | float):
            return self.const(x, node)
        if isinstance(x, Value):
            return x
        if isinstance(x, ViewRef | TensorRef):
            p = x.param.name
            raise self.err(f"tensor '{p}' is used as a value", f"read it first with load({p}[...])", node)
        raise self.err(f"{what} must be a tile or a scalar", "pass a tile or a scalar expression", node)

    def scalar(self, x: Any, node: ast.AST, what: str) -> Value:
        v = self.value(x, node, what)
        if v.is_tile:
            raise self.err(f"{what} must be a scalar, not a tile {v.type}",
                           "reduce the tile first (sum/max) or use a scalar expression", node)
        return v

    def binary(self, op: str, a: Any, b: Any, node: ast.AST) -> Value:
        a = self.value(a, node)
        b = self.value(b, node)
        shape = broadcast_shapes(a.shape, b.shape)
        if shape is None:
            raise self.err(f"tile shapes {shape_text(a)} and {shape_text(b)} do not broadcast in '{op}'",
                           "add axes with x[:, None] or x[None, :], or use mma(a, b) for a matrix product", node)
        if op in ("floordiv", "mod", "shl", "shr") and not (a.dtype.is_int and b.dtype.is_int):
            raise self.err(f"'{op}' needs integer operands, got {a.dtype} and {b.dtype}",
                           "use / for floating-point division", node)
        if op in ("and", "or", "xor") and (a.dtype.is_float or b.dtype.is_float):
            raise self.err(f"bitwise '{op}' needs boolean or integer operands",
                           "compare first, e.g. (x > 0) & (y > 0)", node)
        if op in ("lt", "le", "gt", "ge", "eq", "ne"):
            dt: AnyDType = bool_
        elif op == "truediv":
            dt = promote(a.dtype, b.dtype)
            if not dt.is_float:
                dt = float32
        else:
            dt = promote(a.dtype, b.dtype)
        return self.emit("binary", [a, b], {"op": op}, [vtype(shape, dt, a.is_const and b.is_const)],
                         node).result

    def attribute(self, node: ast.Attribute) -> Any:
        if isinstance(node.value, ast.Name) and isinstance(self.env.get(node.value.id), TensorRef):
            p = self.env[node.value.id].param
            if node.attr == "dtype":
                return TensorDType(p.name, p.dtype_kind) if p.fixed_dtype is None else DTYPES[p.fixed_dtype]
            raise self.err(f"tensor '{p.name}' has no attribute '{node.attr}' in the DSL",
                           f"use its dimension names ({', '.join(p.dims)}) or .dtype", node)
        if isinstance(node.value, ast.Name) and isinstance(self.env.get(node.value.id), Value):
            v = self.env[node.value.id]
            if node.attr == "T":
                return self.trans(v, node)
            if node.attr == "dtype":
                return v.dtype
            raise self.err(f"a tile has no attribute '{node.attr}'", "tiles offer .to(dtype), .T and .dtype",
                           node)
        obj = self.static_object(node)
        if obj is MISSING:
            raise self.err(f"unknown name '{ast.unparse(node)}'",
                           "use names from argus_inductor.dsl or kernel parameters", node)
        if isinstance(obj, float) and math.isinf(obj):
            return self.const(obj, node)
        return obj

    def subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        idx = node.slice
        elts = list(idx.elts) if isinstance(idx, ast.Tuple) else [idx]
        if isinstance(base, TensorRef):
            p = base.param
            if len(elts) != len(p.dims):
                raise self.err(f"tensor '{p.name}' has {len(p.dims)} dimensions "
                               f"({', '.join(p.dims)}) but is indexed with {len(elts)}",
                               "index every dimension with a scalar or a 1-D index tile", node)
            indices = []
            for e in elts:
                if isinstance(e, ast.Slice) or (isinstance(e, ast.Constant) and e.value is None):
                    raise self.err(f"slices and None cannot index tensor '{p.name}'",
                                   "index with arange-based tiles, e.g. A[rm, rk] with rk = k + arange(BK)", e)
                v = self.value(self.expr(e), e, "an index")
                if not v.dtype.is_int:
                    raise self.err(f"index of '{p.name}' has dtype {v.dtype}", "index with integer tiles", e)
                if v.is_tile and v.type.rank != 1:
                    raise self.err(f"index tiles of '{p.name}' must be 1-D, this one is {shape_text(v)}",
                                   "index each dimension with its own 1-D tile; the load forms their outer "
                                   "product", e)
                indices.append(v)
            return ViewRef(p, tuple(indices))
        if isinstance(base, Value) and base.is_tile:
            out = base
            axis = 0
            for e in elts:
                if isinstance(e, ast.Constant) and e.value is None:
                    out = self.emit("expand", [out], {"axis": axis}, [TileType(
                        out.shape[:axis] + (1,) + out.shape[axis:], out.dtype)], node).result
                    axis += 1
                elif isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None:
                    axis += 1
                else:
                    raise self.err("tiles can only be indexed with `:` and `None` (to add axes)",
                                   "select elements with where(...) or reduce with sum/max", e)
            if axis - sum(1 for e in elts if isinstance(e, ast.Constant)) != base.type.rank:
                raise self.err(f"indexing a tile of rank {base.type.rank} with {len(elts)} entries",
                               "write one `:` per existing axis, plus None where an axis is added", node)
            return out
        raise self.err("only tensor parameters and tiles can be indexed",
                       "index a tensor parameter (A[rm, rk]) inside load/store", node)

    def trans(self, v: Value, node: ast.AST) -> Value:
        if not v.is_tile or v.type.rank != 2:
            raise self.err(f"trans needs a 2-D tile, got {v.type}", "transpose 2-D tiles only", node)
        return self.emit("trans", [v], {}, [TileType((v.shape[1], v.shape[0]), v.dtype)], node).result

    def static_dim(self, node: ast.expr, what: str) -> Dim:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            if node.value <= 0:
                raise self.err(f"{what} must be positive, got {node.value}", "use a positive extent", node)
            return node.value
        if isinstance(node, ast.Name):
            v = self.env.get(node.id)
            if isinstance(v, Value) and v.owner is not None and v.owner.kind == "constexpr":
                return node.id
        raise self.err(f"{what} must be a compile-time constant, but '{ast.unparse(node)}' is not",
                       "use a literal or a constexpr parameter (e.g. BM: constexpr) so the tile shape is static",
                       node)

    def staticshape_text(self, node: ast.expr) -> tuple[Dim, ...]:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
        return tuple(self.static_dim(e, "a tile extent") for e in elts)

    def dtype_arg(self, node: ast.expr) -> AnyDType:
        d = self.expr(node)
        if isinstance(d, (DType, TensorDType)):
            return d
        if isinstance(d, str) and d in DTYPES:
            return DTYPES[d]
        raise self.err(f"'{ast.unparse(node)}' is not a dtype", "use float32, bfloat16, int32, ... or T.dtype",
                       node)

    def call(self, node: ast.Call, statement: bool) -> Any:
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, (ast.Name, ast.Subscript, ast.Call, ast.Compare,
                                                                 ast.BinOp, ast.UnaryOp)):
            recv = self.expr(f.value) if not (isinstance(f.value, ast.Name) and f.value.id not in self.env) \
                else MISSING
            if isinstance(recv, Value):
                if f.attr == "to" and len(node.args) == 1 and not node.keywords:
                    return self.cast(recv, self.dtype_arg(node.args[0]), node)
                raise self.err(f"tiles have no method '{f.attr}'", "tiles offer .to(dtype); other operations are "
                               "functions, e.g. sum(x, 1)", node)
        fn = self.static_object(f)
        if fn is MISSING:
            name = ast.unparse(f)
            raise self.err(f"unknown function '{name}'",
                           "call DSL operations from argus_inductor.dsl (load, mma, exp, ...)", node)
        name = getattr(fn, "__argus_builtin__", None)
        if name is None:
            if fn in (builtins.min, builtins.max) and len(node.args) == 2 and not node.keywords:
                a, b = (self.value(self.expr(x), x) for x in node.args)
                return self.binary("min" if fn is builtins.min else "max", a, b, node)
            if fn is builtins.float and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
                try:
                    return self.const(float(node.args[0].value), node)
                except (TypeError, ValueError):
                    pass
            raise self.err(f"'{ast.unparse(f)}' is not a DSL operation",
                           "only DSL operations can be called inside a kernel; inline Python helpers by hand",
                           node)
        if statement and name not in ("store", "atomic_add", "assert_tag", "tag", "assume", "padding_lanes",
                                          "zero_terms"):
            raise self.err(f"the result of {name}(...) is unused", "assign it to a name or remove the call", node)
        handler = getattr(self, f"op_{name}", None)
        if handler is None:
            if name in MATH or name in ("relu", "abs"):
                return self.op_math(name, node)
            if name in REDUCTIONS:
                return self.op_reduce(name, node)
            if name in SCANS:
                return self.op_scan(name, node)
            raise self.err(f"'{name}' is not supported here", "see argus_inductor.dsl for the operations", node)
        return handler(node)

    # ---- argument helpers ---------------------------------------------------------------------
    def args(self, node: ast.Call, names: list[str], required: int) -> list[ast.expr | None]:
        fname = ast.unparse(node.func)
        if len(node.args) > len(names):
            raise self.err(f"{fname} takes at most {len(names)} arguments ({', '.join(names)})",
                           "remove the extra arguments", node)
        out: list[ast.expr | None] = list(node.args) + [None] * (len(names) - len(node.args))
        for kw in node.keywords:
            if kw.arg not in names:
                raise self.err(f"{fname} has no argument '{kw.arg}'", f"its arguments are: {', '.join(names)}",
                               kw)
            i = names.index(kw.arg)
            if out[i] is not None:
                raise self.err(f"argument '{kw.arg}' given twice", "pass it once", kw)
            out[i] = kw.value
        for i in range(required):
            if out[i] is None:
                raise self.err(f"{fname} needs argument '{names[i]}'", f"pass {names[i]}", node)
        return out

    def int_literal(self, node: ast.expr | None, what: str) -> int:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand,
                                                                                           ast.Constant):
            return -int(node.operand.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise self.err(f"{what} must be an integer literal", f"write e.g. {what.split()[0]}=1", node)
