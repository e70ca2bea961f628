"""The DSL's operations (argus_inductor.dsl.lang): each op_<name> reads one call's arguments, checks them and
emits its IR op."""
from __future__ import annotations

import ast
from typing import Any

from ..ir import Value
from ..lang import ACTIVATION_KINDS
from ..types import (
    DTYPES,
    MMA_OPERAND_DTYPES,
    AnyDType,
    Dim,
    DType,
    ScalarType,
    TensorDType,
    TileType,
    bool_,
    broadcast_shapes,
    float32,
    int32,
    promote,
)
from .core import FrontendBase, ViewRef, shape_text, static_numel, vtype


class OperationReader(FrontendBase):
    """One method per DSL operation: op_<name>(call node) -> its result (None for a statement)."""

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
        shape = self.staticshape_text(shape_n)
        return self.emit("full", [], {"shape": shape, "value": 0, "dtype": dt}, [TileType(shape, dt)],
                         node).result

    def op_full(self, node: ast.Call) -> Value:
        shape_n, val_n, dt_n = self.args(node, ["shape", "value", "dtype"], 2)
        dt = self.dtype_arg(dt_n) if dt_n is not None else float32
        shape = self.staticshape_text(shape_n)
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
            raise self.err(f"where's operands {shape_text(c)}, {shape_text(a)}, {shape_text(b)} do not broadcast",
                           "add axes with [:, None] / [None, :] so the shapes line up", node)
        dt = promote(a.dtype, b.dtype)
        return self.emit("where", [c, a, b], {}, [vtype(shape, dt, False)], node).result

    def op_math(self, name: str, node: ast.Call) -> Value:
        (x_n,) = self.args(node, ["x"], 1)
        x = self.value(self.expr(x_n), x_n)
        if not x.dtype.is_float and name not in ("abs", "relu"):
            raise self.err(f"{name} needs a floating-point operand, got {x.dtype}",
                           "cast first, e.g. x.to(float32)", node)
        dt = x.dtype if name in ("abs", "relu") else float32
        return self.emit("unary", [x], {"op": name}, [vtype(x.shape, dt, False)], node).result

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
        return self.emit("unary", [x], {"op": "activation", "kind": kind}, [vtype(x.shape, float32, False)],
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
        return self.emit("reduce", [x], {"op": name, "axis": axis}, [vtype(shape, dt, False)], node).result

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
                         [vtype(x.shape, dt, False)], node).result

    def op_trans(self, node: ast.Call) -> Value:
        (x_n,) = self.args(node, ["x"], 1)
        return self.trans(self.value(self.expr(x_n), x_n), node)

    def op_reshape(self, node: ast.Call) -> Value:
        x_n, s_n = self.args(node, ["x", "shape"], 2)
        x = self.value(self.expr(x_n), x_n)
        shape = self.staticshape_text(s_n)
        if static_numel(shape) is not None and static_numel(x.shape) is not None \
                and static_numel(shape) != static_numel(x.shape):
            raise self.err(f"reshape from {shape_text(x)} to {shape} changes the element count",
                           "keep the product of the extents equal", node)
        return self.emit("reshape", [x], {"shape": shape}, [TileType(shape, x.dtype)], node).result

    def op_broadcast_to(self, node: ast.Call) -> Value:
        x_n, s_n = self.args(node, ["x", "shape"], 2)
        x = self.value(self.expr(x_n), x_n)
        shape = self.staticshape_text(s_n)
        if broadcast_shapes(x.shape, shape) != shape:
            raise self.err(f"{shape_text(x)} does not broadcast to {shape}", "add axes with [:, None] first", node)
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
            raise self.err(f"mma inner extents differ: a is {shape_text(a)}, b is {shape_text(b)}",
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

    def viewshape_text(self, v: ViewRef) -> tuple[Dim, ...]:
        return tuple(i.shape[0] for i in v.indices if i.is_tile)

    def mask_arg(self, node: ast.expr | None, shape: tuple[Dim, ...]) -> Value | None:
        if node is None:
            return None
        m = self.value(self.expr(node), node)
        if m.dtype != bool_:
            raise self.err(f"mask has dtype {m.dtype}", "pass a comparison tile, e.g. rm < M", node)
        if broadcast_shapes(m.shape, shape) != shape:
            raise self.err(f"mask {shape_text(m)} does not broadcast to the access {shape}",
                           "shape the mask like the accessed tile", node)
        return m

    def op_load(self, node: ast.Call) -> Value:
        v_n, m_n, o_n = self.args(node, ["view", "mask", "other"], 1)
        view = self.view_arg(v_n, "load")
        shape = self.viewshape_text(view)
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
                         [vtype(shape, dt, False)], node).result

    def _write(self, kind: str, node: ast.Call) -> None:
        v_n, x_n, m_n = self.args(node, ["view", "value", "mask"], 2)
        view = self.view_arg(v_n, kind)
        shape = self.viewshape_text(view)
        x = self.value(self.expr(x_n), x_n)
        if broadcast_shapes(x.shape, shape) != shape:
            raise self.err(f"{kind} of a {shape_text(x)} value into a {shape} view of '{view.param.name}'",
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
                    raise self.err(f"tag '{kw.arg}' has shape {shape_text(e)}, which does not broadcast to "
                                   f"{shape_text(x)}", "shape the tag expression like the tagged tile", kw)
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
                raise self.err(f"{op} needs a boolean predicate shaped like {shape_text(x)}", hint, p_n)
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
        return self.emit("tag_of", [x], {"name": n_n.value}, [vtype(x.shape, int32, False)], node).result

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
