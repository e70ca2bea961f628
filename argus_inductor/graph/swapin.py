"""The measured swap-in, applied while the backend compiles (ops/swapin.py decides).

For each Argus op node of a rewritten graph whose operands are static tensors on a GPU, the signature's verdict is
read from its cache entry for this device model or, where there is none, measured now: the op on real operands
(the model's own weights, stand-ins for the rest) against its reference compiled alone by Inductor, on the same
operands, each over rotated copies so L2 holds neither. The verdict is stored in the entry (a miss gets an entry of
origin "default" holding the plan it ran, proved, so that later processes decide without timing and `argus
warmup` still tunes it). A node whose verdict is "fallback" gets its reference in the op's place: Inductor then
compiles that subgraph as it would have without Argus, fused with its neighbours. The report says which side won
and by how much.

A graph of dynamic shapes is measured at the sizes it was compiled for (each symbolic size by its hint, as Inductor's
own autotuning picks its kernels), and keeps that verdict at every size it runs; the report says so. Nodes left
unmeasured keep the op and say why: a size known only at run time (a data-dependent count), an op that writes an
operand in place, or the interpreter (where times mean nothing: the template rule stands).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import fx

from .. import ops
from ..kernels.policies import fp32_precision
from ..ops import dispatch, references
from ..ops import swapin as decide
from ..ops.library import LIBRARY
from ..runtime import reporting as report
from ..runtime import tiers, timing
from ..runtime.signature import Signature, device_model
from .operands import random_like, real_arguments, routing_like, static_operands, written_operands
from .patterns import is_argus_op, is_moe

log = logging.getLogger("argus_inductor")
GPUS = ("cuda", "hip")
# what the fallback side of each op is, for the report
FALLBACKS = {"argus::linear": "cuBLAS + Inductor epilogue", "argus::linear_residual": "cuBLAS + Inductor epilogue",
             "argus::gate_up": "cuBLAS x2 + Inductor epilogue", "argus::linear_cat": "cuBLAS x3 + Inductor cat",
             "argus::bmm": "cuBLAS bmm", "argus::attention": "SDPA (flash/cuDNN/efficient, as Inductor picks)",
             "argus::attention_mask": "SDPA with the mask (as Inductor picks)", "argus::moe": "grouped_mm + Inductor",
             "argus::library": "Inductor's kernels", "argus::rms_norm": "Inductor's kernel",
             "argus::embedding_rms_norm": "Inductor's kernels"}
CompileFallback = Callable[[Callable[..., torch.Tensor], tuple[Any, ...], dict[str, Any]], Callable[..., Any]]


def fallback_name(node: fx.Node) -> str:
    """What the fallback side of `node` is, for the report: a library op by its class (cuDNN for a convolution)."""
    name = node.target.name()
    if name == "argus::library" and node.args and str(node.args[0]).startswith("conv"):
        return "cuDNN + Inductor epilogue"
    return FALLBACKS.get(name, "Inductor")


def _node_id(node: fx.Node) -> str | None:
    ids = [a for a in node.args if isinstance(a, str) and a.startswith("g") and ":" in a]
    return ids[-1] if ids else None


def compile_alone(fn: Callable[..., torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> Callable[..., Any]:
    """`fn(*args, **kwargs)` compiled by Inductor alone, as a graph of its own whose inputs are the tensors among the
    arguments (the rest are constants of the graph): a callable taking those tensors, in order."""

    tensors: list[torch.Tensor] = []
    g = fx.Graph()

    def leaf(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            tensors.append(a)
            return g.placeholder(f"t{len(tensors) - 1}")
        return a

    a = fx.node.map_aggregate(args, leaf)
    kw = {k: fx.node.map_aggregate(v, leaf) for k, v in kwargs.items()}
    g.output(g.call_function(fn, tuple(a), kw))
    gm = fx.GraphModule(torch.nn.Module(), g)
    # its own compile, not part of the graph the backend is compiling; one Inductor compile at a time, and from the
    # background on a caller's thread (tiers.py)
    return tiers.on_caller(lambda: _compile_fx(gm, list(tensors)))


def _compile_fx(gm: fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
    """Inductor's compile of `gm` alone, one compile at a time in the process (tiers.COMPILE_LOCK)."""
    from torch._inductor.compile_fx import compile_fx

    with tiers.COMPILE_LOCK, torch._guards.tracing(None):
        return compile_fx(gm, inputs)


