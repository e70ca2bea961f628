"""The MoE op: argus::moe (routed tokens through gate-up and down expert GEMMs after a routing sort), its spec
(the block layout the routing guarantees, as the MoE spec in argus_inductor.specs states it for the proofs) and host
function.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import specs
from ..dsl import Kernel, Policy
from ..kernels.moe import gate_up_rows, gather_policy, gathers_rows, moe_align, moe_down, moe_gate_up, moe_gather
from ..kernels.policies import fit_shared_memory, gluon_reads, moe_down_fallback, moe_gate_up_fallback, moe_policies
from ..runtime import reporting as _report
from ..runtime.signature import Signature, make_signature
from .core import ELEM_BYTES, SPECS, OpSpec, Plan
from .dispatch import lowering_note, run_op, tensor_key


def _moe_template(sig: Signature, target: str) -> dict[str, Any]:
    d = sig.dims()
    up, down = moe_policies(d["T"], d["TOPK"], d["E"], target, gluon=gluon_reads(sig.dtypes[0]))
    if target != "interpret":  # gate and up tiles staged together; the down GEMM's rows are the gate-up's BM
        elem = ELEM_BYTES.get(sig.dtypes[0], 4)
        if not up.warp_specialize:  # a Gluon ring's slots are sized by its lowering (policy_fits), as the down's
            up = fit_shared_memory(up, elem, b_tiles=2, target=target)
        if not down.warp_specialize:
            down = fit_shared_memory(down.with_consts(BM=up.const("BM", 16)), elem, target=target).without_consts("BM")
    return {"moe_gate_up": up.as_dict(), "moe_down": down.as_dict()}


def _moe_checks(sig: Signature, policies: dict[str, Policy]) -> dict[str, tuple[dict[str, int], list[str]]]:
    """What ops.moe's host guarantees its kernels, as the agent's MoE spec states it for its proofs: the block
    layout moe_align_block makes (NB blocks of BM rows, P = NB * BM, real blocks' experts below E, sorted ids at
    most T * TOPK), at the signature's dims; with GATHERED=1 the gate-up reads the P gathered rows (T == P), which
    moe_gather wrote."""
    moe_spec, problem = specs.spec("moe"), specs.problem_from_signature(sig)
    out = {name: moe_spec.verify_shapes(problem, name, pol) for name, pol in policies.items()}
    if "moe_gate_up" in out and gathers_rows(policies["moe_gate_up"]):
        shapes, assumptions = out["moe_gate_up"]
        out["moe_gate_up"] = ({**shapes, "T": shapes["P"]}, [*assumptions, "T == P"])
        out["moe_gather"] = ({"T": shapes["T"], "HD": shapes["HD"], "P": shapes["P"]}, [])
    return out


def _moe_host_kernels(sig: Signature, policies: dict[str, Policy],
                      target: str | None) -> dict[str, tuple[Kernel, Policy]]:
    """The row gather that gate_up_rows runs before a GATHERED=1 gate-up, at the policy it runs it with; where the
    gate-up or the down runs its Gluon lowering (on NVIDIA), the Triton policy a launch it declines runs."""
    from ..hopper import takes

    out: dict[str, tuple[Kernel, Policy]] = {}
    up = policies.get("moe_gate_up")
    if up is not None and gathers_rows(up):
        out["moe_gather"] = (moe_gather, gather_policy(target, sig.dims()["TOPK"]))
        if target in (None, "cuda") and up.warp_specialize and takes(moe_gate_up.name, up):
            f = moe_gate_up_fallback(up)
            out[f"moe_gate_up (Triton fallback, {f.num_stages} stages)"] = (moe_gate_up, f)
    down = policies.get("moe_down")
    if target in (None, "cuda") and down is not None and down.warp_specialize and takes(moe_down.name, down):
        f = moe_down_fallback(down)
        out[f"moe_down (Triton fallback, {f.num_stages} stages)"] = (moe_down, f)
    return out


def _moe_consts(sig: Signature) -> dict[str, dict[str, Any]]:
    topk = sig.dims()["TOPK"]
    return {"moe_gate_up": {"TOPK": topk}, "moe_down": {"TOPK": topk}}


def _moe_select(policy: dict[str, Any], sig: Signature) -> dict[str, Policy]:
    """The gate-up and down policies with TOPK; the down GEMM walks the gate-up's row blocks, so its BM is the
    gate-up's whatever a stored policy says."""
    consts = _moe_consts(sig)
    up = Policy.make(**dict(policy.get("moe_gate_up", {}))).with_consts(**consts["moe_gate_up"])
    down = Policy.make(**dict(policy.get("moe_down", {}))).with_consts(**consts["moe_down"], BM=up.const("BM", 16))
    return {"moe_gate_up": up, "moe_down": down}



