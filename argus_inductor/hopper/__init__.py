"""Hand-written Hopper lowerings of DSL kernels through Triton's Gluon dialect: explicit shared-memory rings,
TMA copies with mbarriers, asynchronous wgmma and warp-specialized partitions, which the tile-level Triton lowering
cannot express. A DSL kernel with a lowering here takes it on NVIDIA sm_90 when its policy says
`warp_specialize=True` and the launch meets the lowering's preconditions; every other launch of it runs the Triton
lowering of the same kernel. The checker proves the DSL kernel under the ring discipline these lowerings keep
(argus_inductor.invariants.interpreter.warp_specialized_staging), and `rings` proves from each lowering's own
Gluon source that it keeps it (fill, read-after-fill, release-after-retire, release-once).

May import: dsl, kernels. Registers its lowerings in dsl.lowerings; imported by specs, ops and above."""
from __future__ import annotations

import importlib

from ..dsl.lowerings import has_lowering, lowering_for, register_lowering, ring_proof, takes

# kernel name -> the module of its lowering (argus_inductor.dsl.lowerings says what such a module provides)
LOWERINGS = {"attention_fwd": "attention", "gemm_epilogue": "gemm", "moe_gate_up": "moe_gate_up",
             "moe_down": "moe_down"}
for _kernel, _module in LOWERINGS.items():
    register_lowering(_kernel, lambda m=_module: importlib.import_module(f"{__name__}.{m}"))

__all__ = ["LOWERINGS", "has_lowering", "lowering_for", "ring_proof", "takes"]
