"""The interpreter's state and how it records proof obligations; the op rules live in the modules of each IR
op family (elementwise, reductions, memory, ghosts, loops), combined in interpreter.Interpreter."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import z3

from ..dsl.ir import Block, KernelIR, Op, TensorParam, Value
from ..dsl.policy import Policy
from ..dsl.types import TileType
from .obligations import Access, Instance, LoopInfo, Obligation, Renamer
from .readsets import ReadSet
from .staging import StagingHook, default_staging
from .tags import (
    AVal,
    Expr,
    ax,
    conj,
    fresh,
    lines,
    subst,
)


class CheckerError(Exception):
    """The kernel's assertions cannot be checked as written (e.g. tag_of names a missing tag)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class BudgetExceeded(Exception):
    """The checker's time budget (verify's budget_s) ran out while it interpreted the op at `line`."""

    def __init__(self, line: int, seconds: float) -> None:
        super().__init__(f"the {seconds:g} s budget ran out while interpreting line {line}")
        self.line = line
        self.seconds = seconds


CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def kind_of(dtype: Any) -> str:
    return "bool" if dtype.kind == "bool" else ("int" if dtype.is_int else "float")


def bits_of(dtype: Any) -> int:
    return int(getattr(dtype, "bits", 32) or 32)




_ids = iter(range(1, 1 << 62))


def next_id() -> int:
    """A fresh number for the names of the checker's variables (unique in the process)."""
    return next(_ids)


