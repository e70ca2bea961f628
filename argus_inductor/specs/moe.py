"""The MoE expert step: routed rows sorted and padded per expert, grouped gate-up GEMM with SiLU(gate)*up,
grouped down GEMM, weighted scatter-add back to token order."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..dsl import Kernel, Policy
from ..kernels.moe import moe_align, route_blocks
from ..kernels.policies import gluon_reads, moe_policies
from . import templates
from .base import Inputs, OpSpec, Problem, empty, randn
from .plan import Plan


@dataclass
class MoeSpec(OpSpec):
    name: str = "moe"
    semantics: str = ("y[t] = sum_j w[t, j] * (silu(x[t] W1g[e]^T) * (x[t] W1u[e]^T)) W2[e]^T with e = ids[t, j], "
                      "for x (T, HD), W1 (E, 2*I, HD) = gate rows over up rows, W2 (E, HD, I), routing weights w and "
                      "expert ids (T, TOPK). Rows are sorted by expert and padded to blocks of BM (moe_align_block); "
                      "every block of rows belongs to one expert (block_expert).")
    static: tuple[str, ...] = ("HD", "I", "E", "TOPK")
    dynamic: tuple[str, ...] = ("T",)
    symbolic_dynamic: bool = False  # the padded row count depends on the routing: proved at concrete shapes
    tile_dims: dict[str, dict[str, str]] = field(default_factory=lambda: {
        "moe_gate_up": {"BN": "I", "BK": "HD"}, "moe_down": {"BN": "HD", "BK": "I"}})

    def variants(self, problem: Problem) -> dict[str, dict[str, Kernel]]:
        return {"grouped": {"moe_gate_up": templates.kernel("moe_gate_up"), "moe_down": templates.kernel("moe_down")}}

    def regime(self, problem: Problem) -> str:
        d = problem.dims
        return "decode" if d["T"] * d["TOPK"] <= 16 * d["E"] else "prefill"

    def fixed_consts(self, problem: Problem, kernel: str, plan: Plan) -> dict[str, Any]:
        consts: dict[str, Any] = {"TOPK": problem.dims["TOPK"]}
        if kernel == "moe_down":  # both kernels walk the same padded row blocks
            consts["BM"] = plan.get("moe_gate_up", "BM", 16)
        return consts

    def default_plan(self, problem: Problem, target: str) -> Plan:
        d = problem.dims
        up, down = moe_policies(d["T"], d["TOPK"], d["E"], target, gluon=gluon_reads(problem.dtype))
        down_knobs = down.as_dict()
        down_knobs.pop("BM", None)
        return Plan({"moe_gate_up": up.as_dict(), "moe_down": down_knobs}, ("moe-token-sorting",),
                    "template default (argus_inductor.kernels.policies)")

    def make_inputs(self, problem: Problem, gen: torch.Generator) -> Inputs:
        d, dt, dev = problem.dims, problem.torch_dtype, problem.device
        t, hd, i, e, k = d["T"], d["HD"], d["I"], d["E"], d["TOPK"]
        x = randn((t, hd), dt, dev, gen)
        w1 = randn((e, 2 * i, hd), dt, dev, gen, hd ** -0.5)
        w2 = randn((e, hd, i), dt, dev, gen, i ** -0.5)
        logits = randn((t, e), torch.float32, dev, gen)
        tw, ti = torch.topk(torch.softmax(logits, -1), k)
        return {"x": x, "w1": w1, "w2": w2, "topk_weights": tw.to(dt), "topk_ids": ti}

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        x, w1, w2 = inputs["x"].float(), inputs["w1"].float(), inputs["w2"].float()
        tw, ti = inputs["topk_weights"].float(), inputs["topk_ids"]
        inter = w1.shape[1] // 2
        y = torch.zeros_like(x)
        for e in range(w1.shape[0]):
            rows, slot = (ti == e).nonzero(as_tuple=True)
            if rows.numel():
                xe = x[rows]
                h = F.silu(xe @ w1[e, :inter].t()) * (xe @ w1[e, inter:].t())
                y.index_add_(0, rows, tw[rows, slot, None] * (h @ w2[e].t()))
        return y

    def run(self, problem: Problem, kernels: dict[str, Kernel], policies: dict[str, Policy],
            inputs: Inputs, poison: bool = False) -> torch.Tensor:
        x, w1, w2 = inputs["x"], inputs["w1"], inputs["w2"]
        tw, ti = inputs["topk_weights"], inputs["topk_ids"]
        up, down = policies["moe_gate_up"], policies["moe_down"]
        bm = up.const("BM", 16)
        sorted_ids, block_expert = moe_align(ti, w1.shape[0], bm)
        h = empty((sorted_ids.numel(), w1.shape[1] // 2), x.dtype, x.device, poison)
        kernels["moe_gate_up"](x, w1, sorted_ids, block_expert, h, policy=up)
        y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        kernels["moe_down"](h, w2, sorted_ids, block_expert, tw.reshape(-1).contiguous(), y, policy=down)
        return y.to(x.dtype)

    def peers(self, problem: Problem, inputs: Inputs) -> dict[str, Callable[[], Any]]:
        if not hasattr(torch, "_grouped_mm"):
            return {}
        x, w1, w2 = inputs["x"], inputs["w1"], inputs["w2"]
        tw, ti = inputs["topk_weights"], inputs["topk_ids"]

        def grouped() -> torch.Tensor:
            topk = ti.shape[1]
            flat = ti.reshape(-1)
            order = torch.argsort(flat, stable=True)
            offs = torch.cumsum(torch.bincount(flat, minlength=w1.shape[0]), 0).to(torch.int32)
            xs = x[order // topk]
            gu = torch._grouped_mm(xs, w1.transpose(1, 2), offs=offs)
            inter = w1.shape[1] // 2
            hh = F.silu(gu[:, :inter]) * gu[:, inter:]
            yd = torch._grouped_mm(hh, w2.transpose(1, 2), offs=offs) * tw.reshape(-1)[order, None]
            return torch.zeros_like(x).index_add_(0, order // topk, yd)

        return {"grouped_mm": grouped}

    def verify_shapes(self, problem: Problem, kernel: str, policy: Policy) -> tuple[dict[str, int], list[str]]:
        d = problem.dims
        t, k, e = d["T"], d["TOPK"], d["E"]
        bm = int(policy.const("BM", 16))
        # the row blocks moe_align_block allocates for T*TOPK pairs (blocks past the last real one carry expert E)
        nb = route_blocks(t * k, e, bm)
        shapes = {"T": t, "HD": d["HD"], "I": d["I"], "E": e, "NB": nb, "P": nb * bm}
        if kernel == "moe_gate_up":
            shapes["I2"] = 2 * d["I"]
        else:
            shapes["TK"] = t * k
        # Blocks past the last real one carry expert id E and are skipped (their Hout rows stay unwritten and are
        # never read); the proof covers the real blocks, where every row is written once.
        return shapes, ["0 <= block_expert < E", f"0 <= sorted_ids <= {t * k}"]

    def flops(self, problem: Problem) -> float:
        d = problem.dims
        return 2.0 * d["T"] * d["TOPK"] * 3 * d["I"] * d["HD"]
