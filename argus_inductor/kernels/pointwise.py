"""Synthesized elementwise kernels and GEMM/convolution epilogues from a small expression IR.

A `Chain` is straight-line elementwise code: each `Step` applies one op (torch float semantics,
computed in float32) to operands that are the chain's input tensors (broadcast to the output shape),
constants or earlier steps; the last step is the result. From a chain this module writes DSL source
text (never executed: it is read with `kernels_from_source`) for

* `pointwise`: one kernel over rank-4 views of the (broadcast) inputs and the output,
* `pointwise_sum`: the same views summed as they are computed, a float32 partial per program (its tile
  partition stated as tag assertions), then the partials added in order by `reduce.sum_partials_kernel`, and
* `linear_chain` / `conv_chain`: the library GEMM / convolution kernel with the chain spliced in
  before its store (the chain's input 0 is the GEMM/conv result, the others extra tensors read at the
  store's indices).

Each generated kernel states, as a tag assertion, that every input element it reads sits at the
position of the output element it is combined with.
"""
from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..dsl import Policy, kernels_from_source
from ..dsl.runtime import Kernel
from .conv import ConvGeometry, conv_fwd, conv_output_view, conv_policies, conv_transpose_fwd, conv_weight_view
from .gemm import gemm_epilogue
from .launch import pick as _pick
from .launch import pow2_between
from .launch import resolve_target as _target
from .reduce import sum_partials_kernel

__all__ = [
    "Step", "Chain", "Operand", "OPS", "KERNELS", "pointwise", "pointwise_policies", "pointwise_kernel",
    "pointwise_source", "pointwise_sum", "pointwise_sum_policies", "pointwise_sum_kernel", "pointwise_sum_source",
    "sum_view_shape",
    "linear_chain", "linear_chain_policies", "linear_chain_kernel", "linear_chain_source",
    "conv_chain", "conv_chain_policies", "conv_chain_kernel", "conv_chain_source",
]

Operand = tuple[str, Any]
"""("in", i): the i-th input tensor; ("const", x): a number; ("step", j): the value of step j < this one."""

_REQUIRED = object()


@dataclass(frozen=True)
class _OpSpec:
    """How many value operands an op takes, then its constant parameters (name, default)."""

    values: int
    params: tuple[tuple[str, Any], ...] = ()


_UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "relu", "gelu", "gelu_tanh",
          "silu", "selu", "hardsigmoid", "hardswish", "mish", "softsign", "reciprocal", "square")
_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")

OPS: dict[str, _OpSpec] = {
    **{op: _OpSpec(1) for op in _UNARY},
    **{op: _OpSpec(2) for op in _BINARY},
    "pow": _OpSpec(1, (("exponent", _REQUIRED),)),
    "clamp": _OpSpec(1, (("min", _REQUIRED), ("max", _REQUIRED))),
    "clamp_min": _OpSpec(1, (("min", _REQUIRED),)),
    "clamp_max": _OpSpec(1, (("max", _REQUIRED),)),
    "leaky_relu": _OpSpec(1, (("negative_slope", 0.01),)),
    "hardtanh": _OpSpec(1, (("min_val", -1.0), ("max_val", 1.0))),
    "softplus": _OpSpec(1, (("beta", 1.0), ("threshold", 20.0))),
    "elu": _OpSpec(1, (("alpha", 1.0),)),
}
"""Every op a chain may use: value operands first, then its constant parameters (trailing ones optional)."""

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


# ---- the IR ------------------------------------------------------------------------------------------------------
def _operand(a: Any, where: str) -> Operand:
    if not isinstance(a, (tuple, list)) or len(a) != 2 or a[0] not in ("in", "const", "step"):
        raise ValueError(f"{where}: an operand is ('in', i), ('const', number) or ('step', j), got {a!r}")
    kind, v = a
    if kind == "const":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise ValueError(f"{where}: a constant must be a number (not NaN), got {v!r}")
        return ("const", float(v))
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{where}: the index of ({kind!r}, ...) must be a non-negative int, got {v!r}")
    return (kind, v)