class InterpreterBase:
    def __init__(self, ir: KernelIR, policy: Policy, consts: dict[str, Any], shapes: dict[str, Expr],
                 staging: StagingHook | None = default_staging, deadline: float | None = None,
                 budget_s: float = 0.0, reads: Sequence[ReadSet] = ()) -> None:
        self.ir = ir
        self.reads = tuple(reads)  # the op's read sets (readsets.py): what each output element must read
        self.deadline = deadline  # time.perf_counter() past which interpretation stops (BudgetExceeded)
        self.budget_s = budget_s
        self.policy = policy
        self.consts = consts
        self.shapes = shapes
        self.staging = staging
        self.tensors: dict[str, TensorParam] = {p.name: p for p in ir.tensors}
        self.env: dict[int, AVal] = {}
        self.ctx: list[Expr] = []
        # a load's result: its tile indices' in-bounds conditions, and the user's mask (zero_terms)
        self.auto_masks: dict[int, tuple[list[Expr], Expr]] = {}
        self.loops: list[LoopInfo] = []
        self.muted = 0
        self.obligations: list[Obligation] = []
        self.accesses: list[Access] = []
        self.assumes: list[Expr] = []
        self.assume_lines: list[int] = []  # the source line of each of `assumes`
        self.pids: list[tuple[str, Expr, Expr]] = []
        self.background: list[Expr] = []
        self.inst_vars: list[Expr] = []
        self.ufs: dict[str, z3.FuncDeclRef] = {}
        self.notes: list[str] = []
        self.unfollowed: list[str] = []  # what no proof may rest on: reported as undecided
        self.unrolled = 1  # the product of the trip counts of the static loops being unrolled around this point
        self.yielded: set[int] = set()  # the values the loop bodies around this point hand to their next iteration
        self.errors: list[str] = []  # the checker-only statements that could not be read (line: why)
        self.unreadable: set[int] = set()  # the values those made: what reads them is skipped
        # each assert_tag's (op, shape, context, where its tags are defined): one that applies nowhere is an error
        self.vacuity: list[tuple[Op, tuple[int, ...], Expr, Expr]] = []
        self.arg_owner: dict[int, Op] = {}
        for op in ir.walk():
            for blk in op.blocks:
                for a in blk.args:
                    self.arg_owner[a.id] = op

    def index_lines(self, acc: Access) -> tuple[int, ...]:
        """Where a write's address comes from: its index computations and the launch grid."""
        grid = (self.ir.grid.line,) if self.ir.grid is not None else ()
        return lines(self.def_lines(acc.op.args[:acc.op.attrs["nidx"]]), grid)

    def def_lines(self, values: list[Value], depth: int = 0) -> tuple[int, ...]:
        """The source lines that define these values (looking through shape-only wrappers and the
        branches of an `if` that produced them)."""
        out: list[int] = []
        for v in values:
            seen = 0
            op = v.owner or self.arg_owner.get(v.id)
            while op is not None and op.kind in ("expand", "broadcast_to", "trans", "cast", "reshape") and seen < 8:
                v = op.args[0]
                op = v.owner or self.arg_owner.get(v.id)
                seen += 1
            if op is not None and op.kind == "if" and v in op.results and depth < 4:
                i = op.results.index(v)
                out += self.def_lines([b.yields[i] for b in op.blocks if i < len(b.yields)], depth + 1)
            elif op is not None and op.kind not in ("const", "constexpr", "shape", "param"):
                out.append(op.line)
        return lines(out)

    def snapshot(self) -> tuple[int, ...]:
        """Where the recorded obligations, accesses, assumptions and notes stand (to take a loop pass back)."""
        return (len(self.obligations), len(self.accesses), len(self.assumes), len(self.notes), len(self.unfollowed))

    def restore(self, mark: tuple[int, ...]) -> None:
        ob, acc, asm, notes, unf = mark
        del self.obligations[ob:], self.accesses[acc:], self.assumes[asm:], self.assume_lines[asm:]
        del self.notes[notes:], self.unfollowed[unf:]

    # ---- driver ---------------------------------------------------------------------------------------
    def run(self) -> None:
        self.block(self.ir.body)

    def renamer(self) -> Renamer:
        return Renamer(self.pids, self.inst_vars)

    def block(self, block: Block) -> None:
        for op in block.ops:
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise BudgetExceeded(op.line, self.budget_s)
            handler = getattr(self, f"op_{op.kind}", None)
            if handler is None:
                raise CheckerError(f"the checker has no rule for '{op.kind}'", op.line)
            if not op.checker_only:
                handler(op)
                continue
            # a statement for the checker alone (a tag, an assertion) that cannot be read is an error of its own: the
            # rest of the kernel is still checked (its read sets and obligations give their counterexamples), and
            # what the statement made is left out of every later statement that reads it
            if any(a.id in self.unreadable for a in op.args):
                self.unreadable.update(r.id for r in op.results)
                continue
            try:
                handler(op)
            except CheckerError as e:
                if not self.muted:
                    self.errors.append(f"line {e.line}: {e}")
                self.unreadable.update(r.id for r in op.results)
                if op.kind == "tag":
                    self.unreadable.add(op.args[0].id)

    def get(self, v: Value) -> AVal:
        return self.env[v.id]

    def put(self, v: Value, a: AVal) -> None:
        self.env[v.id] = a

    def dim(self, d: Any) -> int:
        return int(self.consts[d]) if isinstance(d, str) else int(d)

    def shape_of(self, v: Value) -> tuple[int, ...]:
        return tuple(self.dim(d) for d in v.shape) if isinstance(v.type, TileType) else ()

    def extent(self, tensor: str, d: int) -> Expr:
        return self.shapes[self.tensors[tensor].dims[d]]

    def uf(self, tensor: str) -> z3.FuncDeclRef:
        if tensor not in self.ufs:
            n = len(self.tensors[tensor].dims)
            self.ufs[tensor] = z3.Function(f"uf:{tensor}", *([z3.IntSort()] * n), z3.IntSort())
        return self.ufs[tensor]

    def havoc(self, kind: str) -> Expr:
        v = fresh("hv", z3.BoolSort() if kind == "bool" else z3.IntSort())
        self.inst_vars.append(v)
        return v

    # ---- obligations ------------------------------------------------------------------------------------
    def instance(self, shape: tuple[int, ...], bits: int = 32, label: str = "") -> tuple[list, Instance, Expr]:
        coords = [z3.Int(f"crd:{d}#{next_id()}") for d in range(len(shape))]
        sub = [(ax(d), c) for d, c in enumerate(coords)]
        dom = conj([z3.And(c >= 0, c < n) for c, n in zip(coords, shape)])
        inst = Instance(pids=[(h, v) for h, v, _ in self.pids],
                        loops=[(lp.var, lp.iv, lp.it) for lp in self.loops],
                        coords=coords, shape=shape, bits=bits, label=label)
        return sub, inst, dom

    def check(self, kind: str, op: Op, shape: tuple[int, ...], body: Expr,
              describe: Callable[[dict[str, Any]], str], watch: dict[str, Expr] | None = None,
              bits: int = 32, related: tuple[int, ...] = ()) -> None:
        """An obligation over one element of a tile of `shape`: `body` (over the axis placeholders)
        describes a violation at that element."""
        if self.muted or z3.is_false(body):
            return
        sub, inst, dom = self.instance(shape, bits)
        formula = conj([dom] + self.ctx + [subst(body, sub)])
        w = {k: subst(e, sub) for k, e in (watch or {}).items()}
        self.obligations.append(Obligation(kind, op, formula, describe, [inst], w,
                                           related=tuple(x for x in related if x != op.line)))

