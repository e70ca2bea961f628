"""XOR swizzles (CuTe's ``Swizzle<B, M, S>``) and shared-memory bank analysis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .inttuple import IntTuple
from .layout import Layout, Tiler, composition

__all__ = [
    "ComposedLayout",
    "Swizzle",
    "bank_conflicts",
    "bank_of",
    "is_conflict_free",
    "min_wavefronts",
    "swizzled",
]


@dataclass(frozen=True)
class Swizzle:
    """``Swizzle(bits=B, base=M, shift=S)``: XOR ``B`` bits taken from ``[M+S, M+S+B)`` into ``[M, M+B)``.

    For ``S < 0`` the roles are mirrored (bits move up instead of down). Requires
    ``|S| >= B`` so the two ranges do not overlap; the map is then an involution and
    hence a bijection on every aligned block of ``period()`` offsets.
    """

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        if self.bits < 0 or self.base < 0:
            raise ValueError(f"Swizzle needs bits >= 0 and base >= 0, got {self}")
        if abs(self.shift) < self.bits:
            raise ValueError(f"Swizzle needs |shift| >= bits (non-overlapping ranges), got {self}")

    @property
    def yyy_mask(self) -> int:
        """Mask of the source bits."""
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        """Mask of the destination bits."""
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    def __call__(self, offset: int) -> int:
        src = offset & self.yyy_mask
        moved = src >> self.shift if self.shift >= 0 else src << -self.shift
        return offset ^ moved

    def inverse(self) -> Swizzle:
        """The inverse map; a swizzle is its own inverse."""
        return self

    def period(self) -> int:
        """Size of the aligned blocks of offsets that the swizzle permutes among themselves."""
        return 1 << (self.base + self.bits + abs(self.shift))

    def is_identity(self) -> bool:
        """True when no bits are moved."""
        return self.bits == 0

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"


@dataclass(frozen=True)
class ComposedLayout:
    """``swizzle(offset + layout(c))``: a layout followed by a swizzle of its offsets."""

    swizzle: Swizzle
    layout: Layout
    offset: int = 0

    def __call__(self, *crd: IntTuple) -> int:
        return self.swizzle(self.offset + self.layout(*crd))

    @property
    def shape(self) -> IntTuple:
        return self.layout.shape

    def size(self) -> int:
        """Domain size (that of the inner layout)."""
        return self.layout.size()

    def cosize(self) -> int:
        """One past the largest offset produced."""
        return max(self(i) for i in range(self.size())) + 1

    def offsets(self) -> list[int]:
        """All offsets, in domain order."""
        return [self(i) for i in range(self.size())]

    def compose(self, tiler: Tiler) -> ComposedLayout:
        """Compose the inner layout with ``tiler`` (the swizzle stays outermost)."""
        return ComposedLayout(self.swizzle, composition(self.layout, tiler), self.offset)

    def __str__(self) -> str:
        return f"{self.swizzle} o {self.offset} o {self.layout}"


def swizzled(layout: Layout, swizzle: Swizzle, offset: int = 0) -> ComposedLayout:
    """Apply ``swizzle`` to the offsets produced by ``layout``."""
    return ComposedLayout(swizzle, layout, offset)


def bank_of(byte_offset: int, bank_bytes: int = 4, banks: int = 32) -> int:
    """Shared-memory bank of a byte address."""
    return (byte_offset // bank_bytes) % banks


LaneOffset = int | None


def _words_by_bank(
    offsets_per_lane: Sequence[LaneOffset], elem_bytes: int, vec: int, bank_bytes: int, banks: int
) -> dict[int, set[int]]:
    if elem_bytes <= 0 or vec <= 0:
        raise ValueError("elem_bytes and vec must be positive")
    per_bank: dict[int, set[int]] = {}
    for off in offsets_per_lane:
        if off is None:
            continue
        start = off * elem_bytes
        end = start + vec * elem_bytes  # exclusive
        for word in range(start // bank_bytes, (end - 1) // bank_bytes + 1):
            per_bank.setdefault(word % banks, set()).add(word)
    return per_bank


def bank_conflicts(
    offsets_per_lane: Sequence[LaneOffset],
    elem_bytes: int,
    vec: int = 1,
    bank_bytes: int = 4,
    banks: int = 32,
) -> int:
    """Max number of *distinct* bank words that one warp access hits in a single bank.

    ``offsets_per_lane[l]`` is lane ``l``'s element offset (in units of ``elem_bytes``;
    ``None`` = inactive lane); each lane touches ``vec`` consecutive elements. Lanes
    reading the same word are broadcast and count once. The result is the number of
    shared-memory wavefronts the access needs: 1 means conflict-free for accesses of
    at most 128 bytes; compare with :func:`min_wavefronts` for wider accesses.
    Returns 0 when no lane is active.
    """
    per_bank = _words_by_bank(offsets_per_lane, elem_bytes, vec, bank_bytes, banks)
    return max((len(w) for w in per_bank.values()), default=0)


def min_wavefronts(
    offsets_per_lane: Sequence[LaneOffset],
    elem_bytes: int,
    vec: int = 1,
    bank_bytes: int = 4,
    banks: int = 32,
) -> int:
    """Lower bound on :func:`bank_conflicts`: distinct words touched / banks, rounded up."""
    per_bank = _words_by_bank(offsets_per_lane, elem_bytes, vec, bank_bytes, banks)
    total = sum(len(w) for w in per_bank.values())
    return -(-total // banks)


def is_conflict_free(
    offsets_per_lane: Sequence[LaneOffset],
    elem_bytes: int,
    vec: int = 1,
    bank_bytes: int = 4,
    banks: int = 32,
) -> bool:
    """True when the access needs no more wavefronts than its size forces."""
    args = (offsets_per_lane, elem_bytes, vec, bank_bytes, banks)
    return bank_conflicts(*args) == min_wavefronts(*args)