SPECS["moe"] = OpSpec("moe", (moe_gate_up, moe_down), _moe_template, _moe_consts,
              lambda s: {"moe_gate_up": {"HD": s.dims()["HD"], "I": s.dims()["I"], "E": s.dims()["E"]},
                         "moe_down": {"HD": s.dims()["HD"], "I": s.dims()["I"], "E": s.dims()["E"]}},
              _moe_select, checks=_moe_checks, host_kernels=_moe_host_kernels)


def moe_reference(hidden: Tensor, topk_weights: Tensor, topk_ids: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    """The MoE expert step in plain torch (what the aten fallback runs)."""
    inter = w1.shape[1] // 2
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    for e in range(w1.shape[0]):
        tok, j = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        gu = F.linear(hidden[tok], w1[e])
        y = F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], w2[e])
        out.index_add_(0, tok, y.float() * topk_weights[tok, j, None].float())
    return out.to(hidden.dtype)


@torch.library.custom_op("argus::moe", mutates_args=())
def moe(hidden: Tensor, topk_weights: Tensor, topk_ids: Tensor, w1: Tensor, w2: Tensor, node_id: str) -> Tensor:
    """sum_j topk_weights[t, j] * (silu(x W1g[e]^T) * (x W1u[e]^T)) W2[e]^T, e = topk_ids[t, j].

    hidden (T, HD); topk_weights and topk_ids (T, topk), the ids integers or a router's float32 whole numbers (the
    backend hands the op router_topk's packed ids as they are); w1 (E, 2I, HD) gate rows over up rows;
    w2 (E, HD, I): transformers' stacked expert weights (gate_up_proj, down_proj)."""
    t, hd = hidden.shape
    e, i2, _ = w1.shape
    topk = topk_ids.shape[1]

    def sig() -> Signature:
        return make_signature("moe", f"top{topk},silu", [hidden, w1, w2],
                              {"E": e, "I": i2 // 2, "HD": hd, "TOPK": topk}, {"T": t})

    def run(plan: Plan, target: str) -> Tensor:
        p_up, p_down = plan.policies["moe_gate_up"], plan.policies["moe_down"]  # one BM (_moe_select)
        sorted_ids, block_expert = moe_align(topk_ids, e, p_up.const("BM", 16))
        h = torch.empty(sorted_ids.numel(), i2 // 2, dtype=hidden.dtype, device=hidden.device)
        before = None
        if p_up.warp_specialize and target == "cuda":
            def before(rows: Tensor) -> None:
                _report.note(node_id, lowering_note("moe_gate_up", p_up, rows, w1, sorted_ids, block_expert, h))
        gate_up_rows(hidden, w1, sorted_ids, block_expert, h, p_up, target, plan.kernels["moe_gate_up"], before)
        y = torch.zeros(t, hd, dtype=torch.float32, device=hidden.device)
        plan.kernels["moe_down"](h, w2, sorted_ids, block_expert, topk_weights.reshape(-1).contiguous(), y,
                                 policy=p_down, target=target)
        return y.to(hidden.dtype)

    def fallback() -> Tensor:
        return moe_reference(hidden, topk_weights, topk_ids, w1, w2)

    if t == 0:
        return hidden.new_zeros(hidden.shape)
    # the routing tensors' metadata is part of the call's memo key: the host function reads them (and a replay of
    # its launches must see the same dtypes and layouts)
    return run_op(node_id, sig, run, fallback, [hidden, w1, w2], (topk, tensor_key(topk_weights), tensor_key(topk_ids)),
                  flops=t * topk * 6 * hd * (i2 // 2),  # gate+up (2 x 2*HD*I) and down (2*I*HD) per pair
                  inputs=[hidden, w1, w2, topk_weights, topk_ids])


@moe.register_fake
def _(hidden, topk_weights, topk_ids, w1, w2, node_id):
    return hidden.new_empty(hidden.shape)
