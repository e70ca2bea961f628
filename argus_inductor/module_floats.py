"""Python floats read from nn.Module attributes (an RMSNorm's eps, a rotary embedding's attention scaling) made
constants of an Argus graph instead of inputs to it.

Dynamo passes such a float to the compiled graph as a CPU scalar tensor, built anew by each call
(torch.as_tensor), so that a changed value needs no recompile. Inductor then opens its code with a host prologue
on every call: a pinned buffer, a C++ kernel copying the scalars into it, a device buffer and a host-to-device
copy before the CUDA graph's replay (on the H100 in a Llama decode step: two floats, about 1 us of copy on the GPU
and the allocator's event queries and a cudaHostAlloc now and then on the host, paid before the step's first
kernel). Module attributes are the model's configuration: Dynamo itself specializes the integers read from nn
modules (torch._dynamo.config.allow_unspec_int_on_nn_module is off by default) for the same reason. Argus asks
Dynamo for the floats too, the way Inductor asks for a float it cannot keep symbolic: it marks their symbols for
specialization and raises TensorifyScalarRestartAnalysis, and Dynamo traces the frame again with each as a
constant, guarded by its value (a changed eps recompiles; it never runs with the old one). Floats that are
arguments of the compiled function (a sampling temperature, say) stay inputs.

ARGUS_SPECIALIZE_FLOATS=0 leaves every float an input."""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("argus_inductor")


def _from_module(source: object) -> bool:
    """Whether a Dynamo source reads an attribute of an nn.Module (plain, builtin or specialized)."""
    guard = getattr(source, "guard_source", None)
    guard = guard() if callable(guard) else guard
    checks = ("is_unspecialized_nn_module", "is_unspecialized_builtin_nn_module", "is_specialized_nn_module")
    return any(bool(getattr(guard, c, lambda: False)()) for c in checks)


def module_float_symbols(gm: torch.fx.GraphModule) -> dict[str, str]:
    """The float symbols of `gm`'s inputs that Dynamo read from nn.Module attributes and passed as scalar tensors
    (only `.item()` reads them), by symbol name (e.g. "zf3"), with the attribute each came from."""
    found: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        memo = getattr(node.meta.get("example_value"), "item_memo", None)
        arg = node.meta.get("grapharg")
        if memo is None or arg is None or not node.users or any(u.target != "item" for u in node.users):
            continue
        symbol = getattr(getattr(memo, "node", None), "_expr", None)
        source = getattr(arg, "source", None)
        if getattr(symbol, "name", None) is None or source is None or not _from_module(source):
            continue
        where = getattr(source, "name", source)  # a property in some torch versions, a method in others
        found[symbol.name] = where() if callable(where) else str(where)
    return found


def specialize_module_floats(gm: torch.fx.GraphModule) -> None:
    """Return when `gm` has no module float left to specialize; else mark them and raise Dynamo's restart (it
    traces again with them as constants and calls the backend with the new graph). A symbol already marked is
    never asked for twice, so a Dynamo that kept one as an input anyway is compiled as it is, not restarted in a
    loop."""
    try:
        from torch._dynamo.exc import TensorifyScalarRestartAnalysis
        from torch._dynamo.symbolic_convert import TensorifyState
    except ImportError:  # a torch without the mechanism: the floats stay inputs
        return
    fresh = {s: where for s, where in module_float_symbols(gm).items() if not TensorifyState.should_specialize(s)}
    if not fresh:
        return
    for symbol in fresh:
        TensorifyState.specialize(symbol)
    log.info("argus: module floats made constants (Dynamo traces again): %s", ", ".join(fresh.values()))
    raise TensorifyScalarRestartAnalysis