@dataclass(frozen=True)
class Step:
    """One op of a chain applied to its operands (value operands, then constant parameters)."""

    op: str
    args: tuple[Operand, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or self.op not in OPS:
            raise ValueError(f"unknown pointwise op {self.op!r}; known ops: {', '.join(sorted(OPS))}")
        if not isinstance(self.args, (tuple, list)):
            raise ValueError(f"{self.op}: args must be a tuple of operands, got {type(self.args).__name__}")
        object.__setattr__(self, "args", tuple(_operand(a, self.op) for a in self.args))
        spec = OPS[self.op]
        need = spec.values + sum(1 for _, d in spec.params if d is _REQUIRED)
        most = spec.values + len(spec.params)
        if not need <= len(self.args) <= most:
            names = ["x", "y"][:spec.values] + [n for n, _ in spec.params]
            raise ValueError(f"{self.op} takes {need}..{most} operands ({', '.join(names)}), got {len(self.args)}")
        values, params = self.args[:spec.values], self.args[spec.values:]
        for (name, _), p in zip(spec.params, params):
            if p[0] != "const":
                raise ValueError(f"{self.op}: parameter {name} must be ('const', number), got {p!r}")
        if all(v[0] == "const" for v in values):
            raise ValueError(f"{self.op}: at least one value operand must be a tensor ('in', i) or a step "
                             f"('step', j), got {values!r}")

    def values(self) -> tuple[Operand, ...]:
        return self.args[:OPS[self.op].values]

    def params(self) -> tuple[float, ...]:
        """The constant parameters, defaults filled in."""
        spec = OPS[self.op]
        given = [a[1] for a in self.args[spec.values:]]
        return tuple(given[i] if i < len(given) else d for i, (_, d) in enumerate(spec.params))


@dataclass(frozen=True)
class Chain:
    """Straight-line elementwise code: steps over inputs, constants and earlier steps; the last is the result."""

    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.steps, (tuple, list)) or not self.steps:
            raise ValueError("a chain needs at least one step")
        steps = tuple(s if isinstance(s, Step) else Step(*s) for s in self.steps)
        for j, s in enumerate(steps):
            for a in s.args:
                if a[0] == "step" and a[1] >= j:
                    raise ValueError(f"step {j} ({s.op}) reads ('step', {a[1]}): only earlier steps "
                                     f"(0..{j - 1}) can be read")
        object.__setattr__(self, "steps", steps)

    @property
    def n_inputs(self) -> int:
        """One more than the largest input index the chain reads (the inputs it needs at least)."""
        return 1 + max((a[1] for s in self.steps for a in s.args if a[0] == "in"), default=-1)

    def canonical(self) -> str:
        """The whole chain as one line of text (what key() hashes)."""
        def opnd(a: Operand) -> str:
            return {"in": "x", "step": "s", "const": "c"}[a[0]] + (repr(a[1]) if a[0] == "const" else str(a[1]))
        return ";".join(f"{s.op}({','.join(opnd(a) for a in s.args)})" for s in self.steps)

    def key(self) -> str:
        """A stable short identifier of the chain (same chain, same key, across processes)."""
        return "c" + hashlib.sha256(self.canonical().encode()).hexdigest()[:14]

    def describe(self) -> str:
        """Readable form, e.g. `s0 = mul(x0, 2.0); s1 = tanh(s0) -> s1`."""
        def opnd(a: Operand) -> str:
            return f"x{a[1]}" if a[0] == "in" else f"s{a[1]}" if a[0] == "step" else repr(a[1])
        body = "; ".join(f"s{j} = {s.op}({', '.join(opnd(a) for a in s.args)})" for j, s in enumerate(self.steps))
        return f"{body} -> s{len(self.steps) - 1}"

    def reference(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """The chain with torch ops, computed in float32 (float64 if an input is float64), returned in the
        output dtype (see `result_dtype`). The fallback when no kernel can run."""
        _check_inputs(self, inputs, allow_double=True)
        out_dtype = result_dtype(inputs)
        compute = torch.float64 if out_dtype == torch.float64 else torch.float32
        shape = torch.broadcast_shapes(*(t.shape for t in inputs))
        xs = [t.to(compute) for t in inputs]
        vals: list[torch.Tensor] = []
        for s in self.steps:
            def get(a: Operand) -> Any:
                return xs[a[1]] if a[0] == "in" else vals[a[1]] if a[0] == "step" else a[1]
            vals.append(_torch_op(s.op, [get(a) for a in s.values()], s.params(), compute))
        return vals[-1].expand(shape).to(out_dtype).contiguous()


def _as_tensor(v: Any, like: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=dtype, device=like.device if like is not None else "cpu")


def _torch_op(op: str, vs: list[Any], ps: tuple[float, ...], dtype: torch.dtype) -> torch.Tensor:
    """One step with torch's own float ops."""
    import torch.nn.functional as F

    like = next(v for v in vs if isinstance(v, torch.Tensor))
    a = _as_tensor(vs[0], like, dtype)
    if op in _BINARY:
        b = _as_tensor(vs[1], like, dtype)
        return {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                "maximum": torch.maximum, "minimum": torch.minimum}[op](a, b)
    unary: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "erf": torch.erf, "relu": torch.relu,
        "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "selu": F.selu,
        "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "mish": F.mish, "softsign": F.softsign,
        "reciprocal": torch.reciprocal, "square": torch.square,
    }
    if op in unary:
        return unary[op](a)
    if op == "pow":
        return torch.pow(a, ps[0])
    if op in ("clamp", "hardtanh"):
        return torch.clamp(a, ps[0], ps[1])
    if op == "clamp_min":
        return torch.clamp(a, min=ps[0])
    if op == "clamp_max":
        return torch.clamp(a, max=ps[0])
    if op == "leaky_relu":
        return F.leaky_relu(a, ps[0])
    if op == "softplus":
        return F.softplus(a, ps[0], ps[1])
    if op == "elu":
        return F.elu(a, ps[0])
    raise AssertionError(op)


# ---- DSL text of a chain -------------------------------------------------------------------------------------------
def _lit(v: float) -> str:
    if math.isinf(v):
        return "inf" if v > 0 else "(-inf)"
    return repr(float(v)) if v >= 0 else f"({float(v)!r})"


def _is_literal(x: str) -> bool:
    """Whether a chain operand's DSL text is a number (_lit's), not a tile."""
    try:
        float(x.strip("()"))
    except ValueError:
        return False
    return True


def _expm1(x: str) -> str:
    return f"where(abs({x}) < 1e-05, {x} + 0.5 * {x} * {x}, exp({x}) - 1.0)"


