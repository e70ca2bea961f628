"""Inline Argus ops into Inductor's generated code.

A torch.ops.argus.* op in a compiled graph is a call back into Python on every run: the dispatcher, run_op's
look-ups and a replay of the recorded launches (argus_inductor.runtime.replay) cost tens of microseconds per op on the
host, more than many small kernels take on the GPU. Where every operand of an op node has static shapes,
strides and storage offsets, the op's launches are fixed when the graph is compiled. So at compile time the
backend runs the op once on random operands of exactly that metadata (which resolves its plan as a first call
would: cache, default or synthesized), records the call (allocations, copies, kernel launches, result), and puts
in the node's place a call to `run_inlined` with the node's tensors. When Inductor traces the graph, that call
becomes the recorded allocations and copies as aten ops and each launch as a user-defined Triton kernel
(torch.library.wrap_triton): Inductor compiles the DSL's Triton source itself and launches it from its own
generated code, with no Python of ours at run time.

Only GPU targets are inlined (Inductor launches Triton kernels on GPU tensors only); the interpreter keeps the op.
A node that cannot be recorded (dynamic sizes, a host function that reads values or computes with torch, the aten
fallback) keeps the op, which works as before. On by default on GPUs; ARGUS_INLINE=0 turns it off (timings:
benchmarks/results/NOTES.md, session 9).

The compile-time run takes the graph's own inputs where it has them (a model's weights), except those the op writes
in place (a KV cache, which gets a stand-in: the run must not write into the model's state); tensors made inside the
graph get stand-ins: integer ones (routing ids, targets, masks) zeros, which every kernel takes as valid
indices, floating-point ones random normals. A recording never depends on values (argus_inductor.runtime.replay refuses
host functions that read them).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from ..runtime import reporting as _report
from ..runtime.replay import Launch, Recording, run_host_step, view_of
from .patterns import is_argus_op

log = logging.getLogger("argus_inductor")

GPUS = ("cuda", "hip")
# the recordings graph nodes refer to by index (a node's arguments must be plain values)
_INLINED: list[Recording] = []


def run_inlined(index: int, *inputs: torch.Tensor) -> torch.Tensor:
    """The recorded steps of inlined op `index` on `inputs`: allocations, copies and Triton launches as torch
    ops and wrap_triton calls, which Inductor's tracing turns into graph nodes (and which run as they are when
    called on real tensors outside a trace)."""
    from torch.library import wrap_triton

    rec = _INLINED[index]
    bufs: list[torch.Tensor] = []
    for step in rec.steps:
        if isinstance(step, Launch):
            flat = [a[1] if a[0] == "const" else _pointer(a, inputs, bufs) for a in step.args]
            kernel = step.kernel
            wrap_triton(kernel.fn)[(step.programs,)](*flat, **kernel._opts)
        else:  # torch.empty_strided, which a trace records as a graph node
            run_host_step(step, inputs, bufs, lambda a: torch.empty_strided(a.shape, a.stride, dtype=a.dtype,
                                                                            device=a.device))
    return view_of(rec.result, inputs, bufs)


def _pointer(src: tuple, inputs: Sequence[torch.Tensor], bufs: list[torch.Tensor]) -> torch.Tensor:
    """A launch argument as a tensor whose first element is the argument's: a DSL kernel takes every shape and
    stride as a number of its own, so only the address and dtype count. That is the operand or buffer itself
    where the argument starts at its first element, else a flat view from there to its end. Inductor sees the
    buffer a kernel writes as written in place, where a strided view of it would cost a copy out and back."""
    base = inputs[src[1]] if src[0] == "in" else bufs[src[1]]
    off = src[2]
    if off == 0:
        return base
    extent = 1 + sum((n - 1) * s for n, s in zip(base.shape, base.stride())) if base.numel() else 1
    return base.as_strided((max(extent - off, 1),), (1,), base.storage_offset() + off)


def _value(arg: Any) -> Any:
    """What a node argument holds at compile time: a fake tensor (or real, for an attribute), or a constant."""
    if isinstance(arg, fx.Node):
        if arg.op == "get_attr":
            obj = arg.graph.owning_module
            for part in str(arg.target).split("."):
                obj = getattr(obj, part)
            return obj
        v = arg.meta.get("example_value", arg.meta.get("val"))
        if v is None and arg.op in ("call_function", "call_method"):
            # a node a matcher added (a transpose of a weight) has no example value: work it out from its inputs
            args = fx.node.map_aggregate(arg.args, _value)
            kwargs = {k: fx.node.map_aggregate(a, _value) for k, a in arg.kwargs.items()}
            fn = arg.target if arg.op == "call_function" else getattr(args[0], str(arg.target))
            v = fn(*args, **kwargs) if arg.op == "call_function" else fn(*args[1:], **kwargs)
            arg.meta["example_value"] = v
        return v
    return arg


def _static(t: torch.Tensor) -> bool:
    return all(type(n) is int for n in (*t.shape, *t.stride(), t.storage_offset()))


def _random_like(t: torch.Tensor) -> torch.Tensor:
    """A real tensor with `t`'s shape, strides, storage offset, dtype and device: random normals for floating
    point, zeros otherwise."""
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    base = torch.empty(t.storage_offset() + span, dtype=t.dtype, device=t.device)
    if t.is_floating_point():
        base.normal_()
    else:
        base.zero_()
    return base.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _operands(node: fx.Node, devices: tuple[str, ...]) -> list[tuple[fx.Node, torch.Tensor]] | None:
    """Each tensor operand node of `node` with its compile-time value, or None where one is not a static tensor
    on one of `devices` (or an argument is neither a tensor node nor a constant)."""
    found: list[tuple[fx.Node, torch.Tensor]] = []
    leaves = [*fx.node.map_aggregate(node.args, lambda a: a), *node.kwargs.values()]

    def visit(a: Any) -> bool:
        if isinstance(a, (list, tuple)):
            return all(visit(v) for v in a)
        if not isinstance(a, fx.Node):
            return True
        v = _value(a)
        if not isinstance(v, torch.Tensor) or v.device.type not in devices or not _static(v):
            return False
        found.append((a, v))
        return True

    return found if all(visit(a) for a in leaves) else None


def record_node(node: fx.Node, devices: tuple[str, ...] = GPUS,
                known: dict[fx.Node, torch.Tensor] | None = None) -> tuple[Recording, list[fx.Node]] | None:
    """Run argus op `node` once on operands of its compile-time metadata, recording its launches: the
    recording and the nodes its inputs come from, or None where the call cannot be inlined (its operands must be
    static tensors on `devices`). `known`: real tensors for some nodes (the graph's inputs: weights need no copy)."""
    from ..ops import capturing_recordings

    operands = _operands(node, devices)
    if operands is None:
        log.debug("argus: %s keeps its op: an operand is not a static tensor on %s", node.name, "/".join(devices))
        return None
    known = known or {}
    written = _written_operands(node)  # the recording run writes these: never into the graph's real inputs
    real = {id(n): known[n] if n not in written and _same_meta(known.get(n), v) else _random_like(v)
            for n, v in operands}
    nodes = {id(real[id(n)]): n for n, _ in operands}

    def to_real(a: Any) -> Any:
        return real[id(a)] if isinstance(a, fx.Node) else a

    args = fx.node.map_aggregate(node.args, to_real)
    kwargs = {k: fx.node.map_aggregate(v, to_real) for k, v in node.kwargs.items()}
    with capturing_recordings() as captured:
        node.target(*args, **kwargs)
    if len(captured) != 1:
        log.debug("argus: %s keeps its op: %s", node.name,
                  "it ran the aten fallback" if not captured else f"it ran {len(captured)} host functions")
        return None
    rec, why, inputs = captured[0]
    if rec is None:
        log.debug("argus: %s keeps its op: %s", node.name, why)
        return None
    if rec.result[0] != "buf":
        log.debug("argus: %s keeps its op: its result is a view of an operand", node.name)
        return None
    sources = [nodes.get(id(t)) for t in inputs]
    if any(s is None for s in sources):
        log.debug("argus: %s keeps its op: its host function launches on a tensor made from its operands", node.name)
        return None
    return rec, sources  # type: ignore[return-value]


def _written_operands(node: fx.Node) -> set[fx.Node]:
    """The operand nodes `node`'s op writes in place (its schema's mutable arguments: a KV cache)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return set()
    out = set()
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, fx.Node):
            out.add(value)
    return out


def _same_meta(t: Any, like: torch.Tensor) -> bool:
    return isinstance(t, torch.Tensor) and t.shape == like.shape and t.stride() == like.stride() and \
        t.dtype == like.dtype and t.device == like.device and t.storage_offset() == like.storage_offset()


def inline_ops(gm: fx.GraphModule, devices: tuple[str, ...] | None = None,
               example_inputs: list[Any] | None = None) -> int:
    """Replace each argus op node of `gm` that records (record_node) by run_inlined on its operand nodes; the
    number replaced. `devices`: where operands may live (default GPUS). `example_inputs`: the graph's real inputs,
    in placeholder order, which the recording runs use instead of random copies where their metadata agrees
    (a model's weights are not copied)."""
    devices = GPUS if devices is None else devices
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    known = dict(zip(placeholders, example_inputs or []))
    done = 0
    for node in list(gm.graph.nodes):
        if not is_argus_op(node):
            continue
        try:
            found = record_node(node, devices, known)
        except Exception as e:  # the op keeps working as an op; only the inlining is given up
            log.info("argus: %s keeps its op: recording it raised %s: %s", node.name, type(e).__name__, e)
            found = None
        if found is None:
            continue
        rec, sources = found
        _INLINED.append(rec)
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(run_inlined, (len(_INLINED) - 1, *sources))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        site = [a for a in node.args if isinstance(a, str)]
        if site:
            _report.note(site[-1], f"inlined into Inductor's code: {len(rec.launches)} Triton launch(es)")
        done += 1
    if done:
        gm.recompile()
    return done

