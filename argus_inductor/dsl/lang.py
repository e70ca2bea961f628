"""The names a DSL kernel is written with.

These objects are never called when a kernel runs: the frontend reads the kernel's source and
recognises them by identity. Calling one from ordinary Python raises a DSLError that says so.
"""
from __future__ import annotations

import math
from typing import Any

from .errors import DSLError
from .types import (
    DType,
    bfloat16,
    bool_,
    float8e4m3,
    float8e5m2,
    float16,
    float32,
    int8,
    int32,
    int64,
)

__all__ = [
    "Tensor", "constexpr", "float32", "float16", "bfloat16", "float8e4m3", "float8e5m2", "int8", "int32",
    "int64", "bool_", "inf", "BUILTINS",
]

inf = math.inf


class Tensor:
    """Annotation of a tensor parameter: `A: Tensor("M", "K")`, `ids: Tensor("P", dtype=int32)`.

    Each string names the symbolic extent of one dimension; parameters that share a name must
    agree at launch. Strides are symbolic too (any layout, transposed views included).
    """

    def __init__(self, *dims: str, dtype: DType | None = None) -> None:
        self.dims = dims
        self.dtype = dtype


class constexpr:  # noqa: N801 - mirrors triton.language.constexpr
    """Annotation of a compile-time parameter (tile sizes, flags): its value comes from the policy."""


BUILTINS: dict[str, Any] = {}


def _builtin(name: str, doc: str) -> Any:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise DSLError(f"'{name}' is a DSL operation and only means something inside an @kernel function",
                       fix="call the kernel instead of the operation, e.g. my_kernel(a, b, c, policy=...)")
    stub.__name__ = name
    stub.__qualname__ = name
    stub.__doc__ = doc
    stub.__argus_builtin__ = name  # type: ignore[attr-defined]
    BUILTINS[name] = stub
    return stub


tile_grid = _builtin("tile_grid", "tile_grid(*extents) -> tile ids: the logical launch grid; the policy "
                                  "maps it to hardware programs (row order, grouped order, persistent).")
program_id = _builtin("program_id", "program_id(axis): the tile id along one axis of the tile grid.")
arange = _builtin("arange", "arange(n) -> int32 tile [0, n); n a compile-time constant.")
zeros = _builtin("zeros", "zeros(shape, dtype) -> tile of zeros.")
full = _builtin("full", "full(shape, value, dtype) -> tile filled with value.")
cdiv = _builtin("cdiv", "cdiv(a, b): ceil(a / b) for non-negative integers.")
load = _builtin("load", "load(T[i0, i1, ...], mask=None, other=0): tile load; each index is a scalar or a "
                        "1-D index tile; ragged edges are masked automatically.")
store = _builtin("store", "store(T[i0, ...], value, mask=None): tile store, masked at ragged edges.")
atomic_add = _builtin("atomic_add", "atomic_add(T[i0, ...], value, mask=None): element-wise atomic add "
                                    "(split-k partial sums, MoE scatter-add).")
mma = _builtin("mma", "mma(a, b, acc=None) -> a @ b + acc with float32 accumulation on the tensor cores.")
dot = _builtin("dot", "dot(a, b, acc=None): alias of mma.")
where = _builtin("where", "where(cond, a, b): element-wise select.")
maximum = _builtin("maximum", "maximum(a, b): element-wise max.")
minimum = _builtin("minimum", "minimum(a, b): element-wise min.")
sum = _builtin("sum", "sum(x, axis): reduction.")  # noqa: A001
max = _builtin("max", "max(x, axis): reduction.")  # noqa: A001
min = _builtin("min", "min(x, axis): reduction.")  # noqa: A001
prod = _builtin("prod", "prod(x, axis): product reduction (float32 result for float tiles, like sum).")
cumsum = _builtin("cumsum", "cumsum(x, axis, reverse=False): inclusive prefix sum along axis (float32 result "
                            "for float tiles); reverse=True sums each element with the ones after it.")
cumprod = _builtin("cumprod", "cumprod(x, axis, reverse=False): inclusive prefix product along axis (float32 "
                              "result for float tiles); reverse=True runs from the end of the axis.")