def _ipow(x: str, n: int) -> str:
    """x ** n for 1 <= n as a product (square-and-multiply)."""
    if n == 1:
        return x
    half = _ipow(x, n // 2)
    sq = f"({half} * {half})" if n // 2 > 1 else f"({x} * {x})"
    return f"({sq} * {x})" if n % 2 else sq


class _Emitter:
    """Writes the DSL statements of a chain; `names` maps each chain input to a DSL expression."""

    def __init__(self, chain: Chain, names: Sequence[str], indent: str = "    ") -> None:
        self.chain, self.names, self.ind = chain, list(names), indent
        self.lines: list[str] = []
        self.tmp = 0

    def let(self, expr: str, hint: str) -> str:
        name = f"{hint}_{self.tmp}"
        self.tmp += 1
        self.lines.append(f"{self.ind}{name} = {expr}")
        return name

    def run(self) -> str:
        outs: list[str] = []
        for j, s in enumerate(self.chain.steps):
            vs = [self.names[a[1]] if a[0] == "in" else outs[a[1]] if a[0] == "step" else _lit(a[1])
                  for a in s.values()]
            expr = self.op(s.op, vs, s.params())
            self.lines.append(f"{self.ind}s{j} = {expr}  # {s.op}")
            outs.append(f"s{j}")
        return outs[-1]

    def op(self, op: str, vs: list[str], ps: tuple[float, ...]) -> str:
        a = vs[0]
        simple = {
            "add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}",
            "maximum": "where(({a} > {b}) | ({a} != {a}), {a}, {b})",  # NaN wins, as torch.maximum's
            "minimum": "where(({a} < {b}) | ({a} != {a}), {a}, {b})", "neg": "0.0 - {a}",
            "abs": "abs({a})", "exp": "exp({a})", "log": "log({a})", "sqrt": "sqrt({a})", "rsqrt": "rsqrt({a})",
            "sigmoid": "sigmoid({a})", "tanh": "tanh({a})", "erf": "erf({a})",
            "relu": "where({a} < 0.0, 0.0, {a})",  # NaN and -0.0 kept, as torch's (the DSL's relu drops NaN on a GPU)
            "gelu": "gelu({a})", "gelu_tanh": "gelu_tanh({a})", "silu": "silu({a})",
            "softsign": "{a} / (1.0 + abs({a}))", "reciprocal": "1.0 / {a}", "square": "{a} * {a}",
        }
        if op in ("maximum", "minimum") and _is_literal(a) and not _is_literal(vs[1]):
            a, vs = vs[1], [vs[1], a]  # commutative: the NaN test on the tensor operand
        if op in simple:
            return simple[op].format(a=a, b=vs[1] if len(vs) > 1 else "")
        if op == "hardsigmoid":
            return f"{self.clamp(f'{a} + 3.0', 0.0, 6.0)} / 6.0"
        if op == "hardswish":
            return f"{a} * {self.clamp(f'{a} + 3.0', 0.0, 6.0)} / 6.0"
        if op in ("clamp", "hardtanh"):
            return self.clamp(a, ps[0], ps[1])
        if op == "clamp_min":
            return self.clamp(a, ps[0], None)
        if op == "clamp_max":
            return self.clamp(a, None, ps[0])
        if op == "leaky_relu":
            return f"where({a} > 0.0, {a}, {a} * {_lit(ps[0])})"
        if op == "elu":
            return f"where({a} > 0.0, {a}, {_lit(ps[0])} * {_expm1(a)})"
        if op == "selu":
            return f"{_SELU_SCALE!r} * where({a} > 0.0, {a}, {_SELU_ALPHA!r} * {_expm1(a)})"
        if op == "softplus":
            return self.softplus(a, ps[0], ps[1])
        if op == "mish":
            return f"{a} * tanh({self.softplus(a, 1.0, 20.0)})"
        if op == "pow":
            return self.pow(a, ps[0])
        raise AssertionError(op)

    def clamp(self, a: str, lo: float | None, hi: float | None) -> str:
        """min(max(a, lo), hi) as torch.clamp computes it: NaN stays NaN (the DSL's maximum/minimum drop a NaN on a
        GPU, IEEE maxNum), -0.0 stays -0.0, and lo > hi gives hi."""
        if lo is not None:
            a = self.let(a, "cl") if hi is not None else a
            a = f"where({a} < {_lit(lo)}, {_lit(lo)}, {a})"
        if hi is not None:
            a = self.let(a, "cl")
            a = f"where({a} > {_lit(hi)}, {_lit(hi)}, {a})"
        return a

    def softplus(self, a: str, beta: float, threshold: float) -> str:
        """torch: x where beta * x > threshold, else log1p(exp(beta * x)) / beta (a stable log1p)."""
        t = self.let(f"{a} * {_lit(beta)}", "sp")
        u = self.let(f"exp(0.0 - abs({t}))", "sp")
        l1p = f"where({u} < 1e-05, {u} * (1.0 - 0.5 * {u}), log(1.0 + {u}))"
        return f"where({t} > {_lit(threshold)}, {a}, (where({t} < 0.0, 0.0, {t}) + {l1p}) / {_lit(beta)})"

    def pow(self, a: str, p: float) -> str:
        if p == 0.0:
            return f"where({a} == {a}, 1.0, 1.0)"
        if p == 0.5:
            return f"sqrt({a})"
        if p == -0.5:
            return f"rsqrt({a})"
        if p == int(p) and abs(p) <= 16:
            prod = _ipow(a, int(abs(p)))
            return prod if p > 0 else f"1.0 / {prod}"
        if p == int(p):  # a large integer power: |x| ** p, negated for odd p and negative x
            m = self.let(f"exp({_lit(p)} * log(abs({a})))", "pw")
            return f"where({a} < 0.0, 0.0 - {m}, {m})" if int(p) % 2 else m
        return f"exp({_lit(p)} * log({a}))"  # NaN for negative x, like torch


def broadcast(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The broadcast shape of `shapes` (torch's rules); ValueError when they do not broadcast. Plain Python:
    torch.broadcast_shapes costs tens of microseconds a call, and this runs on every launch."""
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes[1:]):
        return first
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for i, n in enumerate(s, rank - len(s)):
            if n != 1:
                if out[i] not in (1, n):
                    raise ValueError(f"the inputs do not broadcast together: shapes {[tuple(x) for x in shapes]}")
                out[i] = n
    return tuple(out)


def broadcasts_to(shape: Sequence[int], to: Sequence[int]) -> bool:
    """Whether a tensor of `shape` broadcasts to `to` (torch's rules) without changing it."""
    if len(shape) > len(to):
        return False
    return all(a in (1, b) for a, b in zip(reversed(tuple(shape)), reversed(tuple(to))))


def _check_inputs(chain: Chain, inputs: Sequence[torch.Tensor], allow_double: bool = False) -> None:
    if not isinstance(chain, Chain):
        raise ValueError(f"chain must be a Chain, got {type(chain).__name__}")
    if isinstance(inputs, torch.Tensor) or not isinstance(inputs, Sequence):
        raise ValueError("inputs must be a sequence of tensors")
    if not inputs:
        raise ValueError("pointwise needs at least one input tensor")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"input {i} must be a torch.Tensor, got {type(t).__name__}")
        ok = (torch.float16, torch.bfloat16, torch.float32) + ((torch.float64,) if allow_double else ())
        if t.dtype not in ok:
            raise ValueError(f"input {i} has dtype {t.dtype}; pointwise kernels take float16, bfloat16 or float32")
        if t.device != inputs[0].device:
            raise ValueError(f"input {i} is on {t.device} but input 0 is on {inputs[0].device}")
    if chain.n_inputs > len(inputs):
        raise ValueError(f"the chain reads input {chain.n_inputs - 1} but only {len(inputs)} input(s) were given")
    broadcast([t.shape for t in inputs])


def result_dtype(inputs: Sequence[torch.Tensor]) -> torch.dtype:
    """The output dtype: the first input's when all share it, else torch.promote_types over all inputs
    (bfloat16 with float16 gives float32; a 0-dim tensor promotes like any other)."""
    dt = inputs[0].dtype
    for t in inputs[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return dt


# ---- the standalone pointwise kernel ----------------------------------------------------------------------------
_DIMS = '"D0", "D1", "D2", "D3"'
_LOCK = threading.Lock()
_MEMO: dict[tuple[str, str, int], tuple[str, Kernel]] = {}
_BY_CHAIN: dict[tuple[str, Chain, int], tuple[str, Kernel]] = {}


def _same_place(x: str, idx: Sequence[str], dims: Sequence[str]) -> str:
    return " & ".join(f"(tag_of({x}, \"{d}\") == {i})" for d, i in zip(dims, idx))


def pointwise_source(chain: Chain, n_inputs: int) -> str:
    """DSL source of one @kernel computing `chain` over rank-4 views X0..X{n-1} -> Y (all of one shape)."""
    _check_arity(chain, n_inputs)
    name = f"pointwise_{chain.key()}_{n_inputs}"
    params = "".join(f"X{i}: Tensor({_DIMS}), " for i in range(n_inputs))
    used = sorted({a[1] for s in chain.steps for a in s.args if a[0] == "in"})
    idx = ("i0", "i1", "r2[:, None]", "r3[None, :]")
    lines = [
        "from argus_inductor.dsl import *",
        "",
        "",
        "@kernel",
        f"def {name}({params}Y: Tensor({_DIMS}), B2: constexpr = 1, B3: constexpr = 16):",
        f'    """Y = {chain.describe()}, elementwise in float32 over broadcast inputs."""',
        "    p01, p2, p3 = tile_grid(D0 * D1, cdiv(D2, B2), cdiv(D3, B3))",
        "    i0 = p01 // D1",
        "    i1 = p01 % D1",
        "    r2 = p2 * B2 + arange(B2)",
        "    r3 = p3 * B3 + arange(B3)",
    ]
    for i in used:
        lines.append(f"    x{i} = load(X{i}[i0, i1, r2, r3]).to(float32)")
        lines.append(f"    assert_tag({_same_place(f'x{i}', idx, ('D0', 'D1', 'D2', 'D3'))},")
        lines.append('               "each input element read sits at the position of the output element")')
    em = _Emitter(chain, [f"x{i}" for i in range(n_inputs)])
    res = em.run()
    lines += em.lines
    lines.append(f"    store(Y[i0, i1, r2, r3], {res})")
    return "\n".join(lines) + "\n"


def _check_arity(chain: Chain, n_inputs: int) -> None:
    if not isinstance(chain, Chain):
        raise ValueError(f"chain must be a Chain, got {type(chain).__name__}")
    if isinstance(n_inputs, bool) or not isinstance(n_inputs, int) or n_inputs < 1:
        raise ValueError(f"n_inputs must be a positive int, got {n_inputs!r}")
    if chain.n_inputs > n_inputs:
        raise ValueError(f"the chain reads input {chain.n_inputs - 1} but the kernel has {n_inputs} input(s)")


def _compiled(kind: str, chain: Chain, n: int, make: Callable[[], str]) -> tuple[str, Kernel]:
    fast = _BY_CHAIN.get((kind, chain, n))  # every launch asks: no canonical text on this path
    if fast is not None:
        return fast
    key = (kind, chain.canonical(), n)
    with _LOCK:
        hit = _MEMO.get(key)
    if hit is not None:
        _BY_CHAIN[(kind, chain, n)] = hit
        return hit
    text = make()
    ks = kernels_from_source(text, filename=f"<{kind} {chain.key()}>")
    (k,) = ks.values()
    with _LOCK:
        _MEMO[key] = (text, k)
        _BY_CHAIN[(kind, chain, n)] = (text, k)
    return text, k


def pointwise_kernel(chain: Chain, n_inputs: int) -> Kernel:
    """The generated kernel of `chain` with `n_inputs` tensor inputs (memoized by chain; its DSL text is
    `kernel.ir.source`)."""
    _check_arity(chain, n_inputs)
    return _compiled("pointwise", chain, n_inputs, lambda: pointwise_source(chain, n_inputs))[1]


def _view_dims(shape: Sequence[int], target: str, rank: int) -> list[int]:
    """A view shape's sizes, checked, with leading 1s up to `rank`; the target checked too."""
    if target not in ("cuda", "hip", "interpret"):
        raise ValueError(f"target must be 'cuda', 'hip' or 'interpret', got {target!r}")
    dims = [int(v) for v in shape]
    if any(v < 0 for v in dims):
        raise ValueError(f"shape must have non-negative sizes, got {tuple(shape)}")
    return [1] * max(0, rank - len(dims)) + dims


def _gpu_tile(d2: int, d3: int) -> tuple[int, int]:
    """(B2, B3) on a GPU: up to 2048 elements a step, a single row as wide as 1024."""
    b3 = pow2_between(d3, 16, 1024 if d2 == 1 else 256)
    return pow2_between(d2, 1, max(1, 2048 // b3)), b3


def pointwise_policies(shape: Sequence[int], target: str) -> dict[str, Policy]:
    """Template tile sizes for the kernel's rank-4 view `shape` (D0, D1, D2, D3); a shorter shape is read
    with leading 1s, a longer one by its last two dimensions. Key "pointwise" (every generated kernel)."""
    dims = _view_dims(shape, target, 2)
    d2, d3 = dims[-2], dims[-1]
    if target == "interpret":
        b3 = pow2_between(d3, 16, 128)
        return {"pointwise": Policy.make(B2=pow2_between(d2, 1, max(1, 512 // b3)), B3=b3)}
    b2, b3 = _gpu_tile(d2, d3)
    return {"pointwise": Policy.make(B2=b2, B3=b3, num_warps=8 if b2 * b3 >= 2048 else 4, num_stages=1)}


def _merge(sizes: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge adjacent dims whose strides allow it in every tensor."""
    keep = [d for d, s in enumerate(sizes) if s != 1]
    ns: list[int] = []
    nt: list[list[int]] = [[] for _ in strides]
    for d in keep:
        if ns and all(st[d] * sizes[d] == nst[-1] for st, nst in zip(strides, nt)):
            ns[-1] *= sizes[d]
            for st, nst in zip(strides, nt):
                nst[-1] = st[d]
            continue
        ns.append(sizes[d])
        for st, nst in zip(strides, nt):
            nst.append(st[d])
    return ns, nt


def _rank4(tensors: list[torch.Tensor], shape: Sequence[int]) -> list[torch.Tensor]:
    """Rank-4 views (D0, D1, D2, D3) of tensors already expanded to `shape`: dims merged where every
    tensor's strides allow; while more than 4 dims remain, the inputs that block merging the two
    leading dims are materialized (`.contiguous()` on their expanded view) so those dims merge."""
    ts = list(tensors)
    sizes, strides = _merge(list(shape), [list(t.stride()) for t in ts])
    while len(sizes) > 4:
        for k, t in enumerate(ts):
            if strides[k][0] != strides[k][1] * sizes[1]:
                ts[k] = torch.as_strided(t, sizes, strides[k], t.storage_offset()).contiguous()
                strides[k] = list(ts[k].stride())
        sizes, strides = _merge(sizes, strides)
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    return [torch.as_strided(t, sizes, [0] * pad + st, t.storage_offset()) for t, st in zip(ts, strides)]


def view_shape(inputs: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """The rank-4 (D0, D1, D2, D3) view `pointwise` launches its kernel over for these inputs (works on meta
    tensors: what a template policy is computed from)."""
    shape = torch.broadcast_shapes(*(t.shape for t in inputs))
    out = torch.empty(shape, device=inputs[0].device)
    return tuple(_rank4([t.expand(shape) for t in inputs] + [out], shape)[-1].shape)


def pointwise(chain: Chain, inputs: Sequence[torch.Tensor], *, policies: dict[str, Policy] | None = None,
              kernels: dict[str, Kernel] | None = None, target: str | None = None,
              out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """`chain` applied elementwise to the broadcast `inputs` (any rank), computed in float32.

    Output: the broadcast shape, contiguous, in `out_dtype` (default `result_dtype(inputs)`). Inputs are read through
    zero-stride views (no copies) unless they block flattening a result of rank > 4 (see `_rank4`).
    `policies`/`kernels` are looked up by the generated kernel's name, then by "pointwise".
    """
    _check_inputs(chain, inputs)
    n = len(inputs)
    shape = broadcast([t.shape for t in inputs])
    out = torch.empty(shape, dtype=out_dtype or result_dtype(inputs), device=inputs[0].device)
    if out.numel() == 0:
        return out
    views = _rank4([t.expand(shape) for t in inputs] + [out], shape)
    tgt = _target(out, target)
    default = pointwise_kernel(chain, n)
    kern = _pick(kernels, default.name, "pointwise") or default
    pol = _pick(policies, default.name, "pointwise") or pointwise_policies(views[-1].shape, tgt)["pointwise"]
    kern(*views, policy=pol, target=tgt)
    return out


# ---- an elementwise chain summed in the same pass ----------------------------------------------------------------
def pointwise_sum_source(chain: Chain, n_inputs: int) -> str:
    """DSL source of one @kernel writing, for each program, the float32 sum of `chain` over its tile: rows
    [p2 * B2, p2 * B2 + B2) of view (i0, i1) = divmod(p01, D1) and the CHUNK * B3 columns from p3 * CHUNK * B3, into
    Partial[p01, p2, p3]. The chain's values are summed where they are computed: no element of it is stored."""
    _check_arity(chain, n_inputs)
    name = f"pointwise_sum_{chain.key()}_{n_inputs}"
    params = "".join(f"X{i}: Tensor({_DIMS}), " for i in range(n_inputs))
    used = sorted({a[1] for s in chain.steps for a in s.args if a[0] == "in"})
    idx = ("i0", "i1", "r2[:, None]", "r3[None, :]")
    part = 'Partial: Tensor("P0", "P2", "P3")'
    lines = [
        "from argus_inductor.dsl import *",
        "",
        "",
        "@kernel",
        f"def {name}({params}{part}, B2: constexpr = 1, B3: constexpr = 16, CHUNK: constexpr = 1):",
        f'    """Partial[p01, p2, p3] = the sum over the program\'s tile of {chain.describe()}, in float32."""',
        "    assume((P0 == D0 * D1) & (P2 == cdiv(D2, B2)) & (P3 == cdiv(D3, CHUNK * B3)))  # the host's buffer",
        "    p01, p2, p3 = tile_grid(P0, P2, P3)",
        "    i0 = p01 // D1",
        "    i1 = p01 % D1",
        "    r2 = p2 * B2 + arange(B2)",
        "    lo = p3 * (CHUNK * B3)",
        "    acc = zeros((B2,), float32)",
        "    for j in range(0, CHUNK):",
        "        r3 = lo + j * B3 + arange(B3)",
    ]
    for i in used:
        lines.append(f"        x{i} = load(X{i}[i0, i1, r2, r3]).to(float32)")
        lines.append(f"        assert_tag({_same_place(f'x{i}', idx, ('D0', 'D1', 'D2', 'D3'))},")
        lines.append('                   "each input element read sits at the position of the element summed")')
    x = f"x{used[0]}"
    lines += [
        f'        assert_tag((tag_of({x}, "D0") * D1 + tag_of({x}, "D1") == p01) & (tag_of({x}, "D2") // B2 == p2)',
        f'                   & (tag_of({x}, "D3") // (CHUNK * B3) == p3),',
        '                   "program (p01, p2, p3) reads only its own tile: the partials cover each element once")',
    ]
    em = _Emitter(chain, [f"x{i}" for i in range(n_inputs)], indent="        ")
    res = em.run()
    lines += em.lines
    cols = '(tag_of(part, "sum(D3).lo") == lo) & (tag_of(part, "sum(D3).hi") >= minimum(D3, lo + CHUNK * B3))'
    rows = '(tag_of(part, "sum(D2).lo") == p2 * B2) & (tag_of(part, "sum(D2).hi") >= minimum(D2, p2 * B2 + B2))'
    lines += [
        f"        acc = acc + sum(where((r2[:, None] < D2) & (r3[None, :] < D3), {res}, 0.0), 1)",
        "    part = zeros((1,), float32) + sum(acc, 0)",
        f"    assert_tag({cols}",
        f"               & {rows},",
        '               "the partial covers its tile: rows [p2 * B2, p2 * B2 + B2), columns [lo, lo + CHUNK * B3)")',
        "    store(Partial[p01, p2, p3 + arange(1)], part)",
    ]
    return "\n".join(lines) + "\n"


def pointwise_sum_kernel(chain: Chain, n_inputs: int) -> Kernel:
    """The generated partial-sum kernel of `chain` with `n_inputs` tensor inputs (memoized by chain)."""
    _check_arity(chain, n_inputs)
    return _compiled("pointwise_sum", chain, n_inputs, lambda: pointwise_sum_source(chain, n_inputs))[1]


def pointwise_sum_policies(shape: Sequence[int], target: str) -> dict[str, Policy]:
    """Template tiles of `pointwise_sum` for the rank-4 view `shape`: key "pointwise_sum" (the partial sums of
    every generated kernel; B2 rows by B3 columns a step, CHUNK steps a program) and "sum_partials_kernel"."""
    dims = _view_dims(shape, target, 4)
    rows, d2, d3 = dims[0] * dims[1], dims[2], dims[3]
    if target == "interpret":
        b3 = pow2_between(d3, 16, 64)
        b2 = pow2_between(d2, 1, max(1, 256 // b3))
        return {"pointwise_sum": Policy.make(B2=b2, B3=b3, CHUNK=2), "sum_partials_kernel": Policy.make(BLOCK=64)}
    b2, b3 = _gpu_tile(d2, d3)
    tiles = rows * -(-d2 // b2) * -(-d3 // b3)
    chunk = pow2_between(-(-tiles // 4096), 1, pow2_between(-(-d3 // b3), 1, 1 << 16))  # a few thousand programs
    parts = rows * -(-d2 // b2) * -(-d3 // (b3 * chunk))
    return {"pointwise_sum": Policy.make(B2=b2, B3=b3, CHUNK=chunk, num_warps=8 if b2 * b3 >= 2048 else 4,
                                         num_stages=2),
            "sum_partials_kernel": Policy.make(BLOCK=pow2_between(parts, 16, 1024), num_warps=4, num_stages=1)}


def _sum_views(inputs: Sequence[torch.Tensor], shape: Sequence[int]) -> list[torch.Tensor]:
    """The rank-4 views `pointwise_sum` reads the broadcast inputs through (no output: nothing blocks a merge)."""
    return _rank4([t.expand(tuple(shape)) for t in inputs], shape)


def sum_view_shape(inputs: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """The rank-4 (D0, D1, D2, D3) view `pointwise_sum` launches over for these inputs (meta tensors too)."""
    return tuple(_sum_views(inputs, broadcast([t.shape for t in inputs]))[0].shape)


def pointwise_sum(chain: Chain, inputs: Sequence[torch.Tensor], *, mean: bool = False,
                  policies: dict[str, Policy] | None = None, kernels: dict[str, Kernel] | None = None,
                  target: str | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """`chain` over the broadcast `inputs`, summed (or averaged, `mean`) over every element in one pass: no
    element of the chain's result is written, only a float32 partial sum per program, which one more program adds
    up in order (deterministic, no atomics). A 0-d tensor in `out_dtype` (default `result_dtype(inputs)`), as
    torch's sum()/mean() of the chain's result; the mean of no elements is NaN, their sum 0."""
    _check_inputs(chain, inputs)
    shape = broadcast([t.shape for t in inputs])
    dtype = out_dtype or result_dtype(inputs)
    numel = math.prod(shape)
    device = inputs[0].device
    if numel == 0:
        return torch.full((), math.nan if mean else 0.0, dtype=dtype, device=device)
    views = _sum_views(inputs, shape)
    tgt = _target(inputs[0], target)
    vshape = tuple(views[0].shape)
    default = pointwise_sum_kernel(chain, len(inputs))
    templates = pointwise_sum_policies(vshape, tgt)
    kern = _pick(kernels, default.name, "pointwise_sum") or default
    pol = _pick(policies, default.name, "pointwise_sum") or templates["pointwise_sum"]
    b2, b3, chunk = pol.const("B2", 1), pol.const("B3", 16), pol.const("CHUNK", 1)
    d0, d1, d2, d3 = vshape
    partial = torch.empty((d0 * d1, -(-d2 // b2), -(-d3 // (chunk * b3))), dtype=torch.float32, device=device)
    kern(*views, partial, policy=pol, target=tgt)
    partial = partial.view(-1)
    total = torch.empty((1,), dtype=torch.float32, device=device)
    fin = _pick(kernels, "sum_partials_kernel") or sum_partials_kernel
    fpol = _pick(policies, "sum_partials_kernel") or templates["sum_partials_kernel"]
    fin(partial, total, 1.0 / numel if mean else 1.0, policy=fpol, target=tgt)
    return total.reshape(()).to(dtype)


# ---- fused epilogues: text splicing of the library GEMM / conv kernels ---------------------------------------------
def _splice(base: Kernel, new_name: str, out_param: str, anchor: str, store: str, chain: Chain, n_extras: int,
            acc: str, dims: Sequence[str], idx_load: str, idx_tag: Sequence[str], load_mask: str = "") -> str:
    """Source of `base` renamed, with extra tensor params E1.. after `out_param`, and the chain computed
    from `acc` and the extras (read at `idx_load`, under `load_mask` where scalar indices may leave the extra's
    extent) in place of `anchor`, stored by `store`."""
    src = base.ir.source
    for piece in (f"def {base.name}(", out_param, anchor):
        if src.count(piece) != 1:
            raise RuntimeError(f"library kernel {base.name} changed: expected one `{piece}` in its source")
    dim_text = ", ".join(f'"{d}"' for d in dims)
    extra_params = "".join(f", E{i}: Tensor({dim_text})" for i in range(1, n_extras + 1))
    src = src.replace(f"def {base.name}(", f"def {new_name}(").replace(out_param, out_param + extra_params)
    ind = anchor[:len(anchor) - len(anchor.lstrip(" "))]  # the epilogue's indentation, as the anchor's
    body = [f"{ind}# fused epilogue (x0 = {acc}, xi = Ei): {chain.describe()}"]
    used = sorted({a[1] for s in chain.steps for a in s.args if a[0] == "in" and a[1] > 0})
    for i in used:
        body.append(f"{ind}e{i} = load(E{i}[{idx_load}]{', mask=' + load_mask if load_mask else ''}).to(float32)")
        body.append(f"{ind}assert_tag({_same_place(f'e{i}', idx_tag, dims)},")
        body.append(f'{ind}           "each extra element read sits at the position of the output element")')
    em = _Emitter(chain, [acc] + [f"e{i}" for i in range(1, n_extras + 1)], indent=ind)
    res = em.run()
    body += em.lines
    body.append(store.format(res=res))
    return "from argus_inductor.dsl import *\n\n\n" + src.replace(anchor, "\n".join(body))


def linear_chain_source(chain: Chain, n_extras: int) -> str:
    """gemm_epilogue with `chain` applied to act(A @ B + bias) before its store; extras E1.. are (M, N)."""
    _check_arity(chain, n_extras + 1)
    return _splice(gemm_epilogue, f"gemm_chain_{chain.key()}_{n_extras}", 'C: Tensor("M", "N")',
                   "    store(C[rm, rn], acc)", "    store(C[rm, rn], {res})", chain, n_extras, "acc",
                   ("M", "N"), "rm, rn", ("rm[:, None]", "rn[None, :]"))


def conv_chain_source(chain: Chain, n_extras: int, transposed: bool = False) -> str:
    """conv_fwd (or conv_transpose_fwd) with `chain` applied to its result before the store; extras
    E1.. are viewed like Y: (N, G, COG, OS), or (N, G, COG, OD, OH, OW) for a transposed convolution."""
    _check_arity(chain, n_extras + 1)
    base = conv_transpose_fwd if transposed else conv_fwd
    kind = "convt" if transposed else "conv"
    if transposed:  # the store sits in the phase loops; Y (and the extras) by output coordinates
        ind, dims, idx, idx_tag, mask = " " * 16, ("N", "G", "COG", "YD", "YH", "YW"), "n, g, rn, od, oh, ow", \
            ("n", "g", "rn[:, None]", "od", "oh", "ow[None, :]"), "valid[None, :]"
        store = f"store(Y[{idx}], y, mask={mask})"
    else:
        ind, dims, idx, idx_tag, mask = " " * 4, ("N", "G", "COG", "OS"), "n, g, rn, rm", \
            ("n", "g", "rn[:, None]", "rm[None, :]"), ""
        store = f"store(Y[{idx}], y)"
    out_param = "Y: Tensor(" + ", ".join(f'"{d}"' for d in dims) + ")"
    return _splice(base, f"{kind}_chain_{chain.key()}_{n_extras}", out_param, f"{ind}y = acc\n{ind}{store}",
                   f"{ind}y = {{res}}\n{ind}{store}", chain, n_extras, "acc", dims, idx, idx_tag, load_mask=mask)


def linear_chain_kernel(chain: Chain, n_extras: int) -> Kernel:
    """The generated GEMM-with-chain kernel (memoized)."""
    _check_arity(chain, n_extras + 1)
    return _compiled("linear", chain, n_extras, lambda: linear_chain_source(chain, n_extras))[1]


def conv_chain_kernel(chain: Chain, n_extras: int, transposed: bool = False) -> Kernel:
    """The generated convolution-with-chain kernel (memoized)."""
    _check_arity(chain, n_extras + 1)
    return _compiled("convt" if transposed else "conv", chain, n_extras,
                     lambda: conv_chain_source(chain, n_extras, transposed))[1]


def linear_chain_policies(m: int, n: int, k: int, target: str) -> dict[str, Policy]:
    """Template tile sizes of the GEMM under a fused chain (key "gemm_epilogue")."""
    if target not in ("cuda", "hip", "interpret"):
        raise ValueError(f"target must be 'cuda', 'hip' or 'interpret', got {target!r}")
    if target == "interpret":
        return {"gemm_epilogue": Policy.make(BM=pow2_between(m, 16, 32), BN=pow2_between(n, 16, 32),
                                             BK=pow2_between(k, 16, 32))}
    big = m >= 256 and n >= 256
    return {"gemm_epilogue": Policy.make(BM=128 if big else 64, BN=128 if big else pow2_between(n, 32, 128),
                                         BK=32, num_warps=8 if big else 4, num_stages=3, grid_order="grouped")}


def conv_chain_policies(x_shape: Sequence[int], w_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                        dilation: Any = 1, groups: int = 1, transposed: bool = False, output_padding: Any = 0,
                        target: str = "cuda") -> dict[str, Policy]:
    """Template tile sizes of the convolution under a fused chain: conv.py's (keys conv_fwd /
    conv_transpose_fwd)."""
    return conv_policies(x_shape, w_shape, stride, padding, dilation, groups, transposed, output_padding, target,
                         direct=False)


def _check_extras(chain: Chain, extras: Sequence[torch.Tensor], out_shape: tuple[int, ...],
                  device: torch.device) -> list[torch.Tensor]:
    if not isinstance(chain, Chain):
        raise ValueError(f"chain must be a Chain, got {type(chain).__name__}")
    if isinstance(extras, torch.Tensor) or not isinstance(extras, Sequence):
        raise ValueError("extras must be a sequence of tensors")
    if chain.n_inputs > len(extras) + 1:
        raise ValueError(f"the chain reads input {chain.n_inputs - 1} but only {len(extras)} extra tensor(s) "
                         f"were given (input 0 is the GEMM/conv result)")
    out: list[torch.Tensor] = []
    for i, e in enumerate(extras, 1):
        if not isinstance(e, torch.Tensor) or e.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            what = e.dtype if isinstance(e, torch.Tensor) else type(e).__name__
            raise ValueError(f"extra {i} must be a float16/bfloat16/float32 tensor, got {what}")
        if e.device != device:
            raise ValueError(f"extra {i} is on {e.device} but the input is on {device}")
        if not broadcasts_to(e.shape, out_shape):
            raise ValueError(f"extra {i} of shape {tuple(e.shape)} does not broadcast to the output shape "
                             f"{tuple(out_shape)}")
        out.append(e.expand(out_shape))
    return out


def linear_chain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, chain: Chain,
                 extras: Sequence[torch.Tensor], *, policies: dict[str, Policy] | None = None,
                 kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """chain(x @ weight.T + bias, *extras) in one GEMM kernel; x (M, K), weight (N, K), extras broadcast
    to (M, N); returned in x's dtype."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise ValueError("linear_chain needs tensors for x and weight")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_chain needs x (M, K) and weight (N, K), got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or weight.dtype != x.dtype:
        raise ValueError(f"x and weight must share one of float16/bfloat16/float32, got {x.dtype}, {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device} but weight is on {weight.device}")
    m, kdim = x.shape
    n = weight.shape[0]
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,)
                             or bias.device != x.device):
        raise ValueError(f"bias must be a tensor of shape ({n},) on {x.device}")
    ex = _check_extras(chain, extras, (m, n), x.device)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    if kdim == 0:
        raise ValueError("linear_chain needs K >= 1")
    tgt = _target(x, target)
    default = linear_chain_kernel(chain, len(ex))
    kern = _pick(kernels, default.name, "gemm_epilogue") or default
    pol = _pick(policies, default.name, "gemm_epilogue") or linear_chain_policies(m, n, kdim, tgt)["gemm_epilogue"]
    pol = pol.with_consts(HAS_BIAS=int(bias is not None), ACT=0)
    b = bias.to(x.dtype) if bias is not None else out.new_empty(1)
    kern(x, weight.t(), b, out, *ex, policy=pol, target=tgt)
    return out


def _as_output_view(e: torch.Tensor, geo: ConvGeometry) -> torch.Tensor:
    """An extra (already expanded to the output's shape) viewed as the kernel indexes the output."""
    try:
        return conv_output_view(e, geo)
    except RuntimeError:
        return conv_output_view(e.contiguous(), geo)


def conv_chain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any,
               dilation: Any, groups: int, transposed: bool, output_padding: Any, chain: Chain,
               extras: Sequence[torch.Tensor], *, policies: dict[str, Policy] | None = None,
               kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """chain(conv(x, weight) + bias, *extras) in one convolution kernel (torch.nn.functional.conv{1,2,3}d
    or conv_transpose{1,2,3}d semantics); extras broadcast to the conv output; returned in x's dtype."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise ValueError("conv_chain needs tensors for x and weight")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or weight.dtype != x.dtype:
        raise ValueError(f"x and weight must share one of float16/bfloat16/float32, got {x.dtype}, {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device} but weight is on {weight.device}")
    geo = ConvGeometry(x.shape, weight.shape, stride, padding, dilation, groups, transposed, output_padding)
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (geo.cout,)
                             or bias.device != x.device):
        raise ValueError(f"bias must be a tensor of shape ({geo.cout},) (out_channels) on {x.device}")
    user_shape = geo.out_shape if geo.batched else geo.out_shape[1:]
    ex = _check_extras(chain, extras, tuple(user_shape), x.device)
    out = torch.empty(geo.out_shape, dtype=x.dtype, device=x.device)
    if geo.n > 0:
        tgt = _target(x, target)
        default = conv_chain_kernel(chain, len(ex), geo.transposed)
        kern = _pick(kernels, default.name, geo.kernel_name) or default
        pol = _pick(policies, default.name, geo.kernel_name) or conv_chain_policies(
            x.shape, weight.shape, stride, padding, dilation, groups, transposed, output_padding, tgt)[geo.kernel_name]
        pol = pol.with_consts(**geo.consts, HAS_BIAS=int(bias is not None), ACT=0)
        g, cog = geo.groups, geo.cog
        xb = x if geo.batched else x.unsqueeze(0)
        exb = [e if geo.batched else e.unsqueeze(0) for e in ex]
        bv = bias.to(x.dtype).reshape(g, cog) if bias is not None else out.new_empty(g, cog)
        kern(xb.reshape(geo.n, g, geo.cg, -1), conv_weight_view(weight, geo), bv, conv_output_view(out, geo),
             *[_as_output_view(e, geo) for e in exb], policy=pol, target=tgt)
    return out if geo.batched else out.squeeze(0)


KERNELS: tuple[Kernel, ...] = ()
"""No fixed library kernels: every kernel of this module is generated from a chain (pointwise_kernel,
linear_chain_kernel, conv_chain_kernel)."""

