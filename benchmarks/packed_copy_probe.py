"""Probe: host microseconds of a CUDA-graph replay's copy of a decode step's small inputs (token ids, cache
position, position ids) into the graph's buffers, by method; the first step's host latency before its replay
includes it (host_probe.py --split: "input copy").

    python benchmarks/packed_copy_probe.py

Methods: PackedCopy over the sources' bytes (a reshape and a byte view a source, one cat), PackedCopy in the
sources' one dtype (a view a source where needed, one cat), torch._foreach_copy_ (one call; a copy a tensor on
the GPU for integer tensors), and a copy_ per input. Each is checked to fill the buffers with the sources first.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.runtime.cuda_graphs import PackedCopy  # noqa: E402


def host_us(fn: Callable[[], None], n: int = 2000) -> float:
    """Median host microseconds of fn over n calls (synchronized every 50 calls, so the queue stays short)."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
        if i % 50 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    dev = "cuda"
    ids = torch.randint(0, 128256, (1, 1), device=dev)
    pos = [torch.tensor([1024 + i], device=dev) for i in range(8)]
    like = [ids, pos[0], pos[0][None]]
    typed = PackedCopy(like)
    raw = PackedCopy(like)
    raw.dtype = None  # the byte path
    bufs = [torch.empty_like(t) for t in like]
    step = [0]
    last: list[torch.Tensor] = []

    def sources() -> list[torch.Tensor]:
        step[0] += 1
        p = pos[step[0] % 8]
        last[:] = [ids, p, p[None]]
        return list(last)

    def per_input() -> None:
        for b, s in zip(bufs, sources()):
            b.copy_(s)

    methods = {"PackedCopy, bytes": lambda: raw.copy(sources()), "PackedCopy, one dtype": lambda: typed.copy(sources()),
               "torch._foreach_copy_": lambda: torch._foreach_copy_(bufs, sources()), "copy_ per input": per_input}
    for name, fn in methods.items():  # correctness first
        fn()
        torch.cuda.synchronize()
        got = typed.buffers if "one dtype" in name else raw.buffers if "bytes" in name else bufs
        assert all(torch.equal(g, w) for g, w in zip(got, last)), name
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for _ in range(2):  # two rounds, interleaved: the host's speed drifts
        for name, fn in methods.items():
            print(f"  {name:24s} {host_us(fn):6.1f} us", flush=True)


if __name__ == "__main__":
    main()
