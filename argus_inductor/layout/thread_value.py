"""Thread-value (TV) layouts: which thread, and which of its values, holds each tile element.

A :class:`TVLayout` wraps a :class:`Layout` of rank 2, ``(thread, value) -> tile index``,
where the tile index is the *colexicographic* index of the element's coordinate in the
tile (``row + rows * col`` for a 2-D tile, as CuTe's TV layouts do). Thread ``t`` is
``warp * warp_size + lane``. Replication (several threads, or several values of one
thread, holding the same element) is expressed by stride-0 modes.

Constructors mirror the register layouts a Triton lowering produces: ``blocked``
(BlockedEncoding), NVIDIA MMA v2 / v3 (wgmma) accumulators and operand A, and AMD
CDNA3 MFMA accumulators. They reproduce Triton's ordering of registers too: per-thread
values first, then repetitions of the CTA footprint along the fastest dim first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from .inttuple import crd2idx, flatten, prefix_product
from .layout import Layout

__all__ = [
    "TVLayout",
    "ampere_mma_warps",
    "blocked",
    "blocked_params",
    "default_blocked",
    "dot_accumulator",
    "hopper_mma_config",
    "mfma_accumulator",
    "mfma_warps",
    "mma_v2_accumulator",
    "mma_v2_operand_a",
    "wgmma_accumulator",
    "wgmma_operand_a",
]

Coord = int | Sequence[int]


@dataclass(frozen=True)
class TVLayout:
    """Ownership map of a tile: ``layout((thread, value))`` is the colex index of the element."""

    tile_shape: tuple[int, ...]
    layout: Layout
    warp_size: int = 32
    name: str = ""

    def __post_init__(self) -> None:
        shape = (self.tile_shape,) if isinstance(self.tile_shape, int) else tuple(self.tile_shape)
        if not shape or any((not isinstance(s, int)) or s < 1 for s in shape):
            raise ValueError(f"bad tile shape {self.tile_shape}")
        object.__setattr__(self, "tile_shape", shape)
        if self.layout.rank() != 2:
            raise ValueError(f"TV layout must have rank 2 (thread, value), got {self.layout}")
        if self.warp_size < 1:
            raise ValueError("warp_size must be positive")

    # -- sizes --------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.tile_shape)

    @cached_property
    def tile_size(self) -> int:
        n = 1
        for s in self.tile_shape:
            n *= s
        return n

    @cached_property
    def thread_layout(self) -> Layout:
        """Mode 0: thread index -> tile index contribution."""
        return self.layout[0]

    @cached_property
    def value_layout(self) -> Layout:
        """Mode 1: value (register) index -> tile index contribution."""
        return self.layout[1]

    @cached_property
    def num_threads(self) -> int:
        return self.thread_layout.size()

    @cached_property
    def values_per_thread(self) -> int:
        return self.value_layout.size()

    @property
    def num_warps(self) -> int:
        return -(-self.num_threads // self.warp_size)

    @property
    def replication(self) -> int:
        """How many (thread, value) pairs hold each element (validated by :meth:`check`)."""
        return self.num_threads * self.values_per_thread // self.tile_size

    # -- coordinates --------------------------------------------------------------------
    def tile_index(self, coord: Coord) -> int:
        """Colex index of a tile coordinate (an int is accepted for 1-D tiles)."""
        c = (coord,) if isinstance(coord, int) else tuple(coord)
        if len(c) != self.rank or any(not 0 <= x < s for x, s in zip(c, self.tile_shape)):
            raise ValueError(f"coordinate {coord} outside tile {self.tile_shape}")
        return crd2idx(c, self.tile_shape)

    def tile_coord(self, index: int) -> tuple[int, ...]:
        """Tile coordinate of a colex index."""
        if not 0 <= index < self.tile_size:
            raise ValueError(f"index {index} outside tile {self.tile_shape}")
        out = []
        for s in self.tile_shape:
            index, c = divmod(index, s)
            out.append(c)
        return tuple(out)

    def _check_tv(self, thread: int, value: int) -> None:
        if not 0 <= thread < self.num_threads:
            raise ValueError(f"thread {thread} out of range [0, {self.num_threads})")
        if not 0 <= value < self.values_per_thread:
            raise ValueError(f"value {value} out of range [0, {self.values_per_thread})")

    @cached_property
    def _thread_offsets(self) -> list[int]:
        return [self.thread_layout(t) for t in range(self.num_threads)]

    @cached_property
    def _value_offsets(self) -> list[int]:
        return [self.value_layout(v) for v in range(self.values_per_thread)]

    def offset(self, thread: int, value: int) -> int:
        """Colex tile index held by ``(thread, value)``: ``layout((thread, value))``."""
        self._check_tv(thread, value)
        return self._thread_offsets[thread] + self._value_offsets[value]

    def coord(self, thread: int, value: int) -> tuple[int, ...]:
        """Tile coordinate held by ``(thread, value)``."""
        return self.tile_coord(self.offset(thread, value))

    def warp_lane(self, thread: int) -> tuple[int, int]:
        """``(warp, lane)`` of a thread index."""
        return divmod(thread, self.warp_size)

    def thread_of(self, warp: int, lane: int) -> int:
        """Thread index of ``(warp, lane)``."""
        return warp * self.warp_size + lane

    # -- ownership ----------------------------------------------------------------------
    @cached_property
    def _owners_table(self) -> list[list[tuple[int, int]]]:
        t_offs, v_offs = self._thread_offsets, self._value_offsets
        table: list[list[tuple[int, int]]] = [[] for _ in range(self.tile_size)]
        n = self.tile_size
        for t, to in enumerate(t_offs):
            for v, vo in enumerate(v_offs):
                idx = to + vo
                if idx >= n:
                    raise ValueError(f"{self.name or 'TV layout'}: ({t}, {v}) maps outside the tile")
                table[idx].append((t, v))
        return table

    def owners(self, coord: Coord) -> list[tuple[int, int]]:
        """All ``(thread, value)`` pairs holding element ``coord``, sorted."""
        return list(self._owners_table[self.tile_index(coord)])

    def owner(self, coord: Coord) -> tuple[int, int]:
        """The lowest ``(thread, value)`` holding ``coord`` (the primary copy)."""
        owners = self._owners_table[self.tile_index(coord)]
        if not owners:
            raise ValueError(f"element {coord} is not owned by any thread")
        return owners[0]

    def owner_warp_lane(self, coord: Coord) -> tuple[int, int, int]:
        """``(warp, lane, value)`` of the primary owner of ``coord``."""
        t, v = self.owner(coord)
        w, lane = self.warp_lane(t)
        return w, lane, v

    def elements_of(self, thread: int) -> list[tuple[int, ...]]:
        """Coordinates held by ``thread``, indexed by value."""
        return [self.coord(thread, v) for v in range(self.values_per_thread)]

    def lane_coords(self, warp: int, value: int) -> list[tuple[int, ...]]:
        """Coordinate that each lane of ``warp`` holds in register ``value`` (one warp access)."""
        return [self.coord(self.thread_of(warp, lane), value) for lane in range(self.warp_size)]

    def is_primary(self, thread: int, value: int) -> bool:
        """True when every replicated (stride-0) mode coordinate of ``(thread, value)`` is 0.

        The primary pairs form one replica: a bijection onto the tile elements.
        """
        self._check_tv(thread, value)
        for idx, modes in ((thread, self._thread_modes), (value, self._value_modes)):
            for s, bcast in modes:
                idx, c = divmod(idx, s)
                if bcast and c:
                    return False
        return True

    @cached_property
    def _thread_modes(self) -> list[tuple[int, bool]]:
        m = self.thread_layout
        return [(s, d == 0) for s, d in zip(flatten(m.shape), flatten(m.stride))]

    @cached_property
    def _value_modes(self) -> list[tuple[int, bool]]:
        m = self.value_layout
        return [(s, d == 0) for s, d in zip(flatten(m.shape), flatten(m.stride))]

    def check(self) -> TVLayout:
        """Validate: every element is held exactly ``replication`` times, primaries biject."""
        total = self.num_threads * self.values_per_thread
        if total % self.tile_size:
            raise ValueError(f"{total} (thread, value) pairs do not tile {self.tile_size} elements")
        rep = self.replication
        for idx, owners in enumerate(self._owners_table):
            if len(owners) != rep:
                raise ValueError(f"element {self.tile_coord(idx)} held {len(owners)} times, expected {rep}")
            n_prim = sum(self.is_primary(t, v) for t, v in owners)
            if n_prim != 1:
                raise ValueError(f"element {self.tile_coord(idx)} has {n_prim} primary owners")
        return self

    def __str__(self) -> str:
        nm = f"{self.name} " if self.name else ""
        return f"TVLayout[{nm}tile={self.tile_shape} warp={self.warp_size}] {self.layout}"


# ----------------------------------------------------------------------------------------
# Construction from "factors": (size, dim, step) means index digit i -> +i*step along dim.
# dim == -1 marks a pure replication factor (always stride 0).
# ----------------------------------------------------------------------------------------
_Factor = tuple[int, int, int]


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _build(
    tile_shape: Sequence[int],
    thread_factors: list[_Factor],
    value_factors: list[_Factor],
    rep_dims: Sequence[int],
    warp_size: int,
    name: str,
) -> TVLayout:
    shape = tuple(int(s) for s in tile_shape)
    rank = len(shape)
    footprint = [1] * rank
    for s, dim, _ in thread_factors + value_factors:
        if dim >= 0:
            footprint[dim] *= s

    def clip(factors: list[_Factor]) -> list[_Factor]:
        out: list[_Factor] = []
        for s, dim, step in factors:
            if s == 1:
                continue
            if dim < 0:
                out.append((s, dim, 0))
                continue
            lim = shape[dim]
            if step >= lim:  # entirely beyond the tile: replicate
                if step % lim:
                    raise ValueError(f"{name}: step {step} incompatible with tile dim {lim}")
                out.append((s, dim, 0))
            elif step * s > lim:  # partially beyond: keep the part inside, replicate the rest
                if lim % step or (step * s) % lim:
                    raise ValueError(f"{name}: factor {s}x{step} incompatible with tile dim {lim}")
                keep = lim // step
                out.append((keep, dim, step))
                out.append((s // keep, dim, 0))
            else:
                out.append((s, dim, step))
        return out

    threads = clip(thread_factors)
    values = clip(value_factors)
    for dim in rep_dims:
        if shape[dim] > footprint[dim]:
            if shape[dim] % footprint[dim]:
                raise ValueError(
                    f"{name}: tile dim {dim} ({shape[dim]}) is not a multiple of the footprint {footprint[dim]}"
                )
            values.append((shape[dim] // footprint[dim], dim, footprint[dim]))

    tstride = flatten(prefix_product(shape))

    def mode(factors: list[_Factor]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if not factors:
            return (1,), (0,)
        return (
            tuple(s for s, _, _ in factors),
            tuple(step * tstride[dim] if step else 0 for _, dim, step in factors),
        )

    ts, td = mode(threads)
    vs, vd = mode(values)
    tv = TVLayout(shape, Layout((ts, vs), (td, vd)), warp_size, name)
    return tv


def _as_shape(tile_shape: int | Sequence[int]) -> tuple[int, ...]:
    return (int(tile_shape),) if isinstance(tile_shape, int) else tuple(int(s) for s in tile_shape)


def _prod(xs: Sequence[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


# -- Triton BlockedEncoding ------------------------------------------------------------------
def blocked(
    tile_shape: int | Sequence[int],
    size_per_thread: Sequence[int],
    threads_per_warp: Sequence[int],
    warps_per_cta: Sequence[int],
    order: Sequence[int],
) -> TVLayout:
    """Triton ``#blocked`` layout of a tile (any rank; ``order[0]`` is the fastest dim).

    Registers enumerate ``size_per_thread`` (fastest dim first), then repetitions of the
    CTA footprint ``spt*tpw*wpc`` (dim ``order[0]`` first); lanes and warps likewise. A tile
    smaller than the footprint is covered modulo its shape (replication).
    """
    shape = _as_shape(tile_shape)
    r = len(shape)
    spt = tuple(int(x) for x in size_per_thread)
    tpw = tuple(int(x) for x in threads_per_warp)
    wpc = tuple(int(x) for x in warps_per_cta)
    order = tuple(int(x) for x in order)
    if not (len(spt) == len(tpw) == len(wpc) == len(order) == r):
        raise ValueError("blocked: all parameters must have the tile's rank")
    if sorted(order) != list(range(r)):
        raise ValueError(f"blocked: order {order} is not a permutation")
    for v in (*spt, *tpw, *wpc, *shape):
        if not _is_pow2(v):
            raise ValueError("blocked: Triton requires power-of-two sizes and shapes")
    values = [(spt[d], d, 1) for d in order]
    lanes = [(tpw[d], d, spt[d]) for d in order]
    warps = [(wpc[d], d, spt[d] * tpw[d]) for d in order]
    name = f"blocked(spt={list(spt)}, tpw={list(tpw)}, wpc={list(wpc)}, order={list(order)})"
    return _build(shape, lanes + warps, values, order, _prod(tpw), name)


def blocked_params(
    tile_shape: int | Sequence[int],
    size_per_thread: Sequence[int],
    order: Sequence[int],
    num_warps: int,
    warp_size: int = 32,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(threads_per_warp, warps_per_cta)`` as Triton's BlockedEncodingAttr builder picks them."""
    shape = _as_shape(tile_shape)
    r = len(shape)
    tpw = [1] * r
    wpc = [1] * r
    rem_lanes, rem_threads, rem_warps = warp_size, num_warps * warp_size, num_warps
    prev_lanes = prev_warps = 1
    for d in range(r - 1):
        i = order[d]
        threads = min(max(rem_threads, 1), max(1, shape[i] // size_per_thread[i]))
        tpw[i] = min(max(threads, 1), rem_lanes)
        wpc[i] = min(max(threads // tpw[i], 1), rem_warps)
        rem_warps //= wpc[i]
        rem_lanes //= tpw[i]
        rem_threads //= threads
        prev_lanes *= tpw[i]
        prev_warps *= wpc[i]
    tpw[order[r - 1]] = warp_size // prev_lanes
    wpc[order[r - 1]] = num_warps // prev_warps
    return tuple(tpw), tuple(wpc)


def default_blocked(
    tile_shape: int | Sequence[int], num_warps: int, warp_size: int = 32, elem_bytes: int = 4
) -> TVLayout:
    """The blocked layout Triton's coalescing pass picks for loads of a contiguous row-major tile.

    Assumes 16-byte aligned rows. As in Triton, dims are ordered by contiguity (the last
    dim of size > 1 is the contiguous one; ties keep the reversed dim order), and
    ``size_per_thread`` is 1 except along that dim, where it is
    ``min(16 // elem_bytes, max(numel // threads, 1), its size)``: up to 16-byte vectors.
    Lanes and warps come from :func:`blocked_params`.
    """
    shape = _as_shape(tile_shape)
    r = len(shape)
    contig = [shape[d] if _prod(shape[d + 1 :]) == 1 else 1 for d in range(r)]
    order = tuple(sorted(reversed(range(r)), key=lambda d: -contig[d]))
    numel = _prod(shape)
    per_thread = max(1, 16 // elem_bytes)
    per_thread = min(per_thread, max(numel // (num_warps * warp_size), 1), contig[order[0]])
    spt = [1] * r
    spt[order[0]] = per_thread
    tpw, wpc = blocked_params(shape, spt, order, num_warps, warp_size)
    return blocked(shape, spt, tpw, wpc, order)


# -- NVIDIA mma.sync (Triton MMA v2) -----------------------------------------------------------
def ampere_mma_warps(m: int, n: int, num_warps: int) -> tuple[int, int]:
    """Triton's ``warpsPerTileV2`` for a non-chained dot (balances repetitions along M and N)."""
    reps = [-(-m // 16), -(-n // 8)]
    warps = [1, 1]
    while warps[0] * warps[1] < num_warps:
        if reps[0] >= reps[1]:
            warps[0] *= 2
            if reps[0] != 1:
                reps[0] //= 2
        else:
            warps[1] *= 2
            reps[1] //= 2
    return warps[0], warps[1]


def _warps(num_warps: int, wpc: Sequence[int]) -> tuple[int, int]:
    wm, wn = (int(x) for x in wpc)
    if wm * wn != num_warps:
        raise ValueError(f"warps_per_cta {tuple(wpc)} does not multiply to num_warps={num_warps}")
    return wm, wn


def mma_v2_accumulator(m: int, n: int, num_warps: int = 4, warps_per_cta: Sequence[int] | None = None) -> TVLayout:
    """Ampere ``mma.sync.m16n8k16`` fp32 accumulator tiled over an ``(m, n)`` tile.

    Per warp and 16x8 instruction tile: ``row = lane//4 + 8*i``, ``col = 2*(lane%4) + k``,
    value ``k + 2*i``. Warps are row-major over ``warps_per_cta`` (warp w -> (w // wn, w % wn)),
    each covering a 16x8 block; repeats go along N first, then M.
    """
    wm, wn = _warps(num_warps, warps_per_cta or ampere_mma_warps(m, n, num_warps))
    lanes = [(4, 1, 2), (8, 0, 1)]
    warps = [(wn, 1, 8), (wm, 0, 16)]
    values = [(2, 1, 1), (2, 0, 8)]
    return _build((m, n), lanes + warps, values, (1, 0), 32, f"mma_v2_acc(wpc=[{wm},{wn}])")


def mma_v2_operand_a(m: int, k: int, num_warps: int = 4, warps_per_cta: Sequence[int] | None = None) -> TVLayout:
    """Ampere ``mma.sync.m16n8k16`` A operand (16-bit, ``kWidth=2``) over an ``(m, k)`` tile.

    ``row = lane//4 + 8*i``, ``col = 2*(lane%4) + e + 8*j``, value ``e + 2*i + 4*j``; warps along
    N of the parent accumulator replicate A: pass the accumulator's ``warps_per_cta``
    (default ``(num_warps, 1)``).
    """
    wm, wn = _warps(num_warps, warps_per_cta or (num_warps, 1))
    lanes = [(4, 1, 2), (8, 0, 1)]
    warps = [(wn, -1, 0), (wm, 0, 16)]
    values = [(2, 1, 1), (2, 0, 8), (2, 1, 8)]
    return _build((m, k), lanes + warps, values, (1, 0), 32, f"mma_v2_a(wpc=[{wm},{wn}])")


# -- NVIDIA Hopper wgmma (Triton MMA v3) --------------------------------------------------------
_HOPPER_VALID_N = tuple(range(256, 7, -8))


def hopper_mma_config(m: int, n: int, num_warps: int = 4, chained: bool = False) -> tuple[tuple[int, int], int]:
    """``(warps_per_cta, instr_n)`` as Triton picks them for an fp16/bf16/fp8/tf32 wgmma dot.

    ``chained=True`` mimics a dot whose result feeds another dot (all warps along M).
    """
    m_warps = max(m // 16, 1)
    n_warps = max(num_warps // m_warps, 1)
    max_n = max(n // n_warps, 8)
    instr_n = next((c for c in _HOPPER_VALID_N if n % c == 0 and c <= max_n), None)
    if instr_n is None:
        raise ValueError(f"no wgmma instruction N fits n={n}")
    if chained:
        return (num_warps, 1), instr_n
    wpc = [4, 1]
    while wpc[0] * wpc[1] < num_warps:
        if m > 16 * wpc[0]:
            wpc[0] *= 2
        else:
            wpc[1] *= 2
    return (wpc[0], wpc[1]), instr_n


def _hopper_params(
    m: int, n: int, num_warps: int, warps_per_cta: Sequence[int] | None, instr_n: int | None
) -> tuple[int, int, int]:
    dflt_wpc, dflt_n = hopper_mma_config(m, n, num_warps)
    wm, wn = _warps(num_warps, warps_per_cta or dflt_wpc)
    if wm % 4:
        raise ValueError(f"wgmma needs warpgroups of 4 warps along M, got warps_per_cta=({wm}, {wn})")
    inn = instr_n or dflt_n
    if inn % 8 or not 8 <= inn <= 256:
        raise ValueError(f"bad wgmma instruction N {inn}")
    return wm, wn, inn


def wgmma_accumulator(
    m: int,
    n: int,
    num_warps: int = 4,
    warps_per_cta: Sequence[int] | None = None,
    instr_n: int | None = None,
) -> TVLayout:
    """Hopper ``wgmma.m64nNk16`` fp32 accumulator over an ``(m, n)`` tile (Triton MMA v3).

    In one instruction tile: ``row = 16*(warp%4) + lane//4 + 8*i``,
    ``col = 8*j + 2*(lane%4) + k``, value ``k + 2*i + 4*j``. Warps are column-major over
    ``warps_per_cta`` (warp w -> (w % wm, w // wm)): each warp owns 16 rows, warps along N
    own ``instr_n`` columns each; repeats go along N first, then M. Defaults follow
    :func:`hopper_mma_config`. For a 64xN tile on 4 warps this equals CuTe's ``CLayout_64xN``.
    """
    wm, wn, inn = _hopper_params(m, n, num_warps, warps_per_cta, instr_n)
    lanes = [(4, 1, 2), (8, 0, 1)]
    warps = [(wm, 0, 16), (wn, 1, inn)]
    values = [(2, 1, 1), (2, 0, 8), (inn // 8, 1, 8)]
    return _build((m, n), lanes + warps, values, (1, 0), 32, f"wgmma_acc(wpc=[{wm},{wn}], n={inn})")


def wgmma_operand_a(
    m: int,
    k: int,
    num_warps: int = 4,
    warps_per_cta: Sequence[int] | None = None,
) -> TVLayout:
    """Hopper wgmma register A operand for 16-bit types (k-major pairs) over an ``(m, k)`` tile.

    Per k16 slice: ``row = 16*(warp%4) + lane//4 + 8*i``, ``col = 8*j + 2*(lane%4) + e``,
    value ``e + 2*i + 4*j`` (CuTe's ``ALayout_64x16``); repeats along K first, then M.
    Warps along N of the accumulator (``warps_per_cta[1]``) replicate A: pass the
    accumulator's ``warps_per_cta`` (default ``(num_warps, 1)``).
    """
    if warps_per_cta is None:
        warps_per_cta = (num_warps, 1)
    wm, wn = _warps(num_warps, warps_per_cta)
    if wm % 4:
        raise ValueError(f"wgmma needs warpgroups of 4 warps along M, got warps_per_cta=({wm}, {wn})")
    lanes = [(4, 1, 2), (8, 0, 1)]
    warps = [(wm, 0, 16), (wn, -1, 0)]
    values = [(2, 1, 1), (2, 0, 8), (2, 1, 8)]
    return _build((m, k), lanes + warps, values, (1, 0), 32, f"wgmma_a(wpc=[{wm},{wn}])")


# -- AMD CDNA MFMA ---------------------------------------------------------------------------
def mfma_warps(m: int, n: int, num_warps: int, mdim: int = 32, ndim: int | None = None) -> tuple[int, int]:
    """Triton AMD ``warpsPerTile`` for a non-chained dot with an ``mdim x ndim`` instruction."""
    ndim = ndim or mdim
    ret = [1, 1]
    while ret[0] * ret[1] < num_warps:
        if m // (mdim * 2) // ret[0] >= n // ndim // ret[1]:
            if ret[0] < m // mdim:
                ret[0] *= 2
            else:
                ret[1] *= 2
        else:
            ret[1] *= 2
    if ret[1] * ndim > n:
        return ret[1], ret[0]
    return ret[0], ret[1]


def mfma_accumulator(
    m: int,
    n: int,
    num_warps: int = 4,
    instr: int = 32,
    warps_per_cta: Sequence[int] | None = None,
    transposed: bool = False,
) -> TVLayout:
    """CDNA3 MFMA fp32 accumulator (wavefront 64) over an ``(m, n)`` tile.

    ``instr=32`` (``v_mfma_f32_32x32x8_{f16,bf16}``): lane l holds column ``l % 32`` and
    rows ``8*i + 4*(l // 32) + j``, value ``j + 4*i`` (16 values). ``instr=16``
    (``v_mfma_f32_16x16x16``): column ``l % 16``, rows ``4*(l // 16) + j``, value ``j``.
    ``transposed=True`` swaps the roles of rows and columns (Triton's ``isTransposed``,
    which Triton's BlockedToMFMA picks by default). Warps are row-major over
    ``warps_per_cta`` (warp w -> (w // wn, w % wn)), each owning one ``instr x instr`` block;
    repeats go along N first, then M.
    """
    if instr not in (16, 32):
        raise ValueError("instr must be 16 or 32")
    wm, wn = _warps(num_warps, warps_per_cta or mfma_warps(m, n, num_warps, instr))
    row, col = (1, 0) if transposed else (0, 1)
    if instr == 32:
        lanes = [(32, col, 1), (2, row, 4)]
        values = [(4, row, 1), (4, row, 8)]
    else:
        lanes = [(16, col, 1), (4, row, 4)]
        values = [(4, row, 1)]
    warps = [(wn, 1, instr), (wm, 0, instr)]
    nm = f"mfma{instr}{'T' if transposed else ''}_acc(wpc=[{wm},{wn}])"
    return _build((m, n), lanes + warps, values, (1, 0), 64, nm)


# -- what Triton picks for tl.dot ----------------------------------------------------------
def dot_accumulator(
    m: int, n: int, num_warps: int = 4, arch: str = "sm90", k: int | None = None, elem_bits: int = 16
) -> TVLayout:
    """Accumulator layout Triton gives a non-chained ``tl.dot`` with an ``(m, n)`` result.

    ``arch``: ``"sm80"``/``"sm86"``/``"sm89"`` (mma v2), ``"sm90"`` (wgmma when
    ``num_warps % 4 == 0``, ``m % 64 == 0``, ``n % 16 == 0`` and ``k >= 256 // elem_bits``,
    else mma v2), or ``"gfx942"`` (MFMA 32x32 when ``min(m, n) >= 32`` else 16x16,
    transposed, as Triton's BlockedToMFMA does). Inputs are 16-bit (or fp8/tf32) floats.
    """
    if arch.startswith("sm"):
        cap = int(arch[2:])
        if cap < 80 or cap >= 100:
            raise ValueError(f"unsupported NVIDIA arch {arch} (sm80..sm90)")
        if cap >= 90 and num_warps % 4 == 0 and m % 64 == 0 and n % 16 == 0 and (k is None or k >= 256 // elem_bits):
            return wgmma_accumulator(m, n, num_warps)
        return mma_v2_accumulator(m, n, num_warps)
    if arch == "gfx942":
        if min(m, n) < 16:
            raise ValueError("Triton does not use MFMA 32x32/16x16 for a dim below 16")
        instr = 32 if min(m, n) >= 32 else 16
        return mfma_accumulator(m, n, num_warps, instr, transposed=True)
    raise ValueError(f"unsupported arch {arch!r}")
