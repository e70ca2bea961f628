"""Record the DSL kernel launches of one Argus op call, and replay them on later calls with the same metadata.

A compiled model calls each Argus op with operands of the same shapes, strides and dtypes again and again; only
their addresses change. The op's host function (tile sizes, views, output allocation, binding and grid) works out
the same launches every time, and on a small problem that Python costs more than the kernels run. The first call
of a call site with given operand metadata runs the host function while recording, in order:

* every tensor allocation (torch.empty, empty_strided, new_empty, zeros, ones, full: shape, strides, dtype, fill),
* every copy (clone, a same-device dtype conversion, copy_/zero_/fill_ into an allocation): a weight relayout,
  a permute made contiguous, a mask converted to int8,
* every DSL kernel launch (dsl.runtime.observe_launches): the compiled kernel, its grid, and each argument as a
  constant or as a view (offset, shape, strides) of an operand, an allocation or a copy,
* the result, as such a view.

Later calls re-run those steps on their own operands and launch straight through Triton's launcher (skipping its
binding and specialization, so each operand view's 16-byte alignment is checked against the recorded one before
anything runs; a difference runs the host function). A host function that does anything else on the device (a
torch op that computes, a read of a tensor's value, a write into an operand, a tensor from outside its operands)
is not recorded: it runs in full on every call, as without replay. ARGUS_REPLAY=0 turns replay off.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..dsl.runtime import CompiledKernel, launching, observe_launches

aten = torch.ops.aten
# allocations a host function may make (each a fresh buffer at replay) and the value each fills in (None: none)
_ALLOC: dict[Any, Callable[[tuple, dict], Any]] = {
    aten.empty.memory_format: lambda a, k: None, aten.empty_strided.default: lambda a, k: None,
    aten.new_empty.default: lambda a, k: None, aten.new_empty_strided.default: lambda a, k: None,
    aten.empty_like.default: lambda a, k: None, aten.zeros.default: lambda a, k: 0,
    aten.new_zeros.default: lambda a, k: 0, aten.zeros_like.default: lambda a, k: 0,
    aten.ones.default: lambda a, k: 1, aten.new_ones.default: lambda a, k: 1, aten.ones_like.default: lambda a, k: 1,
    aten.full.default: lambda a, k: a[1], aten.new_full.default: lambda a, k: a[2],
    aten.full_like.default: lambda a, k: a[1]}

# an argument or result: ("const", value) | ("in", operand index, offset, shape, strides) |
# ("buf", allocation index, offset, shape, strides); offsets in elements from the source's own first element
Source = tuple


@dataclass
class Alloc:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    fill: Any                     # the value the allocation was filled with, or None


# copies a host function may make (re-run at replay on the same views): op -> whether it writes its first argument
_COPIES = {aten.clone.default: False, aten._to_copy.default: False, aten.copy_.default: True,
           aten.zero_.default: True, aten.fill_.Scalar: True,
           # Tensor.to as the dispatch mode may see it, before it decomposes: a copy where it converted
           # (returning the tensor itself, it is a view, which the recorder tells apart first)
           aten.to.dtype: False, aten.to.dtype_layout: False,
           # reshape as the dispatch mode may see it: a copy where the view's strides do not allow a view (a
           # permuted weight flattened), a view otherwise (told apart like .to)
           aten.reshape.default: False}
_CONSTANT_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


@dataclass
class Launch:
    kernel: CompiledKernel
    programs: int
    args: list[Source]
    launched: Any                 # Triton's compiled kernel from the recorded launch (None in the interpreter)
    itemsizes: list[int]          # each tensor argument's element size in bytes (0 for a constant)


@dataclass
class Copy:
    func: Any
    args: tuple                   # Sources, as a launch's
    kwargs: dict[str, Any]
    fresh: bool                   # the result is a new buffer (clone, _to_copy), not its first argument


class Recording:
    """The steps of one op call (allocations, copies, launches, in order), replayable on operands of the same
    metadata."""

    def __init__(self, steps: list[Alloc | Copy | Launch], result: Source,
                 alignment: list[tuple[int, int, bool]]) -> None:
        self.steps, self.result = steps, result
        self.alignment = alignment  # (operand, byte offset, 16-byte aligned when recorded) of each launch argument
        self.launches = [s for s in steps if isinstance(s, Launch)]
        self.allocs = [s for s in steps if isinstance(s, Alloc)]
        self.direct = any(ln.launched is not None and ln.kernel.target in ("cuda", "hip") for ln in self.launches)
        # each launch's argument list with its constants in place, and where its tensors go: what a replay fills in
        self._slots = [_slots(ln) for ln in self.launches]

    def replay(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """The op's result on `inputs`; None, before anything runs, where an operand view is aligned differently
        from the recorded call (the caller runs the host function then)."""
        for i, offset, aligned in self.alignment:
            if ((inputs[i].data_ptr() + offset) % 16 == 0) != aligned:
                return None
        bufs: list[torch.Tensor] = []
        stream = None  # no stream: every launch goes through Triton's own path
        if self.direct and _no_launch_hooks():
            stream = _raw_stream(inputs[0].device)
        slots = iter(self._slots)
        for step in self.steps:
            if isinstance(step, Launch):
                template, tensors, pointers = next(slots)
                flat = list(template)
                if stream is not None and pointers is not None:
                    # Triton's launcher takes a device address as an int as it is (a tensor costs it a method
                    # call and a driver query each): the address of each view, without making the view
                    for slot, from_input, idx, byte_offset in pointers:
                        flat[slot] = (inputs if from_input else bufs)[idx].data_ptr() + byte_offset
                else:
                    for slot, src in tensors:
                        flat[slot] = view_of(src, inputs, bufs)
                step.kernel.launch_flat(flat, step.programs, step.launched, stream)
            else:
                run_host_step(step, inputs, bufs)
        return view_of(self.result, inputs, bufs)


def run_host_step(step: Alloc | Copy, inputs: Sequence[torch.Tensor], bufs: list[torch.Tensor],
                  allocate: Callable[[Alloc], torch.Tensor] | None = None) -> None:
    """A recorded allocation (through `allocate`, default _allocate) or copy on `inputs`; what it makes goes on
    `bufs`, where later steps' sources index it."""
    if isinstance(step, Alloc):
        b = (allocate or _allocate)(step)
        bufs.append(b if step.fill is None else b.fill_(step.fill))
        return
    args = [a[1] if a[0] == "const" else view_of(a, inputs, bufs) for a in step.args]
    out = step.func(*args, **step.kwargs)
    if step.fresh:
        bufs.append(out)


