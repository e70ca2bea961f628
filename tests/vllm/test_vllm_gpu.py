"""The plugin inside a CUDA build of vLLM on a GPU Argus runs on (sm_90, gfx942): vLLM's own plugin loader runs
the entry point, vLLM builds an unquantized MoE layer, the layer's quant method is the Argus one, its forward runs
torch.ops.argus.moe and agrees with a float reference on small random weights.

    ARGUS_TEST_DEVICE=cuda .venv/bin/python -m pytest tests/vllm/test_vllm_gpu.py

Skipped where vLLM is not installed or no GPU Argus runs on is present (the CUDA build of vLLM has not been
installable on the project's GPU machine; see docs/vllm.md). The CPU build runs the plugin for real in
test_vllm_real.py (scripts/test-vllm.sh).
"""
from __future__ import annotations

import os
import socket
import sys

import pytest
import torch
import torch.nn.functional as F

vllm = pytest.importorskip("vllm")
if getattr(vllm, "__file__", None) is None:  # tests/vllm seen as a namespace package, not vLLM
    del sys.modules["vllm"]
    pytest.skip("vLLM is not installed", allow_module_level=True)
if os.environ.get("ARGUS_TEST_DEVICE") != "cuda" or not torch.cuda.is_available():
    pytest.skip("needs ARGUS_TEST_DEVICE=cuda and a GPU (ARGUS_INTERPRET would turn vLLM's Triton kernels into the "
                "interpreter too)", allow_module_level=True)

from argus_inductor import ops  # noqa: E402
from argus_inductor import vllm_plugin as plugin  # noqa: E402
from argus_inductor.runtime import reporting  # noqa: E402

if ops.target_for(torch.device("cuda")) is None:
    pytest.skip("Argus kernels run on sm_90 and gfx942 only", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_env():
    """vLLM's plugins loaded by its own loader, a one-rank distributed setup, a current VllmConfig."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        cleanup_dist_env_and_memory,
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    config = VllmConfig()
    with set_current_vllm_config(config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="nccl",
                                     distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        initialize_model_parallel(1, 1)
        yield config
    cleanup_dist_env_and_memory()


def _float_reference(x, w13, w2, topk_weights, topk_ids):
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for t in range(x.shape[0]):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            gu = w13[e].double() @ x[t].double()
            out[t] += float(topk_weights[t, j]) * (w2[e].double() @ (F.silu(gu[:inter]) * gu[inter:]))
    return out


def test_vllm_loads_the_plugin_through_its_own_loader(vllm_env):
    st = plugin.status()
    assert st.vllm_version == vllm.__version__ and st.known, st
    assert "moe" in st.replaced, st
    try:
        from vllm.model_executor.custom_op import op_registry_oot
    except ImportError:
        from vllm.model_executor.custom_op import CustomOp

        op_registry_oot = CustomOp.op_registry_oot
    assert op_registry_oot["UnquantizedFusedMoEMethod"].__name__ == "ArgusUnquantizedFusedMoEMethod"


@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_fused_moe_layer_dispatches_to_argus_and_matches(vllm_env, tokens):
    from vllm.forward_context import set_forward_context

    try:  # 0.28 calls the factory FusedMoEFactory (0.26: FusedMoE, a function returning a MoERunner)
        from vllm.model_executor.layers.fused_moe import FusedMoEFactory as FusedMoE
    except ImportError:
        from vllm.model_executor.layers.fused_moe import FusedMoE

    e, k, h, inter = 8, 2, 256, 128
    dtype = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(tokens)
    prefix = f"argus_test_{tokens}.experts"
    vllm_env.compilation_config.static_forward_context.pop(prefix, None)
    with torch.device("cuda"):
        layer = FusedMoE(num_experts=e, top_k=k, hidden_size=h, intermediate_size=inter, params_dtype=dtype,
                         renormalize=False, prefix=prefix)
    params = dict(layer.named_parameters())
    w13 = next(p for n, p in params.items() if n.endswith("w13_weight"))
    w2 = next(p for n, p in params.items() if n.endswith("w2_weight"))
    with torch.no_grad():
        w13.copy_(torch.randn(w13.shape, generator=g, device="cuda", dtype=torch.float32).mul_(h ** -0.5))
        w2.copy_(torch.randn(w2.shape, generator=g, device="cuda", dtype=torch.float32).mul_(inter ** -0.5))
    methods = [(m, m.quant_method) for m in layer.modules() if getattr(m, "quant_method", None) is not None]
    for owner, qm in methods:
        qm.process_weights_after_loading(owner)
    assert any(type(qm).__name__ == "ArgusUnquantizedFusedMoEMethod" for _, qm in methods), methods

    x = torch.randn(tokens, h, generator=g, device="cuda", dtype=torch.float32).to(dtype)
    logits = torch.randn(tokens, e, generator=g, device="cuda", dtype=torch.float32)
    reporting.clear()
    with torch.no_grad(), set_forward_context({}, vllm_env):
        out = layer(x, logits)
    if isinstance(out, tuple):  # (shared, routed) in versions that return both
        out = out[-1]
    topk_weights, topk_ids = torch.topk(logits.softmax(-1), k)
    w13 = next(p for n, p in dict(layer.named_parameters()).items() if n.endswith("w13_weight"))
    w2 = next(p for n, p in dict(layer.named_parameters()).items() if n.endswith("w2_weight"))
    ref = _float_reference(x, w13, w2, topk_weights, topk_ids)
    torch.testing.assert_close(out.double(), ref, rtol=3e-2, atol=3e-2)
    rows = [r for r in reporting.entries() if r.op == "moe" and prefix in r.graph_node]
    assert rows and rows[0].calls >= 1 and not rows[0].source.startswith("fallback"), reporting.entries()
