"""torch.ops.argus.*: the custom ops matched subgraphs become. Each has a fake (meta) implementation so Inductor
and dynamic shapes see through it, and a real one that runs Argus kernels for the tensors' shape signature, or the
aten op where Argus does not apply.

Where a call's kernel comes from (the report's "kernel" column):

- cache: the disk cache (runtime/cache.py) has an entry for the signature; its stored policy (and its DSL kernels,
  when the agent wrote new ones) are used.
- synthesized: ARGUS_ON_MISS=synthesize and the agent produced a kernel now; it is stored in the cache.
- default: ARGUS_ON_MISS=default (the default) - the library kernel with the policy of the nearest solved signature
  of the same op/epilogue/dtypes whose template is this signature's (one regime of the template rules), else the
  template default of kernels/policies.py; the signature is recorded for `argus warmup`.
- fallback: the aten op (ARGUS_ON_MISS=fallback on a miss, a device or dtype Argus does not run on, or a kernel
  that failed to launch).

Modules: core.py (options, targets, OpSpec and the spec registry, Plan), entries.py (verification and cache
entries), plans.py (which plan a signature runs), dispatch.py (one op call: plan, launch, replay, report), and one
module per op family, each registering its specs and defining its ops: gemm.py, attention.py, moe.py, library.py
(convolutions, norms, reductions, pooling, scans, losses, elementwise chains, rotary, router).

May import: config, dsl, kernels, hopper, specs, runtime. Imported by graph, agent and the top-level modules; never
imports them (the agent is reached through plans.install_agent).
"""
from __future__ import annotations

from .. import hopper  # noqa: F401  (registers the Gluon lowerings the plans may ask for)
from ..kernels.policies import fp32_precision
from . import attention, gemm, library, moe  # noqa: F401  (register their specs and torch.ops.argus.*)
from .attention import attention_out
from .core import (
    DSL_HEADER,
    DTYPES,
    SPECS,
    SUPPORTED_ARCHS,
    OpSpec,
    Plan,
    active_options,
    dsl_source,
    kernel_cache,
    library_kernels,
    plan_from_entry,
    set_active_options,
    spec_for,
    target_for,
)
from .dispatch import (
    SignatureRecorded,
    call_key,
    capturing_recordings,
    recording_signatures,
    replay_hot,
    run_op,
    tensor_key,
)
from .entries import CHECKER_VERSION, entry_current, make_entry, mark_proved, verify_plan, warm
from .library import HOST_FUNCTIONS, LIBRARY
from .moe import moe_reference
from .plans import forget_plans, install_agent, plan_for, prove_ahead, tune_library

__all__ = [
    "CHECKER_VERSION", "DSL_HEADER", "DTYPES", "HOST_FUNCTIONS", "LIBRARY", "SPECS", "SUPPORTED_ARCHS", "OpSpec",
    "Plan", "SignatureRecorded", "active_options", "attention_out", "call_key", "capturing_recordings", "dsl_source",
    "entry_current", "forget_plans", "fp32_precision", "install_agent", "kernel_cache", "library_kernels",
    "make_entry", "mark_proved", "moe_reference", "plan_for", "plan_from_entry", "prove_ahead", "recording_signatures",
    "replay_hot", "run_op", "set_active_options", "spec_for", "target_for", "tensor_key", "tune_library", "verify_plan",
    "warm",
]