argmax = _builtin("argmax", "argmax(x, axis): index of the maximum along axis.")
argmin = _builtin("argmin", "argmin(x, axis): index of the minimum along axis.")
trans = _builtin("trans", "trans(x): transpose of a 2-D tile.")
reshape = _builtin("reshape", "reshape(x, shape): same elements, new static shape.")
broadcast_to = _builtin("broadcast_to", "broadcast_to(x, shape).")
cast = _builtin("cast", "cast(x, dtype); also x.to(dtype).")
bitcast = _builtin("bitcast", "bitcast(x, dtype): each element's bits read as dtype, of the same width "
                   "(float32 <-> int32, float16/bfloat16 <-> int16 is not a DSL type); x's dtype must be known, "
                   "e.g. load(X[r]).to(float32).")
tag = _builtin("tag", "tag(x, name=expr, ...) -> x: attach user tags to the elements of x.")
assert_tag = _builtin("assert_tag", "assert_tag(predicate, msg=''): a relation over tags that must hold for "
                                    "every element at this point.")
assume = _builtin("assume", "assume(predicate): a precondition (e.g. on the contents of an index tensor) the "
                            "checker may rely on for every element at this point; never checked, never run.")
padding_lanes = _builtin("padding_lanes", "padding_lanes(x, lanes) -> x: the elements of x where lanes holds are "
                                          "padding, not results (a routed block's padding rows): a store of x may "
                                          "leave their reductions empty (a partial one is still reported); never run.")
zero_terms = _builtin("zero_terms", "zero_terms(x, cond) -> x: a trusted claim that x, a term of a sum, is zero "
                                    "by the op's definition where cond is false (a convolution tap off the input: "
                                    "zero padding; off its stride: no input meets it), so a lane its mask kills "
                                    "there in some loop iterations still has its whole sum; never checked, never "
                                    "run. Where the mask kills a lane and cond holds, the sum is still partial.")
implies = _builtin("implies", "implies(a, b): (not a) or b, for tag assertions.")
tag_of = _builtin("tag_of", "tag_of(x, name): the tag `name` of each element of x (only inside tags and "
                            "assertions); name 'sum(K).lo' / 'sum(K).hi' bounds the K range x summed over, "
                            "'each(K).lo' / '.hi' the K indices loops added into x element-wise.")
static_range = _builtin("static_range", "static_range(n): a loop unrolled at compile time.")
unrolled_range = _builtin("unrolled_range", "unrolled_range(n): a loop unrolled at compile time (n a constexpr) "
                                            "that the checker reads as a range loop, one symbolic iteration for "
                                            "all: an accumulation across its steps is proved as in range(...).")
unrollable_range = _builtin("unrollable_range", "unrollable_range(start, stop, step, steps): range(start, stop, step) "
                                                "where the constexpr `steps` is 0, else unrolled_range(start, start + "
                                                "steps * step, step), which must reach stop (the checker proves it).")
exp = _builtin("exp", "exp(x)")
exp2 = _builtin("exp2", "exp2(x)")
log = _builtin("log", "log(x)")
log2 = _builtin("log2", "log2(x)")
sqrt = _builtin("sqrt", "sqrt(x)")
rsqrt = _builtin("rsqrt", "rsqrt(x)")
abs = _builtin("abs", "abs(x)")  # noqa: A001
sigmoid = _builtin("sigmoid", "sigmoid(x)")
tanh = _builtin("tanh", "tanh(x)")
erf = _builtin("erf", "erf(x)")
cos = _builtin("cos", "cos(x)")
sin = _builtin("sin", "sin(x)")
relu = _builtin("relu", "relu(x)")
silu = _builtin("silu", "silu(x) = x * sigmoid(x)")
gelu = _builtin("gelu", "gelu(x), the erf form")
gelu_tanh = _builtin("gelu_tanh", "gelu_tanh(x), the tanh approximation")
# the activations a fused epilogue picks by a constexpr code: the code is the position here
ACTIVATION_KINDS = ("none", "relu", "gelu", "silu", "gelu_tanh")
activation = _builtin("activation", "activation(x, kind): an epilogue's activation picked by a constexpr (or literal) "
                      "code, 0 none, 1 relu, 2 gelu, 3 silu, 4 gelu_tanh; float32 result")

__all__ += list(BUILTINS)
