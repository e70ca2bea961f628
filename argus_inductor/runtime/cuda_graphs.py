"""CUDA graphs for Argus-compiled graphs, replayed with less host work per call than Inductor's trees.

Inductor wraps a compiled graph in its CUDA-graph trees: per call they check the tree's invariants, copy the inputs,
replay, rebuild each output as a tensor over the graph's memory and mark the previous outputs as overwritten. On the
H100 that took 0.11-0.18 ms of host time from entering the wrapper to the graph's launch (Llama prefill 8x512,
benchmarks/host_probe.py --split), and a prefill call's latency counts every microsecond of host time before the
launch. `GraphReplay` takes the trees' place (0.07 ms there) where its simpler model holds; the backend installs it
(`replacing_trees`) while Inductor compiles an Argus graph:

* one CUDA graph per key: the integer and float inputs (the dynamic sizes) and the values of CPU scalar inputs (a
  graph bakes in a scalar the host read at capture);
* a key's first call runs the compiled code on the caller's inputs (the warm-up: lazy initialization, autotuning)
  and returns its outputs; the second captures (which runs nothing) and replays, so every call runs the graph's
  work once (an input mutation, a KV-cache write say, is applied once per call, as without graphs);
* per replay: the static inputs (parameters, buffers, static-address tensors) must be where they were at capture
  (one that moved is captured again), the other CUDA inputs are copied into the graph's buffers (small ones, a
  decode step's ids and positions, in one launch: PackedCopy; others in one foreach copy);
* an output is returned as a view of the graph's own output buffer, and a graph is replayed only while nothing
  outside holds its outputs (their storages' use counts are what they were at capture): where the caller still
  holds the last call's output (a generation loop's previous logits, say), the key captures a second graph with
  outputs of its own, and where both are held, a third whose outputs are returned as fresh copies. So an output
  kept across calls is never overwritten by a later replay (the trees instead make reading such an output an
  error), and a decode loop that drops each step's logits pays no copy (a 1.7 us copy of Llama's 128256 logits
  and about 30 us of host time a step on the H100).

It hands the graph to Inductor's own wrapper for good where that model does not hold: an input the graph mutates
that is not static (or not 16-byte aligned), a CPU tensor input of more than one element, an input that is neither
a tensor nor a number, an input on another device, an output that aliases a copied input or another output, a
capture that fails (a host sync), static inputs that keep moving, or a graph Inductor split into several
partitions. ARGUS_GRAPH_REPLAY=0 leaves every graph to the trees.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

log = logging.getLogger("argus_inductor")
ALIGN = 16
RECORDS_PER_KEY = 4  # a key whose static inputs keep moving is handed to Inductor's wrapper after this many
# what every GraphReplay in this process did: graphs captured, replays, wrappers handed to Inductor's trees
counters = {"captured": 0, "replayed": 0, "declined": 0}
reasons: dict[str, int] = {}  # why wrappers were handed to the trees, and how many for each reason


def summary() -> str:
    """One line for argus_inductor.report(): what the replays did in this process ("" when nothing)."""
    if not any(counters.values()):
        return ""
    why = "; ".join(f"{n}x {r}" for r, n in reasons.items())
    return (f"CUDA graphs: {counters['captured']} captured, {counters['replayed']} replays, "
            f"{counters['declined']} handed to Inductor's trees" + (f" ({why})" if why else ""))


_POOLS = threading.local()


def _pool(device: torch.device) -> Any:
    """The memory pool every graph of this thread on `device` captures into. Sharing is safe because replays
    of one thread run one after another on one stream and a graph's outputs stay allocated to it (its _Slot holds
    them): a graph's intermediates, which the next graph's may overlap, are dead once its replay ends."""
    pools = getattr(_POOLS, "pools", None)
    if pools is None:
        pools = _POOLS.pools = {}
    if device not in pools:
        pools[device] = torch.cuda.graph_pool_handle()
    return pools[device]


class Declined(Exception):
    """The graph does not fit GraphReplay's model; the reason is the message."""


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % ALIGN == 0


