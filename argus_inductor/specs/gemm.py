"""GEMM with a fused epilogue (bias, activation, residual, gated SiLU(gate)*up) and batched GEMM."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from ..dsl import Kernel, Policy
from ..kernels.gemm import ACTIVATION_FNS as _ACT_FN
from ..kernels.gemm import ACTIVATIONS, cat_shapes, cat_widths, split_operands, tf32x3_split_pays
from ..kernels.policies import (
    fp32_precision,
    gemm_policy,
    gemv_cat_policy,
    gemv_policy,
    presplit_gemm_policy,
    weight_k_major,
)
from . import templates
from .base import Inputs, OpSpec, Problem, empty, strided
from .plan import Plan


@dataclass(frozen=True)
class Epilogue:
    bias: bool
    act: str
    residual: bool
    gate_up: bool   # act(A @ Bg) * (A @ Bu): argus_inductor.ops writes the epilogue "<act>*up"
    cat: tuple[int, ...] = ()  # A @ [B0 | B1 | B2] of these widths (gemv_cat): the epilogue "cat<N0>/<N1>/<N2>"


def parse_epilogue(epilogue: str) -> Epilogue:
    """From argus_inductor.ops' epilogue strings: "bias+silu", "bias+gelu+residual", "silu*up", "cat4096/1024/1024"."""
    widths = cat_widths(epilogue)
    if widths:
        return Epilogue(False, "none", False, False, widths)
    parts = [p for p in epilogue.replace(",", "+").split("+") if p]
    gate = [p for p in parts if p.endswith("*up")]
    if gate:
        act = gate[0][:-3]
        if act not in ACTIVATIONS or len(parts) > 1:
            raise ValueError(f"unknown gated GEMM epilogue {epilogue!r}")
        return Epilogue(False, act, False, True)
    unknown = [p for p in parts if p not in ("bias", "residual") and p not in ACTIVATIONS]
    if unknown:
        raise ValueError(f"unknown GEMM epilogue part(s) {unknown} in {epilogue!r}")
    acts = [p for p in parts if p in ACTIVATIONS]
    return Epilogue("bias" in parts, acts[0] if acts else "none", "residual" in parts, False)


def presplits(policy: Policy, m: int, n: int, k: int) -> bool:
    """Whether a kernel under `policy` runs on pre-split operands: three-pass tf32 where that pays
    (kernels.gemm.tf32_split; argus_inductor.ops makes the same choice for the plans it runs)."""
    return policy.input_precision == "tf32x3" and tf32x3_split_pays(m, n, k)


def mma_operands(name: str, policies: dict[str, Policy], a: torch.Tensor,
                 *bs: torch.Tensor) -> tuple[dict[str, Policy], tuple[torch.Tensor, ...]]:
    """The policies and operands kernel `name` runs with: A and each B split along K (kernels.gemm.split_operands)
    and one tf32 pass where three-pass tf32 runs on pre-split operands; otherwise unchanged."""
    p = policies[name]
    if a.dtype != torch.float32 or not presplits(p, a.shape[-2], bs[0].shape[-1], a.shape[-1]):
        return policies, (a, *bs)
    return ({**policies, name: replace(p, input_precision="tf32")},
            split_operands(a, *bs))


def _template(problem: Problem, target: str) -> Policy:
    """The template policy: the pre-split tf32 one where a float32 problem runs three-pass tf32 on split operands
    (as argus_inductor.ops' templates do), the CUDA-core GEMV path for one row (gemv_policy), else gemm_policy's."""
    d = problem.dims
    if target != "interpret" and problem.dtype == "float32":
        if presplits(Policy.make(input_precision=fp32_precision()), d["M"], d["N"], d["K"]):
            return presplit_gemm_policy(d["M"], d["N"], d["K"])
    return gemv_policy(d["M"], d["N"], target, d["K"], weight_k_major(problem.layouts)) or \
        gemm_policy(d["M"], d["N"], d["K"], target)


def _regime(m: int) -> str:
    if m <= 64:
        return "decode"
    return "mid" if m <= 512 else "prefill"


_TILES = {"BM": "M", "BN": "N", "BK": "K"}


