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
benchmarks/results/NOTES.md, "Compile time and host overhead").

The compile-time run takes the graph's own inputs where it has them (a model's weights), except those the op writes
in place (a KV cache, which gets a stand-in: the run must not write into the model's state); tensors made inside the
graph get stand-ins: integer ones (routing ids, targets, masks) zeros, which every kernel takes as valid
indices, floating-point ones random normals, and a MoE call's expert ids (floats, where a router op packs them
beside its weights) a routing of distinct experts a token (operands.routing_like). A recording never depends on
values (argus_inductor.runtime.replay refuses host functions that read them).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from ..runtime import reporting as _report
from ..runtime.replay import Launch, Recording, run_host_step, view_of
from .operands import real_arguments, static_operands
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


def record_node(node: fx.Node, devices: tuple[str, ...] = GPUS,
                known: dict[fx.Node, torch.Tensor] | None = None) -> tuple[Recording, list[fx.Node]] | None:
    """Run argus op `node` once on operands of its compile-time metadata, recording its launches: the
    recording and the nodes its inputs come from, or None where the call cannot be inlined (its operands must be
    static tensors on `devices`). `known`: real tensors for some nodes (the graph's inputs: weights need no copy)."""
    from ..ops import capturing_recordings

    found = static_operands(node, devices)
    if found is None:
        log.debug("argus: %s keeps its op: an operand is not a static tensor on %s", node.name, "/".join(devices))
        return None
    args, kwargs, real = real_arguments(node, found, known or {})
    nodes = {id(real[id(n)]): n for n, _ in found}
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