def _slots(launch: Launch) -> tuple[list[Any], list[tuple[int, Source]], list[tuple[int, bool, int, int]] | None]:
    """A launch's flat arguments with its constants in place and None for each tensor; each tensor's (slot,
    source); and each tensor's (slot, from an operand, index, byte offset) for launches that take addresses (None
    where the kernel must see tensors: one with descriptor loads picks its variant from their layouts)."""
    template = [a[1] if a[0] == "const" else None for a in launch.args]
    tensors = [(i, a) for i, a in enumerate(launch.args) if a[0] != "const"]
    pointers = None
    if not launch.kernel._described:
        pointers = [(i, a[0] == "in", a[1], a[2] * launch.itemsizes[i]) for i, a in tensors]
    return template, tensors, pointers


@functools.cache
def _knobs() -> Any:
    """triton.knobs (None without it), looked up once: replays ask on every call."""
    try:
        from triton import knobs
    except ImportError:
        return None
    return knobs


def _raw_stream(device: torch.device) -> int:
    """The current stream's handle on `device` (torch's raw getter, as Inductor's launchers use, where it has one)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return get(index) if get is not None else torch.cuda.current_stream(device).cuda_stream


def _no_launch_hooks() -> bool:
    """Triton's launch hooks (its profiler's) see only launches through Triton's own path."""
    knobs = _knobs()
    if knobs is None:
        return False
    return all(h is None or (isinstance(getattr(h, "calls", None), list) and not h.calls)  # triton 3.6: a HookChain
               for h in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _allocate(step: Alloc) -> torch.Tensor:
    """A fresh buffer like the recorded one: through the allocator entry points Inductor's generated code calls
    (about half of torch.empty_strided's cost on the host) where torch has them and the buffer goes to the current
    device, torch.empty_strided otherwise."""
    dev = step.device
    fast = _FAST_EMPTY.get(dev.type)
    if fast is not None and (dev.type == "cpu" or dev.index in (None, torch.cuda.current_device())):
        return fast(step.shape, step.stride, step.dtype)
    return torch.empty_strided(step.shape, step.stride, dtype=step.dtype, device=dev)


_GUARDS = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
_FAST_EMPTY = {kind: f for kind in ("cpu", "cuda") if (f := getattr(_GUARDS, f"_empty_strided_{kind}", None))}


def view_of(src: Source, inputs: Sequence[torch.Tensor], bufs: list[torch.Tensor]) -> torch.Tensor:
    base = inputs[src[1]] if src[0] == "in" else bufs[src[1]]
    off, shape, stride = src[2], src[3], src[4]
    if off == 0 and shape == base.shape and stride == base.stride():
        return base
    return base.as_strided(shape, stride, base.storage_offset() + off)


def _inside(t: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether every element `t` can address lies within the span of `base`'s own elements (same storage)."""
    def span(x: torch.Tensor) -> tuple[int, int]:
        if x.numel() == 0:
            return x.data_ptr(), x.data_ptr()
        lo = x.data_ptr() + sum((n - 1) * st for n, st in zip(x.shape, x.stride()) if st < 0) * x.element_size()
        hi = x.data_ptr() + (1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()) if st > 0)) * \
            x.element_size()
        return lo, hi
    (tlo, thi), (blo, bhi) = span(t), span(base)
    return blo <= tlo and thi <= bhi


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _is_view(func: Any, args: tuple, out: Any) -> bool:
    """Whether `func` did no device work: it mutates nothing and each tensor it returns shares an argument's storage
    (a view, or a reshape/contiguous that did not copy); an op that returns no tensor (promote_types) is metadata."""
    if func._schema.is_mutable:
        return False
    storages = {t.untyped_storage().data_ptr() for t in _tensors(args)}
    return all(t.untyped_storage().data_ptr() in storages for t in _tensors(out))


