"""backend="argus": Argus graph rewrites, then Inductor for everything else."""
from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.exc import RestartAnalysis

from .config import Options
from .graph import rewrite
from .graph.module_floats import specialize_module_floats
from .graph.patterns import is_argus_op
from .ops import install_agent, set_active_options, target_for
from .runtime import reporting as _report
from .runtime import tiers
from .runtime.cuda_graphs import replacing_trees

log = logging.getLogger("argus_inductor")
_SAID: set[str] = set()
# the targets whose ops are inlined into Inductor's code (ARGUS_INLINE): Inductor launches Triton kernels on GPUs
INLINE_TARGETS = {"cuda", "hip"}


def _say_once(msg: str) -> None:
    if msg not in _SAID:
        _SAID.add(msg)
        log.warning(msg)


@functools.lru_cache(maxsize=1)
def code_tag() -> str:
    """A hash of argus_inductor's Python sources. Inductor's on-disk FX-graph cache keys a graph by its code, not
    by the schemas of the custom ops it calls or the Python behind them: code Inductor cached for a graph of Argus
    ops under one version of them came back under another (a call with keyword arguments the op no longer had,
    which failed at run time). While Argus compiles, this tag is part of that key (torch.compiler.config's
    cache_key_tag), so a changed argus_inductor compiles afresh."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _tagged_cache() -> contextlib.AbstractContextManager[Any]:
    """Inductor's cache keys tagged with code_tag() (after the user's own tag, if any) for the compile."""
    cconfig = getattr(torch.compiler, "config", None)
    if cconfig is None or not hasattr(cconfig, "cache_key_tag"):  # a torch without the tag: nothing to add to
        return contextlib.nullcontext()
    tag = f"argus-{code_tag()}"
    return cconfig.patch(cache_key_tag=f"{cconfig.cache_key_tag}|{tag}" if cconfig.cache_key_tag else tag)


def _devices(example_inputs: list[Any]) -> set[torch.device]:
    return {t.device for t in example_inputs if isinstance(t, torch.Tensor)}


def copied_input_bytes(example_inputs: list[Any]) -> int:
    """Bytes of the tensor inputs a CUDA-graph replay copies: all but parameters and the tensors Dynamo marked as
    static (buffers, torch._dynamo.mark_static_address, e.g. a static KV cache)."""
    total = 0
    for t in example_inputs:
        if not isinstance(t, torch.Tensor) or isinstance(t, torch.nn.Parameter):
            continue
        if getattr(t, "_dynamo_static_input_type", None) is not None:
            continue
        try:
            total += int(t.numel()) * t.element_size()
        except Exception:  # a size only known symbolically: nothing to go by
            continue
    return total


def needs_gradients(example_inputs: list[Any]) -> bool:
    """Whether the graph being compiled will be differentiated: grad mode is on and an input (a parameter, lifted by
    Dynamo, or a user tensor) requires grad. Argus's ops have no backward, so such a graph is left to Inductor."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def _mode_options(mode: str | None) -> dict[str, Any]:
    from torch._inductor import list_mode_options

    if not mode:
        return {}
    try:
        return dict(list_mode_options(mode))
    except (RuntimeError, KeyError):
        modes = ", ".join(sorted(list_mode_options()))
        raise ValueError(f"backend='argus': unknown mode {mode!r}; Inductor's modes are {modes}") from None


def argus_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str | None = None,
                  options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The Dynamo backend. `options` are Argus options (see argus_inductor.config.Options); `mode` goes to
    Inductor (e.g. "max-autotune"). torch.compile refuses a mode beside options, so `options["mode"]` is taken
    for it too. A restart Dynamo is asked for (Argus's for the module floats, Inductor's for a float it cannot
    keep symbolic) drops the report entries this call recorded: the next trace's rewrite records them again."""
    recorded = _report.entry_ids()
    try:
        return _compile(gm, example_inputs, mode, options)
    except RestartAnalysis:
        _report.forget_since(recorded)
        raise


