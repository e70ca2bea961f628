"""Hand-written Hopper lowerings of DSL kernels through Triton's Gluon dialect: explicit shared-memory rings,
TMA copies with mbarriers, asynchronous wgmma and warp-specialized partitions, which the tile-level Triton lowering
cannot express. A DSL kernel with a lowering here takes it on NVIDIA sm_90 when its policy says
`warp_specialize=True` and the launch meets the lowering's preconditions; every other launch of it runs the Triton
lowering of the same kernel. The checker proves the DSL kernel under the ring discipline these lowerings keep
(argus_inductor.invariants.interpreter.warp_specialized_staging), and `rings` proves from each lowering's own
Gluon source that it keeps it (fill, read-after-fill, release-after-retire, release-once)."""
from __future__ import annotations

from typing import Any

# kernel name -> the module of its lowering: launch(policy, *args) -> bool (whether it ran), fallback(policy, *args)
# -> the Triton policy of a launch it cannot take, prove_rings(stages) -> its ring-discipline violations
_LOWERINGS = {"attention_fwd": "attention", "gemm_epilogue": "gemm", "moe_gate_up": "moe_gate_up",
              "moe_down": "moe_down"}


def has_lowering(kernel_name: str) -> bool:
    return kernel_name in _LOWERINGS


_LOADED: dict[str, Any] = {}


def lowering_for(kernel_name: str) -> Any:
    """The module of `kernel_name`'s Gluon lowering, or None where it has none (or this Triton has no Gluon)."""
    if kernel_name in _LOADED:  # the launch path asks on every call
        return _LOADED[kernel_name]
    module = _LOWERINGS.get(kernel_name)
    mod = None
    if module is not None:
        try:
            import importlib

            mod = importlib.import_module(f"{__name__}.{module}")
        except ImportError:  # a Triton without triton.experimental.gluon
            mod = None
    _LOADED[kernel_name] = mod
    return mod


def takes(kernel_name: str, policy: Any) -> bool:
    """Whether `kernel_name`'s Gluon lowering runs with `policy`'s tiles and ring (its launches may still decline
    operands); where not, a warp_specialize request runs the Triton lowering at the policy as it is."""
    mod = lowering_for(kernel_name)
    return mod is not None and mod.policy_fits(policy) is None


def ring_proof(kernel_name: str, stages: int) -> list[str]:
    """The ring-discipline violations of `kernel_name`'s Gluon lowering at `stages` slots (argus_inductor.hopper.rings),
    as text; empty when proved, or when the kernel has no such lowering."""
    mod = lowering_for(kernel_name)
    return [] if mod is None else [str(v) for v in mod.prove_rings(stages)]
