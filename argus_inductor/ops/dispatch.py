"""Running one op call (run_op): its signature, its plan or the aten fallback, the launch (recorded on a call
site's first call, replayed after: runtime/replay.py), and the report entry; and the helpers the op families'
host functions share.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from ..dsl import Policy
from ..kernels.gemm import split_operands
from ..runtime import checks
from ..runtime import reporting as _report
from ..runtime.signature import Signature, device_arch
from .core import DTYPES, FORGET, LOCK, Plan, active_options, kernel_cache, say_once, target_for
from .plans import forget_plan, plan_for, refusal

log = logging.getLogger("argus_inductor")

# --------------------------------------------------------------------------------------------------
# Running one op call

_SIG_MEMO: dict[tuple, Signature] = {}
# call site + operand metadata -> (signature, its short name, plan, target, fallback reason); its FLOPs. Dropped
# with the plans.
_RESOLVED: dict[tuple, tuple[Signature, str, Plan | None, str | None, str | None]] = {}
_FLOPS: dict[tuple, int] = {}
# call site + operand metadata -> the recorded launches of its plan (argus_inductor.runtime.replay), or None where the
# host function cannot be replayed. Dropped with the plans.
_REPLAYS: dict[tuple, Any] = {}
# call site + operand metadata -> what a call needs where its plan's launches replay: (recording, report name,
# kernel source, FLOPs). The hot path of run_op. Dropped with the plans.
_HOT: dict[tuple, tuple[Any, str, str, int]] = {}
# while argus_inductor.graph.inline records an op call: each launch recording made, (recording or None, why not,
# the tensors it replays on); calls neither replay nor reuse a recording then
_CAPTURED: list[tuple[Any, str | None, list[Tensor]]] | None = None


@contextlib.contextmanager
def capturing_recordings() -> Iterator[list[tuple[Any, str | None, list[Tensor]]]]:
    """Within it, every op call that runs a plan records its launches afresh (argus_inductor.runtime.replay) and lists
    the recording in the list it yields."""
    global _CAPTURED
    outer, _CAPTURED = _CAPTURED, []
    try:
        yield _CAPTURED
    finally:
        _CAPTURED = outer


def _forget_calls() -> None:
    """Drop the per-call-site memos together: resolved plans, FLOPs and recorded launches."""
    _RESOLVED.clear()
    _FLOPS.clear()
    _REPLAYS.clear()
    _HOT.clear()


FORGET.append(_forget_calls)


def _memo_sig(parts: tuple, make: Callable[[], Signature]) -> Signature:
    s = _SIG_MEMO.get(parts)
    if s is None:
        s = make()
        if len(_SIG_MEMO) > 4096:
            _SIG_MEMO.clear()
        _SIG_MEMO[parts] = s
    return s


def tensor_key(t: Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device)


_UNREPORTED = threading.local()  # .on: calls made to be timed (the measured swap-in), not the model's


@contextlib.contextmanager
def unreported() -> Iterator[None]:
    """Inside: op calls run as usual but are not recorded in the report (the swap-in's timing runs)."""
    prev = getattr(_UNREPORTED, "on", False)
    _UNREPORTED.on = True
    try:
        yield
    finally:
        _UNREPORTED.on = prev


def unreported_now() -> bool:
    return getattr(_UNREPORTED, "on", False)


_RECORDING = threading.local()  # .seen: the signatures of the Argus op calls made inside recording_signatures()


class SignatureRecorded(Exception):
    """Raised by an Argus op's host function inside recording_signatures() once its signature is recorded."""


@contextlib.contextmanager
def recording_signatures() -> Iterator[list[Signature]]:
    """Inside: an Argus op's host function appends its call's signature to the yielded list and raises
    SignatureRecorded instead of planning and launching (no cache, no report): how `argus warmup --config` learns
    the signatures of a model from its traced graph's fake values (agent/trace.py)."""
    prev = getattr(_RECORDING, "seen", None)
    _RECORDING.seen = seen = []
    try:
        yield seen
    finally:
        _RECORDING.seen = prev


def run_op(node_id: str, sig_fn: Callable[[], Signature], kernel_fn: Callable[[Plan, str], Tensor],
           fallback_fn: Callable[[], Tensor], tensors: list[Tensor], memo: tuple = (),
           flops: int | Callable[[Tensor], int] = 0, inputs: list[Tensor] | None = None,
           key: tuple | None = None) -> Tensor:
    """One call of an Argus op: its signature, its plan (or the aten fallback), the launch, and the report entry
    (source, time, and the call's FLOPs as FlopCounterMode counts them: a number, or a function of the output).
    `inputs`: every tensor the host function reads (default `tensors`), for replaying its launches; `memo` and
    the metadata of `tensors` must decide everything else the host function does. `key`: call_key(node_id, memo,
    tensors), where the caller has it already."""
    if key is None:
        key = call_key(node_id, memo, tensors)
        out = replay_hot(key, node_id, tensors, tensors if inputs is None else inputs)
        if out is not None:
            return out
    seen = getattr(_RECORDING, "seen", None)
    if seen is not None:  # recording_signatures(): the call's signature, nothing run
        seen.append(_memo_sig(key, sig_fn))
        raise SignatureRecorded(node_id)
    hit = _RESOLVED.get(key)  # this call site with these shapes was resolved before
    first = hit is None
    if hit is not None:
        sig, short, plan, target, reason = hit
    else:  # a call site met for the first time (a graph's node ids are its own: a traced one's are fresh)
        sig = _memo_sig(key, sig_fn)
        target = target_for(tensors[0].device)
        reason = None
        plan = None
        if target is None:
            reason = f"fallback (no Argus target for {device_arch(tensors[0].device)})"
        elif any(t.dtype not in DTYPES for t in tensors):
            reason = f"fallback (dtype {next(t.dtype for t in tensors if t.dtype not in DTYPES)} not supported)"
        else:
            plan = plan_for(sig, target, {"reference": fallback_fn, "tensors": tensors, "run": kernel_fn})
            if plan is None:
                refused = refusal(sig)
                reason = f"fallback ({refused})" if refused else "fallback (cache miss, ARGUS_ON_MISS=fallback)"
        with LOCK:
            if len(_RESOLVED) > 4096:
                _forget_calls()
            short = sig.short()  # the report's name for it, worked out once
            _RESOLVED[key] = (sig, short, plan, target, reason)
    t0 = _clock_start(tensors[0])
    out = None
    ran = False  # the plan's kernels ran (not the aten op)
    if plan is not None:
        try:
            out = _launch(key, plan, target, kernel_fn, tensors if inputs is None else inputs)  # type: ignore
            source = plan.label()
            ran = True
            if first and plan.source == "cache" and not _capturing(tensors[0]):
                why = _first_use_failure(out, fallback_fn)
                if why:  # the cache is not believed: a plan that disagrees with torch is set aside, never used
                    kernel_cache().set_aside(sig.key(), f"disagrees with the reference at its first use ({why})")
                    reason = "fallback (the cached kernel failed its first-use test)"
                    with LOCK:
                        _RESOLVED[key] = (sig, short, None, target, reason)
                        _REPLAYS.pop(key, None)
                    if _CAPTURED:  # inline recorded the plan's launches: they must not be inlined
                        _CAPTURED.pop()
                    forget_plan(sig)
                    out, ran, plan = None, False, None
        except Exception as e:
            say_once(f"argus: the {plan.source} kernel for {sig.short()} failed ({type(e).__name__}: {e}); "
                      "using the aten op")
            reason = f"fallback (kernel failed: {type(e).__name__})"
    if out is None:
        out = fallback_fn()
        source = reason or "fallback"
    ms = _clock_ms(tensors[0], t0)
    if callable(flops):
        n = _FLOPS.get(key)
        if n is None:
            n = _FLOPS[key] = flops(out)
    else:
        n = flops
    if not unreported_now():
        _report.record_call(node_id, short, source, ms, plan.notes if plan is not None else None, n)
    rec = _REPLAYS.get(key)
    if ran and rec is not None and rec.result[0] == "buf":
        with LOCK:
            _HOT[key] = (rec, short, source, n)
    return out


def call_key(node_id: str, memo: tuple, tensors: list[Tensor]) -> tuple:
    """What identifies a call of an op at a call site: the site, the memo, the metadata of `tensors`."""
    return (node_id, *memo, *(tensor_key(t) for t in tensors))


def replay_hot(key: tuple, node_id: str, tensors: list[Tensor], inputs: list[Tensor]) -> Tensor | None:
    """A call of a call site whose plan's launches replay into a fresh output: the replay and the report entry,
    nothing else. None where the call site has no such recording, or it cannot replay this call (an operand
    aligned differently, replay turned off, a launch that raised): the caller goes the full way (run_op), which
    says what went wrong."""
    hot = _HOT.get(key)
    if hot is None or not active_options().replay or _CAPTURED is not None or getattr(_RECORDING, "seen", None) \
            is not None:
        return None
    rec, short, source, flops = hot
    t0 = _clock_start(tensors[0])
    try:
        out = rec.replay(inputs)
    except Exception:
        return None
    if out is None:
        return None
    if not unreported_now():
        _report.record_call(node_id, short, source, _clock_ms(tensors[0], t0), None, flops)
    return out


def _capturing(t: Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _first_use_failure(out: Any, fallback_fn: Callable[[], Tensor]) -> str:
    """Why a cached plan's first output is not the reference's ("" where it agrees): the reference computed on the
    same operands, compared as every candidate is (runtime/checks.py)."""
    ref = fallback_fn()
    if not isinstance(out, Tensor) or not isinstance(ref, Tensor):
        return ""
    ok, why = checks.agrees(out, ref, checks.tolerance(ref))
    return "" if ok else why


def _clock_start(t: Tensor) -> float | None:
    """The start of a call's report time, or None where it is not timed: a host clock costs nothing on the CPU;
    on a GPU (a synchronization each side) only when reporting, and never inside a graph capture."""
    if t.is_cuda and not (active_options().report and not torch.cuda.is_current_stream_capturing()):
        return None
    if t.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def _clock_ms(t: Tensor, t0: float | None) -> float | None:
    """Milliseconds since _clock_start's `t0` (None where the call was not timed)."""
    if t0 is None:
        return None
    if t.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _launch(key: tuple, plan: Plan, target: str, kernel_fn: Callable[[Plan, str], Tensor],
            inputs: list[Tensor]) -> Tensor:
    """The plan's host function on this call's operands: replayed from its recorded launches where this call site
    with this metadata was recorded before, recorded now on its first call (argus_inductor.runtime.replay)."""
    capturing = _CAPTURED is not None  # argus_inductor.graph.inline records afresh and keeps the recording itself
    if not capturing and not active_options().replay:
        return kernel_fn(plan, target)
    rec = False if capturing else _REPLAYS.get(key, False)
    if rec is False:
        from ..runtime.replay import record

        out, rec, why = record(lambda: kernel_fn(plan, target), inputs)
        if capturing:
            _CAPTURED.append((rec, why, list(inputs)))
            return out
        if why is not None:
            log.debug("argus: no replay for %s: %s", key[0], why)
        with LOCK:
            _REPLAYS[key] = rec
        return out
    if rec is not None:
        out = rec.replay(inputs)
        if out is not None:
            return out
    return kernel_fn(plan, target)


def meta_key(t: Tensor | None) -> tuple | None:
    """An optional operand's part of a call key: its metadata, or None where it is absent."""
    return None if t is None else tensor_key(t)


def present(*ts: Tensor | None) -> list[Tensor]:
    """The operands a call's host function reads (what its replay takes), the absent ones left out."""
    return [t for t in ts if t is not None]


def epilogue_of(*parts: str) -> str:
    return "+".join(p for p in parts if p and p != "none")


def dummy(t: Tensor) -> Tensor:
    return t.new_empty(1)


def presplit_operands(plan: Plan, target: str, a: Tensor, *bs: Tensor) -> tuple[Tensor, ...]:
    """A (.., M, K) and each B (.., K, N) as the plan's mma kernel takes them: unchanged, or where the plan runs
    three-pass tf32 on pre-split operands (kernels.gemm.split_operands)."""
    if "tf32_split" not in plan.policies:
        return (a, *bs)
    return split_operands(a, *bs, policy=plan.policies["tf32_split"], target=target,
                          kernel_fn=plan.kernels["tf32_split"])


_GLUON_LOWERINGS = {"attention_fwd": "TMA loader warp, two wgmma consumer warp groups",
                    "gemm_epilogue": "TMA loader warp, wgmma consumer warp groups, one tile a program",
                    "moe_gate_up": "TMA loader warp, wgmma consumer warp groups, gate and up tiles a slot"}


def lowering_note(name: str, policy: Policy, *operands: Any) -> str:
    """Which lowering a warp-specialized plan's call of kernel `name` takes, for the report (`operands`: what the
    lowering's `declines` takes after the policy)."""
    from ..hopper import lowering_for

    gluon = lowering_for(name)
    why = "no Gluon in this Triton" if gluon is None else gluon.declines(policy, *operands)
    return (f"{name}: the Gluon lowering ({_GLUON_LOWERINGS[name]})" if why is None
            else f"{name}: the Triton lowering at the Triton template (the Gluon kernel declines: {why})")