def _compile(gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str | None,
             options: dict[str, Any] | None) -> Callable[..., Any]:
    if options and "mode" in options:  # torch.compile takes mode or options, not both: Argus's options carry it
        options = dict(options)
        mode = options.pop("mode") if mode is None else mode
    opts = Options.resolve(options)
    with tiers.COMPILE_LOCK:  # a background swap-in's compile and this one take turns (Inductor's config is global)
        set_active_options(opts)
        devices = _devices(example_inputs) or {torch.device("cpu")}
        # A model on the GPU still carries small CPU tensors (positions, scalars): the accelerator decides.
        accel = {d for d in devices if d.type != "cpu"} or devices
        targets = {target_for(d, opts) for d in accel}
        later: torch.fx.GraphModule | None = None  # the graph the background swap-in decides (tiers.py)
        if opts.swapin == "never":
            _say_once("argus: ARGUS_SWAPIN=never: Inductor compiles every graph alone")
        elif needs_gradients(example_inputs):
            _say_once("argus: this graph needs gradients (called outside torch.no_grad() / torch.inference_mode() "
                      "with parameters or inputs that require grad); Argus's kernels are inference kernels with no "
                      "backward, so Inductor compiles this graph alone. Call the model under torch.no_grad() or "
                      "torch.inference_mode() to use them")
        elif None in targets:
            where = ", ".join(sorted(str(d) for d in devices))
            _say_once(f"argus: no Argus kernels for {where} (they run on NVIDIA sm_90 and AMD gfx942, or on the CPU "
                      "with ARGUS_INTERPRET=1); compiling with Inductor alone")
        else:
            with _report.phase("graph rewrite"):
                matches = rewrite(gm, opts.enabled_ops, moe_regions=opts.optimize, prune_rows=opts.prune_rows)
            if matches and opts.specialize_floats:
                specialize_module_floats(gm, example_inputs)  # Dynamo's restart while a module float is an input
            log.info("argus: %d subgraph(s) rewritten to Argus ops", len(matches))
            if matches and opts.swapin == "measure":
                from .graph.swapin import measures, swap_in

                target = next(iter(targets))
                defer = opts.swapin_background and measures(target) and _static(gm)
                if defer:
                    later = _copy(gm)
                with _report.phase("swap-in"):
                    deferred = [v for _, v in swap_in(gm, example_inputs, target, defer=defer) if v is None]
                if not deferred:
                    later = None
        compiled = _lower(gm, example_inputs, mode, opts, devices, targets)
    if later is not None:
        compiled = tiers.Tiered(compiled, functools.partial(_second_tier, later, example_inputs, mode, opts, devices,
                                                            targets, _argus_ops(gm)),
                                _thread_state(devices), name=gm.__class__.__name__)
    if opts.report:
        reported = []

        def run_and_report(*args: Any) -> Any:
            out = compiled(*args)
            if not reported:
                reported.append(True)
                _report.report()
            return out
        return run_and_report
    return compiled


def _argus_ops(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if is_argus_op(n))


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with its own nodes (the tensors it holds shared)."""
    out = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    out.meta = gm.meta
    return out


def _static(gm: torch.fx.GraphModule) -> bool:
    """Whether no input of `gm` has a symbolic size (a dynamic graph is compiled once, in Dynamo's own context)."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            val = n.meta.get("val", n.meta.get("example_value"))
            if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool) or \
                    (isinstance(val, torch.Tensor) and free_symbols(val)):
                return False
    return True


