"""Bounds on what a kernel's text may ask of the frontend, the lowering and the checker.

Kernel text may come from outside the process (an LLM's reply, a cache file), so reading and checking it must
take bounded time and stack whatever it holds. Each bound leaves every library kernel and agent template far
inside it (the figures below were measured over argus_inductor/kernels at the time the bounds were set):

MAX_SOURCE_CHARS  the text of one kernel module: 1 MiB (the library's largest module is under 40 KB)
MAX_NESTING       the syntax tree depth of one kernel function: 64 (the deepest library kernel, conv_transpose_fwd,
                  is 20 deep); the frontend reads by recursion, so this bounds its stack
MAX_NODES         the syntax tree nodes of one kernel function: 50,000 (the largest library kernel has 1,554); a
                  20,000-term expression is over it
MAX_UNROLL        the loop bodies a kernel's static loops (static_range, unrolled_range, unrollable_range's static
                  steps) unroll to, summed over the kernel, nested static loops multiplying: 4,096. The library's
                  largest is a pooling window (KD * KH * KW, 27 for a 3x3x3 window) or a GEMV's rows times its static
                  K steps (BM * KSTEPS, KSTEPS <= 4); the checker unrolls each body (~0.4 ms an iteration for a small
                  body), and Triton copies each into the compiled kernel. A longer loop is a range(...) loop: the
                  checker reads it once, symbolically.
"""
from __future__ import annotations

import ast
from typing import Any

from .errors import DSLError, LaunchError
from .evaluate import eval_scalar
from .ir import Block, KernelIR, Op

MAX_SOURCE_CHARS = 1 << 20
MAX_NESTING = 64
MAX_NODES = 50_000
MAX_UNROLL = 4096


def check_tree(fn: ast.AST, *, filename: str, first_line: int, src_lines: list[str], name: str) -> None:
    """Raise a DSLError where one kernel function's syntax tree is deeper than MAX_NESTING or larger than MAX_NODES
    (walked without recursion, so the check itself is safe on any tree ast.parse returns)."""
    nodes = 0
    stack: list[tuple[ast.AST, int]] = [(fn, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_NESTING or nodes > MAX_NODES:
            rel = getattr(node, "lineno", None) or getattr(fn, "lineno", 1)
            src = src_lines[rel - 1] if 0 < rel <= len(src_lines) else None
            if depth > MAX_NESTING:
                msg = f"the kernel nests deeper than {MAX_NESTING} levels here"
            else:
                msg = f"the kernel is larger than {MAX_NODES:,} syntax nodes"
            raise DSLError(msg, fix="split long or deeply nested expressions into named steps, one per line",
                           line=first_line + rel - 1, filename=filename, source_line=src, kernel=name)
        stack.extend((c, depth + 1) for c in ast.iter_child_nodes(node))


def _known(v: Any, consts: dict[str, Any]) -> Any:
    """The value of a scalar IR expression under `consts`, or None where it depends on something not given."""
    try:
        return eval_scalar(v, consts)
    except (KeyError, LaunchError, ArithmeticError, TypeError, ValueError):
        return None


def _trips(op: Op, consts: dict[str, Any]) -> int | None:
    start, stop, step = (_known(v, consts) for v in op.args[:3])
    if step == 0:
        return 0  # reported by the caller
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, stop, step)):
        return None
    return len(range(start, stop, step))


def _loop_name(op: Op) -> str:
    return "unrolled_range" if op.attrs.get("symbolic") else "static_range"


def unrolled_bodies(ir: KernelIR, consts: dict[str, Any], limit: int | None = None) -> int:
    """The loop bodies the kernel's static loops unroll to with these constexpr values: each static loop's trip
    count times those of the static loops around it, summed (a loop whose bounds are not known here counts as one
    trip; a static if whose condition is known counts its taken branch only). Raises a DSLError at the first loop
    that takes the count past `limit`, or that steps by zero."""
    src_lines = ir.source.splitlines()

    def fail(op: Op, message: str, fix: str) -> DSLError:
        rel = op.line - ir.first_line + 1
        src = src_lines[rel - 1] if 0 < rel <= len(src_lines) else None
        return DSLError(message, fix=fix, line=op.line, filename=ir.filename, source_line=src, kernel=ir.name)

    total = 0

    def walk(block: Block, factor: int) -> None:
        nonlocal total
        for op in block.ops:
            blocks = op.blocks
            inner = factor
            if op.kind == "if" and op.attrs.get("static"):
                cond = _known(op.args[0], consts)
                if cond is not None:
                    blocks = [op.blocks[0 if cond else 1]]
            elif op.kind == "for" and op.attrs.get("static"):
                if _known(op.args[2], consts) == 0:
                    raise fail(op, f"this {_loop_name(op)} steps by zero", "give the loop a nonzero step")
                n = _trips(op, consts)
                if n is not None:
                    inner = factor * n
                    total += inner
                    if limit is not None and total > limit:
                        nest = f" ({factor:,} times {n:,}, nested)" if factor > 1 else ""
                        raise fail(op, f"the kernel's static loops unroll to {total:,} loop bodies here{nest}, more "
                                       f"than the {limit:,} a kernel may unroll",
                                   "write a long loop as range(...), which is not unrolled (the checker reads it "
                                   "once, symbolically), or unroll fewer steps")
            for b in blocks:
                walk(b, inner)

    walk(ir.body, 1)
    return total


def check_unrolling(ir: KernelIR, consts: dict[str, Any]) -> None:
    """Raise a DSLError where the kernel's static loops, with these constexpr values, unroll to more than
    MAX_UNROLL loop bodies (see unrolled_bodies), or one steps by zero."""
    unrolled_bodies(ir, consts, MAX_UNROLL)
