"""Argus options: torch.compile(..., options={...}) over ARGUS_* environment variables over defaults."""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

VERSION = "0.1.0"  # argus_inductor.__version__ (pyproject.toml says the same)
ON_MISS = ("synthesize", "default", "fallback")
OPS = ("gemm", "attention", "moe", "conv", "norm", "scan", "pool", "reduce", "loss", "pointwise")
DEFAULT_OPS = "gemm,attention,moe"  # the classes opt in (ARGUS_OPS) until their tuned kernels beat the vendor's


def _env_bool(name: str, default: bool = False) -> bool:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.lower() not in ("0", "false", "no", "off")


def env_number(name: str, default: Any, kind: type, positive: bool = False) -> Any:
    """The number in environment variable `name` (`default` when unset or blank); ValueError unless it parses as
    `kind` and is >= 0 (> 0 when `positive`)."""
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    try:
        n = kind(v.strip())
    except ValueError:
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if n < 0 or (positive and n == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {v!r}")
    return n


@dataclass(frozen=True)
class Options:
    """What the backend does. Every field has an ARGUS_<NAME> environment variable."""

    interpret: bool = False        # ARGUS_INTERPRET: run Argus kernels on CPU tensors in the Triton interpreter
    report: bool = False           # ARGUS_REPORT: print what Argus did with each subgraph when compiled
    on_miss: str = "default"       # ARGUS_ON_MISS: synthesize | default | fallback
    cache_dir: str = ""            # ARGUS_CACHE_DIR (default ~/.cache/argus)
    ops: str = DEFAULT_OPS         # ARGUS_OPS: which subgraph kinds Argus takes ("all": every kind)
    verify: bool = True            # ARGUS_VERIFY: run the invariant checker on kernels stored in the cache
    optimize: bool = True          # ARGUS_OPTIMIZE: replace traced MoE expert blocks by torch.ops.argus.moe
    cudagraphs: bool = True        # ARGUS_CUDAGRAPHS: on a GPU, let Inductor capture the graph in CUDA graphs
    cudagraph_copy_mb: float = 32.0  # ARGUS_CUDAGRAPH_COPY_MB: per Argus op in the graph; no CUDA graph when a
    #                                   replay would copy more input bytes than that
    graph_replay: bool = True      # ARGUS_GRAPH_REPLAY: replay those CUDA graphs with runtime/cuda_graphs.py
    #                                 (less host work a call) instead of Inductor's CUDA-graph trees
    tune_seconds: float = 20.0     # ARGUS_TUNE_SECONDS: policy search per library-op signature (ON_MISS=synthesize)
    tune_candidates: int = 24      # ARGUS_TUNE_CANDIDATES: most policies that search times per signature
    tune_lock: str = ""            # ARGUS_TUNE_LOCK: a file locked while timing (processes sharing a GPU take turns)
    replay: bool = True            # ARGUS_REPLAY: replay an op call's recorded launches (argus_inductor.runtime.replay)
    inline: bool = True            # ARGUS_INLINE: on a GPU, hand Inductor the Triton launches of each op with static
    #                                 shapes, so its generated code launches them (argus_inductor.graph.inline)
    prune_rows: bool = True        # ARGUS_PRUNE_ROWS: compute only the rows a final slice keeps (a prefill's last
    #                                 layer on the positions whose logits are returned; graph/row_pruning.py)
    specialize_floats: bool = True  # ARGUS_SPECIALIZE_FLOATS: floats read from nn.Module attributes become
    #                                 constants of an Argus graph, not inputs (argus_inductor.graph.module_floats)
    gemv_steps: bool = True        # ARGUS_GEMV_STEPS: the decode GEMV templates' short K loops over one weight as
    #                                 static steps where K is a static dim (KSTEPS; policies.gemv_static_steps)

    @staticmethod
    def resolve(options: dict[str, Any] | None = None) -> Options:
        values: dict[str, Any] = {
            "interpret": _env_bool("ARGUS_INTERPRET"),
            "report": _env_bool("ARGUS_REPORT"),
            "on_miss": os.environ.get("ARGUS_ON_MISS", "default"),
            "cache_dir": os.environ.get("ARGUS_CACHE_DIR", str(Path.home() / ".cache" / "argus")),
            "ops": os.environ.get("ARGUS_OPS", DEFAULT_OPS),
            "verify": _env_bool("ARGUS_VERIFY", True),
            "optimize": _env_bool("ARGUS_OPTIMIZE", True),
            "cudagraphs": _env_bool("ARGUS_CUDAGRAPHS", True),
            "cudagraph_copy_mb": env_number("ARGUS_CUDAGRAPH_COPY_MB", 32.0, float),
            "graph_replay": _env_bool("ARGUS_GRAPH_REPLAY", True),
            "tune_seconds": env_number("ARGUS_TUNE_SECONDS", 20.0, float),
            "tune_candidates": env_number("ARGUS_TUNE_CANDIDATES", 24, int),
            "tune_lock": os.environ.get("ARGUS_TUNE_LOCK", ""),
            "replay": _env_bool("ARGUS_REPLAY", True),
            "inline": _env_bool("ARGUS_INLINE", True),
            "prune_rows": _env_bool("ARGUS_PRUNE_ROWS", True),
            "specialize_floats": _env_bool("ARGUS_SPECIALIZE_FLOATS", True),
            "gemv_steps": _env_bool("ARGUS_GEMV_STEPS", True),
        }
        names = {f.name for f in fields(Options)}
        for k, v in (options or {}).items():
            key = k[len("argus_"):] if k.startswith("argus_") else k
            if key not in names:
                raise ValueError(f"unknown Argus option {k!r}; known options: {', '.join(sorted(names))}")
            values[key] = v
        opts = Options(**values)
        if opts.on_miss not in ON_MISS:
            raise ValueError(f"ARGUS_ON_MISS / on_miss must be one of {ON_MISS}, got {opts.on_miss!r}")
        unknown = set(opts.enabled_ops) - set(OPS)
        if unknown:
            raise ValueError(f"ARGUS_OPS names unknown op kinds {sorted(unknown)}; known: {', '.join(OPS)}")
        return opts

    @property
    def enabled_ops(self) -> tuple[str, ...]:
        names = tuple(o.strip() for o in self.ops.split(",") if o.strip())
        return OPS if "all" in names else names
