"""Argus's graph rewrites in vLLM's Inductor compilations: the plugin's "gemm" (and compiled "attention") hook,
an Inductor pre-grad custom pass over each graph vLLM hands to Inductor (see argus_inductor.vllm_plugin).

Where vLLM compiles with plain Inductor (its CPU build's compilation mode 2: Dynamo once, then Inductor), the
pass runs on the whole model's graph. Where vLLM compiles with its own backend (mode 3, the GPU default), that
backend sets Inductor's pre-grad pass in the config of each compilation it runs (VllmBackend.configure_post_pass,
vLLM 0.28 to 0.33 at least), which replaces this process-wide one there. On a hit in Inductor's own caches the
pre-grad passes do not run: the cached graph is what it was when first compiled.
"""
from __future__ import annotations

import copy
import inspect
import logging
import threading
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from ..config import VERSION as ARGUS_VERSION

# A child of vLLM's logger (the plugin's): in a server it follows VLLM_LOGGING_LEVEL and vLLM's format.
log = logging.getLogger("vllm.argus_inductor")
_LOCK = threading.Lock()
_SAID: set[str] = set()


def say_once(key: str, level: int, msg: str, *args: Any) -> None:
    """Log `msg` the first time `key` is seen in this process (forget_logged() forgets)."""
    with _LOCK:
        if key in _SAID:
            return
        _SAID.add(key)
    log.log(level, msg, *args)


def forget_logged() -> None:
    with _LOCK:
        _SAID.clear()


def arch_text(device: torch.device) -> str:
    """The architecture name of `device` as signatures spell it (its type where that cannot be read)."""
    try:
        from ..runtime.signature import device_arch

        return device_arch(device)
    except Exception:  # pragma: no cover - diagnostics only
        return device.type


try:
    from torch._inductor.custom_graph_pass import CustomGraphPass as _PassBase
except ImportError:  # pragma: no cover - older torch
    _PassBase = object  # type: ignore[assignment,misc]


class ArgusGraphPass(_PassBase):  # type: ignore[misc,valid-type]
    """An Inductor pre-grad custom pass: Argus's pattern matchers over a graph vLLM compiles.

    It runs on the Dynamo-level graph of each piece vLLM hands to Inductor; GEMMs (and attention
    written as SDPA or softmax(QK^T)V) become torch.ops.argus.* calls. A graph on a device Argus has
    no kernels for is left alone; a rewrite that fails restores the graph as it was."""

    def __init__(self, ops: Iterable[str]) -> None:
        self.ops = tuple(ops)

    def __call__(self, graph: torch.fx.Graph) -> None:
        from .. import graph as matchers
        from .. import ops as argus_ops

        gm = graph.owning_module
        if gm is None or not self.ops:
            return
        devices = set()
        for n in graph.nodes:
            if n.op == "placeholder":
                v = n.meta.get("example_value", n.meta.get("val"))
                if isinstance(v, Tensor) and v.is_floating_point():
                    devices.add(v.device)
        if not devices:
            return
        if any(argus_ops.target_for(d) is None for d in devices):
            where = ", ".join(sorted(f"{d} ({arch_text(d)})" for d in devices))
            say_once(f"graph-device:{where}", logging.INFO,
                     "argus: vLLM compiles graphs on %s, where Argus has no kernels; Inductor keeps them", where)
            return
        backup = copy.deepcopy(graph)
        try:
            found = matchers.rewrite(gm, self.ops, moe_regions=False)
        except Exception as e:
            gm.graph = backup
            gm.recompile()
            say_once(f"graph-error:{type(e).__name__}", logging.WARNING,
                     "argus: Argus graph rewrites failed on a vLLM graph (%s: %s); it is compiled unchanged",
                     type(e).__name__, e)
            return
        if found:
            kinds = sorted({m.kind for m in found})
            say_once(f"graph-rewrote:{','.join(kinds)}", logging.INFO,
                     "argus: rewrote subgraphs of vLLM's compiled model to Argus ops (%s)", ", ".join(kinds))
        else:  # say what the graph holds instead (vLLM's CPU build runs its linear layers as its own ops)
            targets = sorted({_target_name(n.target) for n in graph.nodes if n.op == "call_function"})
            say_once("graph-nothing", logging.INFO, "argus: Argus's graph rewrites (%s) found nothing to take in a "
                     "graph vLLM compiled (%d nodes; its ops: %s)", ", ".join(self.ops), len(graph.nodes),
                     ", ".join(targets[:24]) + (", ..." if len(targets) > 24 else ""))

    def uuid(self) -> str:
        return f"argus-inductor-{ARGUS_VERSION}-vllm-pre-grad-{','.join(self.ops)}"

    def __repr__(self) -> str:
        return f"ArgusGraphPass(ops={','.join(self.ops)}, argus={ARGUS_VERSION})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (ArgusGraphPass, (self.ops,))


def _target_name(target: Any) -> str:
    """'_C.onednn_mm' for torch.ops._C.onednn_mm, 'cat' for torch.cat, ..."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return str(getattr(target, "__name__", None) or target)


class _ChainedPass(_PassBase):  # type: ignore[misc,valid-type]
    """Runs a pre-grad pass that was already configured, then Argus's."""

    def __init__(self, first: Any, second: ArgusGraphPass) -> None:
        self.first, self.second = first, second

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in (self.first if isinstance(self.first, (list, tuple)) else (self.first,)):
            p(graph)
        self.second(graph)

    def uuid(self) -> str:
        inner = getattr(self.first, "uuid", None)
        return f"{inner() if callable(inner) else repr(self.first)}+{self.second.uuid()}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_ChainedPass, (self.first, self.second))


def _has_argus_pass(p: Any) -> bool:
    if isinstance(p, ArgusGraphPass):
        return True
    if isinstance(p, _ChainedPass):
        return _has_argus_pass(p.second)
    return isinstance(p, (list, tuple)) and any(_has_argus_pass(x) for x in p)


def pre_grad_caveat() -> str:
    """Where vLLM's own compile backend sets Inductor's pre-grad pass in the config of each compilation it runs
    (VllmBackend.configure_post_pass, vLLM 0.28 to 0.33 at least), that setting replaces Argus's process-wide one
    there: the rewrites run only where vLLM hands a graph to plain Inductor."""
    try:
        from vllm.compilation.backends import VllmBackend

        owns = "pre_grad_custom_pass" in inspect.getsource(VllmBackend)
    except Exception:  # no such backend, or no source to read: nothing known to say
        return ""
    return (" [only where vLLM compiles with plain Inductor (its CPU build; compilation mode 2): its own compile "
            "backend (mode 3, the GPU default) sets Inductor's pre-grad pass itself]") if owns else ""


def install_graph_pass(ops: Iterable[str]) -> ArgusGraphPass | None:
    """Add ArgusGraphPass(ops) to Inductor's pre-grad custom passes of this process (once)."""
    from torch._inductor import config as inductor_config

    if "pre_grad_custom_pass" not in getattr(inductor_config, "_config", {}) and \
            not hasattr(inductor_config, "pre_grad_custom_pass"):
        raise LookupError("this torch's Inductor has no pre_grad_custom_pass hook")
    have = getattr(inductor_config, "pre_grad_custom_pass", None)  # unset after a mock.patch deleted it
    if _has_argus_pass(have):
        return None
    p = ArgusGraphPass(ops)
    inductor_config.pre_grad_custom_pass = p if have is None else _ChainedPass(have, p)
    return p


__all__ = ["ArgusGraphPass", "install_graph_pass", "pre_grad_caveat", "say_once", "forget_logged", "arch_text"]