def _thread_state(devices: set[torch.device]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """What the compiling thread had that is per thread and the background's compile needs: grad mode, inference
    mode (a no_grad graph is compiled for inference, not as a training graph) and the current CUDA device."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    cuda = next((d for d in devices if d.type == "cuda"), None)

    def state() -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode() if inference else torch.set_grad_enabled(grad))
        if cuda is not None:
            stack.enter_context(torch.cuda.device(cuda))
        return stack
    return state


def _second_tier(gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str | None, opts: Options,
                 devices: set[torch.device], targets: set[str | None], first_ops: int) -> Callable[..., Any] | None:
    """The background's work: measure the signatures the first tier left to Inductor (swap_in on the graph as it
    was before), and compile the graph anew where an Argus kernel won one; None where none did (the first tier is
    then what this graph runs for good)."""
    from .graph.swapin import swap_in

    with torch._guards.tracing(None):
        with _report.phase("swap-in"):
            swap_in(gm, example_inputs, next(iter(targets)))
        if _argus_ops(gm) == first_ops or tiers.closing():
            return None
        return _lower(gm, example_inputs, mode, opts, devices, targets)


def _lower(gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str | None, opts: Options,
           devices: set[torch.device], targets: set[str | None]) -> Callable[..., Any]:
    """`gm` (its Argus ops decided) inlined where Argus's launches can be, and compiled by Inductor."""
    from torch._inductor.compile_fx import compile_fx

    inlined = 0
    original = gm
    argus_ops = _argus_ops(gm)
    if argus_ops and opts.inline and targets <= INLINE_TARGETS:
        from .graph.inline import inline_ops

        original = _copy(gm)
        with _report.phase("inline (records each op's launches; compiles its Triton kernels)"):
            inlined = inline_ops(gm, example_inputs=example_inputs)
        log.info("argus: %d Argus op(s) inlined as Triton launches in Inductor's code", inlined)
    # CUDA graphs: Argus ops never synchronize with the host (masks, MoE routing and split-K all stay on the
    # device), so a graph of them replays like Inductor's own kernels and the per-op Python launch cost is paid
    # once, at capture. On by default on a GPU (as in vLLM and mode="max-autotune"); ARGUS_CUDAGRAPHS=0 or
    # mode="max-autotune-no-cudagraphs" turns it off (torch.compile passes no mode="default" to a backend other
    # than Inductor's). argus_inductor.runtime.cuda_graphs replays them with less host work than Inductor's CUDA-graph
    # trees, which it hands a graph to where its simpler model does not hold (ARGUS_GRAPH_REPLAY=0: the trees).
    # A replay first copies every input that has no static address into the graph's own buffers: for large inputs
    # that copy costs more than the host launch work the graph saves (measured on the H100 with replayed launches,
    # argus_inductor.runtime.replay: about 0.1 ms per Argus op, the copy of some 100 MB; default 32 MB per op), so such
    # graphs run without one.
    # A graph whose Argus ops were all inlined (or that has none left: the measured swap-in gave them all back to
    # Inductor) has no Python of Argus per call left to hide: it takes CUDA graphs
    # as Inductor does, only where `mode` asks (measured on the H100 with every op inlined, overhead.py: graphs
    # made 9 of 10 KernelBench-format problems slower, by 0.002-0.6 ms, the replay's input copies and bookkeeping
    # costing more than the launches they save; NOTES.md, "Compile time and host overhead").
    # The rest of the graph is Inductor's, compiled with the options `mode` gives it (max-autotune: autotuned
    # templates for what Argus left, coordinate-descent tuning of Inductor's own kernels).
    modal = _mode_options(mode)

    def inductor_config(all_inlined: bool) -> dict[str, Any]:
        graphs = opts.cudagraphs and any(d.type == "cuda" for d in devices) and \
            (mode in ("max-autotune", "reduce-overhead") if all_inlined else mode != "default")
        copied = copied_input_bytes(example_inputs) if graphs else 0
        if copied > opts.cudagraph_copy_mb * 2**20 * max(1, argus_ops):
            log.info("argus: no CUDA graph: a replay would copy %.0f MB of inputs (ARGUS_CUDAGRAPH_COPY_MB=%g per "
                     "Argus op, %d op(s))", copied / 2**20, opts.cudagraph_copy_mb, argus_ops)
            graphs = False
        config: dict[str, Any] = {**modal, "triton.cudagraphs": graphs}
        if mode == "reduce-overhead":
            config["triton.cudagraphs"] = True
        elif mode and "no-cudagraphs" in mode:
            config["triton.cudagraphs"] = False
        log.info("argus: a graph of %d Argus op(s), %d inlined: CUDA graphs %s", argus_ops, inlined,
                 "on" if config["triton.cudagraphs"] else "off")
        return config

    def compile_with(graph: torch.fx.GraphModule, config: dict[str, Any]) -> Callable[..., Any]:
        replay = opts.graph_replay and config["triton.cudagraphs"]

        def run() -> Callable[..., Any]:
            with tiers.COMPILE_LOCK, replacing_trees() if replay else contextlib.nullcontext(), _tagged_cache(), \
                    _report.phase("inductor"):
                return compile_fx(graph, example_inputs, config_patches=config)
        return tiers.on_caller(run)  # the background's: on a caller's thread

    try:
        compiled = compile_with(gm, inductor_config(argus_ops == inlined))  # none left: exactly Inductor's choice
    except Exception as e:
        if not inlined or isinstance(e, RestartAnalysis):
            # a restart is Dynamo's signal, not a failure (TensorifyScalarRestartAnalysis: trace again with a Python
            # float specialized, which Inductor could not keep symbolic): Dynamo retraces and calls the backend
            # again. Taken for a failure it cost the inlining: a decode step ran its Argus ops from Python, with no
            # CUDA graph either (its cache updates mutate inputs): Llama decode b=32 on the H200 took 1.94 ms a
            # token against 1.31 for max-autotune (e2e-llama-h200-2026-11-23.log)
            raise
        # the ops work without inlining: a launch Inductor cannot compile costs only the inlining (and the graph
        # is then one of Argus ops, which takes CUDA graphs by their rule)
        _say_once(f"argus: Inductor could not compile the inlined Argus launches ({type(e).__name__}: "
                  f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); running them as Argus ops")
        compiled = compile_with(original, inductor_config(False))
    return compiled


def register() -> None:
    """Register backend="argus" with Dynamo (once)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "argus" not in _BACKENDS:
        register_backend(name="argus")(argus_backend)


def _agent() -> Any:
    """The agent, for the ops to reach on a miss under ARGUS_ON_MISS=synthesize (imported when first asked)."""
    from . import agent

    return agent


def install() -> None:
    """What loading the backend sets up, however it is loaded (import, Dynamo's entry point, the vLLM plugin):
    backend="argus" registered, the Gluon lowerings registered with the DSL (importing hopper does it), and the
    agent handed to the ops."""
    from . import hopper  # noqa: F401

    install_agent(_agent)
    register()


install()