def _tensors(args: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    fx.node.map_aggregate(args, lambda a: out.append(a) if isinstance(a, torch.Tensor) else None)
    return out


def _timing_copy(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict]:
    """Independent operands of the same metadata: random normals, and for a MoE call a routing of distinct experts a
    token (a stand-in of zeros would send every token to expert 0)."""
    def fresh(a: Any) -> Any:
        return random_like(a) if isinstance(a, torch.Tensor) else a

    new = fx.node.map_aggregate(args, fresh)
    if is_moe(target):
        weights, ids, w1 = new[1], new[2], new[3]
        weights.copy_(torch.softmax(weights.float(), -1))  # in place: a stand-in keeps the operand's strides
        new = (new[0], weights, routing_like(ids, w1.shape[0]), *new[3:])
    return new, {k: fx.node.map_aggregate(v, fresh) for k, v in kwargs.items()}


def measure_node(node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any], timer: decide.Timer,
                 compile_fallback: CompileFallback = compile_alone) -> decide.Verdict:
    """Time the op (its plan) against its reference compiled alone, on `args` and rotated copies of them."""
    target = node.target
    ref = references.reference_for(target)
    size = sum(t.numel() * t.element_size() for t in _tensors((args, kwargs)))
    copies = [(args, kwargs)] + [_timing_copy(target, args, kwargs) for _ in range(timing.rotation(size))]
    with dispatch.unreported():
        argus_fns = [lambda a=a, k=k: target(*a, **k) for a, k in copies]
        try:
            with report.phase("swap-in: Argus first runs (plan, checker, Triton compile)"):
                for f in argus_fns:
                    f()  # the first call resolves the plan and compiles its kernels
        except Exception as e:
            argus_fns = [_raises(e)]
        fallback_fns = None
        why = ""
        try:
            with report.phase("swap-in: fallback compile (Inductor)"):
                compiled = compile_fallback(ref, args, kwargs)
                fallback_fns = [lambda a=a, k=k: compiled(*_tensors((a, k))) for a, k in copies]
                for f in fallback_fns:
                    f()
        except Exception as e:
            fallback_fns = None
            why = f"the fallback failed to compile or run ({type(e).__name__}: {str(e).strip()[:200]})"
        argus_fns, fallback_fns, why = _agreeing(argus_fns, fallback_fns, why,
                                                 lambda widen: ref(*widen(args), **widen(kwargs)), node.name)
        with report.phase("swap-in: timing"):
            return decide.measure(argus_fns, fallback_fns, fallback_name(node), timer,
                                  why_no_fallback=why)


class Disagrees(Exception):
    """A side's output is off the op's reference (decide.disagreement): it is out of the choice."""


def _widened(args: Any) -> Any:
    """`args` with each 16-bit floating tensor as a float32 copy (the rest as they are): what the output check runs
    the reference on, so that the judge is not the 16-bit library call the fallback side makes."""
    def wide(a: Any) -> Any:
        return a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() and a.element_size() < 4 else a
    return fx.node.map_aggregate(args, wide)


def _judge(eager: Callable[[Callable[[Any], Any]], Any], name: str, widen: bool) -> Any:
    """The reference's output for the output check: with `widen`, run on float32 copies of 16-bit operands where it
    runs so (on the H200, SDPA on bf16 with a float32 mask went wrong through cuDNN, and the check, judging by that
    same call, put the right Argus plan out), else at the operands' own precision."""
    if widen:
        try:
            return eager(_widened)
        except Exception as e:  # a reference that takes only 16-bit operands (grouped_mm), or memory: the native run
            log.debug("argus: swap-in of %s: the reference does not run on float32 copies (%s)", name, e)
    return eager(lambda a: a)


