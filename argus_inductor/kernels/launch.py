"""What every host function of the kernel library does before a launch: resolve the target and pick the caller's
kernel or policy over the library's."""
from __future__ import annotations

from typing import Any

import torch

TARGETS = ("cuda", "hip", "interpret")


def check_target(target: str) -> None:
    """ValueError unless target is one of TARGETS."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")


def resolve_target(x: torch.Tensor, target: str | None) -> str:
    """The launch target: the caller's, else the interpreter for CPU tensors and the GPU backend otherwise."""
    if target is None:
        from ..dsl.runtime import default_target

        target = default_target(x.device)
    check_target(target)
    return target


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def pow2_between(n: int, lo: int, hi: int) -> int:
    """pow2(n) clamped to [lo, hi]: a tile size for an extent n."""
    return max(lo, min(hi, pow2(int(n))))


def pick(table: dict[str, Any] | None, *names: str) -> Any:
    """The first entry of `table` (a caller's kernels or policies) under any of `names`, else None."""
    for n in names:
        if table and table.get(n) is not None:
            return table[n]
    return None
