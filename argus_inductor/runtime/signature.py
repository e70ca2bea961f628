"""Shape signatures: what a cached kernel is specialized for."""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..config import VERSION as __version__


def bucket(n: int) -> str:
    """Dynamic dims are bucketed by power-of-two ranges: 1, 2, 3-4, 5-8, ..."""
    if n <= 2:
        return str(n)
    lo = 1 << ((n - 1).bit_length() - 1)
    return f"{lo + 1}-{lo * 2}"


def layout_of(t: torch.Tensor) -> str:
    """'row' when the last dim is contiguous, 'col' when the second-to-last is, else 'strided'."""
    if t.dim() >= 2 and t.stride(-1) == 1:
        return "row"
    if t.dim() >= 2 and t.stride(-2) == 1:
        return "col"
    return "strided" if t.dim() >= 2 else "vec"


def device_arch(device: torch.device) -> str:
    if device.type == "cuda":
        if getattr(torch.version, "hip", None):
            return getattr(torch.cuda.get_device_properties(device), "gcnArchName", "rocm").split(":")[0]
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return device.type


_MODELS: dict[Any, str] = {}


def device_model(device: torch.device) -> str:
    """The device model a measurement belongs to: name, multiprocessor count and memory size, e.g. "NVIDIA H200
    132sm 140GB" (an H100 SXM, an H100 PCIe and an H200 share sm_90 and differ here); the type for a CPU."""
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = _MODELS.get(index)
    if found is None:
        p = torch.cuda.get_device_properties(index)
        found = _MODELS[index] = f"{p.name} {p.multi_processor_count}sm {round(p.total_memory / 2**30)}GB"
    return found


_KEYS: dict[Any, str] = {}


@dataclass(frozen=True)
class Signature:
    op: str                        # gemm | bmm | attention | moe
    epilogue: str                  # e.g. "bias+silu", "causal", "gqa4"
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    static_dims: tuple[tuple[str, int], ...]
    dynamic_dims: tuple[tuple[str, str], ...]
    arch: str
    versions: tuple[str, str, str]
    # the GPU model (device_model) a GPU signature is specialized for: an H100's entry is not an H200's (it is a
    # starting point there: same_family ignores it); "" for the CPU and for signatures made before it was recorded
    device: str = ""

    def key(self) -> str:
        """The cache key: a hash of every field (computed once: every Argus call on the hot path asks for it). A
        signature with no device hashes as those made before the field existed, so their entries keep their keys."""
        k = _KEYS.get(self)
        if k is None:
            fields = asdict(self)
            if not self.device:
                del fields["device"]
            k = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]
            if len(_KEYS) > 65536:
                _KEYS.clear()
            _KEYS[self] = k
        return k

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (lists for tuples): what the cache and the misses file store."""
        return json.loads(json.dumps(asdict(self)))

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Signature:
        """The inverse of as_dict (what the cache and the misses file store)."""
        return Signature(str(d["op"]), str(d["epilogue"]), tuple(d["dtypes"]), tuple(d["layouts"]),
                         tuple((str(k), int(v)) for k, v in d["static_dims"]),
                         tuple((str(k), str(v)) for k, v in d["dynamic_dims"]), str(d["arch"]),
                         tuple(d["versions"]), str(d.get("device", "")))  # type: ignore[arg-type]

    def dims(self) -> dict[str, int]:
        """Every dim as a number: static dims exactly, dynamic dims as the top of their bucket."""
        out = dict(self.static_dims)
        for k, v in self.dynamic_dims:
            out[k] = int(v.split("-")[-1])
        return out

    def same_family(self, other: Signature) -> bool:
        """Same op, epilogue, dtypes, layouts and device: a policy of one is a sensible start for the other."""
        return (self.op, self.epilogue, self.dtypes, self.layouts, self.arch) == \
            (other.op, other.epilogue, other.dtypes, other.layouts, other.arch)

    def distance(self, other: Signature) -> float:
        """How far apart two signatures of one family are: the sum of |log2| ratios of their dims."""
        a, b = self.dims(), other.dims()
        if set(a) != set(b):
            return math.inf
        return sum(abs(math.log2(max(a[k], 1)) - math.log2(max(b[k], 1))) for k in a)

    def short(self) -> str:
        """One line for a person: op, epilogue, dims, dtypes, device. A library op's signature (conv, norms, ...:
        every dim of every operand, the call's arguments in its epilogue) reads as its operands' shapes and its
        arguments: `rms_norm([2,24,64] [64]; dim=[2], eps=1e-06) float32 cpu`. Layouts and versions are not shown:
        `labels` adds them where they tell two signatures apart."""
        lib = _library_text(self)
        if lib is not None:
            return lib
        dims = ",".join(f"{k}={v}" for k, v in self.static_dims + self.dynamic_dims)
        epi = f"[{self.epilogue}]" if self.epilogue else ""
        return f"{self.op}{epi}({dims}) {'/'.join(self.dtypes)} {self.arch}" + \
            (f" [{self.device}]" if self.device else "")


_OPERAND_DIM = re.compile(r"t(\d+)d(\d+)")


def _library_text(sig: Signature) -> str | None:
    """short() of a library op's signature (ops.library.library_signature: static dims t<i>d<j>, epilogue
    '<arguments JSON>|<1 per operand present, 0 per optional one absent>'), or None for any other signature."""
    args_text, bar, absent = sig.epilogue.rpartition("|")
    if not bar or sig.dynamic_dims or not sig.static_dims or set(absent) - {"0", "1"}:
        return None
    shapes: dict[int, dict[int, int]] = {}
    for k, v in sig.static_dims:
        m = _OPERAND_DIM.fullmatch(k)
        if m is None:
            return None
        shapes.setdefault(int(m[1]), {})[int(m[2])] = v
    try:
        args = json.loads(args_text) if args_text else {}
    except ValueError:
        return None
    if not isinstance(args, dict) or absent.count("1") < len(shapes):
        return None
    present = iter(range(absent.count("1")))
    operands = []
    for c in absent:
        if c == "0":
            operands.append("-")  # an optional operand the call left out (a conv without bias)
            continue
        dims = shapes.get(next(present), {})
        operands.append("[" + ",".join(str(dims[j]) for j in sorted(dims)) + "]")
    arg_text = ", ".join(f"{k}={_arg(v)}" for k, v in sorted(args.items()))
    dtypes = sig.dtypes[0] if len(set(sig.dtypes)) == 1 else "/".join(sig.dtypes)
    return f"{sig.op}({' '.join(operands)}{'; ' + arg_text if arg_text else ''}) {dtypes} {sig.arch}" + \
        (f" [{sig.device}]" if sig.device else "")


def _arg(v: Any) -> str:
    """An argument's value as compact JSON, a plain word without its quotes."""
    return v if isinstance(v, str) and v.isidentifier() else json.dumps(v, separators=(",", ":"))


