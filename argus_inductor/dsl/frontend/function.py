"""One kernel function: its parameters (tensors, scalars, constexprs), then its body through the statement,
expression and operation readers, into a KernelIR."""
from __future__ import annotations

import ast
from typing import Any

from .. import lang
from ..ir import Block, ConstParam, KernelIR, ScalarParam, TensorParam, walk_block
from ..types import DTYPES, DType, ScalarType, int32
from .core import TensorRef
from .expressions import ExpressionReader
from .operations import OperationReader
from .statements import StatementReader


class Frontend(StatementReader, ExpressionReader, OperationReader):
    """Reads one kernel's FunctionDef (never executing it) into its KernelIR: `Frontend(tree, ...).build()`."""

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
