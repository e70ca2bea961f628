"""Probe: which Python floats a compiled decode step still takes as CPU scalar tensors, and why Argus's
module-float specialization (argus_inductor.graph.module_floats) left each one an input.

    python benchmarks/float_inputs_probe.py [--device cuda|cpu]

Compiles a tiny transformers Llama's decode step (StaticCache) with backend="argus" and prints, for each graph
the backend is handed, every placeholder whose example value is a one-element CPU float tensor: its Dynamo source,
its users, whether it carries an item memo (a float Dynamo made a tensor), and the source's guard kind.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def describe(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    from argus_inductor.graph.module_floats import _from_module
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    print(f"graph: {len(nodes)} placeholders, {len(example_inputs)} example inputs", flush=True)
    for node, value in zip(nodes, example_inputs):
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu" or value.numel() != 1:
            continue
        ev = node.meta.get("example_value")
        memo = getattr(ev, "item_memo", None)
        arg = node.meta.get("grapharg")
        source = getattr(arg, "source", None)
        guard = getattr(source, "guard_source", None)
        guard = guard() if callable(guard) else guard
        name = getattr(source, "name", source)
        name = name() if callable(name) else name
        print(f"  {node.name}: dtype={value.dtype} users={[str(u.target) for u in node.users]} "
              f"item_memo={memo is not None} source={type(source).__name__}:{name} guard={guard} "
              f"from_module={_from_module(source) if source is not None else None}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--e2e", action="store_true", help="e2e.py's 2-layer Llama-3-8B and its decode step (b=1)")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ["ARGUS_INTERPRET"] = "1"
    import transformers
    from transformers import StaticCache

    import argus_inductor.backend as backend
    original = backend._compile

    def spy(gm: torch.fx.GraphModule, example_inputs: list[Any], *a: Any, **k: Any) -> Any:
        describe(gm, example_inputs)
        return original(gm, example_inputs, *a, **k)

    backend._compile = spy
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}")
    if args.e2e:
        from benchmarks import e2e
        model, how = e2e.build("llama", 2, args.device)
        dec = e2e.Decoder(model, 1, args.device)
        print(how, flush=True)
        with torch.no_grad():
            dec.step(model, 0)
            fn = torch.compile(model, backend="argus", dynamic=True)
            for i in range(3):
                dec.step(fn, i)
        return
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, vocab_size=256, hidden_size=64, intermediate_size=96,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    with torch.device(args.device):
        model = transformers.LlamaForCausalLM(cfg).eval()
        cache = StaticCache(config=cfg, max_cache_len=64)
        tok = torch.randint(0, 256, (1, 1))
        pos = torch.tensor([5])
    with torch.no_grad():
        model(input_ids=tok, past_key_values=cache, cache_position=pos, position_ids=pos[None], use_cache=True)
        fn = torch.compile(model, backend="argus", dynamic=True)
        for i in range(3):
            p = pos + i
            fn(input_ids=tok, past_key_values=cache, cache_position=p, position_ids=p[None], use_cache=True)


if __name__ == "__main__":
    main()
