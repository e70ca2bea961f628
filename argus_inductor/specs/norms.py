"""Row softmax, RMSNorm and LayerNorm over the last dimension."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..dsl import Kernel, Policy
from . import templates
from .base import Inputs, OpSpec, Problem, empty, next_pow2, strided
from .plan import Plan

EPS = {"rmsnorm": 1e-6, "layernorm": 1e-5}


@dataclass
class RowSpec(OpSpec):
    """One spec class for the three row-wise ops; `name` picks which."""

    name: str = "softmax"
    static: tuple[str, ...] = ("C",)
    dynamic: tuple[str, ...] = ("R",)
    tile_dims: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.semantics = {
            "softmax": "Y = softmax(X, dim=-1) for X (R, C), computed in float32.",
            "rmsnorm": "Y = X * rsqrt(mean(X^2, dim=-1) + eps) * W for X (R, C), W (C,), eps = 1e-6.",
            "layernorm": "Y = (X - mean) / sqrt(var + eps) * W + B over the last dim (biased variance), eps = 1e-5.",
        }[self.name]
        self.tile_dims = {self.kernel_name: {"BR": "R", "BC": "C"}}

    @property
    def kernel_name(self) -> str:
        return f"{self.name}_kernel"

    def variants(self, problem: Problem) -> dict[str, dict[str, Kernel]]:
        return {"rows": {self.kernel_name: templates.kernel(self.kernel_name)}}

    def default_plan(self, problem: Problem, target: str) -> Plan:
        c = problem.dims["C"]
        bc = min(next_pow2(c, 16), 32 if target == "interpret" else 1024)
        return Plan({self.kernel_name: Policy.make(BR=4, BC=bc).as_dict()}, ("row-block-normalization",),
                    "template default")

    def make_inputs(self, problem: Problem, gen: torch.Generator) -> Inputs:
        d, dt, dev = problem.dims, problem.torch_dtype, problem.device
        out: Inputs = {"x": strided((d["R"], d["C"]), "row", dt, dev, gen, scale=2.0)}
        if self.name in ("rmsnorm", "layernorm"):
            out["w"] = strided((d["C"],), "row", dt, dev, gen)
        if self.name == "layernorm":
            out["b"] = strided((d["C"],), "row", dt, dev, gen)
        return out

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        x = inputs["x"].float()
        if self.name == "softmax":
            return torch.softmax(x, -1)
        if self.name == "rmsnorm":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS["rmsnorm"]) * inputs["w"].float()
        return F.layer_norm(x, (x.shape[-1],), inputs["w"].float(), inputs["b"].float(), EPS["layernorm"])

    def run(self, problem: Problem, kernels: dict[str, Kernel], policies: dict[str, Policy],
            inputs: Inputs, poison: bool = False) -> torch.Tensor:
        x = inputs["x"]
        y = empty(tuple(x.shape), x.dtype, x.device, poison)
        k, pol = kernels[self.kernel_name], policies[self.kernel_name]
        if self.name == "softmax":
            k(x, y, policy=pol)
        elif self.name == "rmsnorm":
            k(x, inputs["w"], y, EPS["rmsnorm"], policy=pol)
        else:
            k(x, inputs["w"], inputs["b"], y, EPS["layernorm"], policy=pol)
        return y

    def peers(self, problem: Problem, inputs: Inputs) -> dict[str, Callable[[], Any]]:
        x = inputs["x"]
        if self.name == "softmax":
            return {"torch.softmax": lambda: torch.softmax(x, -1)}
        if self.name == "rmsnorm" and hasattr(F, "rms_norm"):
            return {"F.rms_norm": lambda: F.rms_norm(x, (x.shape[-1],), inputs["w"], EPS["rmsnorm"])}
        if self.name == "layernorm":
            return {"F.layer_norm": lambda: F.layer_norm(x, (x.shape[-1],), inputs["w"], inputs["b"],
                                                         EPS["layernorm"])}
        return {}

    def verify_shapes(self, problem: Problem, kernel: str, policy: Policy) -> tuple[dict[str, int], list[str]]:
        return {"R": problem.dims["R"], "C": problem.dims["C"]}, []
