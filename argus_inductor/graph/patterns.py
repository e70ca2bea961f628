"""The pattern toolkit the graph passes share: the torch callables each family matches, a node's fake value and
arguments, known-equal sizes, erasing what a rewrite leaves unused, the activation a node applies, the nodes under
autocast, and the Match each pass returns.

May import: ops (only for what an op computes: no pass launches anything), runtime. Every other module of graph/
imports this one; it imports none of them.
"""
from __future__ import annotations

import logging
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from ..runtime import reporting as report  # noqa: F401

log = logging.getLogger("argus_inductor")
_SAID: set[str] = set()

LIBRARY_KINDS = ("conv", "norm", "scan", "pool", "reduce", "loss", "pointwise")
LINEAR = {torch._C._nn.linear, F.linear}
MATMUL = {torch.matmul, operator.matmul, torch.mm}
BMM = {torch.bmm}
ADDMM = {torch.addmm}
ADD = {operator.add, torch.add, torch.Tensor.add}
MUL = {operator.mul, torch.mul, torch.Tensor.mul}
DIV = {operator.truediv, torch.div, torch.true_divide}
SDPA = {F.scaled_dot_product_attention, getattr(torch._C._nn, "scaled_dot_product_attention", None)} - {None}
SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax}
DROPOUT = {F.dropout, torch.dropout}
TRANSPOSE = {torch.transpose, torch.Tensor.transpose}
REPEAT_INTERLEAVE = {torch.repeat_interleave, torch.Tensor.repeat_interleave}
SILU = {F.silu, torch.nn.functional.silu, torch.ops.aten.silu.default}
ACTIVATIONS = {torch.relu: "relu", F.relu: "relu", F.silu: "silu", F.gelu: "gelu"}
METHOD_ACTS = {"relu": "relu"}
SDPA_ARGS = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]


@dataclass
class Match:
    kind: str
    nodes: list[str]


def say_once(msg: str) -> None:
    if msg not in _SAID:
        _SAID.add(msg)
        log.warning(msg)


