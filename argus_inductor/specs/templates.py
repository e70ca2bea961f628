"""The templates the offline synthesizer instantiates: the kernel library's DSL kernels (argus_inductor.kernels),
each with the knowledge-base entries it implements."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..dsl import Kernel

DSL_HEADER = "from argus_inductor.dsl import *\n"


@dataclass(frozen=True)
class Template:
    name: str                  # the kernel's name
    techniques: tuple[str, ...]  # knowledge-base ids it implements
    origin: str                # "library:<module>"


@functools.lru_cache(maxsize=1)
def _library() -> dict[str, Kernel]:
    from .. import kernels as lib

    found = {k.name: k for k in vars(lib).values() if isinstance(k, Kernel)}
    try:  # newer library module; absent in older trees
        from ..kernels import gemm_residual as extra

        found.update({k.name: k for k in vars(extra).values() if isinstance(k, Kernel)})
    except ImportError:  # pragma: no cover
        pass
    return found


TEMPLATES: dict[str, Template] = {t.name: t for t in [
    Template("gemm_epilogue", ("tile-shape", "epilogue-fusion", "grouped-grid-order", "persistent-kernel",
                               "skinny-decode-tiles", "software-pipelining", "ragged-edge-masking",
                               "fp32-accumulation", "warp-count", "tma-block-pointers", "cuda-core-gemv"),
             "library:gemm"),
    Template("gemv_cat", ("cuda-core-gemv", "horizontal-fusion"), "library:gemm"),
    Template("bmm_kernel", ("tile-shape", "batched-grid", "software-pipelining", "tma-block-pointers"),
             "library:gemm"),
    Template("gemm_residual", ("residual-epilogue", "epilogue-fusion", "tile-shape", "cuda-core-gemv"),
             "library:gemm_residual"),
    Template("gemm_gate_up", ("fused-gate-up", "tile-shape", "cuda-core-gemv"), "library:gemm_residual"),
    Template("attention_fwd", ("online-softmax", "causal-block-skipping", "exp2-folded-scale", "head-dim-block",
                               "gqa-kv-sharing", "attention-tiles", "attention-kv-pipelining", "tma-block-pointers"),
             "library:attention"),
    Template("attention_decode", ("gqa-head-packing", "online-softmax", "head-dim-block", "attention-tiles"),
             "library:attention"),
    Template("moe_gate_up", ("moe-token-sorting", "moe-expert-grouping", "fused-gate-up", "software-pipelining",
                             "grouped-grid-order", "tma-block-pointers", "moe-row-gather"), "library:moe"),
    Template("moe_down", ("moe-token-sorting", "moe-weighted-combine", "moe-expert-grouping", "grouped-grid-order",
                          "tma-block-pointers"), "library:moe"),
    Template("router_topk_rows", ("moe-router-topk",), "library:router"),
    Template("rotary_table_rows", ("rotary-table",), "library:rotary"),
    Template("rope_cache_write", ("rope-cache-write",), "library:rotary"),
    Template("softmax_kernel", ("online-softmax", "row-block-normalization", "ragged-edge-masking"), "library:norms"),
    Template("rmsnorm_kernel", ("row-block-normalization", "two-pass-statistics"), "library:norms"),
    Template("layernorm_kernel", ("row-block-normalization", "two-pass-statistics"), "library:norms"),
    Template("gemm_splitk", ("split-k",), "library:gemm"),
    Template("bias_act_cast", ("split-k", "epilogue-fusion"), "library:gemm"),
]}


def kernel(name: str) -> Kernel:
    """The template kernel `name`."""
    lib = _library()
    if name in lib:
        return lib[name]
    raise KeyError(f"no template kernel '{name}' in argus_inductor.kernels")


def available() -> set[str]:
    return set(_library())


def dsl_source(kernels: dict[str, Kernel]) -> str:
    """Module text holding the kernels, readable again with kernels_from_source (what the cache keeps)."""
    parts = [DSL_HEADER]
    for k in kernels.values():
        parts.append("\n\n" + k.ir.source.rstrip() + "\n")
    return "".join(parts)