def current_versions() -> tuple[str, str, str]:
    """(torch, triton, argus_inductor) of this environment, as a signature made here records them."""
    import triton

    return torch.__version__.split("+")[0], triton.__version__, __version__


VERSION_NAMES = ("torch", "triton", "argus")


def version_text(versions: Sequence[str], here: Sequence[str] | None = None) -> str:
    """'torch 2.12.0, triton 3.5.0': the versions a signature records, only those that differ from `here` when
    given (empty when none does)."""
    return ", ".join(f"{n} {v}" for n, v, h in zip(VERSION_NAMES, versions, here or ("",) * 3)
                     if here is None or v != h)


def labels(sigs: Sequence[Signature], here: Sequence[str] | None = None) -> list[str]:
    """short() of each signature, plus what tells it apart where that is not in short(): the versions it was
    made under where they differ from `here` (this environment's, current_versions()), and, among signatures that
    would still print alike, their layouts, their full versions and, as a last resort, their keys. So no two
    distinct signatures of one listing read the same."""
    out = []
    for s in sigs:
        other = version_text(s.versions, here) if here is not None else ""
        out.append(s.short() + (f" [made under {other}]" if other else ""))
    for extra in (lambda s: "layouts " + "/".join(s.layouts), lambda s: version_text(s.versions),
                  lambda s: "key " + s.key()):
        groups: dict[str, set[Signature]] = {}
        for s, text in zip(sigs, out):
            groups.setdefault(text, set()).add(s)
        clash = {t for t, g in groups.items() if len(g) > 1}
        if not clash:
            break
        out = [f"{text} [{extra(s)}]" if text in clash else text for s, text in zip(sigs, out)]
    return out


def make_signature(op: str, epilogue: str, tensors: list[torch.Tensor], static: dict[str, int],
                   dynamic: dict[str, int]) -> Signature:
    dev = tensors[0].device
    return Signature(op, epilogue, tuple(str(t.dtype).replace("torch.", "") for t in tensors),
                     tuple(layout_of(t) for t in tensors), tuple(sorted(static.items())),
                     tuple(sorted((k, bucket(v)) for k, v in dynamic.items())), device_arch(dev),
                     current_versions(), device_model(dev) if dev.type == "cuda" else "")