@dataclass
class GemmSpec(OpSpec):
    name: str = "gemm"
    semantics: str = ("C = act(A @ B + bias) [+ R] with A (M, K), B (K, N) = weight.T of an nn.Linear weight (N, K), "
                      "bias (N,), residual R (M, N); or, for the epilogue '<act>*up', C = act(A @ Bg) * (A @ Bu); "
                      "accumulate in float32, round once to the output dtype.")
    static: tuple[str, ...] = ("N", "K")
    dynamic: tuple[str, ...] = ("M",)
    tile_dims: dict[str, dict[str, str]] = field(default_factory=lambda: {
        **{k: dict(_TILES) for k in ("gemm_epilogue", "gemm_residual", "gemm_splitk", "gemm_gate_up")},
        "gemv_cat": {"BN": "N", "BK": "K"}})
    aux: tuple[str, ...] = ("bias_act_cast",)

    def variants(self, problem: Problem) -> dict[str, dict[str, Kernel]]:
        epi = parse_epilogue(problem.epilogue)
        if epi.cat:
            return {"cat": {"gemv_cat": templates.kernel("gemv_cat")}}
        if epi.gate_up:
            return {"gateup": {"gemm_gate_up": templates.kernel("gemm_gate_up")}}
        if epi.residual:
            return {"residual": {"gemm_residual": templates.kernel("gemm_residual")}}
        return {"tile": {"gemm_epilogue": templates.kernel("gemm_epilogue")},
                "splitk": {"gemm_splitk": templates.kernel("gemm_splitk"),
                           "bias_act_cast": templates.kernel("bias_act_cast")}}

    def regime(self, problem: Problem) -> str:
        return _regime(problem.dims["M"])

    def fixed_consts(self, problem: Problem, kernel: str, plan: Plan) -> dict[str, Any]:
        if kernel == "gemv_cat":  # no epilogue: three projections side by side
            return {}
        epi = parse_epilogue(problem.epilogue)
        consts: dict[str, Any] = {"HAS_BIAS": int(epi.bias), "ACT": ACTIVATIONS[epi.act]}
        if kernel == "bias_act_cast":  # the split-k epilogue pass: a light elementwise kernel
            consts.update(BM=16, BN=128)
        return consts

    def default_plan(self, problem: Problem, target: str) -> Plan:
        note = "template default (kernels/policies.py)"
        if parse_epilogue(problem.epilogue).cat:
            return Plan({"gemv_cat": gemv_cat_policy(target, problem.dims["K"]).as_dict()},
                        ("cuda-core-gemv", "horizontal-fusion"),
                        note)
        pol = _template(problem, target).as_dict()
        if int(pol.get("SPLIT_K", 1)) > 1 and "splitk" in self.variants(problem):
            return Plan({"gemm_splitk": pol, "bias_act_cast": {}}, ("split-k",), note)
        pol.pop("SPLIT_K", None)
        name = next(iter(self.contract(problem)))
        if name == "gemm_gate_up" and target != "interpret" and pol.get("BN", 64) > 128:
            pol["BN"] //= 2  # two accumulators: half the tile width (as argus_inductor.ops does)
        return Plan({name: pol}, ("tile-shape",), note)

    def make_inputs(self, problem: Problem, gen: torch.Generator) -> Inputs:
        d, dt, dev = problem.dims, problem.torch_dtype, problem.device
        lay = problem.layouts or ("row", "row", "row")
        epi = parse_epilogue(problem.epilogue)
        x = strided((d["M"], d["K"]), lay[0], dt, dev, gen)
        w = strided((d["N"], d["K"]), lay[1] if len(lay) > 1 else "row", dt, dev, gen, scale=d["K"] ** -0.5)
        out: Inputs = {"a": x, "b": w.t()}
        out["bias"] = strided((d["N"],), "row", dt, dev, gen) if epi.bias else None
        out["residual"] = strided((d["M"], d["N"]), "row", dt, dev, gen) if epi.residual else None
        if epi.gate_up:
            wu = strided((d["N"], d["K"]), lay[2] if len(lay) > 2 else "row", dt, dev, gen, scale=d["K"] ** -0.5)
            out["b_up"] = wu.t()
        return out

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        epi = parse_epilogue(problem.epilogue)
        a = inputs["a"].float()
        y = a @ inputs["b"].float()
        if inputs.get("bias") is not None:
            y = y + inputs["bias"].float()
        y = _ACT_FN[epi.act](y)
        if inputs.get("b_up") is not None:
            y = y * (a @ inputs["b_up"].float())
        if inputs.get("residual") is not None:
            y = y + inputs["residual"].float()
        return y

    def run(self, problem: Problem, kernels: dict[str, Kernel], policies: dict[str, Policy],
            inputs: Inputs, poison: bool = False) -> torch.Tensor:
        a, b = inputs["a"], inputs["b"]
        m, n = a.shape[0], b.shape[1]
        if "gemm_splitk" in kernels:  # partial sums into float32, then bias/activation/cast
            part = torch.zeros(m, n, dtype=torch.float32, device=a.device)
            kernels["gemm_splitk"](a, b, part, policy=policies["gemm_splitk"])
            out = empty((m, n), a.dtype, a.device, poison)
            bias = inputs.get("bias")
            kernels["bias_act_cast"](part, bias if bias is not None else out.new_empty(1), out,
                                     policy=policies["bias_act_cast"])
            return out
        out = empty((m, n), a.dtype, a.device, poison)
        if "gemv_cat" in kernels:  # B's columns as the three weights
            n0, n1, _ = parse_epilogue(problem.epilogue).cat
            kernels["gemv_cat"](a, b[:, :n0], b[:, n0:n0 + n1], b[:, n0 + n1:], out, policy=policies["gemv_cat"])
            return out
        if "gemm_gate_up" in kernels:
            pols, (a, b, bu) = mma_operands("gemm_gate_up", policies, a, b, inputs["b_up"])
            kernels["gemm_gate_up"](a, b, bu, out, policy=pols["gemm_gate_up"])
            return out
        bias = inputs.get("bias")
        bias_arg = bias if bias is not None else out.new_empty(1)
        name = "gemm_residual" if "gemm_residual" in kernels else "gemm_epilogue"
        pols, (a, b) = mma_operands(name, policies, a, b)
        if name == "gemm_residual":
            kernels[name](a, b, bias_arg, inputs["residual"], out, policy=pols[name])
        else:
            kernels[name](a, b, bias_arg, out, policy=pols[name])
        return out

    def peers(self, problem: Problem, inputs: Inputs) -> dict[str, Callable[[], Any]]:
        a, b, bias, res, bu = inputs["a"], inputs["b"], inputs.get("bias"), inputs.get("residual"), inputs.get("b_up")
        epi = parse_epilogue(problem.epilogue)
        if bias is None and res is None and bu is None and epi.act == "none":
            return {"cuBLAS": lambda: torch.matmul(a, b)}

        def eager() -> torch.Tensor:
            y = _ACT_FN[epi.act](F.linear(a, b.t(), bias))
            if bu is not None:
                y = y * torch.matmul(a, bu)
            return y + res if res is not None else y

        return {"cuBLAS+eager epilogue": eager}

    def verify_shapes(self, problem: Problem, kernel: str, policy: Policy) -> tuple[dict[str, int], list[str]]:
        d = problem.dims
        if kernel == "gemv_cat":
            return cat_shapes(problem.epilogue, d), []
        shapes = {"M": d["M"], "N": d["N"], "K": d["K"]}
        if kernel != "gemm_splitk" and presplits(policy, d["M"], d["N"], d["K"]):
            shapes["K"] *= 3  # the mma runs over the split operands, 3K long
        if kernel in ("gemm_epilogue", "gemm_residual", "bias_act_cast"):
            shapes["NB"] = d["N"] if parse_epilogue(problem.epilogue).bias else 1
        return shapes, []

    def flops(self, problem: Problem) -> float:
        d = problem.dims
        return 2.0 * d["M"] * d["N"] * d["K"] * (2 if parse_epilogue(problem.epilogue).gate_up else 1)


