"""What the agent knows about one op: its semantics and reference, the template kernels that implement it
(their parameter lists are the contract an LLM-written kernel must keep), inputs, peers, and how a plan
becomes launch policies."""
from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..dsl import Kernel, Policy
from ..dsl.ir import ConstParam, ScalarParam, TensorParam
from ..dsl.policy import LAUNCH_FIELDS
from ..invariants.readsets import ReadSet
from ..kernels.launch import pow2
from ..kernels.policies import fp32_precision
from .plan import Plan
from .reads import kernel_reads

Inputs = dict[str, Any]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Problem:
    """One concrete instance of a signature: the op, its epilogue, every dim, dtype, layouts, device."""

    op: str
    epilogue: str
    dims: dict[str, int]
    dtype: str = "float32"
    layouts: tuple[str, ...] = ()
    device: str = "cpu"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def with_dims(self, **dims: int) -> Problem:
        return replace(self, dims={**self.dims, **dims})

    def short(self) -> str:
        epi = f"[{self.epilogue}]" if self.epilogue else ""
        return f"{self.op}{epi}(" + ",".join(f"{k}={v}" for k, v in self.dims.items()) + f") {self.dtype}"


def next_pow2(n: int, lo: int = 1) -> int:
    return max(lo, pow2(n))


def strided(shape: tuple[int, ...], layout: str, dtype: torch.dtype, device: str, gen: torch.Generator,
            scale: float = 1.0) -> torch.Tensor:
    """Random values in a tensor of `shape` laid out as the signature says ('col': the last two dims
    transposed in memory)."""
    if layout == "col" and len(shape) >= 2:
        base = randn((*shape[:-2], shape[-1], shape[-2]), dtype, device, gen, scale)
        return base.transpose(-1, -2)
    return randn(shape, dtype, device, gen, scale)