def _agreeing(argus_fns: list[Callable[[], Any]], fallback_fns: list[Callable[[], Any]] | None, why: str,
              eager: Callable[[Callable[[Any], Any]], Any], name: str) -> tuple[list[Callable[[], Any]], Any, str]:
    """The sides with each one out whose output on the first operand copy is off the reference run eagerly on it
    (by more than decide.agree_limit for the sides' output dtype): the fallback as failed (`why` says so), the Argus
    plan as a call that raises Disagrees. `eager(widen)` runs the reference on widen(the operands); the check runs it
    on float32 copies of 16-bit operands where it can (_judge), unless a side's output holds indices or flags (an
    integer or bool tensor: a widened run may break a tie the 16-bit one made). Where the reference cannot run
    eagerly, both stand."""
    outs: dict[str, Any] = {}
    for side, fns in (("fallback", fallback_fns), ("argus", argus_fns)):
        try:
            outs[side] = fns[0]() if fns is not None else None
        except Exception:  # a side that already failed stays failed
            outs[side] = None
    native = outs["fallback"] if outs["fallback"] is not None else outs["argus"]
    floating = all(t.is_floating_point() for t in _tensors(native))
    try:
        with report.phase("swap-in: output check"):
            want = _judge(eager, name, widen=floating)
    except Exception as e:
        log.debug("argus: swap-in of %s: no eager reference to check the sides against (%s)", name, e)
        return argus_fns, fallback_fns, why
    limit = decide.agree_limit(native if native is not None else want)
    if fallback_fns is not None and outs["fallback"] is not None:
        err = decide.disagreement(outs["fallback"], want)
        if err > limit:
            log.warning("argus: swap-in of %s: Inductor's compiled fallback is off the op's reference (relative "
                        "error %.3g); Argus's plan is kept", name, err)
            fallback_fns, why = None, f"the fallback's output is off the reference's (relative error {err:.3g})"
    if outs["argus"] is None:  # the Argus side already failed: it stays failed
        return argus_fns, fallback_fns, why
    err = decide.disagreement(outs["argus"], want)
    if err > limit:
        log.warning("argus: swap-in of %s: Argus's plan is off the op's reference (relative error %.3g); it is not "
                    "used", name, err)
        argus_fns = [_raises(Disagrees(f"its output is off the reference's (relative error {err:.3g})"))]
    return argus_fns, fallback_fns, why


def _raises(e: Exception) -> Callable[[], Any]:
    def f() -> Any:
        raise e
    return f


