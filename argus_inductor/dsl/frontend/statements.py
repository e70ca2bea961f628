"""Statements: assignment, for loops (range, static and unrolled), if, and the names they bind."""
from __future__ import annotations

import ast
import builtins
from typing import Any

from ..ir import Block, Op, Value
from ..types import ScalarType, int32
from .core import (
    MISSING,
    UNSUPPORTED_FIX,
    FrontendBase,
    LoopLocal,
    TensorRef,
    ViewRef,
    assigned_names,
    binop_name,
    runtime_type,
    same_type,
)


class StatementReader(FrontendBase):
    """Reads statements into the current block; loops and ifs open blocks of their own."""

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
            self.assign(st.target, self.binary(binop_name(self, st.op, st), left, self.expr(st.value), st), st)
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
                           UNSUPPORTED_FIX.get(name, "rewrite it with DSL operations, for loops and if"), st)

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
        if g is MISSING:
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
        fn = self.static_object(it.func) if isinstance(it, ast.Call) else MISSING
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
        assigned = assigned_names(st.body)
        carried = [n for n in assigned if isinstance(self.env.get(n), Value)]
        inits = [self.env[n] for n in carried]
        body = Block()
        iv = self.new_value(ScalarType(int32), st.target.id)
        body.args.append(iv)
        for n, v in zip(carried, inits):
            arg = self.new_value(runtime_type(v.type), n)
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
            if not isinstance(new, Value) or not same_type(new.type, init.type):
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
        assigned_then = assigned_names(st.body)
        assigned_else = assigned_names(st.orelse)
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
            if not same_type(vals[0].type, vals[1].type):
                raise self.err(f"'{n}' has type {vals[0].type} in one branch and {vals[1].type} in the other",
                               "make both branches produce the same shape and dtype", st)
            op.blocks[0].yields.append(vals[0])
            op.blocks[1].yields.append(vals[1])
            r = self.new_value(runtime_type(vals[0].type) if not cond.is_const else vals[0].type, n)
            r.owner = op
            op.results.append(r)
            self.env[n] = r
        for n in dict.fromkeys(assigned_then + assigned_else):
            if n not in results and n not in outer:
                self.env[n] = LoopLocal(st.lineno)
