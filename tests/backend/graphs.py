"""The FX graph Dynamo hands a backend, for the matcher tests."""
from __future__ import annotations

from collections.abc import Callable

import torch


def capture(fn: Callable, *args: torch.Tensor) -> tuple[torch.fx.GraphModule, list]:
    """Dynamo's graph of fn and its inputs (in the graph's order, which is not always the call's)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)(*args)
    assert len(graphs) == 1
    return graphs[0]
