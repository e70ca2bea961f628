"""Launch policies: everything about a kernel that is a parameter, not code."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

GRID_ORDERS = ("row", "grouped")
INPUT_PRECISIONS = ("tf32", "ieee", "tf32x3")
LAUNCH_FIELDS = ("num_warps", "num_stages", "grid_order", "group_m", "persistent", "input_precision",
                 "programs_per_sm", "tma", "warp_specialize")


@dataclass(frozen=True)
class Policy:
    """Tile sizes and flags (constexpr values) plus how the kernel is launched.

    grid_order: "row" walks the tile grid with its last axis fastest; "grouped" walks the last two
    axes in bands of `group_m` rows (better L2 reuse for GEMM). persistent: launch about
    `programs_per_sm` programs per SM that loop over tiles instead of one program per tile. tma: loads of
    boxes (each tile index an offset plus an arange) go through tensor descriptors, which the Hopper copy
    engine fills asynchronously with zeros outside the tensor (NVIDIA sm_90+; elsewhere ignored, and a launch
    whose operands a descriptor cannot describe runs the pointer-load version). warp_specialize: run the kernel's
    hand-written Hopper lowering (argus_inductor.hopper: a TMA loader warp, consumer warp groups on wgmma) where it
    has one, on NVIDIA sm_90, for launches that meet its preconditions; other launches run the Triton lowering. A
    kernel without such a lowering refuses it when lowered (Triton 3.6's automatic warp specialization is not used:
    kb/warp-specialization.md).
    """

    consts: tuple[tuple[str, Any], ...] = ()
    num_warps: int = 4
    num_stages: int = 3
    grid_order: str = "row"
    group_m: int = 8
    persistent: bool = False
    input_precision: str = "tf32"
    programs_per_sm: int = 1
    tma: bool = False
    warp_specialize: bool = False
    extra: tuple[tuple[str, Any], ...] = field(default=(), compare=True)

    @staticmethod
    def make(**kw: Any) -> Policy:
        launch = {k: kw.pop(k) for k in list(kw) if k in LAUNCH_FIELDS}
        p = Policy(consts=tuple(sorted(kw.items())), **launch)
        p.validate()
        return p

    def with_consts(self, **kw: Any) -> Policy:
        merged = dict(self.consts)
        merged.update(kw)
        return replace(self, consts=tuple(sorted(merged.items())))

    def without_consts(self, *names: str) -> Policy:
        return replace(self, consts=tuple((k, v) for k, v in self.consts if k not in names))

    def const(self, name: str, default: Any = None) -> Any:
        return dict(self.consts).get(name, default)

    def validate(self) -> None:
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of two in [1, 32], got {self.num_warps}")
        if not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages must be in [1, 8], got {self.num_stages}")
        if self.grid_order not in GRID_ORDERS:
            raise ValueError(f"grid_order must be one of {GRID_ORDERS}, got {self.grid_order!r}")
        if self.group_m < 1:
            raise ValueError(f"group_m must be >= 1, got {self.group_m}")
        if self.input_precision not in INPUT_PRECISIONS:
            raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}")
        if self.programs_per_sm < 1:
            raise ValueError("programs_per_sm must be >= 1")
        for name in ("tma", "warp_specialize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.consts)
        for k in LAUNCH_FIELDS:
            d[k] = getattr(self, k)
        return d

    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.as_dict().items()))
