"""A z3 model of a violated obligation, rendered for a person (and an LLM) and as JSON.

The model names one execution: program ids, loop iterations, the element's coordinates; the
element is mapped to the thread that holds it through the tile's default blocked layout for the
policy's num_warps (the layout Triton's coalescing pass gives a row-major tile).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import z3

from ..dsl.ir import KernelIR
from .obligations import Instance, Obligation
from .tags import Expr


@dataclass
class Execution:
    """One execution of the op: which program, which loop iterations, which element and thread."""

    program: dict[str, int]
    iterations: dict[str, int]
    element: list[int]
    thread: dict[str, int] | None = None
    label: str = ""

    def text(self) -> str:
        parts = []
        if self.program:
            parts.append("program (" + ", ".join(f"{k}={v}" for k, v in self.program.items()) + ")")
        for k, v in self.iterations.items():
            parts.append(f"iteration {k}={v}")
        if self.element:
            s = f"element ({', '.join(map(str, self.element))})"
            if self.thread is not None:
                t = self.thread
                s += f" held by thread {t['thread']} (warp {t['warp']}, lane {t['lane']})"
            parts.append(s)
        return ", ".join(parts)


@dataclass
class Violation:
    kernel: str
    kind: str
    line: int
    op: str
    source: str
    message: str
    executions: list[Execution] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, int] = field(default_factory=dict)
    filename: str = ""
    related: list[int] = field(default_factory=list)  # other lines involved (index math, loops, loads)

    @property
    def lines(self) -> list[int]:
        return [self.line] + [x for x in self.related if x != self.line]

    @property
    def headline(self) -> str:
        where = self.executions[0].text() if self.executions else ""
        return f"{where + ' ' if where else ''}at line {self.line}: {self.message}"

    def text(self) -> str:
        lines = [f"{self.kernel}: {self.kind} violated at {self.filename}:{self.line} ({self.op})",
                 f"    {self.source.strip()}",
                 f"  {self.headline}"]
        for ex in self.executions[1:]:
            lines.append(f"  {ex.label or 'and'}: {ex.text()}")
        if self.related:
            lines.append("  involves lines " + ", ".join(map(str, self.related)))
        if self.shapes:
            lines.append("  shapes: " + ", ".join(f"{k}={v}" for k, v in self.shapes.items()))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _num(model: z3.ModelRef, e: Expr) -> Any:
    v = model.eval(e, model_completion=True)
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_true(v):
        return True
    if z3.is_false(v):
        return False
    if z3.is_rational_value(v):
        return float(v.as_fraction())
    return str(v)


def owner(shape: tuple[int, ...], coord: list[int], num_warps: int, bits: int) -> dict[str, int] | None:
    """The thread holding `coord` of a tile under the default blocked layout (None if not a Triton tile)."""
    if not shape or any(n < 1 or n & (n - 1) for n in shape):
        return None
    try:
        from ..layout.thread_value import default_blocked

        lay = default_blocked(shape, num_warps, elem_bytes=max(1, bits // 8))
        warp, lane, value = lay.owner_warp_lane(tuple(coord))
    except Exception:  # a layout the algebra cannot build is not worth failing a report over
        return None
    return {"thread": warp * lay.warp_size + lane, "warp": warp, "lane": lane, "register": value}


def execution(model: z3.ModelRef, inst: Instance, num_warps: int) -> Execution:
    program = {h: _num(model, v) for h, v in inst.pids}
    iterations = {name: _num(model, iv) for name, iv, _ in inst.loops}
    element = [_num(model, c) for c in inst.coords]
    thread = owner(inst.shape, element, num_warps, inst.bits) if element else None
    return Execution(program, iterations, element, thread, inst.label)


def source_line(ir: KernelIR, line: int) -> str:
    """The kernel's source text at `line` (of its file), "" outside the kernel."""
    lines = ir.source.splitlines()
    i = line - ir.first_line
    return lines[i] if 0 <= i < len(lines) else ""


def render(ir: KernelIR, ob: Obligation, model: z3.ModelRef, num_warps: int,
           shapes: dict[str, Expr]) -> Violation:
    values = {k: _num(model, e) for k, e in ob.watch.items()}
    try:
        message = ob.describe(values)
    except Exception as e:  # a message must never hide the violation itself
        message = f"{ob.kind} ({e})"
    return Violation(
        kernel=ir.name, kind=ob.kind, line=ob.op.line, op=ob.op.kind, source=source_line(ir, ob.op.line),
        message=message,
        executions=[execution(model, inst, num_warps) for inst in ob.instances],
        values=values, shapes={k: _num(model, v) for k, v in shapes.items()}, filename=ir.filename,
        related=sorted(set(ob.related) - {ob.op.line}))
