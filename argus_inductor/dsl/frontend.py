"""Reads a DSL kernel's Python source (never executes it) into the typed IR."""
from __future__ import annotations

import ast
import builtins
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import lang
from .errors import DSLError
from .ir import Block, ConstParam, KernelIR, Op, ScalarParam, TensorParam, Value, walk_block
from .lang import ACTIVATION_KINDS
from .types import (
    DTYPES,
    MMA_OPERAND_DTYPES,
    AnyDType,
    Dim,
    DType,
    ScalarType,
    TensorDType,
    TileType,
    ValueType,
    bool_,
    broadcast_shapes,
    float32,
    int32,
    promote,
)

Resolver = Callable[[str], Any]
_MISSING = object()

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "shl",
           ast.RShift: "shr"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "cos", "sin", "silu",
         "gelu", "gelu_tanh")
_REDUCTIONS = ("sum", "max", "min", "argmax", "argmin", "prod")
_SCANS = ("cumsum", "cumprod")
_UNSUPPORTED_FIX = {
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


class _Ctx:
    """One lexical block being filled with ops."""

    def __init__(self, block: Block) -> None:
        self.block = block


class Frontend:
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

    # ---- entry ----------------------------------------------------------------------------------
    def build(self) -> KernelIR:
        params = self.parse_params()
        body = Block()
        self.blocks.append(body)
        symbols: dict[str, tuple[str, int]] = {}
        for p in params:
            if isinstance(p, TensorParam):
                self.env[p.name] = TensorRef(p)
                for d, sym in enumerate(p.dims):
                    if sym not in symbols:
                        symbols[sym] = (p.name, d)
                        self.env[sym] = self.emit("shape", [], {"name": sym, "tensor": p.name, "dim": d},
                                                  [ScalarType(int32)], self.fn, hint=sym).result
        self.constexprs: dict[str, Value] = {}  # each constexpr parameter's value, as the kernel starts
        for p in params:
            if isinstance(p, ConstParam):
                self.env[p.name] = self.constexprs[p.name] = self.emit(
                    "constexpr", [], {"name": p.name}, [ScalarType(int32, const=True)], self.fn, hint=p.name).result
            elif isinstance(p, ScalarParam):
                self.env[p.name] = self.emit("param", [], {"name": p.name},
                                             [ScalarType(DTYPES[p.dtype])], self.fn, hint=p.name).result
        stmts = list(self.fn.body)
        if stmts and isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant) \
                and isinstance(stmts[0].value.value, str):
            stmts = stmts[1:]
        self.visit_body(stmts, top=True)
        if self.grid is None:
            raise self.err("the kernel never declares its launch grid",
                           "start the body with e.g. `pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))`", self.fn)
        if not any(op.kind in ("store", "atomic_add") for op in walk_block(body)):
            raise self.err("the kernel never writes an output",
                           "write results with store(Out[...], value) or atomic_add(...)", self.fn)
        return KernelIR(self.fn.name, params, body, self.filename, self.first_line, self.source, self.grid,
                        symbols)

    def parse_params(self) -> list[Any]:
        a = self.fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            raise self.err("kernels take plain positional parameters only",
                           "remove *args, **kwargs and keyword-only markers", self.fn)
        defaults: dict[str, ast.expr] = {}
        for arg, d in zip(a.args[len(a.args) - len(a.defaults):], a.defaults):
            defaults[arg.arg] = d
        params: list[Any] = []
        seen_syms: set[str] = set()
        for arg in a.args:
            self.line = arg.lineno
            ann = arg.annotation
            if ann is None:
                raise self.err(f"parameter '{arg.arg}' has no annotation",
                               f"annotate it: `{arg.arg}: Tensor(\"M\", \"K\")`, `{arg.arg}: float`, "
                               f"`{arg.arg}: int` or `{arg.arg}: constexpr`", arg)
            kind = self.resolve_annotation(ann)
            if kind == "constexpr":
                default = None
                if arg.arg in defaults:
                    d = defaults[arg.arg]
                    if not isinstance(d, ast.Constant):
                        raise self.err(f"the default of constexpr '{arg.arg}' is not a literal",
                                       "give a literal default such as 64, or none", d)
                    default = d.value
                params.append(ConstParam(arg.arg, default))
            elif kind in ("float", "int"):
                params.append(ScalarParam(arg.arg, "float32" if kind == "float" else "int32"))
            elif isinstance(kind, tuple):
                dims, dtype = kind
                for s in dims:
                    if not s.isidentifier():
                        raise self.err(f"dimension name {s!r} of '{arg.arg}' is not an identifier",
                                       "name each dimension with an identifier such as \"M\"", ann)
                seen_syms.update(dims)
                params.append(TensorParam(arg.arg, dims, "int" if dtype is not None and dtype.is_int
                                          else "float", dtype.name if dtype is not None else None))
        names = [p.name for p in params]
        clash = seen_syms & set(names)
        if clash:
            n = sorted(clash)[0]
            raise self.err(f"'{n}' is both a parameter and a dimension name",
                           "rename the dimension or the parameter", self.fn)
        return params

    def resolve_annotation(self, ann: ast.expr) -> Any:
        obj = self.static_object(ann)
        if obj is lang.constexpr or obj == "constexpr":
            return "constexpr"
        if obj is float:
            return "float"
        if obj is int:
            return "int"
        if isinstance(ann, ast.Call) and self.static_object(ann.func) is lang.Tensor:
            dims = []
            for a in ann.args:
                if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                    raise self.err("tensor dimensions are named with strings",
                                   "write Tensor(\"M\", \"K\")", a)
                dims.append(a.value)
            dtype = None
            for kw in ann.keywords:
                if kw.arg != "dtype":
                    raise self.err(f"Tensor() has no argument '{kw.arg}'", "only dtype=... is accepted", kw)
                dt = self.static_object(kw.value)
                if not isinstance(dt, DType):
                    raise self.err("Tensor(dtype=...) needs a DSL dtype", "write dtype=int32 or similar", kw)
                dtype = dt
            if not dims:
                raise self.err("a tensor parameter needs at least one dimension",
                               "pass a 0-d value as a scalar parameter (`x: float`)", ann)
            return (tuple(dims), dtype)
        raise self.err("unrecognised parameter annotation",
                       "use Tensor(\"M\", ...), float, int or constexpr", ann)

    def static_object(self, node: ast.expr) -> Any:
        """Resolve a module-level name or dotted attribute (no execution of the kernel body)."""
        if isinstance(node, ast.Name):
            return self.resolve_global(node.id)
        if isinstance(node, ast.Attribute):
            base = self.static_object(node.value)
            if base is _MISSING or base is None:
                return _MISSING
            return getattr(base, node.attr, _MISSING)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return _MISSING

    # ---- statements ---------------------------------------------------------------------------
    def visit_body(self, stmts: list[ast.stmt], top: bool = False) -> None:
        for i, st in enumerate(stmts):
            self.line = st.lineno
            if isinstance(st, ast.Return) and st.value is None and top and i == len(stmts) - 1:
                continue
            self.visit_stmt(st)

    def visit_stmt(self, st: ast.stmt) -> None:
        if isinstance(st, ast.Assign):
            if len(st.targets) != 1:
                raise self.err("chained assignment is not supported", "assign one target per statement", st)
            self.assign(st.targets[0], self.expr(st.value), st)
        elif isinstance(st, ast.AnnAssign) and st.value is not None:
            self.assign(st.target, self.expr(st.value), st)
        elif isinstance(st, ast.AugAssign):
            if not isinstance(st.target, ast.Name):
                raise self.err("augmented assignment needs a plain name", "write `x = x + y`", st)
            left = self.lookup(st.target.id, st.target)
            self.assign(st.target, self.binary(_binop_name(self, st.op, st), left, self.expr(st.value), st), st)
        elif isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                return
            if not isinstance(st.value, ast.Call):
                raise self.err("this expression statement has no effect",
                               "assign it to a name, or remove it", st)
            self.expr(st.value, statement=True)
        elif isinstance(st, ast.For):
            self.visit_for(st)
        elif isinstance(st, ast.If):
            self.visit_if(st)
        elif isinstance(st, ast.Pass):
            pass
        elif isinstance(st, ast.Return):
            raise self.err("a kernel returns nothing and cannot return early",
                           "write outputs with store(...); guard work with `if` instead of returning", st)
        else:
            name = type(st).__name__
            raise self.err(f"unsupported Python construct '{name.lower()}' in a kernel",
                           _UNSUPPORTED_FIX.get(name, "rewrite it with DSL operations, for loops and if"), st)

    def assign(self, target: ast.expr, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value, target)
        elif isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.err(f"cannot unpack into {len(target.elts)} names",
                               "unpack a tuple of the same length (e.g. the ids tile_grid returns)", node)
            for e, v in zip(target.elts, value):
                self.bind(e.id, v, e)  # type: ignore[attr-defined]
        else:
            raise self.err("only names can be assigned", "assign to a plain name; tiles are immutable values",
                           node)

    def bind(self, name: str, value: Any, node: ast.AST) -> None:
        old = self.env.get(name)
        if isinstance(old, TensorRef):
            raise self.err(f"'{name}' is a tensor parameter and cannot be reassigned",
                           "store into it with store(...) or pick another name", node)
        if isinstance(value, ViewRef):
            raise self.err("a tensor view must be read with load(...) before it is used as a value",
                           f"write `{name} = load({value.param.name}[...])`", node)
        if not isinstance(value, (Value, tuple)):
            raise self.err(f"'{name}' cannot hold this kind of value", "assign tiles or scalars only", node)
        if isinstance(value, Value) and not value.hint:
            value.hint = name
        self.env[name] = value

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.env:
            v = self.env[name]
            if isinstance(v, LoopLocal):
                raise self.err(f"'{name}' is only defined inside the block at line "
                               f"{self.first_line + v.line - 1}",
                               f"give '{name}' a value before the loop or if so it is carried out of it", node)
            return v
        g = self.resolve_global(name)
        if g is _MISSING:
            raise self.err(f"unknown name '{name}'",
                           "define it before use, pass it as a parameter, or import it from argus_inductor.dsl",
                           node)
        return g

    def visit_for(self, st: ast.For) -> None:
        if st.orelse:
            raise self.err("for-else is not supported", "remove the else clause", st)
        if not isinstance(st.target, ast.Name):
            raise self.err("the loop variable must be a single name", "write `for k in range(...)`", st)
        it = st.iter
        fn = self.static_object(it.func) if isinstance(it, ast.Call) else _MISSING
        kind = getattr(st, "argus_kind", None) or getattr(fn, "__argus_builtin__", None)
        if kind == "unrollable_range":
            self.visit_unrollable_for(st, it)
            return
        static = kind in ("static_range", "unrolled_range")
        if not isinstance(it, ast.Call) or not (fn is builtins.range or kind == "range" or static):
            raise self.err("a kernel loop must iterate over range(...), static_range(...) or unrolled_range(...)",
                           "write `for k in range(0, K, BK)`", st)
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.err("range takes 1 to 3 positional arguments", "write range(stop) or "
                           "range(start, stop, step)", it)
        bounds = [self.scalar(self.expr(a), a, "a loop bound") for a in it.args]
        if len(bounds) == 1:
            bounds = [self.const(0, st), bounds[0], self.const(1, st)]
        elif len(bounds) == 2:
            bounds.append(self.const(1, st))
        for b, a in zip(bounds, it.args):
            if not b.dtype.is_int:
                raise self.err("loop bounds must be integers", "use integer expressions in range(...)", a)
        if static and not all(b.is_const for b in bounds):
            raise self.err(f"{kind} bounds must be compile-time constants",
                           "use literals or constexpr parameters, or a plain range(...)", it)
        assigned = _assigned_names(st.body)
        carried = [n for n in assigned if isinstance(self.env.get(n), Value)]
        inits = [self.env[n] for n in carried]
        body = Block()
        iv = self.new_value(ScalarType(int32), st.target.id)
        body.args.append(iv)
        for n, v in zip(carried, inits):
            arg = self.new_value(_runtime(v.type), n)
            body.args.append(arg)
        op = Op("for", bounds + inits, {"static": static, "symbolic": kind == "unrolled_range", "carried": carried,
                                        "var": st.target.id}, [],
                self.first_line + st.lineno - 1, [body], ghost=self.ghost > 0)
        self.blocks[-1].ops.append(op)
        outer = dict(self.env)
        self.env[st.target.id] = iv
        for n, arg in zip(carried, body.args[1:]):
            self.env[n] = arg
        self.blocks.append(body)
        self.loop_depth += 1
        self.visit_body(st.body)
        self.loop_depth -= 1
        self.blocks.pop()
        for n, init in zip(carried, inits):
            new = self.env[n]
            if not isinstance(new, Value) or not _same_type(new.type, init.type):
                raise self.err(f"loop-carried '{n}' changes type in the loop: {init.type} before, "
                               f"{getattr(new, 'type', new)} after one iteration",
                               f"keep '{n}' the same shape and dtype (cast with .to(...) or broadcast)", st)
            body.yields.append(new)
        inner = self.env
        self.env = outer
        for n in assigned:
            if n not in carried and n in inner:
                self.env[n] = LoopLocal(st.lineno)
        if st.target.id not in outer:
            self.env[st.target.id] = LoopLocal(st.lineno)
        for n, arg in zip(carried, body.args[1:]):
            r = self.new_value(arg.type, n)
            r.owner = op
            op.results.append(r)
            self.env[n] = r

    def visit_unrollable_for(self, st: ast.For, it: ast.Call) -> None:
        """`for k in unrollable_range(start, stop, step, steps):` is read as `if steps > 0:` a loop over
        unrolled_range(start, start + steps * step, step), `else:` one over range(start, stop, step), the same body
        in both (the lowering keeps the branch the policy's constexpr selects)."""
        if it.keywords or len(it.args) != 4:
            raise self.err("unrollable_range takes start, stop, step and the number of static steps",
                           "write `for k in unrollable_range(0, K, BK, KSTEPS):`", it)
        start, stop, step, steps = it.args
        if not self.scalar(self.expr(steps), steps, "a step count").is_const:
            raise self.err("unrollable_range's step count must be a compile-time constant",
                           "pass a constexpr parameter (0: the range loop)", steps)
        end = ast.BinOp(start, ast.Add(), ast.BinOp(steps, ast.Mult(), step))
        loops = []
        for kind, bounds in (("unrolled_range", [start, end, step]), ("range", [start, stop, step])):
            loop = ast.For(target=st.target, iter=ast.Call(func=it.func, args=bounds, keywords=[]), body=st.body,
                           orelse=[])
            loop.argus_kind = kind  # type: ignore[attr-defined]
            loops.append(loop)
        node = ast.If(test=ast.Compare(steps, [ast.Gt()], [ast.Constant(0)]), body=[loops[0]], orelse=[loops[1]])
        for n in (node, *loops):
            ast.copy_location(n, st)
        self.visit_if(ast.fix_missing_locations(node))  # the new expressions take the for statement's line

    def visit_if(self, st: ast.If) -> None:
        cond = self.expr(st.test)
        if isinstance(cond, Value) and cond.is_tile:
            raise self.err("an `if` needs a scalar condition, but this one is a tile",
                           "select element-wise with where(cond, a, b), or mask the load/store", st.test)
        cond = self.scalar(cond, st.test, "an if condition")
        assigned_then = _assigned_names(st.body)
        assigned_else = _assigned_names(st.orelse)
        outer = dict(self.env)
        results = [n for n in dict.fromkeys(assigned_then + assigned_else)
                   if isinstance(outer.get(n), Value) or (n in assigned_then and n in assigned_else)]
        op = Op("if", [cond], {"results": results, "static": cond.is_const}, [],
                self.first_line + st.lineno - 1, [Block(), Block()], ghost=self.ghost > 0)
        self.blocks[-1].ops.append(op)
        branch_envs = []
        for blk, stmts in zip(op.blocks, (st.body, st.orelse)):
            self.env = dict(outer)
            self.blocks.append(blk)
            self.visit_body(stmts)
            self.blocks.pop()
            branch_envs.append(self.env)
        self.env = outer
        # a name both branches only use inside loops of their own (a loop variable, a temporary) stays loop-local
        results[:] = [n for n in results if isinstance(outer.get(n), Value)
                      or not all(isinstance(e.get(n), LoopLocal) for e in branch_envs)]
        for n in results:
            vals = [e.get(n) for e in branch_envs]
            for v in vals:
                if not isinstance(v, Value):
                    raise self.err(f"'{n}' is assigned in one branch of this if but has no value in the other",
                                   f"give '{n}' a value before the if, or assign it in both branches", st)
            if not _same_type(vals[0].type, vals[1].type):
                raise self.err(f"'{n}' has type {vals[0].type} in one branch and {vals[1].type} in the other",
                               "make both branches produce the same shape and dtype", st)
            op.blocks[0].yields.append(vals[0])
            op.blocks[1].yields.append(vals[1])
            r = self.new_value(_runtime(vals[0].type) if not cond.is_const else vals[0].type, n)
            r.owner = op
            op.results.append(r)
            self.env[n] = r
        for n in dict.fromkeys(assigned_then + assigned_else):
            if n not in results and n not in outer:
                self.env[n] = LoopLocal(st.lineno)

    # ---- expressions --------------------------------------------------------------------------
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
            return self.binary(_binop_name(self, node.op, node), self.expr(node.left), self.expr(node.right),
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
            if op not in _CMPOPS:
                raise self.err(f"comparison '{op.__name__}' is not supported", "use <, <=, >, >=, == or !=", node)
            return self.binary(_CMPOPS[op], self.expr(node.left), self.expr(node.comparators[0]), node)
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
                       _UNSUPPORTED_FIX.get(name, "rewrite it with DSL operations"), node)

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
            raise self.err(f"tile shapes {_shape(a)} and {_shape(b)} do not broadcast in '{op}'",
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
        return self.emit("binary", [a, b], {"op": op}, [_vtype(shape, dt, a.is_const and b.is_const)],
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
        if obj is _MISSING:
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
                    raise self.err(f"index tiles of '{p.name}' must be 1-D, this one is {_shape(v)}",
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

    def static_shape(self, node: ast.expr) -> tuple[Dim, ...]:
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
                else _MISSING
            if isinstance(recv, Value):
                if f.attr == "to" and len(node.args) == 1 and not node.keywords:
                    return self.cast(recv, self.dtype_arg(node.args[0]), node)
                raise self.err(f"tiles have no method '{f.attr}'", "tiles offer .to(dtype); other operations are "
                               "functions, e.g. sum(x, 1)", node)
        fn = self.static_object(f)
        if fn is _MISSING:
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
            if name in _MATH or name in ("relu", "abs"):
                return self.op_math(name, node)
            if name in _REDUCTIONS:
                return self.op_reduce(name, node)
            if name in _SCANS:
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

    # ---- operations ---------------------------------------------------------------------------
    def op_tile_grid(self, node: ast.Call) -> tuple[Value, ...]:
        if self.loop_depth or len(self.blocks) != 1 or self.ghost:
            raise self.err("tile_grid must be declared at the top level of the kernel",
                           "move it out of loops and ifs", node)
        if self.grid is not None:
            raise self.err("tile_grid is declared twice", "declare the launch grid once, at the top", node)
        if node.keywords or not 1 <= len(node.args) <= 3:
            raise self.err("tile_grid takes 1 to 3 extents", "write tile_grid(cdiv(M, BM), cdiv(N, BN))", node)
        ext = [self.scalar(self.expr(a), a, "a grid extent") for a in node.args]
        for e, a in zip(ext, node.args):
            if not e.dtype.is_int:
                raise self.err("grid extents must be integers", "use cdiv(...) of integer sizes", a)
        op = self.emit("tile_grid", ext, {"rank": len(ext)}, [ScalarType(int32)] * len(ext), node)
        self.grid = op
        return tuple(op.results)

    def op_program_id(self, node: ast.Call) -> Value:
        (a,) = self.args(node, ["axis"], 1)
        axis = self.int_literal(a, "axis")
        if self.grid is None:
            raise self.err("program_id is used before the grid is declared",
                           "declare it first: `pm, pn = tile_grid(...)`", node)
        if not 0 <= axis < len(self.grid.results):
            raise self.err(f"program_id({axis}) but the grid has {len(self.grid.results)} axes",
                           "use an axis of the declared tile_grid", node)
        return self.grid.results[axis]

    def op_arange(self, node: ast.Call) -> Value:
        (n,) = self.args(node, ["n"], 1)
        d = self.static_dim(n, "the length of arange")
        return self.emit("arange", [], {"n": d}, [TileType((d,), int32)], node).result

    def op_zeros(self, node: ast.Call) -> Value:
        shape_n, dt_n = self.args(node, ["shape", "dtype"], 1)
        dt = self.dtype_arg(dt_n) if dt_n is not None else float32
        shape = self.static_shape(shape_n)
        return self.emit("full", [], {"shape": shape, "value": 0, "dtype": dt}, [TileType(shape, dt)],
                         node).result

    def op_full(self, node: ast.Call) -> Value:
        shape_n, val_n, dt_n = self.args(node, ["shape", "value", "dtype"], 2)
        dt = self.dtype_arg(dt_n) if dt_n is not None else float32
        shape = self.static_shape(shape_n)
        v = self.expr(val_n)
        if isinstance(v, Value) and v.owner is not None and v.owner.kind == "const":
            return self.emit("full", [], {"shape": shape, "value": v.owner.attrs["value"], "dtype": dt},
                             [TileType(shape, dt)], node).result
        v = self.scalar(v, val_n, "the fill value")
        return self.emit("broadcast_to", [self.cast(v, dt, node)], {"shape": shape}, [TileType(shape, dt)],
                         node).result

    def op_cdiv(self, node: ast.Call) -> Value:
        a_n, b_n = self.args(node, ["a", "b"], 2)
        a, b = self.value(self.expr(a_n), a_n), self.value(self.expr(b_n), b_n)
        if not (a.dtype.is_int and b.dtype.is_int):
            raise self.err("cdiv needs integers", "pass integer sizes", node)
        return self.binary("cdiv", a, b, node)

    def op_cast(self, node: ast.Call) -> Value:
        x_n, d_n = self.args(node, ["x", "dtype"], 2)
        return self.cast(self.value(self.expr(x_n), x_n), self.dtype_arg(d_n), node)

    def op_bitcast(self, node: ast.Call) -> Value:
        x_n, d_n = self.args(node, ["x", "dtype"], 2)
        v = self.value(self.expr(x_n), x_n)
        dt = self.dtype_arg(d_n)
        if not isinstance(v.dtype, DType) or not isinstance(dt, DType):
            raise self.err(f"bitcast needs known dtypes, got {v.dtype} -> {dt}",
                           "cast to a concrete dtype first, e.g. bitcast(load(X[r]).to(float32), int32)", node)
        if v.dtype.bits != dt.bits or dt.kind == "bool" or v.dtype.kind == "bool":
            raise self.err(f"bitcast from {v.dtype} ({v.dtype.bits} bits) to {dt} ({dt.bits} bits) changes the "
                           "width", "bitcast between types of one width, e.g. float32 <-> int32", node)
        t = TileType(v.shape, dt) if v.is_tile else ScalarType(dt, v.is_const)
        return self.emit("cast", [v], {"dtype": dt, "bitcast": True}, [t], node).result

    def cast(self, v: Value, dt: AnyDType, node: ast.AST) -> Value:
        t = TileType(v.shape, dt) if v.is_tile else ScalarType(dt, v.is_const)
        return self.emit("cast", [v], {"dtype": dt}, [t], node).result

    def op_maximum(self, node: ast.Call) -> Value:
        a_n, b_n = self.args(node, ["a", "b"], 2)
        return self.binary("max", self.expr(a_n), self.expr(b_n), node)

    def op_minimum(self, node: ast.Call) -> Value:
        a_n, b_n = self.args(node, ["a", "b"], 2)
        return self.binary("min", self.expr(a_n), self.expr(b_n), node)

    def op_where(self, node: ast.Call) -> Value:
        c_n, a_n, b_n = self.args(node, ["cond", "a", "b"], 3)
        c, a, b = (self.value(self.expr(n), n) for n in (c_n, a_n, b_n))
        if c.dtype != bool_:
            raise self.err(f"where's condition has dtype {c.dtype}", "pass a comparison, e.g. where(x > 0, x, 0)",
                           c_n)
        shape = broadcast_shapes(c.shape, a.shape)
        shape = broadcast_shapes(shape, b.shape) if shape is not None else None
        if shape is None:
            raise self.err(f"where's operands {_shape(c)}, {_shape(a)}, {_shape(b)} do not broadcast",
                           "add axes with [:, None] / [None, :] so the shapes line up", node)
        dt = promote(a.dtype, b.dtype)
        return self.emit("where", [c, a, b], {}, [_vtype(shape, dt, False)], node).result

    def op_math(self, name: str, node: ast.Call) -> Value:
        (x_n,) = self.args(node, ["x"], 1)
        x = self.value(self.expr(x_n), x_n)
        if not x.dtype.is_float and name not in ("abs", "relu"):
            raise self.err(f"{name} needs a floating-point operand, got {x.dtype}",
                           "cast first, e.g. x.to(float32)", node)
        dt = x.dtype if name in ("abs", "relu") else float32
        return self.emit("unary", [x], {"op": name}, [_vtype(x.shape, dt, False)], node).result

    def op_activation(self, node: ast.Call) -> Value:
        x_n, k_n = self.args(node, ["x", "kind"], 2)
        x = self.value(self.expr(x_n), x_n)
        if not x.dtype.is_float:
            raise self.err(f"activation needs a floating-point operand, got {x.dtype}", "cast first, e.g. "
                           "x.to(float32)", node)
        if isinstance(k_n, ast.Name) and k_n.id in self.constexprs and self.env.get(k_n.id) is self.constexprs[k_n.id]:
            kind: str | int = k_n.id  # the parameter itself (not a name rebound in the kernel): its policy value
        else:
            kind = self.int_literal(k_n, "activation kind")
            if not 0 <= kind < len(ACTIVATION_KINDS):
                raise self.err(f"activation kind {kind} is not one of 0..{len(ACTIVATION_KINDS) - 1}",
                               f"use {', '.join(f'{i} ({n})' for i, n in enumerate(ACTIVATION_KINDS))}", k_n)
        return self.emit("unary", [x], {"op": "activation", "kind": kind}, [_vtype(x.shape, float32, False)],
                         node).result

    def op_reduce(self, name: str, node: ast.Call) -> Value:
        x_n, a_n = self.args(node, ["x", "axis"], 2)
        x = self.value(self.expr(x_n), x_n)
        if not x.is_tile:
            raise self.err(f"{name} reduces a tile, got a scalar", "pass a tile", node)
        axis = self.int_literal(a_n, "axis")
        r = x.type.rank
        if not -r <= axis < r:
            raise self.err(f"axis {axis} is out of range for a tile of rank {r}", f"use an axis in [0, {r})", a_n)
        axis %= r
        shape = x.shape[:axis] + x.shape[axis + 1:]
        dt = int32 if name in ("argmax", "argmin") else (float32 if name in ("sum", "prod") and x.dtype.is_float
                                                         else x.dtype)
        return self.emit("reduce", [x], {"op": name, "axis": axis}, [_vtype(shape, dt, False)], node).result

    def op_scan(self, name: str, node: ast.Call) -> Value:
        """cumsum / cumprod: an inclusive prefix scan along one axis; same shape, float32 for float tiles."""
        x_n, a_n, r_n = self.args(node, ["x", "axis", "reverse"], 2)
        x = self.value(self.expr(x_n), x_n)
        if not x.is_tile:
            raise self.err(f"{name} scans a tile, got a scalar", "pass a tile", node)
        axis = self.int_literal(a_n, "axis")
        r = x.type.rank
        if not -r <= axis < r:
            raise self.err(f"axis {axis} is out of range for a tile of rank {r}", f"use an axis in [0, {r})", a_n)
        reverse = False
        if r_n is not None:
            if not (isinstance(r_n, ast.Constant) and isinstance(r_n.value, bool)):
                raise self.err(f"{name}'s reverse must be the literal True or False",
                               "branch on a constexpr flag: `if REVERSE: ... cumsum(x, 1, reverse=True)`", r_n)
            reverse = r_n.value
        if x.dtype.kind == "bool":
            raise self.err(f"{name} needs a numeric tile, got bool", "cast first, e.g. x.to(int32)", node)
        dt = float32 if x.dtype.is_float else x.dtype
        return self.emit("scan", [x], {"op": name, "axis": axis % r, "reverse": reverse},
                         [_vtype(x.shape, dt, False)], node).result

    def op_trans(self, node: ast.Call) -> Value:
        (x_n,) = self.args(node, ["x"], 1)
        return self.trans(self.value(self.expr(x_n), x_n), node)

    def op_reshape(self, node: ast.Call) -> Value:
        x_n, s_n = self.args(node, ["x", "shape"], 2)
        x = self.value(self.expr(x_n), x_n)
        shape = self.static_shape(s_n)
        if _static_numel(shape) is not None and _static_numel(x.shape) is not None \
                and _static_numel(shape) != _static_numel(x.shape):
            raise self.err(f"reshape from {_shape(x)} to {shape} changes the element count",
                           "keep the product of the extents equal", node)
        return self.emit("reshape", [x], {"shape": shape}, [TileType(shape, x.dtype)], node).result

    def op_broadcast_to(self, node: ast.Call) -> Value:
        x_n, s_n = self.args(node, ["x", "shape"], 2)
        x = self.value(self.expr(x_n), x_n)
        shape = self.static_shape(s_n)
        if broadcast_shapes(x.shape, shape) != shape:
            raise self.err(f"{_shape(x)} does not broadcast to {shape}", "add axes with [:, None] first", node)
        return self.emit("broadcast_to", [x], {"shape": shape}, [TileType(shape, x.dtype)], node).result

    def op_mma(self, node: ast.Call) -> Value:
        a_n, b_n, c_n = self.args(node, ["a", "b", "acc"], 2)
        a, b = self.value(self.expr(a_n), a_n), self.value(self.expr(b_n), b_n)
        for v, n, nm in ((a, a_n, "a"), (b, b_n, "b")):
            if not v.is_tile or v.type.rank != 2:
                raise self.err(f"mma operand {nm} must be a 2-D tile, got {v.type}",
                               "pass 2-D tiles (M x K) and (K x N)", n)
            if not v.dtype.is_float or (isinstance(v.dtype, DType) and v.dtype.name not in MMA_OPERAND_DTYPES):
                raise self.err(f"mma operand {nm} has dtype {v.dtype}; the tensor cores take bf16, fp16, fp8 "
                               "or fp32 (as tf32)", f"cast it: {nm}.to(bfloat16)", n)
        if a.dtype != b.dtype and not (isinstance(a.dtype, TensorDType) or isinstance(b.dtype, TensorDType)):
            raise self.err(f"mma operands have different dtypes ({a.dtype} and {b.dtype})",
                           "cast one to the other's dtype with .to(...)", node)
        if a.shape[1] != b.shape[0]:
            raise self.err(f"mma inner extents differ: a is {_shape(a)}, b is {_shape(b)}",
                           "make a (M x K) and b (K x N); transpose with trans(x) if needed", node)
        shape = (a.shape[0], b.shape[1])
        args = [a, b]
        if c_n is not None:
            c = self.value(self.expr(c_n), c_n)
            if c.shape != shape or c.dtype != float32:
                raise self.err(f"mma accumulator must be a float32 tile {shape}, got {c.type}",
                               f"create it with zeros({shape}, float32)", c_n)
            args.append(c)
        return self.emit("mma", args, {}, [TileType(shape, float32)], node).result

    op_dot = op_mma

    def view_arg(self, node: ast.expr | None, fname: str) -> ViewRef:
        v = self.expr(node) if node is not None else None
        if not isinstance(v, ViewRef):
            raise self.err(f"{fname} needs a tensor view as its first argument",
                           f"write {fname}(T[i0, i1, ...]) with a tensor parameter T", node)
        return v

    def view_shape(self, v: ViewRef) -> tuple[Dim, ...]:
        return tuple(i.shape[0] for i in v.indices if i.is_tile)

    def mask_arg(self, node: ast.expr | None, shape: tuple[Dim, ...]) -> Value | None:
        if node is None:
            return None
        m = self.value(self.expr(node), node)
        if m.dtype != bool_:
            raise self.err(f"mask has dtype {m.dtype}", "pass a comparison tile, e.g. rm < M", node)
        if broadcast_shapes(m.shape, shape) != shape:
            raise self.err(f"mask {_shape(m)} does not broadcast to the access {shape}",
                           "shape the mask like the accessed tile", node)
        return m

    def op_load(self, node: ast.Call) -> Value:
        v_n, m_n, o_n = self.args(node, ["view", "mask", "other"], 1)
        view = self.view_arg(v_n, "load")
        shape = self.view_shape(view)
        mask = self.mask_arg(m_n, shape)
        other = 0
        if o_n is not None:
            o = self.expr(o_n)
            if not (isinstance(o, Value) and o.owner is not None and o.owner.kind == "const"):
                raise self.err("load's `other` must be a literal", "write other=0.0 or other=-inf", o_n)
            other = o.owner.attrs["value"]
        p = view.param
        dt: AnyDType = DTYPES[p.fixed_dtype] if p.fixed_dtype else TensorDType(p.name, p.dtype_kind)
        args = list(view.indices) + ([mask] if mask is not None else [])
        return self.emit("load", args, {"tensor": p.name, "has_mask": mask is not None, "other": other},
                         [_vtype(shape, dt, False)], node).result

    def _write(self, kind: str, node: ast.Call) -> None:
        v_n, x_n, m_n = self.args(node, ["view", "value", "mask"], 2)
        view = self.view_arg(v_n, kind)
        shape = self.view_shape(view)
        x = self.value(self.expr(x_n), x_n)
        if broadcast_shapes(x.shape, shape) != shape:
            raise self.err(f"{kind} of a {_shape(x)} value into a {shape} view of '{view.param.name}'",
                           "make the value's shape match the indexed view (or broadcast to it)", node)
        if view.param.dtype_kind == "int" and x.dtype.is_float:
            raise self.err(f"{kind} of floating-point values into integer tensor '{view.param.name}'",
                           "cast explicitly with .to(int32)", node)
        mask = self.mask_arg(m_n, shape)
        args = list(view.indices) + [x] + ([mask] if mask is not None else [])
        if self.ghost:
            raise self.err(f"{kind} inside a tag expression", "move it out of tag(...)", node)
        self.emit(kind, args, {"tensor": view.param.name, "has_mask": mask is not None,
                               "nidx": len(view.indices)}, [], node)

    def op_store(self, node: ast.Call) -> None:
        self._write("store", node)

    def op_atomic_add(self, node: ast.Call) -> None:
        self._write("atomic_add", node)

    def op_tag(self, node: ast.Call) -> Value:
        if len(node.args) != 1 or not node.keywords:
            raise self.err("tag takes one tile and named tag expressions", "write tag(x, q=rm[:, None])", node)
        x = self.value(self.expr(node.args[0]), node.args[0])
        self.ghost += 1
        try:
            exprs = []
            for kw in node.keywords:
                e = self.value(self.expr(kw.value), kw.value)
                if not e.dtype.is_int:
                    raise self.err(f"tag '{kw.arg}' must be an integer expression", "tag with integer indices",
                                   kw)
                if broadcast_shapes(e.shape, x.shape) != x.shape:
                    raise self.err(f"tag '{kw.arg}' has shape {_shape(e)}, which does not broadcast to {_shape(x)}",
                                   "shape the tag expression like the tagged tile", kw)
                exprs.append(e)
            self.emit("tag", [x] + exprs, {"names": [kw.arg for kw in node.keywords]}, [], node)
        finally:
            self.ghost -= 1
        return x

    def op_assert_tag(self, node: ast.Call) -> None:
        p_n, m_n = self.args(node, ["predicate", "msg"], 1)
        self.ghost += 1
        try:
            p = self.value(self.expr(p_n), p_n)
            if p.dtype != bool_:
                raise self.err("assert_tag needs a boolean predicate", "compare tags, e.g. "
                               "tag_of(s, 'k') <= tag_of(s, 'q')", p_n)
            msg = m_n.value if isinstance(m_n, ast.Constant) and isinstance(m_n.value, str) else ""
            self.emit("assert_tag", [p], {"msg": msg}, [], node)
        finally:
            self.ghost -= 1

    def op_assume(self, node: ast.Call) -> None:
        (p_n,) = self.args(node, ["predicate"], 1)
        self.ghost += 1
        if isinstance(p_n, ast.Constant) and isinstance(p_n.value, str):  # a fact over index tensors, for the checker
            try:
                self.emit("assume", [], {"text": p_n.value}, [], node)
            finally:
                self.ghost -= 1
            return
        try:
            p = self.value(self.expr(p_n), p_n)
            if p.dtype != bool_:
                raise self.err("assume needs a boolean predicate", "compare, e.g. assume((e >= 0) & (e < E))", p_n)
            self.emit("assume", [p], {}, [], node)
        finally:
            self.ghost -= 1

    def op_padding_lanes(self, node: ast.Call) -> Value:
        return self._marked_lanes(node, "padding_lanes", "lanes",
                                  "name the padding rows, e.g. padding_lanes(h, (tok >= T)[:, None])")

    def op_zero_terms(self, node: ast.Call) -> Value:
        return self._marked_lanes(node, "zero_terms", "cond", "name where the term is not zero by definition, "
                                  "e.g. zero_terms(a, inside[None, :])")

    def _marked_lanes(self, node: ast.Call, op: str, pred: str, hint: str) -> Value:
        """A checker-only claim about x's lanes, op(x, predicate): x itself, with the predicate (read as a ghost,
        boolean and shaped like x) recorded for the checker."""
        x_n, p_n = self.args(node, ["x", pred], 2)
        x = self.value(self.expr(x_n), x_n)
        self.ghost += 1
        try:
            p = self.value(self.expr(p_n), p_n)
            if p.dtype != bool_ or broadcast_shapes(p.shape, x.shape) != x.shape:
                raise self.err(f"{op} needs a boolean predicate shaped like {_shape(x)}", hint, p_n)
            self.emit(op, [x, p], {}, [], node)
        finally:
            self.ghost -= 1
        return x

    def op_tag_of(self, node: ast.Call) -> Value:
        x_n, n_n = self.args(node, ["x", "name"], 2)
        if not self.ghost:
            raise self.err("tag_of(...) is only meaningful inside tag(...) or assert_tag(...)",
                           "use it in an assertion; tags do not exist at run time", node)
        x = self.value(self.expr(x_n), x_n)
        if not (isinstance(n_n, ast.Constant) and isinstance(n_n.value, str)):
            raise self.err("tag_of needs the tag name as a string", "write tag_of(x, \"k\")", n_n)
        return self.emit("tag_of", [x], {"name": n_n.value}, [_vtype(x.shape, int32, False)], node).result

    def op_implies(self, node: ast.Call) -> Value:
        a_n, b_n = self.args(node, ["a", "b"], 2)
        a, b = self.value(self.expr(a_n), a_n), self.value(self.expr(b_n), b_n)
        na = self.emit("unary", [a], {"op": "not"}, [a.type], node).result
        return self.binary("or", na, b, node)

    def op_static_range(self, node: ast.Call) -> Any:
        raise self.err("static_range is only valid as a for-loop's iterable", "write `for i in static_range(4):`",
                       node)

    def op_unrolled_range(self, node: ast.Call) -> Any:
        raise self.err("unrolled_range is only valid as a for-loop's iterable",
                       "write `for s in unrolled_range(KSTEPS):`", node)

    def op_unrollable_range(self, node: ast.Call) -> Any:
        raise self.err("unrollable_range is only valid as a for-loop's iterable",
                       "write `for k in unrollable_range(0, K, BK, KSTEPS):`", node)


# ---- helpers ------------------------------------------------------------------------------------
def _binop_name(fe: Frontend, op: ast.operator, node: ast.AST) -> str:
    if type(op) not in _BINOPS:
        raise fe.err(f"operator {type(op).__name__} is not supported", "use +, -, *, /, //, %, &, |", node)
    return _BINOPS[type(op)]


def _vtype(shape: tuple[Dim, ...], dt: AnyDType, const: bool) -> ValueType:
    return TileType(shape, dt) if shape else ScalarType(dt, const)


def _runtime(t: ValueType) -> ValueType:
    return ScalarType(t.dtype) if isinstance(t, ScalarType) else t


def _same_type(a: ValueType, b: ValueType) -> bool:
    return _runtime(a) == _runtime(b)


def _shape(v: Value) -> str:
    return f"({', '.join(map(str, v.shape))})" if v.is_tile else "scalar"


def _static_numel(shape: tuple[Dim, ...]) -> int | None:
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return None
        n *= d
    return n


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
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
