"""Hand-written Hopper lowerings of DSL kernels through Triton's Gluon dialect: explicit shared-memory rings,
TMA copies with mbarriers, asynchronous wgmma and warp-specialized partitions, which the tile-level Triton lowering
cannot express. A DSL kernel with a lowering here takes it on NVIDIA sm_90 when its policy says
`warp_specialize=True` and the launch meets the lowering's preconditions; every other launch of it runs the Triton
lowering of the same kernel. The checker proves the DSL kernel under the ring discipline these lowerings keep
(argus_inductor.invariants.interpreter.warp_specialized_staging), and `rings` proves from each lowering's own
Gluon source that it keeps it (fill, read-after-fill, release-after-retire, release-once)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

# kernel name -> "module:function"; the function takes (policy, *launch args) and returns whether it ran
_LOWERINGS = {"attention_fwd": "attention:launch"}


def has_lowering(kernel_name: str) -> bool:
    return kernel_name in _LOWERINGS


def lowering_for(kernel_name: str) -> Callable[..., bool] | None:
    """The Gluon launcher of `kernel_name`, or None where it has none (or this Triton has no Gluon)."""
    where = _LOWERINGS.get(kernel_name)
    if where is None:
        return None
    module, fn = where.split(":")
    try:
        import importlib
        mod: Any = importlib.import_module(f"{__name__}.{module}")
    except ImportError:  # a Triton without triton.experimental.gluon
        return None
    return getattr(mod, fn)


def ring_proof(kernel_name: str, stages: int) -> list[str]:
    """The ring-discipline violations of `kernel_name`'s Gluon lowering at `stages` slots (argus_inductor.hopper.rings),
    as text; empty when proved, or when the kernel has no such lowering."""
    where = _LOWERINGS.get(kernel_name)
    if where is None:
        return []
    import importlib

    try:
        mod: Any = importlib.import_module(f"{__name__}.{where.split(':')[0]}")
    except ImportError:  # no Gluon in this Triton: the lowering never runs
        return []
    return [str(v) for v in mod.prove_rings(stages)]
