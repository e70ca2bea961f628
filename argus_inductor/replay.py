"""Record the DSL kernel launches of one Argus op call, and replay them on later calls with the same metadata.

A compiled model calls each Argus op with operands of the same shapes, strides and dtypes again and again; only
their addresses change. The op's host function (tile sizes, views, output allocation, binding and grid) works out
the same launches every time, and on a small problem that Python costs more than the kernels run. The first call
of a call site with given operand metadata runs the host function while recording:

* every tensor allocation (torch.empty, empty_strided, new_empty, zeros: shape, strides, dtype, zero fill),
* every DSL kernel launch (dsl.runtime.observe_launches): the compiled kernel, its grid, and each argument as a
  constant or as a view (offset, shape, strides) of an operand or of an allocation,
* the result, as such a view.

Later calls re-create the allocations, rebuild the views of their own operands and launch straight through
Triton's launcher (skipping its binding and specialization, so each pointer's 16-byte alignment is checked
against the recorded one; a difference runs the host function). A host function that does anything else on the
device (a torch op that computes, a read of a tensor's value, a tensor from outside its operands) is not
recorded: it runs in full on every call, as without replay. ARGUS_REPLAY=0 turns replay off.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .dsl.runtime import CompiledKernel, launching, observe_launches

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
class _Alloc:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    fill: Any                     # the value the allocation was filled with, or None


@dataclass
class _Launch:
    kernel: CompiledKernel
    programs: int
    args: list[Source]
    launched: Any                 # Triton's compiled kernel from the recorded launch (None in the interpreter)
    aligned: tuple[bool, ...]     # per tensor argument: its address was 16-byte aligned when recorded


class Recording:
    """The launches of one op call, replayable on operands of the same metadata."""

    def __init__(self, allocs: list[_Alloc], launches: list[_Launch], result: Source) -> None:
        self.allocs, self.launches, self.result = allocs, launches, result
        self.direct = any(ln.launched is not None and ln.kernel.target in ("cuda", "hip") for ln in launches)

    def replay(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """The op's result on `inputs`; None where an address is aligned differently from the recorded call (the
        caller runs the host function then)."""
        bufs = []
        for a in self.allocs:
            b = torch.empty_strided(a.shape, a.stride, dtype=a.dtype, device=a.device)
            bufs.append(b if a.fill is None else b.fill_(a.fill))
        stream = None  # no stream: every launch goes through Triton's own path
        if self.direct and _no_launch_hooks():
            stream = _raw_stream(inputs[0].device)
        for ln in self.launches:
            flat = []
            i = 0
            for src in ln.args:
                if src[0] == "const":
                    flat.append(src[1])
                    continue
                t = _view(src, inputs, bufs)
                if (t.data_ptr() % 16 == 0) != ln.aligned[i]:
                    return None
                i += 1
                flat.append(t)
            ln.kernel.launch_flat(flat, ln.programs, ln.launched, stream)
        return _view(self.result, inputs, bufs)


def _raw_stream(device: torch.device) -> int:
    """The current stream's handle on `device` (torch's raw getter, as Inductor's launchers use, where it has one)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return get(index) if get is not None else torch.cuda.current_stream(device).cuda_stream


def _no_launch_hooks() -> bool:
    """Triton's launch hooks (its profiler's) see only launches through Triton's own path."""
    try:
        from triton import knobs
    except ImportError:
        return False
    return all(h is None or (isinstance(getattr(h, "calls", None), list) and not h.calls)  # triton 3.6: a HookChain
               for h in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _view(src: Source, inputs: Sequence[torch.Tensor], bufs: list[torch.Tensor]) -> torch.Tensor:
    base = inputs[src[1]] if src[0] == "in" else bufs[src[1]]
    off, shape, stride = src[2], src[3], src[4]
    if off == 0 and shape == base.shape and stride == base.stride():
        return base
    return base.as_strided(shape, stride, base.storage_offset() + off)


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
    """Watches one host-function call: allocations and views pass, anything else marks it unrecordable."""

    def __init__(self, inputs: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.inputs = list(inputs)
        self.allocs: list[_Alloc] = []
        self.buffers: list[torch.Tensor] = []
        self.launches: list[_Launch] = []
        self.why: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if launching():  # the launch's own work (the interpreter copies operands): not the host function's
            return out
        fill = _ALLOC.get(func)
        if fill is not None:
            value = fill(args, kwargs)
            if not (value is None or type(value) in (int, float, bool)):
                self.why = self.why or f"{func} fills with a {type(value).__name__}"
            self.allocs.append(_Alloc(tuple(out.shape), tuple(out.stride()), out.dtype, out.device, value))
            self.buffers.append(out)
        elif self.why is None and not _is_view(func, args, out):
            self.why = f"the host function runs {func}"
        return out

    def source(self, t: torch.Tensor) -> Source | None:
        """Where tensor `t` lives: a view of exactly one operand or allocation; None otherwise."""
        storage = t.untyped_storage().data_ptr()
        found = [("in", i, x) for i, x in enumerate(self.inputs) if x.untyped_storage().data_ptr() == storage] + \
                [("buf", j, b) for j, b in enumerate(self.buffers) if b.untyped_storage().data_ptr() == storage]
        if len(found) != 1 or (t.numel() and not storage):
            return None
        kind, idx, base = found[0]
        return (kind, idx, t.storage_offset() - base.storage_offset(), tuple(t.shape), tuple(t.stride()))

    def launch(self, kernel: CompiledKernel, flat: list[Any], programs: int, launched: Any) -> None:
        args: list[Source] = []
        aligned = []
        for a in flat:
            if isinstance(a, torch.Tensor):
                src = self.source(a)
                if src is None:
                    self.why = self.why or f"{kernel.ir.name} takes a tensor that is not a view of an operand"
                    return
                args.append(src)
                aligned.append(a.data_ptr() % 16 == 0)
            elif a is None or type(a) in (int, float, bool):
                args.append(("const", a))
            else:
                self.why = self.why or f"{kernel.ir.name} takes a {type(a).__name__}"
                return
        direct = launched if hasattr(launched, "function") and hasattr(launched, "packed_metadata") else None
        self.launches.append(_Launch(kernel, programs, args, direct, tuple(aligned)))


def record(run: Callable[[], Any], inputs: Sequence[torch.Tensor]) -> tuple[Any, Recording | None, str | None]:
    """Run the host function `run` once, recording it: (its result, the recording or None, why not)."""
    rec = _Recorder(inputs)
    with observe_launches(rec.launch), rec:
        out = run()
    if rec.why is None and not isinstance(out, torch.Tensor):
        rec.why = f"the host function returns a {type(out).__name__}"
    result = rec.source(out) if rec.why is None else None
    if rec.why is None and result is None:
        rec.why = "the result is not a view of an operand or allocation"
    if rec.why is not None:
        return out, None, rec.why
    return out, Recording(rec.allocs, rec.launches, result), None
