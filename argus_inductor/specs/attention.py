"""Attention forward: causal or not, GQA/MQA, prefill (online softmax) and decode (GQA head packing)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..dsl import Kernel, Policy
from ..kernels.attention import mask_operand, nonnegative_scale
from ..kernels.policies import attention_policy
from . import templates
from .base import Inputs, OpSpec, Problem, empty, next_pow2, strided
from .plan import Plan


def is_causal(problem: Problem) -> bool:
    return "causal" in problem.epilogue.split(",")


def has_mask(problem: Problem) -> bool:
    return "mask" in problem.epilogue.split(",")


def decode_kernel(problem: Problem) -> bool:
    """One query token, not causal, a query-head group that fits one tile: the head-packed decode kernel
    (a top-left-aligned causal single-token query sees key 0 only, so it takes the general kernel)."""
    d = problem.dims
    return d["S"] == 1 and not is_causal(problem) and d["H"] // d["HK"] <= 64


@dataclass
class AttentionSpec(OpSpec):
    name: str = "attention"
    semantics: str = ("O = softmax(Q K^T * scale [+ causal mask]) V for Q (Z, H, S, D), K and V (Z, HK, T, D), "
                      "H % HK == 0, query head h reads key/value head h // (H // HK); scale = 1/sqrt(D); the causal "
                      "mask is top-left aligned (key j visible to query i when j <= i), as "
                      "scaled_dot_product_attention(is_causal=True).")
    static: tuple[str, ...] = ("H", "HK", "D")
    dynamic: tuple[str, ...] = ("Z", "S", "T")
    tile_dims: dict[str, dict[str, str]] = field(default_factory=lambda: {
        "attention_fwd": {"BM": "S", "BN": "T"}, "attention_decode": {"BN": "T"}})
    capturable: bool = False  # SDPA's flash/cuDNN paths misbehave under graph capture: both timed with events

    def variants(self, problem: Problem) -> dict[str, dict[str, Kernel]]:
        if decode_kernel(problem):
            return {"decode": {"attention_decode": templates.kernel("attention_decode")}}
        return {"fwd": {"attention_fwd": templates.kernel("attention_fwd")}}

    def regime(self, problem: Problem) -> str:
        return "decode" if problem.dims["S"] == 1 else "prefill"

    def fixed_consts(self, problem: Problem, kernel: str, plan: Plan) -> dict[str, Any]:
        d = problem.dims
        return {"BD": next_pow2(d["D"], 16), "CAUSAL": int(is_causal(problem)),
                "BG": next_pow2(d["H"] // d["HK"], 16), "HAS_MASK": int(has_mask(problem)),
                "SAFE": int("nanrows" not in problem.epilogue.split(","))}

    def default_plan(self, problem: Problem, target: str) -> Plan:
        d = problem.dims
        pol = attention_policy(d["S"], d["D"], target, has_mask(problem)).as_dict()
        name = next(iter(self.contract(problem)))
        if name == "attention_decode":
            pol.pop("BM", None)
        return Plan({name: pol}, ("online-softmax",), "template default (argus_inductor.kernels.policies)")

    def make_inputs(self, problem: Problem, gen: torch.Generator) -> Inputs:
        d, dt, dev = problem.dims, problem.torch_dtype, problem.device
        out = {"q": strided((d["Z"], d["H"], d["S"], d["D"]), "row", dt, dev, gen),
               "k": strided((d["Z"], d["HK"], d["T"], d["D"]), "row", dt, dev, gen),
               "v": strided((d["Z"], d["HK"], d["T"], d["D"]), "row", dt, dev, gen),
               "scale": 1.0 / math.sqrt(d["D"])}
        if has_mask(problem):  # a KV-cache style mask: each sequence sees a random-length prefix of the keys
            lengths = torch.randint(1, d["T"] + 1, (d["Z"], 1, 1, 1), generator=gen, device=dev)
            keys = torch.arange(d["T"], device=dev).view(1, 1, 1, -1)
            out["mask"] = torch.zeros(d["Z"], 1, d["S"], d["T"], dtype=dt, device=dev).masked_fill(
                keys >= lengths, torch.finfo(dt).min)
        return out

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        mask = inputs["mask"].float() if "mask" in inputs else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal(problem),
                                              scale=inputs["scale"])

    def run(self, problem: Problem, kernels: dict[str, Kernel], policies: dict[str, Policy],
            inputs: Inputs, poison: bool = False) -> torch.Tensor:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        out = empty(tuple(q.shape), q.dtype, q.device, poison)
        name = next(iter(kernels))
        mask = inputs.get("mask")
        q, scale = nonnegative_scale(q, inputs["scale"])
        kernels[name](q, k, v, mask_operand(mask, q, k), out, scale, policy=policies[name])
        return out

    def peers(self, problem: Problem, inputs: Inputs) -> dict[str, Callable[[], Any]]:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        causal, gqa = is_causal(problem), q.shape[1] != k.shape[1]
        out = {}
        for name, be in (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cudnn", SDPBackend.CUDNN_ATTENTION)):
            def call(be: Any = be) -> torch.Tensor:
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=inputs.get("mask"), is_causal=causal,
                                                          enable_gqa=gqa)
            out[name] = call
        return out

    def verify_shapes(self, problem: Problem, kernel: str, policy: Policy) -> tuple[dict[str, int], list[str]]:
        return dict(problem.dims), []

    def flops(self, problem: Problem) -> float:
        d = problem.dims
        frac = 0.5 if is_causal(problem) and d["S"] == d["T"] else 1.0
        return 4.0 * d["Z"] * d["H"] * d["S"] * d["T"] * d["D"] * frac
