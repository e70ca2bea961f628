"""The signatures the backend itself makes for a transformers model, found by tracing the model on the meta device.

`argus warmup --config` used to predict a config's signatures from its dims (shapes.from_config), and the
prediction drifted from what the backend matches: the output and down projections take a residual epilogue, a
decode step's attention reads a mask, the last layer of a prefill runs on its last position only (row pruning),
and the layouts are the graph's. Here the model is built from the config on the meta device (no weights are
allocated) with at most two layers (every layer of a decoder makes the same signatures; the second is the last
one, whose rows a prefill prunes) and compiled with a backend that applies Argus's rewrite to each graph Dynamo
traces; there each Argus op node's host function runs on the node's fake values as far as its signature
(ops.recording_signatures), and the rewritten graph then runs on the meta device through the ops' fake
implementations. Traced: a prefill of one sequence of each token count, and one decode step of `batch` sequences
against a static cache of `context` positions.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch

from ..runtime.signature import Signature


class TraceError(RuntimeError):
    """The model could not be built or traced (no transformers, an unknown architecture, an op meta tensors lack)."""


def _model(config: dict[str, Any], dtype: torch.dtype) -> torch.nn.Module:
    try:
        import transformers
    except ImportError as e:
        raise TraceError("transformers is not installed") from e
    try:
        cfg = transformers.AutoConfig.for_model(**config)
    except (ValueError, KeyError, TypeError) as e:
        raise TraceError(f"transformers cannot read the config ({e})") from None
    layers = getattr(cfg, "num_hidden_layers", None)
    if isinstance(layers, int) and layers > 2:
        cfg.num_hidden_layers = 2
    for name in ("layer_types", "mlp_only_layers"):  # per-layer lists follow the layer count
        v = getattr(cfg, name, None)
        if isinstance(v, list) and isinstance(layers, int) and len(v) == layers:
            setattr(cfg, name, v[:cfg.num_hidden_layers])
    moe = any(getattr(cfg, n, None) for n in ("num_local_experts", "num_experts", "n_routed_experts"))
    if moe and hasattr(torch, "_grouped_mm"):
        cfg._experts_implementation = "grouped_mm"  # the form the backend's MoE rewrite takes whole
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        for attention in ("sdpa", "eager"):  # transformers' own default: SDPA where the model has it
            cfg._attn_implementation = attention
            try:
                with torch.device("meta"):
                    return transformers.AutoModelForCausalLM.from_config(cfg).eval()
            except ValueError as e:
                if attention == "sdpa" and "attention implementation" in str(e):
                    continue
                raise
    except Exception as e:
        raise TraceError(f"transformers cannot build a causal LM from the config ({_first_line(e)})") from None
    finally:
        torch.set_default_dtype(old)
    raise TraceError("transformers cannot build a causal LM from the config")


def _first_line(e: BaseException) -> str:
    """`Type: first line` of an exception, of the one inside where Dynamo wraps a backend's failure."""
    e = getattr(e, "inner_exception", None) or e
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def trace_config(config: dict[str, Any], tokens: list[int], dtype: str = "bfloat16", context: int = 4096,
                 batch: int = 1, ops: tuple[str, ...] = ("gemm", "attention", "moe")) -> list[Signature]:
    """The signatures of every Argus op the backend makes for the model of `config` (arch "meta": the caller
    names the device): a prefill of one sequence of each token count above 1, and for a count of 1 one decode step
    of `batch` sequences against a static cache of `context` positions. In the order first met, without repeats."""
    from ..config import Options
    from ..graph import is_argus_op, rewrite

    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise TraceError(f"unknown dtype {dtype!r}")
    model = _model(copy.deepcopy(config), dt)
    opts = Options.resolve({})

    seen: list[Signature] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        rewrite(gm, ops, moe_regions=opts.optimize, prune_rows=opts.prune_rows)
        gm.recompile()
        # every node's fake value, the rewrite's own nodes included (some carry none of their own)
        FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*example_inputs)
        for node in gm.graph.nodes:
            if is_argus_op(node):
                seen.extend(_signatures_of(node))
        return gm.forward  # runs on the meta device: each Argus op through its fake implementation

    found: dict[str, Signature] = {}
    with torch.no_grad():
        for t in tokens:
            torch._dynamo.reset()
            fn = torch.compile(model, backend=backend, dynamic=False)
            try:
                if t > 1:
                    ids = torch.zeros(1, t, dtype=torch.long, device="meta")
                    fn(input_ids=ids, use_cache=False, logits_to_keep=1)
                else:
                    _decode_step(model, fn, batch, context)
            except TraceError:
                raise
            except Exception as e:
                what = "a decode step" if t == 1 else f"a prefill of {t} tokens"
                raise TraceError(f"tracing {what} failed ({_first_line(e)})") from None
            for sig in seen:
                found.setdefault(sig.key(), sig)
            seen.clear()
    torch._dynamo.reset()
    return list(found.values())


def _host_function(target: Any) -> Any:
    """The Python host function of an Argus op (what its CUDA/CPU implementation calls)."""
    from ..ops import library as library_ops

    name = getattr(target, "_schema", None) and target._schema.name  # "argus::linear"
    if name in library_ops.HOST_FUNCTIONS:  # the ops defined through the low-level Library API
        return library_ops.HOST_FUNCTIONS[name]
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(name)
    if opdef is None:
        raise TraceError(f"no host function known for the Argus op {name}")
    return opdef._init_fn


def _signatures_of(node: torch.fx.Node) -> list[Signature]:
    """The signature an Argus op node's call makes: its host function run on the node's fake values, stopped where
    it would plan (ops.recording_signatures)."""
    from torch.fx.node import map_arg

    from .. import ops

    def value(n: torch.fx.Node) -> Any:
        return n.meta.get("val", n.meta.get("example_value"))

    args, kwargs = map_arg((node.args, node.kwargs), value)
    modes = [value(n).fake_mode for n in node.all_input_nodes if hasattr(value(n), "fake_mode")]
    with ops.recording_signatures() as got, (modes[0] if modes else contextlib.nullcontext()):
        try:
            _host_function(node.target)(*args, **kwargs)
        except ops.SignatureRecorded:
            pass
    return got


def _decode_step(model: torch.nn.Module, fn: Any, batch: int, context: int) -> None:
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=context)
    ids = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    pos = torch.full((1,), context - 1, dtype=torch.long, device="meta")
    fn(input_ids=ids, past_key_values=cache, cache_position=pos, position_ids=pos[None], use_cache=True)


__all__ = ["trace_config", "TraceError"]
