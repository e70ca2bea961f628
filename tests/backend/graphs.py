"""The FX graph Dynamo hands a backend, for the matcher tests."""
from __future__ import annotations

from collections.abc import Callable

import torch


def capture(fn: Callable, *args: torch.Tensor, dynamic: bool = False) -> tuple[torch.fx.GraphModule, list]:
    """Dynamo's graph of fn and its inputs (in the graph's order, which is not always the call's); `dynamic`: every
    size symbolic (the inputs then hold the graph's size arguments too)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
    assert len(graphs) == 1
    return graphs[0]
