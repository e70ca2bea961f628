"""Where warm-up work comes from: the signatures recorded as cache misses, a transformers config.json with
token counts, a shapes file, or a named preset. Each becomes a Job: a problem (op, epilogue, dims, dtype) or a
recorded signature."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..kernels.gemm import cat_epilogue
from ..kernels.policies import GEMV_CAT_MAX_M
from ..runtime.signature import Signature
from ..specs import SPECS, Problem, attention_epilogue, moe_epilogue, problem_from_signature, signature_for
from ..specs.base import DTYPES


@dataclass(frozen=True)
class Job:
    problem: Problem                       # dims to synthesize at (device filled in by the worker)
    source: str                            # misses | config | shapes | preset
    signature: dict[str, Any] | None = None  # a recorded signature (misses): used as is
    label: str = ""
    rekeyed_from: str = ""                 # a recorded signature moved to this environment's versions: the old ones

    def signature_on(self, arch: str) -> Signature:
        if self.signature is not None:
            sig = Signature.from_dict(self.signature)
            # a recorded miss is of the device it ran on; a traced signature (arch "meta") is of the worker's
            return replace(sig, arch=arch, device=model_of(arch)) if self.source == "traced" else sig
        return signature_for(self.problem, arch)

    def to_json(self) -> dict[str, Any]:
        p = self.problem
        return {"problem": {"op": p.op, "epilogue": p.epilogue, "dims": p.dims, "dtype": p.dtype,
                            "layouts": list(p.layouts)}, "source": self.source, "signature": self.signature,
                "label": self.label, "rekeyed_from": self.rekeyed_from}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Job:
        p = d["problem"]
        return Job(Problem(p["op"], p["epilogue"], dict(p["dims"]), p["dtype"], tuple(p.get("layouts", ()))),
                   d["source"], d.get("signature"), d.get("label", ""), d.get("rekeyed_from", ""))


def model_of(arch: str) -> str:
    """The GPU model a signature of `arch` made on this machine names (runtime.signature.device_model): the visible
    GPU's where it is of `arch`, else none (the CPU, or a signature for another machine), as specs.signature_for."""
    import torch

    from ..runtime.signature import device_arch, device_model

    if arch != "cpu" and torch.cuda.is_available() and arch == device_arch(torch.device("cuda")):
        return device_model(torch.device("cuda"))
    return ""


class ShapesError(ValueError):
    pass


ENTRY_KEYS = ("op", "epilogue", "dtype", "layouts", "label", "causal")


def problem_from_entry(e: dict[str, Any], dtype: str = "bfloat16") -> Problem:
    """One shapes-file entry: {"op": "gemm", "M": 1, "N": 4096, "K": 4096} (epilogue "bias+silu" optional),
    {"op": "attention", "Z":.., "H":.., "HK":.., "S":.., "T":.., "D":.., "causal": true},
    {"op": "moe", "T":.., "HD":.., "I":.., "E":.., "TOPK":..}, {"op": "rmsnorm", "R":.., "C":..}; "dtype" optional.
    The format is documented for users in `argus warmup --help` (agent/cli.py SHAPES_FORMAT)."""
    if not isinstance(e, dict) or "op" not in e:
        raise ShapesError(f"a shapes entry must be an object with an 'op': {e!r}")
    op = str(e["op"])
    if op not in SPECS:
        raise ShapesError(f"unknown op {op!r} in {e!r}; known: {', '.join(SPECS)}")
    spec = SPECS[op]
    names = (*spec.static, *spec.dynamic)
    missing = [n for n in names if n not in e]
    if missing:
        raise ShapesError(f"{op} entry {e!r} lacks {', '.join(missing)} (a {op} takes {', '.join(names)})")
    unknown = [k for k in e if k not in names and k not in ENTRY_KEYS]
    if unknown:
        raise ShapesError(f"{op} entry {e!r}: unknown key(s) {', '.join(map(str, unknown))} (a {op} takes "
                          f"{', '.join(names)}, and optionally {', '.join(ENTRY_KEYS[1:])})")
    bad = [n for n in names if isinstance(e[n], bool) or not isinstance(e[n], int)]
    if bad:
        raise ShapesError(f"{op} entry {e!r}: {', '.join(f'{n}={e[n]!r}' for n in bad)} must be integers")
    dims = {n: int(e[n]) for n in names}
    if any(v < 1 for v in dims.values()):
        raise ShapesError(f"dims must be >= 1: {e!r}")
    epilogue = str(e.get("epilogue", ""))
    if op == "attention" and "epilogue" not in e:
        if dims["H"] % dims["HK"]:
            raise ShapesError(f"H must be a multiple of HK: {e!r}")
        epilogue = attention_epilogue(dims["H"], dims["HK"], bool(e.get("causal", False)))
    if op == "moe" and "epilogue" not in e:
        epilogue = moe_epilogue(dims["TOPK"])
    layouts = tuple(e.get("layouts", ()))
    dt = str(e.get("dtype", dtype))
    if dt not in DTYPES:
        raise ShapesError(f"{op} entry {e!r}: dtype {dt!r} is not one of {', '.join(DTYPES)}")
    problem = Problem(op, epilogue, dims, dt, layouts)
    try:
        signature_for(problem, "cpu")  # the epilogue and layouts as the op reads them
    except (ValueError, KeyError, IndexError) as err:
        raise ShapesError(f"{op} entry {e!r}: {err}") from None
    return problem


