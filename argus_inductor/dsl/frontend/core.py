"""What every part of the frontend shares: the reader's state (environment, blocks, line), how it emits ops and
reports errors, the references a name can hold besides a value, and small typing helpers."""
from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DSLError
from ..ir import Block, Op, TensorParam, Value
from ..types import DTYPES, AnyDType, Dim, DType, ScalarType, TileType, ValueType, bool_, float32, int32

Resolver = Callable[[str], Any]
MISSING = object()  # what a resolver returns for a name it does not know

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "shl",
          ast.RShift: "shr"}
CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "cos", "sin", "silu",
        "gelu", "gelu_tanh")
REDUCTIONS = ("sum", "max", "min", "argmax", "argmin", "prod")
SCANS = ("cumsum", "cumprod")
UNSUPPORTED_FIX = {
    "While": "write the loop as `for i in range(start, stop, step)` with a bound known at launch",
    "Assert": "state kernel facts with assert_tag(predicate); they are proven at compile time",
    "With": "remove the `with` block: DSL kernels have no context managers",
    "Try": "remove the try/except: a DSL kernel cannot raise; guard values with where(...) or masks",
    "FunctionDef": "move the helper out of the kernel and inline its operations",
    "Lambda": "inline the expression: DSL kernels have no lambdas",
    "Import": "import at module level; the kernel body may only use DSL operations",
    "ImportFrom": "import at module level; the kernel body may only use DSL operations",
    "Global": "pass the value as a kernel parameter instead",
    "Nonlocal": "pass the value as a kernel parameter instead",
    "Delete": "drop the `del`: values die when unused",
    "Raise": "a kernel cannot raise; state the condition with assert_tag(...)",
    "ListComp": "use a tile operation (arange, where, broadcasting) instead of a comprehension",
    "Dict": "DSL kernels have no dictionaries; use separate values",
    "JoinedStr": "DSL kernels have no strings at run time",
}


@dataclass(frozen=True)
class TensorRef:
    param: TensorParam


@dataclass(frozen=True)
class ViewRef:
    param: TensorParam
    indices: tuple[Value, ...]


@dataclass(frozen=True)
class LoopLocal:
    line: int


class FrontendBase:
    """The state of one kernel being read, and the primitives the statement, expression and operation readers
    build on."""

    def __init__(self, tree: ast.FunctionDef, *, source: str, filename: str, first_line: int,
                 resolve: Resolver) -> None:
        self.fn = tree
        self.source = source
        self.src_lines = source.splitlines()
        self.filename = filename
        self.first_line = first_line
        self.resolve_global = resolve
        self.env: dict[str, Any] = {}
        self.next_id = 0
        self.blocks: list[Block] = []
        self.ghost = 0
        self.loop_depth = 0
        self.grid: Op | None = None
        self.line = tree.lineno
        self.constexprs: dict[str, Value] = {}  # each constexpr parameter's value, as the kernel starts

    # ---- errors -------------------------------------------------------------------------------
    def err(self, message: str, fix: str, node: ast.AST | None = None) -> DSLError:
        rel = getattr(node, "lineno", None) or self.line
        line = self.first_line + rel - 1
        src = self.src_lines[rel - 1] if 0 < rel <= len(self.src_lines) else None
        return DSLError(message, fix=fix, line=line, filename=self.filename, source_line=src, kernel=self.fn.name)

    # ---- building -----------------------------------------------------------------------------
    def new_value(self, type_: ValueType, hint: str = "") -> Value:
        self.next_id += 1
        return Value(self.next_id, type_, hint)

    def emit(self, kind: str, args: list[Value], attrs: dict[str, Any], types: list[ValueType],
             node: ast.AST | None = None, hint: str = "") -> Op:
        line = self.first_line + (getattr(node, "lineno", None) or self.line) - 1
        op = Op(kind, list(args), attrs, [], line, ghost=self.ghost > 0)
        for t in types:
            v = self.new_value(t, hint)
            v.owner = op
            op.results.append(v)
        self.blocks[-1].ops.append(op)
        return op

    def const(self, value: Any, node: ast.AST | None = None) -> Value:
        if isinstance(value, bool):
            dt: DType = bool_
        elif isinstance(value, int):
            dt = int32 if -(2**31) <= value < 2**31 else DTYPES["int64"]
        elif isinstance(value, float):
            dt = float32
        else:
            raise self.err(f"the constant {value!r} has no DSL type", "use an int, a float or a bool", node)
        return self.emit("const", [], {"value": value}, [ScalarType(dt, const=True)], node).result

    def static_object(self, node: ast.expr) -> Any:
        """Resolve a module-level name or dotted attribute (no execution of the kernel body)."""
        if isinstance(node, ast.Name):
            return self.resolve_global(node.id)
        if isinstance(node, ast.Attribute):
            base = self.static_object(node.value)
            if base is MISSING or base is None:
                return MISSING
            return getattr(base, node.attr, MISSING)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return MISSING


# ---- helpers ------------------------------------------------------------------------------------
def binop_name(fe: FrontendBase, op: ast.operator, node: ast.AST) -> str:
    if type(op) not in BINOPS:
        raise fe.err(f"operator {type(op).__name__} is not supported", "use +, -, *, /, //, %, &, |", node)
    return BINOPS[type(op)]


def vtype(shape: tuple[Dim, ...], dt: AnyDType, const: bool) -> ValueType:
    return TileType(shape, dt) if shape else ScalarType(dt, const)


def runtime_type(t: ValueType) -> ValueType:
    return ScalarType(t.dtype) if isinstance(t, ScalarType) else t


def same_type(a: ValueType, b: ValueType) -> bool:
    return runtime_type(a) == runtime_type(b)


def shape_text(v: Value) -> str:
    return f"({', '.join(map(str, v.shape))})" if v.is_tile else "scalar"


def static_numel(shape: tuple[Dim, ...]) -> int | None:
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return None
        n *= d
    return n


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    out: dict[str, None] = {}
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            out[n.id] = None
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                out[node.target.id] = None
    return list(out)
