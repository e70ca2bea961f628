"""Every Argus setting, defined once: its ARGUS_* environment variable, its default, its one-line meaning, and for the
backend's options the torch.compile option that sets it (torch.compile(..., options={...}) over ARGUS_* variables
over defaults). README's configuration table is generated from SETTINGS (`argus config --markdown`), and a
test fails when the two differ or when the source reads an ARGUS_* variable that is not here.

A leaf: imports nothing of argus_inductor, so every layer may read it.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

VERSION = "0.2.0"  # argus_inductor.__version__ (pyproject.toml says the same); part of every signature
ON_MISS = ("synthesize", "default", "fallback")
SWAPIN = ("measure", "always", "never")
OPS = ("gemm", "attention", "moe", "conv", "norm", "scan", "pool", "reduce", "loss", "pointwise")
DEFAULT_OPS = "gemm,attention,moe"  # the classes opt in (ARGUS_OPS) until their tuned kernels beat the vendor's
VLLM_OPS = ("moe", "attention", "gemm")


def _bool(name: str, v: str) -> bool:
    return v.strip().lower() not in ("0", "false", "no", "off")


def _number(kind: type, positive: bool = False) -> Callable[[str, str], Any]:
    def parse(name: str, v: str) -> Any:
        try:
            n = kind(v.strip())
        except ValueError:
            raise ValueError(f"{name} must be a number, got {v!r}") from None
        if n < 0 or (positive and n == 0):
            raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {v!r}")
        return n
    return parse


def _text(name: str, v: str) -> str:
    return v.strip()


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, v: str) -> str:
        v = v.strip()
        if v not in options:
            raise ValueError(f"{name} must be one of {', '.join(options)}, got {v!r}")
        return v
    return parse


def _workers(name: str, v: str) -> str | int:
    v = v.strip()
    return "auto" if v == "auto" else _number(int)(name, v)


def checker_workers(value: str | int) -> int:
    """The number of proof worker processes ARGUS_CHECKER_WORKERS (or the checker_workers option) asks for."""
    if value == "auto":
        return min(4, (os.cpu_count() or 1) // 4)
    return int(_workers("ARGUS_CHECKER_WORKERS", str(value)))


@dataclass(frozen=True)
class Setting:
    env: str                      # the environment variable
    default: Any                  # its value when unset or blank
    parse: Callable[[str, str], Any]  # (name, text) -> value; ValueError with a clear message
    meaning: str                  # one line, for README's table and `--help`
    group: str                    # backend | agent | llm | vllm | debug
    option: str | None = None     # the torch.compile option / Options field it sets (backend settings)


_CACHE = str(Path.home() / ".cache" / "argus")

SETTINGS: tuple[Setting, ...] = (
    # ---- the backend (each also a torch.compile option of the same name)
    Setting("ARGUS_INTERPRET", False, _bool, "run Argus kernels on CPU tensors in the Triton interpreter (slow; for "
            "machines without a GPU and for tests)", "backend", "interpret"),
    Setting("ARGUS_REPORT", False, _bool, "print what Argus did with each subgraph after the first call", "backend",
            "report"),
    Setting("ARGUS_ON_MISS", "default", _choice(ON_MISS), "a signature with no cache entry: default (the nearest "
            "solved plan or the template, recorded for `argus warmup`), synthesize (the agent now), fallback "
            "(Inductor's op)", "backend", "on_miss"),
    Setting("ARGUS_SWAPIN", "measure", _choice(SWAPIN), "on a GPU, whether an Argus kernel replaces what Inductor "
            "would run: measure (time both once per signature and keep the faster), always, never", "backend",
            "swapin"),
    Setting("ARGUS_SWAPIN_BACKGROUND", True, _bool, "with measure: a signature with no stored verdict runs "
            "Inductor's code from the first call while Argus's kernel is measured in a background thread; later calls "
            "run the faster (0: measured while compiling, the first call waits; argus_inductor.settle() waits for "
            "the background)", "backend", "swapin_background"),
    Setting("ARGUS_CACHE_DIR", _CACHE, _text, "the kernel cache (entries, misses, trails)", "backend", "cache_dir"),
    Setting("ARGUS_OPS", DEFAULT_OPS, _text, f"the subgraph kinds Argus takes, comma-separated from {', '.join(OPS)} "
            "(all: every kind)", "backend", "ops"),
    Setting("ARGUS_VERIFY", True, _bool, "run the invariant checker on every kernel before it is stored or served",
            "backend", "verify"),
    Setting("ARGUS_VERIFY_BUDGET", 20.0, _number(float, positive=True), "seconds the checker may spend on one kernel "
            "of a plan; past it the kernel is 'not proved: budget' (undecided: it runs, and warmup tries again)",
            "backend", "verify_budget"),
    Setting("ARGUS_CHECKER_WORKERS", "auto", _workers, "processes that prove kernels beside the backend's own work "
            "(auto: a quarter of the CPUs, at most 4; 0 or 1: proved in the calling process)", "backend",
            "checker_workers"),
    Setting("ARGUS_OPTIMIZE", True, _bool, "rewrite traced MoE experts blocks into one argus::moe call", "backend",
            "optimize"),
    Setting("ARGUS_CUDAGRAPHS", True, _bool, "on a GPU, let Inductor capture the compiled graph in CUDA graphs",
            "backend", "cudagraphs"),
    Setting("ARGUS_CUDAGRAPH_COPY_MB", 32.0, _number(float), "no CUDA graph when a replay would copy more input "
            "megabytes than this per Argus op", "backend", "cudagraph_copy_mb"),
    Setting("ARGUS_GRAPH_REPLAY", True, _bool, "replay CUDA graphs with Argus's lighter replay "
            "(runtime/cuda_graphs.py) instead of Inductor's CUDA-graph trees", "backend", "graph_replay"),
    Setting("ARGUS_REPLAY", True, _bool, "replay an op call's recorded launches instead of running its host "
            "function again", "backend", "replay"),
    Setting("ARGUS_INLINE", True, _bool, "on a GPU, hand Inductor the Triton launches of each op with static shapes, "
            "so its generated code launches them", "backend", "inline"),
    Setting("ARGUS_PRUNE_ROWS", True, _bool, "compute only the rows a final slice keeps (a prefill's last layer on the "
            "positions whose logits are returned)", "backend", "prune_rows"),
    Setting("ARGUS_SPECIALIZE_FLOATS", True, _bool, "floats read from nn.Module attributes become constants of an "
            "Argus graph, not inputs", "backend", "specialize_floats"),
    Setting("ARGUS_TUNE_SECONDS", 20.0, _number(float), "policy search per library-op signature under "
            "ARGUS_ON_MISS=synthesize", "backend", "tune_seconds"),
    Setting("ARGUS_TUNE_CANDIDATES", 24, _number(int), "most policies that search times per signature", "backend",
            "tune_candidates"),
    Setting("ARGUS_TUNE_LOCK", "", _text, "a file locked while timing, so processes sharing a GPU take turns",
            "backend", "tune_lock"),
    # ---- the agent
    Setting("ARGUS_AGENT_TRIALS", 0, _number(int), "most candidates one synthesis tries (0: the target's default)",
            "agent"),
    Setting("ARGUS_AGENT_SECONDS", 0.0, _number(float), "seconds one synthesis may take (0: the target's default)",
            "agent"),
    Setting("ARGUS_KB_DIR", "", _text, "the knowledge base folder (default: kb/ beside the package)", "agent"),
    # ---- the LLM endpoint the agent writes kernels with (any OpenAI-compatible chat-completions server)
    Setting("ARGUS_LLM_BASE_URL", "", _text, "e.g. http://127.0.0.1:8000/v1 (vllm serve); unset: the offline planner",
            "llm"),
    Setting("ARGUS_LLM_MODEL", "", _text, "the model the endpoint serves (required with a base URL)", "llm"),
    Setting("ARGUS_LLM_API_KEY", "", _text, "the endpoint's key (\"EMPTY\" is sent when unset)", "llm"),
    Setting("ARGUS_LLM_TIMEOUT", 120.0, _number(float, positive=True), "seconds a request may take in all, "
            "connecting and reading included", "llm"),
    Setting("ARGUS_LLM_MAX_RETRIES", 3, _number(int), "retries after a time-out, a connection error, HTTP 429/5xx or a "
            "malformed reply", "llm"),
    Setting("ARGUS_LLM_BACKOFF", 2.0, _number(float), "first wait between retries, in seconds (doubling)", "llm"),
    Setting("ARGUS_LLM_TEMPERATURE", 0.2, _number(float), "sampling temperature of each request", "llm"),
    Setting("ARGUS_LLM_MAX_TOKENS", 4096, _number(int, positive=True), "most tokens a reply may have", "llm"),
    # ---- the vLLM plugin
    Setting("ARGUS_VLLM_OPS", ",".join(VLLM_OPS), _text, "the ops the plugin takes inside vLLM, comma-separated from "
            f"{', '.join(VLLM_OPS)} (none: stand aside)", "vllm"),
    Setting("ARGUS_VLLM_DISABLE", "", _text, "ops to leave to vLLM, subtracted from ARGUS_VLLM_OPS", "vllm"),
    Setting("ARGUS_VLLM_ALLOW_UNKNOWN", False, _bool, "try a vLLM version outside the tested range anyway", "vllm"),
    # ---- debugging and tests
    Setting("ARGUS_VERIFY_TRACE", False, _bool, "print the checker's obligations and z3 queries as it proves them",
            "debug"),
    Setting("ARGUS_TEST_DEVICE", "", _text, "tests: cuda runs the GPU tests (a machine with an sm_90 GPU)", "debug"),
    Setting("ARGUS_VLLM_REAL_REQUIRED", False, _bool, "tests: the real-vLLM tests fail, not skip, where vLLM does not "
            "import (scripts/test-vllm.sh sets it)", "debug"),
    Setting("ARGUS_KB_FULL", False, _bool, "benchmarks/kernelbench: the problems at full size on the CPU too (they are "
            "on a GPU)", "debug"),
)
_BY_ENV = {s.env: s for s in SETTINGS}


def setting(env: str) -> Setting:
    """The setting of variable `env` (KeyError for a name that is not a setting)."""
    return _BY_ENV[env]


def env(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of setting `name` from the environment (its default when unset or blank); ValueError with the
    variable's name when the text does not parse."""
    s = _BY_ENV[name]
    v = (os.environ if environ is None else environ).get(name)
    if v is None or v.strip() == "":
        return s.default
    return s.parse(name, v)