def from_shapes_file(path: Path | str, dtype: str = "bfloat16") -> list[Job]:
    """The jobs of a shapes file (the format: `argus warmup --help`); a ShapesError names the file and the entry."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ShapesError(f"cannot read shapes file {path}: {e}") from None
    if not isinstance(data, list):
        raise ShapesError(f"{path}: expected a JSON list of shape objects (see `argus warmup --help`)")
    jobs = []
    for i, e in enumerate(data, 1):
        try:
            jobs.append(Job(problem_from_entry(e, dtype), "shapes",
                            label=e.get("label", "") if isinstance(e, dict) else ""))
        except ShapesError as err:
            raise ShapesError(f"{path}, entry {i}: {err}") from None
    return jobs


def from_misses(misses: list[dict[str, Any]]) -> list[Job]:
    """The signatures recorded by earlier runs (KernelCache.misses()) that are still unsolved."""
    out = []
    for m in misses:
        if m.get("solved"):
            continue
        sig = Signature.from_dict(m["signature"])
        try:
            prob = problem_from_signature(sig)
        except (KeyError, ValueError):
            continue  # an op the agent does not synthesize (reported by the caller as skipped)
        out.append(Job(prob, "misses", sig.as_dict(), label=f"seen {m.get('count', 1)}x"))
    return out


def _first(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def from_config(config: dict[str, Any], tokens: list[int], dtype: str = "bfloat16", context: int = 4096,
                batch: int = 1) -> list[Job]:
    """The GEMM, attention and MoE problems of one decoder layer (and the LM head) of a transformers config, for
    each token count: prefill attention is causal over `tokens`; a token count of 1 is decode against a KV cache
    of `context` tokens for each of `batch` sequences."""
    cfg = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    try:
        h = int(cfg["hidden_size"])
        nh = int(cfg["num_attention_heads"])
    except KeyError as e:
        raise ShapesError(f"config lacks {e.args[0]}") from None
    nkv = int(_first(cfg, "num_key_value_heads", default=nh))
    hd = int(_first(cfg, "head_dim", default=h // nh))
    inter = int(_first(cfg, "intermediate_size", default=4 * h))
    experts = _first(cfg, "num_local_experts", "num_experts", "n_routed_experts")
    topk = _first(cfg, "num_experts_per_tok", "moe_topk")
    moe_inter = int(_first(cfg, "moe_intermediate_size", default=inter))
    vocab = _first(cfg, "vocab_size")
    jobs: list[Job] = []

    def add(op: str, epilogue: str, dims: dict[str, int], label: str) -> None:
        jobs.append(Job(Problem(op, epilogue, dims, dtype), "config", label=label))

    for t in tokens:
        m = t * batch if t == 1 else t
        # the backend fuses a few-row step's q, k and v projections into one launch where its rows are known at
        # compile time (one row always is; 2-4 under static shapes only)
        if m <= GEMV_CAT_MAX_M:
            add("gemm", cat_epilogue((nh * hd, nkv * hd, nkv * hd)), {"N": (nh + 2 * nkv) * hd, "K": h, "M": m},
                f"q/k/v_proj T={t}")
        if m > 1:
            add("gemm", "", {"N": nh * hd, "K": h, "M": m}, f"q_proj T={t}")
            if nkv != nh:
                add("gemm", "", {"N": nkv * hd, "K": h, "M": m}, f"k/v_proj T={t}")
        add("gemm", "", {"N": h, "K": nh * hd, "M": m}, f"o_proj T={t}")
        if experts and topk:
            add("gemm", "", {"N": int(experts), "K": h, "M": m}, f"router T={t}")
            add("moe", moe_epilogue(int(topk)), {"HD": h, "I": moe_inter, "E": int(experts), "TOPK": int(topk), "T": m},
                f"experts T={t}")
        else:  # the backend fuses the gated MLP's gate and up projections into one "<act>*up" GEMM
            act = str(_first(cfg, "hidden_act", "hidden_activation", default="silu"))
            act = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}.get(act, act)
            add("gemm", f"{act}*up", {"N": inter, "K": h, "M": m}, f"gate/up_proj T={t}")
            add("gemm", "", {"N": h, "K": inter, "M": m}, f"down_proj T={t}")
        if vocab:
            add("gemm", "", {"N": int(vocab), "K": h, "M": m}, f"lm_head T={t}")
        if t == 1:
            add("attention", attention_epilogue(nh, nkv, False),
                {"H": nh, "HK": nkv, "D": hd, "Z": batch, "S": 1, "T": context}, f"decode attention ctx={context}")
        else:
            add("attention", attention_epilogue(nh, nkv, True),
                {"H": nh, "HK": nkv, "D": hd, "Z": 1, "S": t, "T": t}, f"prefill attention T={t}")
    return jobs


def read_config(path: Path | str) -> dict[str, Any]:
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ShapesError(f"cannot read config {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise ShapesError(f"{path}: not a JSON object")
    return cfg


def from_config_file(path: Path | str, tokens: list[int], dtype: str = "bfloat16", context: int = 4096,
                     batch: int = 1) -> list[Job]:
    return from_config(read_config(path), tokens, dtype, context, batch)


def from_traced(signatures: list[Signature]) -> tuple[list[Job], list[Signature]]:
    """Traced signatures (agent/trace.py) as the agent's jobs, and the rest: the general op classes' signatures
    (norms, rotary tables, routers: library_ops), which `argus warmup` tunes as it does their recorded misses."""
    jobs, library = [], []
    for sig in signatures:
        try:
            prob = problem_from_signature(sig)
        except (KeyError, ValueError):
            library.append(sig)
            continue
        jobs.append(Job(prob, "traced", sig.as_dict(), label="traced"))
    return jobs, library


@dataclass
class Preset:
    name: str
    doc: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    gpu: bool = False  # sized for a GPU: `argus warmup` refuses it on a machine without one unless --force


def _fast_kernels() -> Preset:
    """The shapes of the Fast kernels benchmark (benchmarks/ops.py: GEMM_M x GEMM_NK + 8192^3, ATTN, MOE)."""
    gemm_nk = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
    entries: list[dict[str, Any]] = [{"op": "gemm", "M": m, "N": n, "K": k} for m in (1, 16, 128, 4096)
                                     for n, k in gemm_nk]
    entries.append({"op": "gemm", "M": 8192, "N": 8192, "K": 8192})
    attn = [(4, 32, 32, 4096, 4096, 128, True), (4, 32, 32, 4096, 4096, 128, False),
            (16, 32, 32, 1024, 1024, 128, True), (1, 32, 32, 16384, 16384, 128, True),
            (8, 16, 16, 2048, 2048, 64, False), (4, 32, 8, 4096, 4096, 128, True), (32, 32, 8, 1, 8192, 128, False)]
    entries += [{"op": "attention", "Z": z, "H": h, "HK": hk, "S": s, "T": t, "D": d, "causal": c}
                for z, h, hk, s, t, d, c in attn]
    entries += [{"op": "moe", "T": t, "HD": hd, "I": i, "E": e, "TOPK": k}
                for hd, i, e, k in ((4096, 14336, 8, 2), (2048, 768, 128, 8)) for t in (1, 64, 4096)]
    return Preset("fast-kernels", "the Fast kernels benchmark shapes (GEMM, attention, MoE; bf16)", entries, gpu=True)


PRESETS = {"fast-kernels": _fast_kernels}


def from_preset(name: str, dtype: str = "bfloat16", ops: set[str] | None = None) -> list[Job]:
    if name not in PRESETS:
        raise ShapesError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    p = PRESETS[name]()
    return [Job(problem_from_entry(e, dtype), "preset", label=name) for e in p.entries
            if ops is None or e["op"] in ops]