def _signature(node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature | None:
    with ops.recording_signatures() as seen:
        try:
            node.target(*args, **kwargs)
        except ops.SignatureRecorded:
            pass
    return seen[-1] if seen else None


def _store(sig: Signature, slot: str | None, verdict: decide.Verdict, target: str) -> None:
    """Keep `verdict` in `sig`'s cache entry under `slot` (None: keep none, only make sure the entry exists); a
    signature with none gets an entry of origin "default" holding the plan its calls run (proved, as every stored
    entry is)."""
    cache = ops.kernel_cache()
    try:
        entry = cache.get(sig.key())
        if entry is None:
            plan = ops.plan_for(sig, target)
            if plan is None:
                return
            # with the verdict plan_for proved it with before its first run (none: make_entry proves it, as
            # ARGUS_VERIFY says)
            entry = ops.make_entry(sig, plan.policy or None, "default", target, kernels=plan.kernels,
                                   verification=plan.verification)
            if plan.verification is not None:
                ops.mark_proved(sig, entry)
        elif slot is None:
            return
        if slot is not None:
            entry = replace(entry, swapin={**entry.swapin, slot: verdict.as_dict()})
        cache.put(sig.key(), entry)
    except Exception as e:  # the verdict holds for this process; the next one measures again
        log.warning("argus: cannot store the swap-in verdict of %s (%s: %s)", sig.short(), type(e).__name__, e)


@dataclass
class _Member:
    """An Argus op node the swap-in can decide: its real operands, signature and reference."""
    node: fx.Node
    node_id: str | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    sig: Signature
    ref: Callable[..., torch.Tensor]
    at_hints: bool = False  # its operands' sizes are symbolic: measured at this compile's (AT_HINTS)


def _eligible(node: fx.Node, devices: tuple[str, ...], known: dict[fx.Node, torch.Tensor]) -> _Member | str:
    """`node` as a member, or why its swap-in is not measured."""
    ref = references.reference_for(node.target)
    if ref is None or _writes(node):
        return "swap-in not measured: the op writes an operand in place"
    # a dynamic graph's operands at this compile's sizes: it is measured there, as Inductor's autotuning does
    found = static_operands(node, devices, hints=True)
    at_hints = found is not None and any(not isinstance(v, torch.Tensor) for _, v in found)
    if found is None:
        return "swap-in not measured: a size of its operands is known only at run time (the template rule stands)"
    args, kwargs, _ = real_arguments(node, found, known)
    sig = _signature(node, args, kwargs)
    if sig is None:
        return "swap-in not measured: no signature"
    return _Member(node, _node_id(node), args, kwargs, sig, ref, at_hints)


def _writes(node: fx.Node) -> bool:
    """Whether Argus op `node` writes an operand in place (a KV-cache write: its schema's mutable arguments, or a
    library op's `writes`)."""
    return bool(written_operands(node)) or bool(node.args and node.args[0] in LIBRARY and LIBRARY[node.args[0]].writes)


def _groups(members: list[_Member]) -> list[list[_Member]]:
    """The members in groups decided together: an op whose result only another member reads is in that member's group
    (an elementwise chain before a reduction, a GEMM before its norm): Inductor fuses across such a boundary where it
    runs both, so the two sides are compared on the whole group. In graph order."""
    by_node = {m.node: m for m in members}
    parent = {m.node: m.node for m in members}

    def root(n: fx.Node) -> fx.Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for m in members:
        users = list(m.node.users)
        if len(users) == 1 and users[0] in by_node:
            parent[root(m.node)] = root(users[0])
    out: dict[fx.Node, list[_Member]] = {}
    for m in members:
        out.setdefault(root(m.node), []).append(m)
    return list(out.values())


def _group_key(group: list[_Member]) -> str:
    """What a group's verdict is kept under in its last member's entry: its members' signatures and how they feed
    each other."""
    index = {m.node: i for i, m in enumerate(group)}
    edges = sorted((index[a], i) for i, m in enumerate(group) for a in m.node.all_input_nodes if a in index)
    text = json.dumps([[m.sig.key() for m in group], edges])
    return "group " + hashlib.sha256(text.encode()).hexdigest()[:16]


def _run_group(group: list[_Member], fns: list[Callable[..., Any]], external: dict[fx.Node, Any]) -> Any:
    """Run the group's members in order with `fns[i]` for member i (its op or its reference), each member's inputs
    from `external` (real tensors of the nodes outside the group) or the member before; the last member's result."""
    values: dict[fx.Node, Any] = {}
    out = None
    for m, fn in zip(group, fns):
        def real(a: Any) -> Any:
            if isinstance(a, fx.Node):
                return values[a] if a in values else external[a]
            return a
        args = fx.node.map_aggregate(m.node.args, real)
        kwargs = {k: fx.node.map_aggregate(v, real) for k, v in m.node.kwargs.items()}
        out = values[m.node] = fn(*args, **kwargs)
    return out


def measure_group(group: list[_Member], timer: decide.Timer) -> decide.Verdict:
    """Time the group's ops (each its plan) against the group's references compiled together by Inductor (which fuses
    across the members), on the same external operands and rotated copies of them."""

    members = {m.node for m in group}
    outside: dict[fx.Node, Any] = {}  # each node outside the group a member reads, with its real tensor
    for m in group:
        nodes: list[Any] = []
        fx.node.map_aggregate(m.node.args, nodes.append)
        fx.node.map_aggregate(tuple(m.node.kwargs.values()), nodes.append)
        values: list[Any] = []
        fx.node.map_aggregate(m.args, values.append)
        fx.node.map_aggregate(tuple(m.kwargs.values()), values.append)
        for a, v in zip(nodes, values):
            if isinstance(a, fx.Node) and a not in members:
                outside[a] = v
    order = list(outside)
    size = sum(v.numel() * v.element_size() for v in outside.values() if isinstance(v, torch.Tensor))
    copies = [outside] + [{a: random_like(v) if isinstance(v, torch.Tensor) else v for a, v in outside.items()}
                          for _ in range(timing.rotation(size))]
    for m in group:  # a MoE member's expert ids from outside: a routing in each copy (routing_like)
        if is_moe(m.node.target) and m.node.args[2] in outside:
            for c in copies[1:]:
                c[m.node.args[2]] = routing_like(c[m.node.args[2]], m.args[3].shape[0])
    with dispatch.unreported():
        argus_fns = [lambda c=c: _run_group(group, [m.node.target for m in group], c) for c in copies]
        try:
            with report.phase("swap-in: Argus first runs (plan, checker, Triton compile)"):
                for f in argus_fns:
                    f()
        except Exception as e:
            argus_fns = [_raises(e)]
        fallback_fns, why = None, ""
        try:
            with report.phase("swap-in: fallback compile (Inductor)"):
                g = fx.Graph()
                env: dict[fx.Node, fx.Node] = {a: g.placeholder(f"t{i}") for i, a in enumerate(order)}
                for m in group:  # the references in the members' places, as the graph would hold them
                    env[m.node] = g.call_function(
                        m.ref, fx.node.map_aggregate(m.node.args, lambda a: env[a] if isinstance(a, fx.Node) else a),
                        {k: fx.node.map_aggregate(v, lambda a: env[a] if isinstance(a, fx.Node) else a)
                         for k, v in m.node.kwargs.items()})
                g.output(env[group[-1].node])
                gm = fx.GraphModule(torch.nn.Module(), g)
                compiled = tiers.on_caller(lambda: _compile_fx(gm, [outside[a] for a in order]))
                fallback_fns = [lambda c=c: compiled(*[c[a] for a in order]) for c in copies]
                for f in fallback_fns:
                    f()
        except Exception as e:
            fallback_fns = None
            why = f"the fallback failed to compile or run ({type(e).__name__}: {str(e).strip()[:200]})"
        argus_fns, fallback_fns, why = _agreeing(
            argus_fns, fallback_fns, why,
            lambda widen: _run_group(group, [m.ref for m in group], widen(copies[0])), group[-1].node.name)
        with report.phase("swap-in: timing"):
            return decide.measure(argus_fns, fallback_fns, "Inductor across the group (" + " + ".join(
                fallback_name(m.node) for m in group) + ")", timer, why_no_fallback=why)


PENDING = "fallback (swap-in pending: Inductor's code runs while Argus's kernel is measured in the background)"
AT_HINTS = ("swap-in measured at the sizes this dynamic graph was compiled for ({sig}); the graph keeps that verdict "
            "at every size it runs")
_CLOCK: list[Any] = [None, GPUS]  # measuring_with(): a clock and the devices it measures on (tests)


@contextlib.contextmanager
def measuring_with(timer: decide.Timer, devices: tuple[str, ...]) -> Iterator[None]:
    """Inside, the backend's swap-in measures with `timer` on operands on `devices` whatever the target (tests: a
    fake clock under the interpreter, where real times mean nothing)."""
    prev = list(_CLOCK)
    _CLOCK[:] = [timer, devices]
    try:
        yield
    finally:
        _CLOCK[:] = prev


def measures(target: str) -> bool:
    """Whether the swap-in measures for `target` (a GPU, or a clock given by measuring_with)."""
    return target in GPUS or _CLOCK[0] is not None


def swap_in(gm: fx.GraphModule, example_inputs: Sequence[Any], target: str, timer: decide.Timer | None = None,
            compile_fallback: CompileFallback = compile_alone, devices: tuple[str, ...] | None = None,
            defer: bool = False) -> list[tuple[str, decide.Verdict | None]]:
    """Decide each Argus op node of `gm` (target "cuda" / "hip" measures; "interpret" only notes that it does not,
    unless a `timer` is given: the tests' fake clock), replace the nodes Inductor's code wins with their references,
    and return each decided node's (id, verdict). Ops that feed only each other are decided together (_groups).
    `devices`: where operands may live. `defer`: a group with no verdict yet (none stored, none decided in this
    graph) is not measured now: its nodes get their references (Inductor's code, the first tier) and come back
    with verdict None; runtime/tiers.py measures them later, on a copy of the graph as it was."""
    timer = timer or _CLOCK[0]
    devices = devices or _CLOCK[1]
    measuring = target in GPUS or timer is not None
    timer = timer or timing.time_ms
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    known = {n: t for n, t in zip(placeholders, example_inputs) if isinstance(t, torch.Tensor)}
    members: list[_Member] = []
    for node in list(gm.graph.nodes):
        if not is_argus_op(node):
            continue
        node_id = _node_id(node)
        if not measuring:
            if node_id:
                report.note(node_id, "swap-in not measured (the Triton interpreter: times mean nothing); the "
                                     "template rule stands")
            continue
        try:
            m = _eligible(node, devices, known)
        except Exception as e:  # the op keeps running as the rules say; only the measurement is given up
            log.warning("argus: swap-in of %s not measured (%s: %s)", node.name, type(e).__name__, e)
            continue
        if isinstance(m, str):
            if node_id:
                report.note(node_id, m)
            continue
        members.append(m)
    if members and not defer:  # the checker's workers prove the plans while the groups are measured one by one
        ops.prove_ahead([m.sig for m in members], target)  # (deferred: when the background measures them)
    decided: list[tuple[str, decide.Verdict]] = []
    verdicts: dict[str, decide.Verdict] = {}  # decided so far in this graph (layers share signatures)
    runs_now: list[Signature] = []  # deferred: the members whose stored verdict runs their plan from the first call
    changed = False
    for group in _groups(members):
        if tiers.closing():  # the process is exiting: what is left stays as it is (its op, unmeasured)
            break
        last = group[-1]
        try:
            model = device_model(_tensors((last.args, last.kwargs))[0].device)
            if any("float32" in m.sig.dtypes for m in group):  # a verdict timed at one float32 precision is not
                model += f" | fp32 {fp32_precision(last.sig.op)}"  # another's (tf32 against full float32)
            slot = model if len(group) == 1 else f"{model} | {_group_key(group)}"
            key = last.sig.key() + "|" + slot
            verdict = verdicts.get(key) or decide.stored(ops.kernel_cache().get(last.sig.key()), slot)
            if verdict is None and defer:
                for m in group:
                    decided.append((m.node_id or m.node.name, None))
                    m.node.target = m.ref
                    if m.node_id:
                        report.settle(m.node_id, m.sig.short(), PENDING)
                changed = True
                continue
            if verdict is None:
                verdict = measure_node(last.node, last.args, last.kwargs, timer, compile_fallback) \
                    if len(group) == 1 else measure_group(group, timer)
                for m in group:  # every member's signature gets its entry (a miss: the plan it ran)
                    _store(m.sig, slot if m is last else None, verdict, target)
            verdicts[key] = verdict
        except Exception as e:
            log.warning("argus: swap-in of %s not measured (%s: %s)", last.node.name, type(e).__name__, e)
            continue
        for m in group:
            if m.node_id:
                report.note(m.node_id, verdict.text())
                if m.at_hints:
                    report.note(m.node_id, AT_HINTS.format(sig=m.sig.short()))
            decided.append((m.node_id or m.node.name, verdict))
            if verdict.winner == "fallback":
                m.node.target = m.ref
                changed = True
                if m.node_id:
                    report.settle(m.node_id, m.sig.short(), f"fallback (swap-in: {verdict.fallback} was faster)")
            elif defer:
                runs_now.append(m.sig)
    if runs_now:  # deferred, but a stored verdict runs these plans at the first call: proved while Inductor compiles
        ops.prove_ahead(runs_now, target)
    if changed:
        gm.graph.lint()
        gm.recompile()
    return decided


__all__ = ["swap_in", "measure_node", "compile_alone", "measures", "measuring_with", "FALLBACKS", "PENDING", "AT_HINTS"]
