"""The kernel library: DSL kernels with host wrappers. GEMM, attention and MoE are imported here; the general op
classes are modules of their own: conv, reduce (reductions, softmax), normalize, pool, scan, loss and pointwise
(elementwise chains, standalone, summed in the same pass, or as a GEMM/conv epilogue).

May import: dsl. Imported by hopper, specs, ops and above; never by dsl or invariants."""
from . import conv, loss, normalize, pointwise, pool, reduce, scan
from .attention import attention, attention_decode, attention_fwd
from .gemm import ACTIVATIONS, bias_act_cast, bmm, bmm_kernel, gemm, gemm_epilogue, gemm_splitk, gemv_cat
from .moe import (
    moe_align,
    moe_align_block,
    moe_align_counted,
    moe_align_fused,
    moe_count,
    moe_down,
    moe_expert_step,
    moe_gate_up,
    moe_gather,
    moe_place,
    moe_route,
)
from .norms import layernorm, layernorm_kernel, rmsnorm, rmsnorm_kernel, softmax, softmax_kernel
from .rotary import rope_cache, rope_cache_write, rotary_table, rotary_table_rows
from .router import router_topk, router_topk_rows

__all__ = [
    "ACTIVATIONS", "gemm", "gemm_epilogue", "gemm_splitk", "gemv_cat", "bias_act_cast", "bmm", "bmm_kernel",
    "softmax", "softmax_kernel", "rmsnorm", "rmsnorm_kernel", "layernorm", "layernorm_kernel",
    "attention", "attention_fwd", "attention_decode",
    "moe_align", "moe_align_block", "moe_align_fused", "moe_route", "moe_align_counted", "moe_count",
    "moe_place", "moe_gate_up", "moe_gather", "moe_down",
    "moe_expert_step", "router_topk", "router_topk_rows", "rotary_table", "rotary_table_rows", "rope_cache",
    "rope_cache_write",
    "conv", "loss", "normalize", "pointwise", "pool", "reduce", "scan",
]