@dataclass
class BmmSpec(OpSpec):
    name: str = "bmm"
    semantics: str = "C[b] = A[b] @ B[b] for A (B, M, K), B (B, K, N); float32 accumulation."
    static: tuple[str, ...] = ("N", "K")
    dynamic: tuple[str, ...] = ("B", "M")
    symbols: dict[str, str] = field(default_factory=lambda: {"B": "Bt"})
    tile_dims: dict[str, dict[str, str]] = field(default_factory=lambda: {
        "bmm_kernel": {"BM": "M", "BN": "N", "BK": "K"}})

    def variants(self, problem: Problem) -> dict[str, dict[str, Kernel]]:
        return {"tile": {"bmm_kernel": templates.kernel("bmm_kernel")}}

    def regime(self, problem: Problem) -> str:
        return _regime(problem.dims["M"])

    def default_plan(self, problem: Problem, target: str) -> Plan:
        pol = _template(problem, target)
        return Plan({"bmm_kernel": pol.as_dict()}, ("tile-shape",), "template default (kernels/policies.py)")

    def make_inputs(self, problem: Problem, gen: torch.Generator) -> Inputs:
        d, dt, dev = problem.dims, problem.torch_dtype, problem.device
        lay = problem.layouts or ("row", "row")
        return {"a": strided((d["B"], d["M"], d["K"]), lay[0], dt, dev, gen),
                "b": strided((d["B"], d["K"], d["N"]), lay[1] if len(lay) > 1 else "row", dt, dev, gen,
                             scale=d["K"] ** -0.5)}

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        return torch.bmm(inputs["a"].float(), inputs["b"].float())

    def run(self, problem: Problem, kernels: dict[str, Kernel], policies: dict[str, Policy],
            inputs: Inputs, poison: bool = False) -> torch.Tensor:
        a, b = inputs["a"], inputs["b"]
        out = empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype, a.device, poison)
        pols, (a, b) = mma_operands("bmm_kernel", policies, a, b)
        kernels["bmm_kernel"](a, b, out, policy=pols["bmm_kernel"])
        return out

    def peers(self, problem: Problem, inputs: Inputs) -> dict[str, Callable[[], Any]]:
        a, b = inputs["a"], inputs["b"]
        return {"cuBLAS": lambda: torch.bmm(a, b)}

    def verify_shapes(self, problem: Problem, kernel: str, policy: Policy) -> tuple[dict[str, int], list[str]]:
        d = problem.dims
        k = d["K"] * (3 if presplits(policy, d["M"], d["N"], d["K"]) else 1)
        return {"Bt": d["B"], "M": d["M"], "N": d["N"], "K": k}, []

    def flops(self, problem: Problem) -> float:
        d = problem.dims
        return 2.0 * d["B"] * d["M"] * d["N"] * d["K"]
