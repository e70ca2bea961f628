"""The typed IR the frontend produces: SSA values, ops with source lines, structured loops and ifs."""
from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .types import AnyDType, Dim, ScalarType, TileType, ValueType


@dataclass(eq=False)
class Value:
    id: int
    type: ValueType
    hint: str = ""          # the Python name it was bound to, for readable Triton source
    owner: Op | None = None  # the op that defines it (None for block arguments)

    @property
    def is_tile(self) -> bool:
        return isinstance(self.type, TileType)

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.type.shape if isinstance(self.type, TileType) else ()

    @property
    def dtype(self) -> AnyDType:
        return self.type.dtype

    @property
    def is_const(self) -> bool:
        return isinstance(self.type, ScalarType) and self.type.const

    def __repr__(self) -> str:
        return f"%{self.hint or 'v'}{self.id}"


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)      # loop-carried values (for loop bodies)
    ops: list[Op] = field(default_factory=list)
    yields: list[Value] = field(default_factory=list)    # values handed to the next iteration / the if's results


@dataclass(eq=False)
class Op:
    """One operation. `kind` names it; `attrs` hold its static parameters.

    Kinds: const, constexpr, param, shape, tile_grid, arange, full, binary, unary, where, cast,
    expand, broadcast_to, reshape, trans, reduce, scan, mma, load, store, atomic_add, tag, assert_tag,
    for, if.  `for` has blocks[0] = body, whose first arg is the induction variable;
    `if` has blocks [then, else].
    """

    kind: str
    args: list[Value]
    attrs: dict[str, Any]
    results: list[Value]
    line: int
    blocks: list[Block] = field(default_factory=list)
    ghost: bool = False  # only feeds tags/assertions: never lowered

    @property
    def result(self) -> Value:
        return self.results[0]

    @property
    def checker_only(self) -> bool:
        """A statement for the checker (a tag, an assertion, what only feeds them): never lowered, never run."""
        return self.ghost or self.kind in ("tag", "assert_tag", "tag_of")


@dataclass(frozen=True)
class TensorParam:
    name: str
    dims: tuple[str, ...]   # shape symbols, e.g. ("M", "K")
    dtype_kind: str          # "float" or "int"
    fixed_dtype: str | None  # a declared dtype name, or None (bound at launch)


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: str  # "float32", "int32" or "int64"


@dataclass(frozen=True)
class ConstParam:
    name: str
    default: Any = None


Param = TensorParam | ScalarParam | ConstParam


@dataclass(eq=False)
class KernelIR:
    name: str
    params: list[Param]
    body: Block
    filename: str
    first_line: int
    source: str
    grid: Op | None = None  # the tile_grid op
    symbols: dict[str, tuple[str, int]] = field(default_factory=dict)  # shape symbol -> (tensor, dim)

    def tensor(self, name: str) -> TensorParam:
        for p in self.params:
            if isinstance(p, TensorParam) and p.name == name:
                return p
        raise KeyError(name)

    @property
    def tensors(self) -> list[TensorParam]:
        return [p for p in self.params if isinstance(p, TensorParam)]

    @property
    def constexprs(self) -> list[ConstParam]:
        return [p for p in self.params if isinstance(p, ConstParam)]

    @property
    def scalars(self) -> list[ScalarParam]:
        return [p for p in self.params if isinstance(p, ScalarParam)]

    def walk(self) -> Iterator[Op]:
        yield from walk_block(self.body)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def dump(self) -> str:
        lines = [f"kernel {self.name}({', '.join(_param_str(p) for p in self.params)})"]
        _dump_block(self.body, lines, "  ")
        return "\n".join(lines)


def walk_block(block: Block) -> Iterator[Op]:
    for op in block.ops:
        yield op
        for b in op.blocks:
            yield from walk_block(b)


def _param_str(p: Param) -> str:
    if isinstance(p, TensorParam):
        return f"{p.name}: tensor[{', '.join(p.dims)}]<{p.fixed_dtype or p.dtype_kind}>"
    if isinstance(p, ScalarParam):
        return f"{p.name}: {p.dtype}"
    return f"{p.name}: constexpr"


def _dump_block(block: Block, lines: list[str], indent: str) -> None:
    if block.args:
        lines.append(f"{indent}args {', '.join(f'{a!r}: {a.type}' for a in block.args)}")
    for op in block.ops:
        res = ", ".join(f"{r!r}: {r.type}" for r in op.results)
        attrs = ", ".join(f"{k}={v}" for k, v in op.attrs.items())
        ghost = " ghost" if op.ghost else ""
        lines.append(f"{indent}{res + ' = ' if res else ''}{op.kind}({', '.join(map(repr, op.args))})"
                     f"{' {' + attrs + '}' if attrs else ''}{ghost}  # line {op.line}")
        for b in op.blocks:
            _dump_block(b, lines, indent + "  ")
    if block.yields:
        lines.append(f"{indent}yield {', '.join(map(repr, block.yields))}")
