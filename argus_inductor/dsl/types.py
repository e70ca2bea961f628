"""Element types and value types of the tile DSL."""
from __future__ import annotations

from dataclasses import dataclass

Dim = int | str  # a static tile extent: a literal or the name of a constexpr parameter


@dataclass(frozen=True)
class DType:
    name: str          # DSL name, e.g. "bfloat16"
    triton: str        # Triton spelling, e.g. "tl.bfloat16"
    kind: str          # "float", "int" or "bool"
    bits: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    def __str__(self) -> str:
        return self.name


float32 = DType("float32", "tl.float32", "float", 32)
float16 = DType("float16", "tl.float16", "float", 16)
bfloat16 = DType("bfloat16", "tl.bfloat16", "float", 16)
float8e4m3 = DType("float8e4m3", "tl.float8e4nv", "float", 8)
float8e5m2 = DType("float8e5m2", "tl.float8e5", "float", 8)
int8 = DType("int8", "tl.int8", "int", 8)
int32 = DType("int32", "tl.int32", "int", 32)
int64 = DType("int64", "tl.int64", "int", 64)
bool_ = DType("bool", "tl.int1", "bool", 1)

DTYPES: dict[str, DType] = {d.name: d for d in
                            (float32, float16, bfloat16, float8e4m3, float8e5m2, int8, int32, int64, bool_)}
DTYPES.update({"fp32": float32, "fp16": float16, "bf16": bfloat16, "half": float16, "int1": bool_,
               "float8_e4m3fn": float8e4m3, "float8_e5m2": float8e5m2})

MMA_OPERAND_DTYPES = ("float16", "bfloat16", "float8e4m3", "float8e5m2", "float32")


@dataclass(frozen=True)
class TensorDType:
    """The element type of a tensor parameter, known only when the kernel is launched."""

    tensor: str
    kind: str = "float"

    @property
    def name(self) -> str:
        return f"{self.tensor}.dtype"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def bits(self) -> int:
        return 16 if self.kind == "float" else 32

    def __str__(self) -> str:
        return self.name


AnyDType = DType | TensorDType


@dataclass(frozen=True)
class ScalarType:
    dtype: AnyDType
    const: bool = False  # known at compile time (literal or constexpr)

    def __str__(self) -> str:
        return f"{'const ' if self.const else ''}{self.dtype}"


@dataclass(frozen=True)
class TileType:
    shape: tuple[Dim, ...]
    dtype: AnyDType

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"tile[{dims}]<{self.dtype}>"


ValueType = ScalarType | TileType


def promote(a: AnyDType, b: AnyDType) -> AnyDType:
    """Result element type of a binary elementwise op (Triton's rules, simplified)."""
    if a == b:
        return a
    order = {"bool": 0, "int": 1, "float": 2}
    if order[a.kind] != order[b.kind]:
        return a if order[a.kind] > order[b.kind] else b
    if a.kind == "float":
        if float32 in (a, b):
            return float32
        if isinstance(a, TensorDType):
            return a
        if isinstance(b, TensorDType):
            return b
        return float32
    if a.kind == "int":
        if isinstance(a, TensorDType) or isinstance(b, TensorDType):
            return int64 if int64 in (a, b) else (a if isinstance(a, TensorDType) else b)
        return a if a.bits >= b.bits else b
    return a


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """Numpy broadcasting over static extents; None when the shapes do not broadcast."""
    out: list[Dim] = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))