def randn(shape: tuple[int, ...], dtype: torch.dtype, device: str, gen: torch.Generator,
          scale: float = 1.0) -> torch.Tensor:
    """Random normal values made on the device itself (`gen` is a generator of that device)."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype)


def generator(device: str, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: Any, poison: bool) -> torch.Tensor:
    """An output buffer; poisoned with NaN under test, so an element a kernel never writes cannot pass for
    right by holding an earlier result."""
    if poison and dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def kernel_knobs(k: Kernel) -> set[str]:
    """The knob names a kernel accepts: its constexpr parameters and the launch fields."""
    return {p.name for p in k.ir.constexprs} | set(LAUNCH_FIELDS)


def runtime_params(k: Kernel) -> list[tuple[str, int]]:
    """(name, rank) of each runtime parameter in order; scalars have rank -1."""
    out = []
    for p in k.ir.params:
        if isinstance(p, TensorParam):
            out.append((p.name, len(p.dims)))
        elif isinstance(p, ScalarParam):
            out.append((p.name, -1))
    return out


def signature_text(k: Kernel) -> str:
    """The parameter list of a template kernel, as the contract an LLM kernel must keep."""
    parts = []
    for p in k.ir.params:
        if isinstance(p, TensorParam):
            dims = ", ".join(f'"{d}"' for d in p.dims)
            dt = f", dtype={p.fixed_dtype}" if p.fixed_dtype else ""
            parts.append(f"{p.name}: Tensor({dims}{dt})")
        elif isinstance(p, ScalarParam):
            parts.append(f"{p.name}: {'float' if p.dtype == 'float32' else 'int'}")
        elif isinstance(p, ConstParam):
            parts.append(f"{p.name}: constexpr" + (f" = {p.default}" if p.default is not None else ""))
    return f"def {k.name}(" + ", ".join(parts) + ")"


@dataclass
class OpSpec:
    """Subclasses fill in the op-specific parts."""

    name: str = ""
    semantics: str = ""
    static: tuple[str, ...] = ()      # dims fixed by the signature
    dynamic: tuple[str, ...] = ()     # dims bucketed by the signature
    tile_dims: dict[str, dict[str, str]] = field(default_factory=dict)  # kernel -> tile knob -> dim it tiles
    capturable: bool = True           # run() can be captured in a CUDA graph (no host sync inside)
    symbolic_dynamic: bool = True     # prove over whole buckets of the dynamic dims (else at concrete shapes)
    symbols: dict[str, str] = field(default_factory=dict)  # problem dim -> the kernels' shape symbol, where differs
    aux: tuple[str, ...] = ()         # helper kernels whose policy is fixed (fixed_consts), never searched

    # ---- kernels and plans ------------------------------------------------------------------------
    def variants(self, problem: Problem) -> dict[str, dict[str, Kernel]]:
        """Kernel sets that implement the problem, by variant name; the first is the default (and the
        contract an LLM kernel keeps)."""
        raise NotImplementedError

    def contract(self, problem: Problem) -> dict[str, Kernel]:
        return next(iter(self.variants(problem).values()))

    def variant_of(self, problem: Problem, plan: Plan) -> str:
        for name, ks in self.variants(problem).items():
            if set(plan.knobs) == set(ks):
                return name
        raise ValueError(f"plan names kernels {sorted(plan.knobs)}, which no variant of {self.name} has "
                         f"(variants: {', '.join(f'{n}={sorted(k)}' for n, k in self.variants(problem).items())})")

    def regime(self, problem: Problem) -> str:
        return "any"

    def fixed_consts(self, problem: Problem, kernel: str, plan: Plan) -> dict[str, Any]:
        """Constexprs the signature decides (epilogue flags, head-dim block, top-k, ...)."""
        return {}

    def default_plan(self, problem: Problem, target: str) -> Plan:
        raise NotImplementedError

    def policies(self, problem: Problem, plan: Plan, kernels: dict[str, Kernel]) -> dict[str, Policy]:
        """The launch policy of each kernel: the plan's knobs plus the fixed constexprs it declares."""
        out = {}
        for name, k in kernels.items():
            declared = {p.name for p in k.ir.constexprs}
            knobs = dict(plan.knobs.get(name, {}))
            fixed = {c: v for c, v in self.fixed_consts(problem, name, plan).items() if c in declared}
            knobs.update(fixed)
            if problem.dtype == "float32" and problem.device != "cpu":  # torch's matmul precision: not a knob
                knobs["input_precision"] = fp32_precision()
            out[name] = Policy.make(**knobs)
        return out

    # ---- data -----------------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, gen: torch.Generator) -> Inputs:
        raise NotImplementedError

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        raise NotImplementedError

    def run(self, problem: Problem, kernels: dict[str, Kernel], policies: dict[str, Policy],
            inputs: Inputs, poison: bool = False) -> torch.Tensor:
        """Launch the kernels on the inputs; poison: fill output buffers with NaN first (tests)."""
        raise NotImplementedError

    def peers(self, problem: Problem, inputs: Inputs) -> dict[str, Callable[[], Any]]:
        """Vendor implementations to time against (GPU only)."""
        return {}

    def verify_shapes(self, problem: Problem, kernel: str, policy: Policy) -> tuple[dict[str, int], list[str]]:
        """Concrete values of the kernel's shape symbols, and assumptions, for the invariant checker."""
        raise NotImplementedError

    def read_sets(self, problem: Problem, kernel: str) -> tuple[ReadSet, ...]:
        """What each output element of `kernel` (a template, or an agent kernel in its place) must read: its op's read
        sets for this problem's variant (specs/reads.py, one place for the library and the agent)."""
        return kernel_reads(kernel, problem.epilogue)

    def verify_args(self, problem: Problem, kernel: str, policy: Policy,
                    buckets: dict[str, str] | None = None) -> tuple[dict[str, int], list[str]]:
        """What the checker gets: static dims concrete; each dynamic dim symbolic within its bucket (so the proof
        covers every shape the cached kernel will meet), unless the op proves at concrete shapes only."""
        shapes, assumptions = self.verify_shapes(problem, kernel, policy)
        if not self.symbolic_dynamic:
            return shapes, assumptions
        for dim in self.dynamic:
            sym = self.symbols.get(dim, dim)
            if sym not in shapes:
                continue
            lo, hi = bucket_range(buckets[dim]) if buckets and dim in buckets else (shapes[sym], shapes[sym])
            if lo == hi:
                continue
            del shapes[sym]
            assumptions = [*assumptions, f"{lo} <= {sym}", f"{sym} <= {hi}"]
        return shapes, assumptions

    def reference_source(self) -> str:
        return inspect.getsource(type(self).reference)

    def tolerance(self, problem: Problem, target: str) -> float:
        if problem.dtype == "float32":
            return 3e-3 if target != "interpret" else 1e-4
        return 2e-2

    def test_problem(self, problem: Problem, buckets: dict[str, str], rng: random.Random) -> Problem:
        """An odd-shaped instance of the same signature: each dynamic dim drawn from its bucket."""
        dims = dict(problem.dims)
        for d in self.dynamic:
            lo, hi = bucket_range(buckets.get(d, str(dims[d])))
            dims[d] = rng.randint(lo, hi)
        return replace(problem, dims=dims)

    def flops(self, problem: Problem) -> float:
        return math.nan


def bucket_range(b: str) -> tuple[int, int]:
    parts = b.split("-")
    return int(parts[0]), int(parts[-1])