class _Recorder(TorchDispatchMode):
    """Watches one host-function call: allocations, copies and views pass, anything else marks it unrecordable."""

    def __init__(self, inputs: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.inputs = list(inputs)
        self.steps: list[Alloc | Copy | Launch] = []
        self.buffers: list[torch.Tensor] = []   # what each "buf" Source indexes: allocations and copies, in order
        self.alignment: list[tuple[int, int, bool]] = []
        self.why: str | None = None

    def refuse(self, why: str) -> None:
        """Mark the call unrecordable (a launch this recording cannot see)."""
        if self.why is None:
            self.why = why

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if launching() or self.why is not None:  # the launch's own work (the interpreter copies operands)
            return out
        fill = _ALLOC.get(func)
        if fill is not None:
            value = fill(args, kwargs)
            if not (value is None or type(value) in (int, float, bool)):
                self.why = f"{func} fills with a {type(value).__name__}"
            self.steps.append(Alloc(tuple(out.shape), tuple(out.stride()), out.dtype, out.device, value))
            self.buffers.append(out)
        # a copy that writes, or one that made a new tensor (a .to() that converted nothing is a view, below)
        elif func in _COPIES and (_COPIES[func] or not _is_view(func, args, out)):
            self.copy(func, args, kwargs, out)
        elif not _is_view(func, args, out):
            self.why = f"the host function runs {func}"
        return out

    def copy(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        writes = _COPIES[func]
        srcs: list[Any] = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                src = self.source(a)
                if src is None or (writes and i == 0 and src[0] != "buf"):
                    self.why = f"{func} {'writes' if writes and i == 0 else 'reads'} a tensor that is not " \
                               f"{'an allocation' if writes and i == 0 else 'a view of an operand'}"
                    return
                srcs.append(src)
            elif isinstance(a, _CONSTANT_TYPES) or (isinstance(a, (list, tuple)) and all(type(v) is int for v in a)):
                srcs.append(("const", a))  # a shape (reshape's) is a constant too
            else:
                self.why = f"{func} takes a {type(a).__name__}"
                return
        if any(not isinstance(v, _CONSTANT_TYPES) for v in kwargs.values()):
            self.why = f"{func} takes a keyword argument that is not a constant"
            return
        if not writes and (not isinstance(out, torch.Tensor) or out.device != args[0].device):
            self.why = f"{func} moves a tensor to another device"
            return
        self.steps.append(Copy(func, tuple(srcs), dict(kwargs), not writes))
        if not writes:
            self.buffers.append(out)

    def source(self, t: torch.Tensor) -> Source | None:
        """Where tensor `t` lives: a view of one operand or buffer; None otherwise. Operands may share a storage
        (q, k and v split from one projection): `t` is then that operand itself, or a view inside the elements of
        exactly one of them, which stays right at a replay whose operands do not share one."""
        storage = t.untyped_storage().data_ptr()
        found = [("in", i, x) for i, x in enumerate(self.inputs) if x.untyped_storage().data_ptr() == storage] + \
                [("buf", j, b) for j, b in enumerate(self.buffers) if b.untyped_storage().data_ptr() == storage]
        if len(found) > 1:
            same = [f for f in found if f[2].data_ptr() == t.data_ptr() and f[2].shape == t.shape
                    and f[2].stride() == t.stride()]
            inside = [f for f in found if _inside(t, f[2])]
            found = same[:1] or inside
        if len(found) != 1 or (t.numel() and not storage):
            return None
        kind, idx, base = found[0]
        if t.dtype != base.dtype:  # a reinterpreting view: offsets and strides in another unit than the base's
            return None
        return (kind, idx, t.storage_offset() - base.storage_offset(), tuple(t.shape), tuple(t.stride()))

    def launch(self, kernel: CompiledKernel, flat: list[Any], programs: int, launched: Any) -> None:
        if self.why is not None:
            return
        args: list[Source] = []
        itemsizes: list[int] = []
        for a in flat:
            itemsizes.append(a.element_size() if isinstance(a, torch.Tensor) else 0)
            if isinstance(a, torch.Tensor):
                src = self.source(a)
                if src is None:
                    self.why = f"{kernel.ir.name} takes a tensor that is not a view of an operand"
                    return
                args.append(src)
                if src[0] == "in":
                    base = self.inputs[src[1]]
                    self.alignment.append((src[1], a.data_ptr() - base.data_ptr(), a.data_ptr() % 16 == 0))
            elif a is None or type(a) in (int, float, bool):
                args.append(("const", a))
            else:
                self.why = f"{kernel.ir.name} takes a {type(a).__name__}"
                return
        direct = launched if hasattr(launched, "function") and hasattr(launched, "packed_metadata") else None
        self.steps.append(Launch(kernel, programs, args, direct, itemsizes))


def record(run: Callable[[], Any], inputs: Sequence[torch.Tensor]) -> tuple[Any, Recording | None, str | None]:
    """Run the host function `run` once, recording it: (its result, the recording or None, why not)."""
    rec = _Recorder(inputs)
    with observe_launches(rec.launch, rec.refuse), rec:
        out = run()
    if rec.why is None and not isinstance(out, torch.Tensor):
        rec.why = f"the host function returns a {type(out).__name__}"
    if rec.why is None and out.numel() == 0:  # no storage: an empty operand of its shape would pass for it
        rec.why = "the result is empty"
    result = rec.source(out) if rec.why is None else None
    if rec.why is None and result is None:
        rec.why = "the result is not a view of an operand or allocation"
    if rec.why is not None:
        return out, None, rec.why
    return out, Recording(rec.steps, result, rec.alignment), None
