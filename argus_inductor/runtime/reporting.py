"""What Argus did with each matched subgraph: its signature, where its kernel came from, its time."""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

_LOCK = threading.Lock()
_PHASES: dict[str, float] = {}  # where compile time went: phase -> seconds, in this process


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time inside under `name` (graph rewrite, swap-in, checker, inline, Inductor): phases() says where a
    first call's time went. In a background swap-in's thread (runtime/tiers.py) the name is "background: <name>":
    that time is not the first call's."""
    from .tiers import in_background

    if in_background():
        name = f"background: {name}"
    t0 = time.perf_counter()
    try:
        yield
    finally:
        with _LOCK:
            _PHASES[name] = _PHASES.get(name, 0.0) + time.perf_counter() - t0


def phases() -> dict[str, float]:
    """Seconds spent in each phase so far in this process (see phase)."""
    with _LOCK:
        return {k: round(v, 3) for k, v in _PHASES.items()}


def clear_phases() -> None:
    with _LOCK:
        _PHASES.clear()


@dataclass
class Entry:
    graph_node: str          # the FX node(s) the subgraph came from
    op: str
    signature: str = ""
    source: str = "pending"  # cache | synthesized | default | fallback (+ reason)
    calls: int = 0
    total_ms: float = 0.0
    flops: int = 0           # per call (see record_call)
    notes: list[str] = field(default_factory=list)


_ENTRIES: dict[str, Entry] = {}


def record_match(node_id: str, op: str, graph_node: str) -> None:
    with _LOCK:
        _ENTRIES.setdefault(node_id, Entry(graph_node, op))


def record_rewrite(node_id: str, op: str, graph_node: str, what: str) -> None:
    """A graph rewrite that has no kernel of its own (rows no output reads, not computed): shown with what it
    changed in place of a signature."""
    with _LOCK:
        _ENTRIES[node_id] = Entry(graph_node, op, signature=what, source="graph rewrite (no kernel of its own)")


def forget_match(node_id: str) -> None:
    """Drop a match a later rewrite absorbed (a GEMM whose epilogue became a fused chain's)."""
    with _LOCK:
        _ENTRIES.pop(node_id, None)


def entry_ids() -> set[str]:
    """The ids of the entries recorded so far (forget_since drops the ones added after)."""
    with _LOCK:
        return set(_ENTRIES)


def forget_since(ids: set[str]) -> None:
    """Drop the entries recorded after `entry_ids` returned `ids`: a rewrite whose graph Dynamo traces again (its
    matches are recorded again by the next rewrite, under the new graph's ids)."""
    with _LOCK:
        for k in [k for k in _ENTRIES if k not in ids]:
            del _ENTRIES[k]


def record_call(node_id: str, signature: str, source: str, ms: float | None,
                notes: list[str] | None = None, flops: int = 0) -> None:
    """One call of a matched subgraph. `flops`: what the call computes in matmul, convolution and attention FLOPs
    (as torch's FlopCounterMode counts them), the measure of Argus coverage; recorded when the op runs in Python,
    so a CUDA-graph replay (which runs no Python) keeps the number from the recording."""
    with _LOCK:
        e = _ENTRIES.get(node_id)
        if e is None:
            e = _ENTRIES.setdefault(node_id, Entry("(direct call)", signature.split("(")[0]))
        e.signature = signature
        e.source = source
        e.calls += 1
        if flops:
            e.flops = int(flops)
        if ms is not None:
            e.total_ms += ms
        for n in notes or ():
            if n not in e.notes:
                e.notes.append(n)


def settle(node_id: str, signature: str, source: str) -> None:
    """Say where a matched subgraph's code comes from where no Argus op will run for it (the measured swap-in gave it
    back to Inductor)."""
    with _LOCK:
        e = _ENTRIES.get(node_id)
        if e is not None:
            e.signature, e.source = signature, source


def note(node_id: str, text: str) -> None:
    """Add a note to a matched subgraph's entry (one that has none yet is left alone)."""
    with _LOCK:
        e = _ENTRIES.get(node_id)
        if e is not None and text not in e.notes:
            e.notes.append(text)


def entries() -> list[Entry]:
    with _LOCK:
        return list(_ENTRIES.values())


def clear() -> None:
    with _LOCK:
        _ENTRIES.clear()


INTERPRETER_NOTE = ("ms/call here is the Triton interpreter's wall clock (kernels emulated on the CPU): it says "
                    "nothing about speed on a GPU")


def interpreting() -> bool:
    """Whether Triton kernels run under its interpreter in this process (TRITON_INTERPRET, which ARGUS_INTERPRET
    sets): then every Argus time is the interpreter's."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def report(file=None) -> str:
    """Print (and return) one line per matched subgraph."""
    rows = entries()
    lines = [f"Argus: {len(rows)} subgraph(s) matched"]
    interpreted = interpreting()
    for i, e in enumerate(rows):
        t = f"{e.total_ms / e.calls:.3f} ms/call" if e.calls and e.total_ms else "not timed"
        if interpreted and e.calls and e.total_ms:
            t += " (Triton interpreter)"
        lines.append(f"  [{i}] {e.op:<9} {e.graph_node}")
        lines.append(f"      signature: {e.signature or '(not run yet)'}")
        lines.append(f"      kernel:    {e.source}; {e.calls} call(s), {t}")
        lines.extend(f"      note:      {n}" for n in e.notes)
    spent = phases()
    if spent:
        lines.append("  compile time: " + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items()))
    from .cuda_graphs import summary

    graphs = summary()
    if graphs:
        lines.append(graphs)
    if interpreted and any(e.calls and e.total_ms for e in rows):
        lines.append(INTERPRETER_NOTE)
    text = "\n".join(lines)
    print(text, file=file, flush=True)
    return text