def fake_value(n: Any) -> torch.Tensor | None:
    if not isinstance(n, fx.Node):
        return None
    v = n.meta.get("example_value", n.meta.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def known_eq(a: Any, b: Any) -> bool:
    """a == b, decided without adding a guard (symbolic sizes count only when provably equal)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(a == b))
    except Exception:
        return False


def same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == b.dim() and all(known_eq(x, y) for x, y in zip(a.shape, b.shape))


def as_int(x: Any) -> int | None:
    """x as an int: an int, or a SymInt the shape environment has pinned to one (transformers' static cache
    traces its key/value sizes as SymInts that guards fix to constants), else None."""
    if isinstance(x, torch.SymInt):
        x = x.node.maybe_as_int()
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def as_num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def is_call(node: Any, targets: set, methods: tuple[str, ...] = ()) -> bool:
    return isinstance(node, fx.Node) and ((node.op == "call_function" and node.target in targets)
                                          or (node.op == "call_method" and node.target in methods))


def bind(node: fx.Node, names: list[str]) -> dict[str, Any]:
    a = dict(zip(names, node.args))
    a.update(node.kwargs)
    return a


def alive(n: fx.Node) -> bool:
    return not getattr(n, "_erased", False)


def is_argus_op(n: object) -> bool:
    """Whether `n` is a call of one of Argus's ops (torch.ops.argus.*)."""
    return isinstance(n, fx.Node) and n.op == "call_function" and str(n.target).startswith("argus.")


def is_moe(target: Any) -> bool:
    """Whether `target` is Argus's experts op, argus::moe (its overload or its packet)."""
    return str(target).split(".")[:2] == ["argus", "moe"]


def only_user(n: fx.Node, user: fx.Node) -> bool:
    return list(n.users) == [user]


def is_pure(n: fx.Node) -> bool:
    """Whether erasing `n` once it has no users changes nothing (no mutation, no side effect)."""
    if n.op not in ("call_function", "call_method"):
        return False
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    if name.endswith("_") and not name.startswith("__"):
        return False
    if n.target in (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv):
        return False
    try:
        return not n.is_impure()
    except Exception:
        return False


def erase_unused(g: fx.Graph, nodes: Iterable[fx.Node]) -> None:
    """Erase `nodes` (which must have no users) and then every input of theirs that is left unused and
    pure. Not a whole-graph dead-code pass: that would drop in-place updates such as copy_ or scatter_
    that Dynamo records without users."""
    work = list(nodes)
    while work:
        n = work.pop()
        if not alive(n) or n.users or (n.op not in ("call_function", "call_method")):
            continue
        inputs = list(n.all_input_nodes)
        g.erase_node(n)
        work.extend(i for i in inputs if alive(i) and not i.users and is_pure(i))


def activation_of(node: fx.Node) -> str | None:
    if node.op == "call_function" and node.target in ACTIVATIONS:
        if node.target is F.gelu:
            approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
            return "gelu_tanh" if approx == "tanh" else "gelu"
        if node.kwargs.get("inplace") or (len(node.args) > 1 and node.args[1] is True):
            return None
        return ACTIVATIONS[node.target]
    if node.op == "call_method" and node.target in METHOD_ACTS:
        return METHOD_ACTS[node.target]
    return None


def under_autocast(g: fx.Graph) -> set[fx.Node]:
    """The nodes inside an enabled torch.autocast region (Dynamo records `_enter_autocast(device, dtype, enabled,
    cache)` ... `_exit_autocast(enter)` around them). Autocast runs a matmul or attention there in its own dtype
    (float32 operands, a bfloat16 product); an Argus op has no autocast kernel and would return its operands' dtype,
    so the matchers leave these nodes to Inductor."""
    stacks: dict[Any, list[bool]] = {}
    opened: dict[fx.Node, Any] = {}
    inside: set[fx.Node] = set()
    for n in g.nodes:
        name = getattr(n.target, "__name__", "") if n.op == "call_function" else ""
        if name == "_enter_autocast" and n.args:
            enabled = n.args[2] if len(n.args) > 2 else n.kwargs.get("enabled", True)
            stacks.setdefault(n.args[0], []).append(bool(enabled))
            opened[n] = n.args[0]
        elif name == "_exit_autocast" and n.args and n.args[0] in opened:
            stack = stacks.get(opened[n.args[0]])
            if stack:
                stack.pop()
        elif any(stack and stack[-1] for stack in stacks.values()):
            inside.add(n)
    return inside




def torch_fns(*names: str, mod: Any = torch) -> set[Any]:
    return {getattr(mod, n) for n in names if hasattr(mod, n)}


def float_tensor(n: Any) -> bool:
    v = fake_value(n)
    return v is not None and v.is_floating_point()


def static_shape(n: Any) -> tuple[int, ...] | None:
    v = fake_value(n)
    if v is None or not all(isinstance(s, int) for s in v.shape):
        return None
    return tuple(v.shape)


def int_list(v: Any, n: int) -> list[int] | None:
    """An int or a sequence of ints as a list of n ints (None when it is neither)."""
    if as_int(v) is not None:
        return [v] * n
    if isinstance(v, (list, tuple)) and all(as_int(x) is not None for x in v):
        if len(v) == 1:
            return [v[0]] * n
        return list(v) if len(v) == n else None
    return None


def dims_arg(d: Any, rank: int) -> list[int] | None:
    """A dim argument as sorted non-negative dims; [] for 'all' is returned as None by the callers."""
    if as_int(d) is not None:
        d = [d]
    if not isinstance(d, (list, tuple)) or not d or not all(as_int(x) is not None for x in d):
        return None
    out = sorted({x % rank for x in d})
    return out if all(-rank <= x < rank for x in d) else None


# --------------------------------------------------------------------------------------------- convolution