def _dense_view(t: torch.Tensor) -> torch.Tensor:
    """`t` with every expanded (stride-0) dim narrowed to one element: what a copy into its buffer must write."""
    for d, (size, stride) in enumerate(zip(t.shape, t.stride())):
        if stride == 0 and size > 1:
            t = t.narrow(d, 0, 1)
    return t


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


PACK_MAX_BYTES = 1 << 16  # inputs up to this size in all are copied in one launch (a decode step's ids, positions)


class PackedCopy:
    """Small contiguous inputs copied into their buffers with one launch. A replay's input copy was one
    cudaMemcpyAsync per input (a decode step's token ids, cache positions and position ids: three copies of 8
    bytes, each about 1.2 us of GPU time and a gap of as much after it, between one step's graph and the next).
    The buffers are slices of one byte tensor at 16-byte offsets, and one `torch.cat` of the sources' bytes (with
    zero pads between them) fills it. Where every input has one dtype (a decode step's int64 ids and positions),
    the cat takes the sources flattened in that dtype, with pads of it: the host's part of the copy was 57 us on the
    H100's host with a reshape and a byte view a source before the cat (host_probe.py --split), the first step's
    latency before its replay."""

    def __init__(self, like: Sequence[torch.Tensor]) -> None:
        total = 0
        spans, pads = [], []
        for t in like:
            size = t.numel() * t.element_size()
            spans.append((total, size))
            pads.append(-size % ALIGN)  # zero bytes up to the next buffer's 16-byte offset
            total += size + pads[-1]
        self.packed = torch.zeros(total, dtype=torch.uint8, device=like[0].device)
        self.buffers = [self.packed[o:o + n].view(t.dtype).view(t.shape) for (o, n), t in zip(spans, like)]
        self.pads = [self.packed.new_zeros(p) if p else None for p in pads]
        dtypes = {t.dtype for t in like}
        # one dtype: the packed bytes as that dtype and the pads in its elements (an element divides 16 bytes)
        self.dtype = dtypes.pop() if len(dtypes) == 1 and ALIGN % like[0].element_size() == 0 else None
        if self.dtype is not None:
            size = like[0].element_size()
            self.typed = self.packed.view(self.dtype)
            self.typed_pads = [self.typed.new_zeros(p // size) if p else None for p in pads]

    @staticmethod
    def fits(tensors: Sequence[torch.Tensor]) -> bool:
        """Whether PackedCopy takes these: more than one, all contiguous, on one device, PACK_MAX_BYTES in all."""
        return (len(tensors) > 1 and all(t.is_contiguous() for t in tensors)
                and len({t.device for t in tensors}) == 1
                and sum(t.numel() * t.element_size() for t in tensors) <= PACK_MAX_BYTES)

    def copy(self, sources: Sequence[torch.Tensor]) -> None:
        """Fill the buffers from `sources` (the buffers' shapes and dtypes): one launch where every source is
        contiguous, else a copy each."""
        if not all([s.is_contiguous() for s in sources]):
            torch._foreach_copy_(self.buffers, list(sources))
            return
        parts = []
        if self.dtype is not None:  # the sources have the buffers' dtypes (Dynamo guards the graph's inputs on them)
            for src, pad in zip(sources, self.typed_pads):
                parts.append(src if src.dim() == 1 else src.view(-1))
                if pad is not None:
                    parts.append(pad)
            torch.cat(parts, out=self.typed)
            return
        for src, pad in zip(sources, self.pads):
            parts.append(src.reshape(-1).view(torch.uint8))
            if pad is not None:
                parts.append(pad)
        torch.cat(parts, out=self.packed)


SHARED_SLOTS = 2  # graphs a key returns its output buffers from; where all are held, one more returns copies


def _uses(t: torch.Tensor) -> int:
    """The use count of t's storage: one more for each tensor (a view too) that shares it."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class _Slot:
    """One captured graph of a key and the outputs it writes. `shared`: its outputs are returned as views (so it
    replays only while nothing outside holds them), else as fresh copies."""

    def __init__(self, graph: torch.cuda.CUDAGraph, outputs: Sequence[Any], fresh: Sequence[bool],
                 shared: bool) -> None:
        self.graph = graph
        self.outputs = outputs
        self.shared = shared
        mine = [o for o, f in zip(outputs, fresh) if f]
        self.ptrs = [o.data_ptr() for o in mine]  # where the graph writes them
        self.uses = [_uses(o) for o in mine]     # their storages' use counts with nobody else holding them
        self._mine = mine

    def free(self) -> bool:
        """Whether a replay may write this slot's outputs: no view of them is held outside and none was moved
        (a caller's resize_ of a returned view gives the storage new memory, which the graph does not write)."""
        return all(_uses(o) == n and o.data_ptr() == p for o, n, p in zip(self._mine, self.uses, self.ptrs))


class _Recorded:
    """One key's graphs: its input list, the captured graphs (slots) and the outputs they write."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []
        self.copied: list[int] = []           # positions of the CUDA inputs copied into a buffer per call
        self.buffers: list[torch.Tensor] = []  # their buffers (an expanded dim narrowed to one element)
        self.static: list[int] = []           # positions of the static inputs read in place
        self.static_ptrs: list[int] = []      # and their addresses at capture
        self.slots: list[_Slot] = []          # SHARED_SLOTS shared slots at most, then one of copies
        self.fresh: list[bool] = []           # per output: the graph's own (False: a static input's view)
        self.expanded = False                 # a copied input has an expanded (stride-0) dim
        self.packed: PackedCopy | None = None  # the buffers as slices of one tensor, filled in one launch
        self.records = 0


class GraphReplay:
    """The replaying wrapper of one compiled graph (Inductor's boxed calling convention: a list of inputs, which
    the call clears). `fallback` makes Inductor's own wrapper, taken over for good when this one declines."""

    def __init__(self, model: Callable[[list[Any]], Any], static_input_idxs: Sequence[int],
                 mutated_input_idxs: Sequence[int], device_index: int,
                 fallback: Callable[[], Callable[[list[Any]], Any]]) -> None:
        self.model = model
        self.static = frozenset(static_input_idxs)
        self.mutated = frozenset(mutated_input_idxs)
        self.device = torch.device("cuda", device_index)
        self._make_fallback = fallback
        self.fallback: Callable[[list[Any]], Any] | None = None
        self.declined = ""
        self.numbers: list[int] = []   # positions of the integer and float inputs (the key)
        self.scalars: list[int] = []   # positions of the CPU scalar tensors (their values: the key too)
        self.local = threading.local()  # graphs per thread, as Inductor's wrapper keeps them
        if self.mutated - self.static:
            self._decline("it mutates an input that is not static")

    # ------------------------------------------------------------------------------------------------ calls

    def __call__(self, inputs: list[Any]) -> Any:
        if self.fallback is not None:
            return self.fallback(inputs)
        table: dict[tuple, _Recorded] | None = getattr(self.local, "table", None)
        if table is None:
            try:
                table = self._table(inputs)
            except Declined as e:
                self._decline(str(e))
                return self.fallback(inputs)  # type: ignore[misc]
        key = tuple([inputs[i] for i in self.numbers] + [inputs[i].item() for i in self.scalars])
        rec = table.get(key)
        if rec is None:
            table[key] = _Recorded()
            return self._warm_up(inputs)
        if not rec.slots or [inputs[i].data_ptr() for i in rec.static] != rec.static_ptrs:
            if rec.records >= RECORDS_PER_KEY:
                self._decline(f"its static inputs moved {rec.records} times")
                return self.fallback(inputs)  # type: ignore[misc]
            try:
                self._buffers(rec, inputs)
                rec.records += 1
                rec.slots = []
                self._capture(rec, shared=True)
            except Declined as e:
                self._decline(str(e))
                return self.fallback(inputs)  # type: ignore[misc]
        slot = next((s for s in rec.slots if not s.shared or s.free()), None)
        if slot is None:  # every slot's outputs are held by the caller: a graph with outputs of its own
            try:
                slot = self._capture(rec, shared=len(rec.slots) < SHARED_SLOTS)
            except Declined as e:
                self._decline(str(e))
                return self.fallback(inputs)  # type: ignore[misc]
        return self._replay(rec, slot, inputs)

    def _table(self, inputs: list[Any]) -> dict[tuple, _Recorded]:
        """Sort the input positions by kind (the same at every call of one compiled graph)."""
        self.numbers, self.scalars = [], []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                if x.device.type == "cpu":
                    if x.numel() != 1:
                        raise Declined(f"input {i} is a CPU tensor of {x.numel()} elements")
                    self.scalars.append(i)
                elif x.device != self.device:
                    raise Declined(f"input {i} is on {x.device}, the graph on {self.device}")
            elif isinstance(x, (int, float)) and not isinstance(x, bool):
                self.numbers.append(i)
            else:
                raise Declined(f"input {i} is a {type(x).__name__}")
        self.local.table = {}
        return self.local.table

    def _decline(self, why: str) -> None:
        if not self.declined:
            self.declined = why
            counters["declined"] += 1
            if len(reasons) < 16 or why in reasons:
                reasons[why] = reasons.get(why, 0) + 1
            log.info("argus: CUDA graph replayed by Inductor's wrapper: %s", why)
        self.local = threading.local()
        self.fallback = self._make_fallback()

    # ------------------------------------------------------------------------------------- record and replay

    def _buffers(self, rec: _Recorded, inputs: list[Any]) -> None:
        """The key's input list: static inputs themselves, a fresh aligned buffer for every other tensor (a CPU
        scalar's buffer is filled here once: its value is part of the key)."""
        rec.inputs, rec.copied, rec.buffers, rec.static, rec.static_ptrs = [], [], [], [], []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.device.type == "cuda" and i in self.static and _aligned(x):
                rec.inputs.append(x)
                rec.static.append(i)
                rec.static_ptrs.append(x.data_ptr())
            elif isinstance(x, torch.Tensor):
                if i in self.mutated:
                    raise Declined(f"it mutates input {i}, which is not 16-byte aligned")
                if x.device.type == "cuda":  # filled by each replay (the capture runs nothing); buffer below
                    rec.inputs.append(None)
                    rec.copied.append(i)
                    rec.expanded = rec.expanded or 0 in x.stride()
                else:
                    buf = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                    _dense_view(buf).copy_(_dense_view(x))
                    rec.inputs.append(buf)
            else:
                rec.inputs.append(x)
        copied = [inputs[i] for i in rec.copied]
        rec.packed = PackedCopy(copied) if not rec.expanded and PackedCopy.fits(copied) else None
        for j, (i, x) in enumerate(zip(rec.copied, copied)):
            buf = rec.packed.buffers[j] if rec.packed is not None else \
                torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
            rec.inputs[i] = buf
            rec.buffers.append(_dense_view(buf))

    def _warm_up(self, inputs: list[Any]) -> Any:
        """Run the compiled code on the caller's inputs (a misaligned one copied: the code assumes 16 bytes)."""
        args = []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.device.type == "cuda" and not _aligned(x):
                if i in self.mutated:
                    self._decline(f"it mutates input {i}, which is not 16-byte aligned")
                    return self.fallback(inputs)  # type: ignore[misc]
                x = _fresh_copy(x)
            args.append(x)
        inputs.clear()
        return self.model(args)

    def _capture(self, rec: _Recorded, shared: bool) -> _Slot:
        """Capture the key's graph on its buffers (a slot of its own outputs) and add it to rec.slots."""
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.graph(graph, pool=_pool(self.device), stream=stream, capture_error_mode="thread_local"):
                outputs = self.model(list(rec.inputs))
        except Exception as e:  # a host sync, a CPU op: Inductor's wrapper knows what to do with those
            torch.cuda.synchronize(self.device)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise Declined(f"capture failed ({type(e).__name__}: {first})") from e
        torch.cuda.current_stream(self.device).wait_stream(stream)
        outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        copied = {_storage_ptr(rec.inputs[i]) for i in rec.copied}
        static = {_storage_ptr(rec.inputs[i]) for i in rec.static}
        seen: set[int] = set()
        fresh = []
        for j, o in enumerate(outs):
            if not isinstance(o, torch.Tensor):
                fresh.append(False)
                continue
            if o.device.type != "cuda":
                raise Declined(f"output {j} is on {o.device}")
            ptr = _storage_ptr(o)
            if ptr in copied:
                raise Declined(f"output {j} aliases a copied input")
            if ptr in static:
                fresh.append(False)  # a static input's own memory: the caller's tensor, returned as it is
                continue
            if ptr in seen:
                raise Declined(f"output {j} aliases another output")
            seen.add(ptr)
            fresh.append(True)
        del outputs
        rec.fresh = fresh
        slot = _Slot(graph, outs, fresh, shared)
        rec.slots.append(slot)
        counters["captured"] += 1
        return slot

    def _replay(self, rec: _Recorded, slot: _Slot, inputs: list[Any]) -> list[Any]:
        if rec.packed is not None:
            rec.packed.copy([inputs[i] for i in rec.copied])
        elif rec.copied:
            srcs = [_dense_view(inputs[i]) for i in rec.copied] if rec.expanded else [inputs[i] for i in rec.copied]
            torch._foreach_copy_(rec.buffers, srcs)
        inputs.clear()
        slot.graph.replay()
        counters["replayed"] += 1
        if slot.shared:
            return [_view(o) if f else o for o, f in zip(slot.outputs, rec.fresh)]
        return [_fresh_copy(o) if f else o for o, f in zip(slot.outputs, rec.fresh)]


def _fresh_copy(t: torch.Tensor) -> torch.Tensor:
    return t.clone()  # preserve_format: a dense tensor keeps its strides


def _view(t: torch.Tensor) -> torch.Tensor:
    """A tensor of its own over t's memory: the caller's in-place metadata changes (t_(), unsqueeze_()) leave the
    slot's output as captured, and while it (or a view of it) lives, t's storage counts one more use."""
    return t.as_strided(t.size(), t.stride(), t.storage_offset())


def cudagraphify_with(inductor_cudagraphify: Callable[..., Callable[[list[Any]], Any]],
                      made: list[GraphReplay] | None = None) -> Callable[..., Any]:
    """A drop-in for Inductor's `compile_fx.cudagraphify` (same arguments) that returns a GraphReplay, which calls
    `inductor_cudagraphify` for Inductor's wrapper where it declines; each one made is appended to `made`."""

    def cudagraphify(model: Callable[[list[Any]], Any], static_input_idxs: Sequence[int] = (), *,
                     device_index: int, mutated_input_idxs: Sequence[int] = (), **kwargs: Any) -> GraphReplay:
        def fallback() -> Callable[[list[Any]], Any]:
            return inductor_cudagraphify(model, static_input_idxs, device_index=device_index,
                                         mutated_input_idxs=tuple(mutated_input_idxs), **kwargs)
        replay = GraphReplay(model, static_input_idxs, mutated_input_idxs, device_index, fallback)
        if made is not None:
            made.append(replay)
        return replay

    return cudagraphify


@contextlib.contextmanager
def replacing_trees() -> Iterator[None]:
    """While Inductor compiles (and wraps) a graph: its CUDA graphs are GraphReplay's. A graph Inductor split
    into several partitions (ops that cannot be captured between them) stays with the trees: each partition's
    outputs are the next one's inputs, which the trees pass on in their own memory, where GraphReplay would copy
    them twice (out of one graph, into the next)."""
    from torch._inductor import compile_fx

    original = compile_fx.cudagraphify
    made: list[GraphReplay] = []
    compile_fx.cudagraphify = cudagraphify_with(original, made)
    try:
        yield
    finally:
        compile_fx.cudagraphify = original
    if len(made) > 1:
        for replay in made:
            replay._decline(f"Inductor split the graph into {len(made)} partitions")
