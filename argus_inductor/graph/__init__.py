"""Graph rewrites: the passes that turn matched subgraphs of Dynamo's graph into torch.ops.argus.* calls.

- patterns.py: the toolkit every pass shares (torch callables, fake values, arguments, erasing unused nodes).
- one module per matcher family: moe.py, attention.py, gemm.py, router.py, rotary.py, norm.py, library.py (the
  library op classes), chain.py (elementwise chains).
- analyses the families ask: causal_mask.py (a size-only mask proved causal), row_pruning.py (rows no output
  reads), module_floats.py (module floats as constants).
- pipeline.py: the pipeline that runs the passes in order; inline.py: Argus ops inlined as Triton launches in
  Inductor's code; experts.py: argus_inductor.optimize(model), the module-level swap of MoE experts.

May import: ops, runtime, kernels (an op's constants and references), specs. Imported by the backend, the agent's
tracing and the vLLM plugin; never imports them.
"""
from __future__ import annotations

from .patterns import Match, is_argus_op
from .pipeline import rewrite

__all__ = ["Match", "is_argus_op", "rewrite"]
