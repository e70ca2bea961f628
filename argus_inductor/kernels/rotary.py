"""The rotary embedding's cos and sin tables in one launch, computed once per (position, frequency).

transformers' rotary embedding computes `emb = cat(freqs, freqs)` (positions x frequencies, float32), then
`emb.cos()` and `emb.sin()`, which every q and k rotation of every layer multiplies in. Inductor inlines such a
cheap producer into its consumers unless more than `realize_reads_threshold` kernels read it. In a model of a few
layers nothing reads it that often, so every q and k element recomputes two float32 transcendentals: the q
rotation took 24 us a layer at 2048 Mixtral tokens on the H100 (cos and sin, not the bytes) against about 11
for its loads and stores. Computed here once, the tables are a buffer Inductor's consumers read.

The op returns both tables packed in one float32 tensor (2, *emb.shape): cos first, then sin. The graph's own
scaling and dtype cast stay after it, in Inductor's kernels.
"""
from __future__ import annotations

import torch

from ..dsl import Policy
from ..dsl.lang import Tensor, arange, assume, cdiv, constexpr, cos, float32, load, sin, store, tile_grid
from ..dsl.runtime import Kernel, kernel
from .launch import check_target, pow2, resolve_target
from .reduce import pick_kernel

MAX_WIDTH = 1024  # a table row is one tile (a rotary dimension of at most this many frequencies)


@kernel
def rotary_table_rows(E: Tensor("R", "D"), Y: Tensor("R2", "D", dtype=float32), BR: constexpr = 16,
                      BD: constexpr = 128):
    """Y[r] = cos(E[r]) and Y[R + r] = sin(E[r]), in float32, for each row r of E."""
    (pr,) = tile_grid(cdiv(R, BR))
    assume((D <= BD) & (R2 == 2 * R))
    rr = pr * BR + arange(BR)
    rd = arange(BD)
    live = (rr < R)[:, None] & (rd < D)[None, :]  # past R, a cos row would land on the sin rows
    e = load(E[rr, rd], mask=live, other=0.0).to(float32)
    store(Y[rr, rd], cos(e), mask=live)
    store(Y[R + rr, rd], sin(e), mask=live)


KERNELS = (rotary_table_rows,)


def rotary_policy(rows: int, width: int, target: str) -> Policy:
    """A few rows a program, a whole row each: 16 rows of 128 on a GPU (2048 positions: 128 programs)."""
    check_target(target)
    bd = max(2, pow2(width))
    br = 4 if target == "interpret" else max(1, min(16, 2048 // bd))
    return Policy.make(BR=br, BD=bd, num_warps=4)


def table_shapes(emb: torch.Tensor) -> dict[str, int]:
    """rotary_table_rows' shape symbols for the angles `emb` (rows of its last dim)."""
    width = emb.shape[-1]
    rows = emb.numel() // max(width, 1)
    return {"R": rows, "D": width, "R2": 2 * rows}


def rotary_table(emb: torch.Tensor, *, policies: dict[str, Policy] | None = None,
                 kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """(2, *emb.shape) float32: cos(emb), then sin(emb)."""
    if emb.dim() < 1 or not emb.is_floating_point():
        raise ValueError(f"rotary_table takes a float tensor of angles, got {tuple(emb.shape)} {emb.dtype}")
    width = emb.shape[-1]
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"rotary_table takes rows of 1 to {MAX_WIDTH} angles, got {width}")
    target = resolve_target(emb, target)
    x = emb.reshape(-1, width)
    y = torch.empty(2 * x.shape[0], width, dtype=torch.float32, device=emb.device)
    if x.shape[0]:
        pol = (policies or {}).get("rotary_table_rows") or rotary_policy(x.shape[0], width, target)
        if pol.const("BD", width) < width:  # the kernel writes one tile a row: a narrower tile leaves it half done
            raise ValueError(f"rotary_table's policy has BD={pol.const('BD')} for rows of {width} angles")
        pick_kernel("rotary_table_rows", rotary_table_rows, kernels)(x, y, policy=pol, target=target)
    return y.view(2, *emb.shape)


def rotary_reference(emb: torch.Tensor) -> torch.Tensor:
    """torch's cos and sin of `emb` in float32, packed as rotary_table packs them."""
    e = emb.float()
    return torch.stack([e.cos(), e.sin()])


__all__ = ["rotary_table_rows", "rotary_table", "rotary_reference", "rotary_policy", "table_shapes", "KERNELS",
           "MAX_WIDTH"]
