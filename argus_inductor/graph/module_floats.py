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
arguments of the compiled function (a sampling temperature, say) stay inputs, and so does an attribute seen with
another value before in this process (a float a model changes as it runs recompiles once, not at every value).

How the retrace makes them constants: where Dynamo's VariableBuilder allows it, Argus names the attributes'
sources and its hook on `wrap_symfloat` builds each as a ConstantVariable with Dynamo's CONSTANT_MATCH guard (an
equality checked in C++), as Dynamo does for every float under `specialize_float`. Marking the symbol for
specialization instead (TensorifyState, the fallback) leaves the float a symbol of the shape environment, and in
torch 2.11 its guard is Python that rebuilds the attribute as a tensor and reads it back (`as_tensor(...).item()`)
on every call: on the H100's host, nine floats a Llama decode step, 18 calls before the graph's replay.

ARGUS_SPECIALIZE_FLOATS=0 leaves every float an input."""
from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger("argus_inductor")
_SPECIALIZED: dict[str, float] = {}  # each attribute made a constant in this process, with its value
_MARKED: set[str] = set()  # the symbols Argus marked in the frame being compiled (unmarked when it ends)
_CONSTANT: set[str] = set()  # the attributes' sources the frame being compiled traces as constants (cleared too)
_HOOKED: list[bool] = []  # whether VariableBuilder.wrap_symfloat carries Argus's hook (empty: not tried yet)


def _unmark(*_: Any) -> None:
    """At the end of a frame's compile: drop the marks Argus made. Dynamo keeps its marks (by symbol name, e.g.
    "zf3") until torch._dynamo.reset(), and symbol names restart in every frame, so a mark left behind would
    specialize whatever float of a later compile gets that name: the same attribute after its value changed
    (recompiled at every value, up to Dynamo's recompile limit), or another frame's argument. The sources named
    for the constant hook are dropped alike (a later frame's compile asks for its own)."""
    _CONSTANT.clear()
    try:
        from torch._dynamo.symbolic_convert import TensorifyState
    except ImportError:
        return
    TensorifyState.force_specializations.difference_update(_MARKED)
    _MARKED.clear()


def forget() -> None:
    """Forget the attributes specialized so far (each is specialized again, whatever value it had)."""
    _SPECIALIZED.clear()
    _MARKED.clear()
    _CONSTANT.clear()


def _from_module(source: object) -> bool:
    """Whether a Dynamo source reads an attribute of an nn.Module (plain, builtin or specialized)."""
    guard = getattr(source, "guard_source", None)
    guard = guard() if callable(guard) else guard
    checks = ("is_unspecialized_nn_module", "is_unspecialized_builtin_nn_module", "is_specialized_nn_module")
    return any(bool(getattr(guard, c, lambda: False)()) for c in checks)


def _unmark_when_the_frame_ends() -> bool:
    """Register _unmark with Dynamo's end-of-compile callbacks (torch._dynamo.reset() clears them, so checked at
    every marking); False in a torch without them, which keeps the marks until torch._dynamo.reset()."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return False
    if _unmark not in getattr(callback_handler, "end_callbacks", ()):
        callback_handler.register_end_callback(_unmark)
    return True


def _source_name(source: object) -> str:
    where = getattr(source, "name", source)  # a property in some torch versions, a method in others
    return where() if callable(where) else str(where)


def _hook_wrap_symfloat() -> bool:
    """Wrap Dynamo's VariableBuilder.wrap_symfloat (once) so that a float whose source Argus named in _CONSTANT
    is traced as a constant with a CONSTANT_MATCH guard; every other float goes through Dynamo's own code. False
    where this torch's Dynamo lacks a piece of it (the TensorifyState marks are used then)."""
    if _HOOKED:
        return _HOOKED[0]
    try:
        from torch._dynamo.guards import GuardBuilder
        from torch._dynamo.variables.builder import VariableBuilder
        from torch._dynamo.variables.constant import ConstantVariable
        original = VariableBuilder.wrap_symfloat
        GuardBuilder.CONSTANT_MATCH  # noqa: B018 (present in this torch)
    except (ImportError, AttributeError):
        _HOOKED.append(False)
        return False

    def wrap_symfloat(self: Any, value: float) -> Any:
        source = getattr(self, "source", None)
        if _CONSTANT and source is not None and _source_name(source) in _CONSTANT:
            self.install_guards(GuardBuilder.CONSTANT_MATCH)
            return ConstantVariable.create(value=value, source=source)
        return original(self, value)

    wrap_symfloat.__wrapped__ = original  # type: ignore[attr-defined]
    VariableBuilder.wrap_symfloat = wrap_symfloat  # type: ignore[method-assign]
    _HOOKED.append(True)
    return True


def module_float_symbols(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> dict[str, tuple[str, float]]:
    """The float symbols of `gm`'s inputs that Dynamo read from nn.Module attributes and passed as scalar tensors
    (only `.item()` reads them), by symbol name (e.g. "zf3"), with the attribute each came from and its value."""
    found: dict[str, tuple[str, float]] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return found
    for node, value in zip(placeholders, example_inputs):
        if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
            continue
        memo = getattr(node.meta.get("example_value"), "item_memo", None)
        arg = node.meta.get("grapharg")
        if memo is None or arg is None or not node.users or any(u.target != "item" for u in node.users):
            continue
        symbol = getattr(getattr(memo, "node", None), "_expr", None)
        source = getattr(arg, "source", None)
        if getattr(symbol, "name", None) is None or source is None or not _from_module(source):
            continue
        try:
            number = float(value.item())
        except Exception:  # a fake or meta input (a tracing backend's): no value to guard on
            continue
        found[symbol.name] = (_source_name(source), number)
    return found


def specialize_module_floats(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    """Return when `gm` has no module float left to specialize; else mark them and raise Dynamo's restart (it
    traces again with them as constants and calls the backend with the new graph). A float already asked for in
    this frame's compile (its source named for the hook, or its symbol marked) is never asked for twice, so a Dynamo
    that kept one as an input anyway is compiled as it is, not restarted in a loop."""
    try:
        from torch._dynamo.exc import TensorifyScalarRestartAnalysis
        from torch._dynamo.symbolic_convert import TensorifyState
    except ImportError:  # a torch without the mechanism: the floats stay inputs
        return
    fresh = {}
    for symbol, (where, value) in module_float_symbols(gm, example_inputs).items():
        if TensorifyState.should_specialize(symbol) or where in _CONSTANT:
            continue
        if _SPECIALIZED.get(where, value) != value:  # changed since it was made a constant: it varies
            log.info("argus: %s changed from %r to %r since it was made a constant: left an input", where,
                     _SPECIALIZED[where], value)
            continue
        fresh[symbol] = where
        _SPECIALIZED[where] = value
    if not fresh:
        return
    # the hook's names are sources ("L['self'].norm.variance_epsilon"), which other frames have too: used only where
    # they are dropped when this frame's compile ends
    if _unmark_when_the_frame_ends() and _hook_wrap_symfloat():
        _CONSTANT.update(fresh.values())
    else:
        for symbol in fresh:
            TensorifyState.specialize(symbol)
            _MARKED.add(symbol)
    log.info("argus: module floats made constants (Dynamo traces again): %s", ", ".join(fresh.values()))
    raise TensorifyScalarRestartAnalysis
