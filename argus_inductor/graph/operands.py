"""The operands of an op node at compile time: the fake (or real) value each argument node holds, whether it is a
static tensor, and real stand-ins with the same metadata, for the runs the backend makes while compiling (recording
an op's launches to inline them, timing the measured swap-in).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import fx

from .patterns import is_moe


def value_of(arg: Any) -> Any:
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
            args = fx.node.map_aggregate(arg.args, value_of)
            kwargs = {k: fx.node.map_aggregate(a, value_of) for k, a in arg.kwargs.items()}
            fn = arg.target if arg.op == "call_function" else getattr(args[0], str(arg.target))
            v = fn(*args, **kwargs) if arg.op == "call_function" else fn(*args[1:], **kwargs)
            arg.meta["example_value"] = v
        return v
    return arg


def is_static(t: torch.Tensor) -> bool:
    return all(type(n) is int for n in (*t.shape, *t.stride(), t.storage_offset()))


class AtHints:
    """A symbolic tensor's metadata at this compile's sizes (each symbolic size by its hint: the value it has in the
    inputs Dynamo compiled the graph for), with the tensor methods random_like and same_meta read."""

    def __init__(self, t: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...], offset: int) -> None:
        self.shape, self._stride, self._offset = torch.Size(shape), stride, offset
        self.dtype, self.device = t.dtype, t.device
        self._floating = t.is_floating_point()

    def stride(self) -> tuple[int, ...]:
        return self._stride

    def storage_offset(self) -> int:
        return self._offset

    def numel(self) -> int:
        return self.shape.numel()

    def is_floating_point(self) -> bool:
        return self._floating


def hint(n: Any) -> int | None:
    """A size at this compile's inputs: an int as it is, a symbolic size by its hint; None where it has none (a size
    known only at run time, such as the count of a data-dependent selection)."""
    if type(n) is int:
        return n
    if not isinstance(n, torch.SymInt):
        return None
    node = n.node
    try:
        return int(node.hint) if node.has_hint() else None  # unbacked: no value until the graph runs
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None


def at_hints(t: torch.Tensor) -> torch.Tensor | AtHints | None:
    """`t` itself where its sizes are static, its metadata at the size hints where some are symbolic, None where a
    size has no hint."""
    if is_static(t):
        return t
    sizes = [hint(n) for n in (*t.shape, *t.stride(), t.storage_offset())]
    if any(n is None for n in sizes):
        return None
    rank = t.dim()
    return AtHints(t, tuple(sizes[:rank]), tuple(sizes[rank:2 * rank]), sizes[-1])


def random_like(t: torch.Tensor | AtHints) -> torch.Tensor:
    """A real tensor with `t`'s shape, strides, storage offset, dtype and device: random normals for floating
    point, zeros otherwise."""
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    base = torch.empty(t.storage_offset() + span, dtype=t.dtype, device=t.device)
    if t.is_floating_point():
        base.normal_()
    else:
        base.zero_()
    return base.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset())


def static_operands(node: fx.Node, devices: tuple[str, ...], hints: bool = False
                    ) -> list[tuple[fx.Node, Any]] | None:
    """Each tensor operand node of `node` with its compile-time value, or None where one is not a static tensor
    on one of `devices` (or an argument is neither a tensor node nor a constant). `hints`: a tensor of symbolic
    sizes counts, as its metadata at the size hints (at_hints), and a symbolic size argument as its hint: the
    operands as this compile's inputs have them."""
    found: list[tuple[fx.Node, Any]] = []
    leaves = [*fx.node.map_aggregate(node.args, lambda a: a), *node.kwargs.values()]

    def visit(a: Any) -> bool:
        if isinstance(a, (list, tuple)):
            return all(visit(v) for v in a)
        if not isinstance(a, fx.Node):
            return True
        v = value_of(a)
        if hints and (isinstance(v, torch.SymInt) or type(v) is int):  # a size argument
            n = hint(v)
            if n is None:
                return False
            found.append((a, n))
            return True
        if not isinstance(v, torch.Tensor) or v.device.type not in devices:
            return False
        if not is_static(v):
            v = at_hints(v) if hints else None
            if v is None:
                return False
        found.append((a, v))
        return True

    return found if all(visit(a) for a in leaves) else None


def written_operands(node: fx.Node) -> set[fx.Node]:
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


def same_meta(t: Any, like: torch.Tensor | AtHints) -> bool:
    return isinstance(t, torch.Tensor) and t.shape == like.shape and tuple(t.stride()) == tuple(like.stride()) and \
        t.dtype == like.dtype and t.device == like.device and t.storage_offset() == like.storage_offset()


def routing_like(ids: torch.Tensor | AtHints, experts: int) -> torch.Tensor:
    """A routing of distinct experts a token with `ids`'s shape, strides, dtype and device. A MoE call's expert ids
    are never a random stand-in: a router op hands them over as floats packed beside its weights, so a stand-in of
    normals indexed out of range (a device-side assert in the swap-in's fallback on the H200, reads out of bounds in
    the kernel)."""
    t, k = ids.shape
    out = random_like(ids)
    out.copy_(torch.rand(t, experts, device=ids.device).topk(min(k, experts), dim=1).indices)
    return out


def real_arguments(node: fx.Node, found: list[tuple[fx.Node, Any]], known: dict[fx.Node, torch.Tensor]
                   ) -> tuple[tuple[Any, ...], dict[str, Any], dict[int, Any]]:
    """`node`'s arguments with a real tensor for each operand node in `found` (static_operands): the graph's own
    input where `known` has one of the same metadata that the op does not write (a model's weights), a random
    stand-in otherwise (a size found by its hint stays that int; a MoE call's expert ids a routing, routing_like);
    and the real value of each operand node by id(node)."""
    written = written_operands(node)  # runs at compile time write these: never into the graph's real inputs

    def real_of(n: fx.Node, v: Any) -> Any:
        if isinstance(v, int):
            return v
        return known[n] if n not in written and same_meta(known.get(n), v) else random_like(v)

    real = {id(n): real_of(n, v) for n, v in found}
    ids = node.args[2] if is_moe(node.target) and len(node.args) > 3 else None
    if isinstance(ids, fx.Node) and id(ids) in real and real[id(ids)] is not known.get(ids):  # a stand-in
        w1 = real.get(id(node.args[3]))
        if isinstance(w1, torch.Tensor):
            real[id(ids)] = routing_like(real[id(ids)], w1.shape[0])

    def to_real(a: Any) -> Any:
        return real[id(a)] if isinstance(a, fx.Node) else a

    args = fx.node.map_aggregate(node.args, to_real)
    kwargs = {k: fx.node.map_aggregate(v, to_real) for k, v in node.kwargs.items()}
    return args, kwargs, real