def env_number(name: str, default: Any, kind: type, positive: bool = False) -> Any:
    """The number in environment variable `name` (`default` when unset or blank); ValueError unless it parses as
    `kind` and is >= 0 (> 0 when `positive`). For settings whose default depends on the caller (a budget)."""
    _BY_ENV[name]  # a setting of this table: KeyError otherwise
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return _number(kind, positive)(name, v)


def _default(option: str) -> Any:
    return next(s.default for s in SETTINGS if s.option == option)


@dataclass(frozen=True)
class Options:
    """What the backend does: the settings of group "backend" (SETTINGS says what each means)."""

    interpret: bool = _default("interpret")
    report: bool = _default("report")
    on_miss: str = _default("on_miss")
    swapin: str = _default("swapin")
    swapin_background: bool = _default("swapin_background")
    cache_dir: str = _default("cache_dir")
    ops: str = _default("ops")
    verify: bool = _default("verify")
    verify_budget: float = _default("verify_budget")
    checker_workers: str | int = _default("checker_workers")
    optimize: bool = _default("optimize")
    cudagraphs: bool = _default("cudagraphs")
    cudagraph_copy_mb: float = _default("cudagraph_copy_mb")
    graph_replay: bool = _default("graph_replay")
    replay: bool = _default("replay")
    inline: bool = _default("inline")
    prune_rows: bool = _default("prune_rows")
    specialize_floats: bool = _default("specialize_floats")
    tune_seconds: float = _default("tune_seconds")
    tune_candidates: int = _default("tune_candidates")
    tune_lock: str = _default("tune_lock")

    @staticmethod
    def resolve(options: dict[str, Any] | None = None) -> Options:
        """torch.compile's `options` (names with or without an "argus_" prefix) over ARGUS_* variables over defaults;
        ValueError naming the option or variable for anything unknown or malformed."""
        values: dict[str, Any] = {s.option: env(s.env) for s in SETTINGS if s.option}
        names = {f.name for f in fields(Options)}
        by_option = {s.option: s for s in SETTINGS if s.option}
        for k, v in (options or {}).items():
            key = k[len("argus_"):] if k.startswith("argus_") else k
            if key not in names:
                raise ValueError(f"unknown Argus option {k!r}; known options: {', '.join(sorted(names))}")
            s = by_option[key]
            if isinstance(v, str) and not isinstance(s.default, str):
                v = s.parse(f"option {k!r}", v)  # a number or flag given as text, as the variable would be
            values[key] = v
        opts = Options(**values)
        if opts.on_miss not in ON_MISS:
            raise ValueError(f"ARGUS_ON_MISS / on_miss must be one of {ON_MISS}, got {opts.on_miss!r}")
        if opts.swapin not in SWAPIN:
            raise ValueError(f"ARGUS_SWAPIN / swapin must be one of {SWAPIN}, got {opts.swapin!r}")
        checker_workers(opts.checker_workers)  # ValueError naming the setting for a malformed count
        unknown = set(opts.enabled_ops) - set(OPS)
        if unknown:
            raise ValueError(f"ARGUS_OPS names unknown op kinds {sorted(unknown)}; known: {', '.join(OPS)}")
        return opts

    @property
    def enabled_ops(self) -> tuple[str, ...]:
        names = tuple(o.strip() for o in self.ops.split(",") if o.strip())
        return OPS if "all" in names else names


GROUPS = {"backend": "The backend (each also a `torch.compile(..., options={...})` key, without the ARGUS_ prefix, in "
                     "lower case)",
          "agent": "The agent", "llm": "The LLM endpoint", "vllm": "The vLLM plugin", "debug": "Debugging and tests"}


def table_markdown() -> str:
    """The configuration table README.md carries (between its config-table markers)."""
    out = []
    for group, title in GROUPS.items():
        out += [f"**{title}**", "", "| variable | default | meaning |", "| --- | --- | --- |"]
        for s in SETTINGS:
            if s.group != group:
                continue
            default = s.default if s.env != "ARGUS_CACHE_DIR" else "~/.cache/argus"
            shown = {True: "1", False: "0", "": "(unset)"}.get(default, default) if isinstance(default, (bool, str)) \
                else default
            out.append(f"| `{s.env}` | `{shown}` | {s.meaning} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
