"""Turns a kernel into something you can call: lowering per policy, loading the Triton module,
binding tensor arguments to shape symbols, computing the grid, launching."""
from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import DSLError, LaunchError
from .evaluate import compile_scalar
from .frontend.module import read_function, read_module
from .ir import KernelIR, ScalarParam, TensorParam
from .lowering import LoweredSource, lower
from .lowerings import lowering_for
from .policy import Policy
from .types import TensorDType

_LOCK = threading.Lock()
_READING = threading.Lock()  # a kernel's IR is read once, whichever thread uses it first (Kernel.ir)
_PACKAGE = __name__.split(".")[0]  # argus_inductor
# observe_launches(): a function called with (compiled kernel, flat arguments, programs, what Triton returned)
# after every launch in this thread (argus_inductor.runtime.replay records an op call's launches through it)
_OBSERVER = threading.local()
_COMPILED: dict[tuple[str, str, str, tuple[tuple[str, int], ...]], CompiledKernel] = {}


def cache_dir() -> Path:
    return Path(os.environ.get("ARGUS_CACHE_DIR", Path.home() / ".cache" / "argus"))


def interpret_requested() -> bool:
    return os.environ.get("ARGUS_INTERPRET", "") not in ("", "0", "false", "False")


def default_target(device: Any = None) -> str:
    """Where a launch runs: the interpreter for CPU tensors, else the GPU's backend."""
    import torch

    if device is not None and getattr(device, "type", "cpu") == "cpu":
        return "interpret"
    if device is None and (interpret_requested() or not torch.cuda.is_available()):
        return "interpret"
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def _load_module(src: LoweredSource, target: str) -> Any:
    digest = hashlib.sha256(src.source.encode()).hexdigest()[:20]
    d = cache_dir() / "triton"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{src.name}_{digest}.py"
    if not path.exists() or path.read_text() != src.source:
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(src.source)
        os.replace(tmp, path)
    modname = f"argus_generated_{src.name}_{digest}_{target}"
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    if target == "interpret":
        # Triton decides between compiling and interpreting from this variable, at decoration time and
        # again at launch; a process that interprets Argus kernels keeps it set.
        if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and "triton.language" in sys.modules:
            import triton.language as tl

            if not type(tl.cdiv).__name__.startswith("Interpreted"):
                raise LaunchError("Argus kernels for CPU tensors need the Triton interpreter, but triton was "
                                  "imported before it was enabled: set ARGUS_INTERPRET=1 (or TRITON_INTERPRET=1) "
                                  "in the environment before Python starts")
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise LaunchError("this process interprets Triton kernels (TRITON_INTERPRET=1), so GPU kernels cannot be "
                          "compiled here; unset TRITON_INTERPRET/ARGUS_INTERPRET to run on the GPU")
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, src.name)


@dataclass
class CompiledKernel:
    ir: KernelIR
    policy: Policy
    target: str
    source: LoweredSource
    consts: dict[str, Any]
    fn: Any

    def __post_init__(self) -> None:
        # Everything that does not depend on the arguments is worked out once, so a launch costs a few
        # dictionary look-ups (this runs on every call of a compiled model's Argus op).
        self._runtime = [p for p in self.ir.params if isinstance(p, (TensorParam, ScalarParam))]
        self._launches: dict[tuple[Any, ...], tuple[list[Any], tuple[tuple[int, int | str], ...], int]] = {}
        self._names = {p.name for p in self._runtime}
        self._tensors = [p for p in self._runtime if isinstance(p, TensorParam)]
        self._scalars = [p for p in self._runtime if isinstance(p, ScalarParam)]
        self._mma_pairs = [(op.line, op.args[0].dtype, op.args[1].dtype) for op in self.ir.walk()
                           if op.kind == "mma" and not op.ghost
                           and (isinstance(op.args[0].dtype, TensorDType) or isinstance(op.args[1].dtype, TensorDType))]
        self._checked_dtypes: set[tuple[Any, ...]] = set()
        getters: list[tuple[str, Any]] = []
        for name in self.source.arg_names:
            if name in self._names:
                getters.append(("value", name))
            elif name in self.ir.symbols:
                getters.append(("symbol", name))
            elif name == "NUM_PROGRAMS":
                getters.append(("programs", None))
            else:
                tname, d = name.rsplit("_stride", 1)
                getters.append(("stride", (tname, int(d))))
        self._getters = getters
        assert self.ir.grid is not None
        self._grid_extents = [compile_scalar(e) for e in self.ir.grid.args]
        self._opts: dict[str, Any] = dict(self.consts)
        if self.target != "interpret":
            self._opts.update(num_warps=self.policy.num_warps, num_stages=self.policy.num_stages)
        self._order = self._direct_order()
        # tensors loaded through tensor descriptors: (name, position in the flat list, narrowest box per dim)
        index = {n: i for i, n in enumerate(self.source.arg_names)}
        self._described = [(name, index[name], box) for name, box in self.source.descriptors]
        self._siblings: dict[tuple[tuple[str, int], ...] | None, CompiledKernel] = {self.source.majors: self}

    @property
    def triton_source(self) -> str:
        return self.source.source

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        runtime = self._runtime
        if len(args) > len(runtime):
            raise LaunchError(f"{self.ir.name} takes {len(runtime)} arguments "
                              f"({', '.join(p.name for p in runtime)}), got {len(args)}")
        values: dict[str, Any] = {p.name: a for p, a in zip(runtime, args)}
        for k, a in kwargs.items():
            if k not in self._names:
                raise LaunchError(f"{self.ir.name} has no argument '{k}'")
            if k in values:
                raise LaunchError(f"argument '{k}' given twice")
            values[k] = a
        if len(values) != len(runtime):
            missing = [p.name for p in runtime if p.name not in values]
            raise LaunchError(f"{self.ir.name} is missing argument(s): {', '.join(missing)}")
        return values

    def launch_args(self, values: dict[str, Any]) -> tuple[list[Any], dict[str, int], Any]:
        import torch

        syms: dict[str, int] = {}
        device = None
        for p in self._tensors:
            t = values[p.name]
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"argument '{p.name}' must be a torch.Tensor, got {type(t).__name__}")
            shape = t.shape
            if len(shape) != len(p.dims):
                raise LaunchError(f"'{p.name}' must have {len(p.dims)} dimensions ({', '.join(p.dims)}), "
                                  f"got shape {tuple(shape)}")
            if t.is_floating_point() != (p.dtype_kind == "float"):
                kind = "a floating-point" if p.dtype_kind == "float" else "an integer"
                raise LaunchError(f"'{p.name}' must be {kind} tensor, got {t.dtype}")
            if device is None:
                device = t.device
            elif t.device != device:
                raise LaunchError(f"'{p.name}' is on {t.device} but other arguments are on {device}")
            for d, s in enumerate(p.dims):
                n = shape[d]
                old = syms.setdefault(s, n)
                if old != n:
                    owner = self.ir.symbols[s]
                    raise LaunchError(f"dimension {s} is {old} from {owner[0]}.shape[{owner[1]}] but "
                                      f"{n} from {p.name}.shape[{d}]")
        for p in self._scalars:
            v = values[p.name]
            if isinstance(v, torch.Tensor) and v.numel() == 1:
                v = v.item()
            if not isinstance(v, (int, float)):
                raise LaunchError(f"argument '{p.name}' must be a number, got {type(v).__name__}")
            values[p.name] = float(v) if p.dtype == "float32" else int(v)
        if self._mma_pairs:
            self.check_mma_dtypes(values)
        flat: list[Any] = []
        for kind, key in self._getters:
            if kind == "value":
                flat.append(values[key])
            elif kind == "symbol":
                flat.append(syms[key])
            elif kind == "stride":
                flat.append(values[key[0]].stride(key[1]))
            else:
                flat.append(None)  # NUM_PROGRAMS, filled once the grid is known
        return flat, syms, device

    def check_mma_dtypes(self, values: dict[str, Any]) -> None:
        key = tuple(values[p.name].dtype for p in self._tensors)
        if key in self._checked_dtypes:
            return

        def actual(dt: Any) -> str:
            name = str(values[dt.tensor].dtype).replace("torch.", "") if isinstance(dt, TensorDType) else dt.name
            return {"float": "float32", "half": "float16"}.get(name, name)

        for line, da, db in self._mma_pairs:
            a, b = actual(da), actual(db)
            if a != b:
                raise LaunchError(f"mma at line {line} of {self.ir.name} multiplies {a} by {b}: "
                                  "pass tensors of one dtype or cast in the kernel")
        self._checked_dtypes.add(key)

    def _tensor_slots(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[int, int | str], ...]:
        """Where each tensor argument goes in the flat launch list: (position, argument index or keyword)."""
        where: dict[str, int | str] = {p.name: i for i, p in enumerate(self._runtime[:len(args)])}
        where.update({k: k for k in kwargs})
        names = self.source.arg_names
        return tuple((names.index(p.name), where[p.name]) for p in self._tensors)

    def grid_size(self, syms: dict[str, int], values: dict[str, Any]) -> int:
        env = {**values, **syms, **self.consts}
        total = 1
        for f in self._grid_extents:
            total *= max(int(f(env)), 0)
        return total

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        # Launch memo: the same argument metadata (shapes, strides, dtypes, devices, scalar values) binds,
        # checks and sizes the grid the same way, so a repeated call only puts its tensors in their slots.
        key = _launch_key(args, kwargs)
        memo = self._launches.get(key) if key is not None else None
        if memo is None:
            values = self.bind(args, kwargs)
            flat, syms, device = self.launch_args(values)
            total = self.grid_size(syms, values)
            programs = total
            if total and self.policy.persistent:
                programs = min(total, _num_sms(device, self.target) * self.policy.programs_per_sm)
                flat[self.source.arg_names.index("NUM_PROGRAMS")] = programs
            if key is not None:
                slots = self._tensor_slots(args, kwargs)
                template = list(flat)
                for pos, _ in slots:
                    template[pos] = None  # the memo keeps no tensor alive
                memo = (template, slots, programs)
                if len(self._launches) > 256:
                    self._launches.clear()
                self._launches[key] = memo
        else:
            template, slots, programs = memo
            flat = list(template)
            for pos, src in slots:
                flat[pos] = args[src] if isinstance(src, int) else kwargs[src]
        if programs == 0:
            return
        if self._described:
            fit = self.for_operands(flat)
            if fit is not self:
                fit(*args, **kwargs)
                return
        observer = getattr(_OBSERVER, "fn", None)
        try:
            if observer is not None:
                _OBSERVER.launching = True
            launched = self.fn[(programs,)](*flat, **self._opts)
        except Exception as e:
            if type(e).__name__ == "OutOfResources":
                raise LaunchError(f"policy {self.policy.key()} does not fit kernel {self.ir.name} on this GPU "
                                  f"({e}); choose smaller tiles or fewer stages") from e
            raise
        finally:
            _OBSERVER.launching = False
        if observer is not None:
            observer(self, flat, programs, launched)

    def _majors(self, flat: list[Any]) -> tuple[tuple[str, int], ...] | None:
        """The stride-1 dimension of each tensor this kernel reads through descriptors (listed where it is not the
        last), or None where one of them is no tensor the copy engine can read: it needs a stride-1 dimension
        that every box spans at least 16 bytes along, a 16-byte aligned address, the other strides nonzero
        multiples of 16 bytes, and boxes of a multiple of 128 bytes (Triton 3.6's pipeliner stages them in a
        ring whose slots must stay 128-byte aligned: triton-lang/triton#10474)."""
        majors = []
        for name, pos, box in self._described:
            t = flat[pos]
            size, strides, shape = t.element_size(), t.stride(), t.shape
            unit = [d for d in range(len(strides)) if strides[d] == 1 and shape[d] > 1]
            c = unit[-1] if unit else len(strides) - 1
            if strides[c] != 1 or box[c] * size < 16 or math.prod(box) * size % 128 or t.data_ptr() % 16 or \
                    max(shape) >= 2 ** 31 or any(st * size % 16 or st == 0 for d, st in enumerate(strides) if d != c):
                return None
            if c != len(strides) - 1:
                majors.append((name, c))
        return tuple(majors)

    def for_operands(self, flat: list[Any]) -> CompiledKernel:
        """This kernel, or its sibling lowered for the operands' layouts: descriptors laid out around each tensor's
        stride-1 dimension, or pointer loads only (policy.tma off) where some operand fits no descriptor."""
        majors = self._majors(flat)
        fit = self._siblings.get(majors)
        if fit is None:
            if majors is None:
                fit = compile_ir(self.ir, replace(self.policy, tma=False), self.target)
            else:
                fit = compile_ir(self.ir, self.policy, self.target, majors)
            self._siblings[majors] = fit
        if fit is self and self.target == "cuda":
            _ensure_allocator()
        return fit

    def launch_flat(self, flat: list[Any], programs: int, launched: Any = None, stream: int | None = None) -> None:
        """Launch with an already bound argument list (as __call__ builds it). `launched`, the compiled Triton kernel
        an earlier launch returned, and `stream` skip Triton's binding and specialization: the caller vouches that
        the arguments specialize as that launch's did (same metadata, same 16-byte alignment of every pointer)."""
        if self._described:
            fit = self.for_operands(flat)
            if fit is not self:
                fit.launch_flat(flat, programs)  # same arguments: only the loads differ
                return
        order = self._order if launched is not None and stream is not None else None
        if order is None:
            self.fn[(programs,)](*flat, **self._opts)
            return
        full = [flat[i] if i >= 0 else v for i, v in order]
        launched.run(programs, 1, 1, stream, launched.function, launched.packed_metadata, None, None, None, *full)

    def _direct_order(self) -> list[tuple[int, Any]] | None:
        """The Triton function's parameters in order, each (index into the flat list, None) or (-1, its constexpr
        value): what its launcher takes. None where that cannot be worked out (then launches go through Triton)."""
        names = getattr(self.fn, "arg_names", None)
        index = {n: i for i, n in enumerate(self.source.arg_names)}
        if names is None or not all(n in index or n in self.consts for n in names) or \
                len(index) != sum(n in index for n in names):
            return None
        return [(index[n], None) if n in index else (-1, self.consts[n]) for n in names]


def _torch_scratch(size: int, alignment: int, stream: int | None) -> Any:
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator() -> None:
    """Kernels that build tensor descriptors on the device need a little global scratch per program, which Triton
    asks its allocator for at each launch; a thread that has none set gets torch's (a user's own is kept)."""
    from triton.runtime import _allocation

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        _allocation.set_allocator(_torch_scratch)


def compile_ir(ir: KernelIR, policy: Policy, target: str,
               majors: tuple[tuple[str, int], ...] = ()) -> CompiledKernel:
    """The compiled kernel of `ir` under `policy` for `target` (descriptors around `majors`, see lowering.lower),
    shared by every Kernel object with the same IR."""
    key = (ir.fingerprint(), policy.key(), target, majors)
    with _LOCK:
        hit = _COMPILED.get(key)
    if hit is None:
        src, consts = lower(ir, policy, target, majors)
        fn = _load_module(src, target)
        hit = CompiledKernel(ir, policy, target, src, consts, fn)
        with _LOCK:
            _COMPILED[key] = hit
    return hit


def launching() -> bool:
    """Whether this thread is inside an observed kernel launch (Triton's own work, not the caller's)."""
    return getattr(_OBSERVER, "launching", False)


class observe_launches:
    """Context manager: call `fn(compiled, flat, programs, launched)` after each DSL kernel launch in this thread."""

    def __init__(self, fn: Callable[[CompiledKernel, list[Any], int, Any], None],
                 opaque: Callable[[str], None] | None = None) -> None:
        self.fn = fn
        self.opaque = opaque  # told (with why) of a launch that bypasses the DSL runtime (a Gluon lowering)

    def __enter__(self) -> observe_launches:
        self.prev = getattr(_OBSERVER, "fn", None), getattr(_OBSERVER, "opaque", None)
        _OBSERVER.fn, _OBSERVER.opaque = self.fn, self.opaque
        return self

    def __exit__(self, *exc: Any) -> None:
        _OBSERVER.fn, _OBSERVER.opaque = self.prev


_SMS: dict[Any, int] = {}


def _launch_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a launch's binding depends on besides the tensors' addresses; None where an argument is neither a
    tensor nor a plain number (that call takes the checked path every time)."""
    import torch

    parts: list[Any] = []
    for a in (*args, *(kwargs[k] for k in sorted(kwargs))):
        if isinstance(a, torch.Tensor):
            parts.append((a.shape, a.stride(), a.dtype, a.device))
        elif type(a) in (int, float, bool):
            parts.append((type(a), a))
        else:
            return None
    if kwargs:
        parts.append(tuple(sorted(kwargs)))
    return tuple(parts)


def _num_sms(device: Any, target: str) -> int:
    if target == "interpret":
        return 3
    n = _SMS.get(device)
    if n is None:
        import torch

        n = _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return n


class Kernel:
    """A DSL kernel: its IR, and lowering + launching under a policy. `read` (with `name`), instead of `ir`: the IR
    is read at its first use (the package's own kernels, kernel())."""

    def __init__(self, ir: KernelIR | None = None, *, read: Callable[[], KernelIR] | None = None,
                 name: str | None = None, module: str | None = None) -> None:
        if ir is None and (read is None or name is None):
            raise TypeError("Kernel takes an IR, or a reader of one with its name")
        self._ir = ir
        self._read = read
        self.name = ir.name if ir is not None else name
        # the module that defines it under its name (@kernel of an imported module): another process imports the
        # same kernel from there (invariants/pool.py proves it in a worker); None for kernels read from text
        self.module = module
        self._by_policy: dict[tuple[Policy, str], CompiledKernel] = {}

    @property
    def ir(self) -> KernelIR:
        if self._ir is None:
            with _READING:
                if self._ir is None:
                    assert self._read is not None
                    try:
                        self._ir = self._read()
                    except DSLError as e:
                        raise e.with_traceback(None) from None
                    self._read = None
        return self._ir

    @property
    def is_read(self) -> bool:
        """Whether the kernel's source has been read into its IR."""
        return self._ir is not None

    def __repr__(self) -> str:
        return f"<argus kernel {self.name} ({self.ir.filename}:{self.ir.first_line})>"

    def default_policy(self) -> Policy:
        return Policy.make(**{p.name: p.default for p in self.ir.constexprs if p.default is not None})

    def compile(self, policy: Policy | None = None, target: str | None = None) -> CompiledKernel:
        policy = policy or self.default_policy()
        target = target or default_target()
        fast = self._by_policy.get((policy, target))  # the launch hot path: no key strings
        if fast is not None:
            return fast
        hit = compile_ir(self.ir, policy, target)
        if len(self._by_policy) > 1024:
            self._by_policy.clear()
        self._by_policy[(policy, target)] = hit
        return hit

    def triton_source(self, policy: Policy | None = None, target: str | None = None) -> str:
        """The Triton source this kernel lowers to under `policy` (its default policy when None) for `target` (by
        default where this process launches: the interpreter without a GPU or under TRITON_INTERPRET)."""
        src, _ = lower(self.ir, policy or self.default_policy(), target or default_target())
        return src.source

    def __call__(self, *args: Any, policy: Policy | None = None, target: str | None = None, **kwargs: Any) -> None:
        if target is None:
            dev = next((a.device for a in list(args) + list(kwargs.values()) if hasattr(a, "device")), None)
            target = default_target(dev)
        if policy is not None and policy.warp_specialize and target == "cuda":
            policy = self._hopper(policy, args, kwargs)
            if policy is None:
                return
        self.compile(policy, target)(*args, **kwargs)

    def _hopper(self, policy: Policy, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Policy | None:
        """Run the kernel's Gluon lowering (argus_inductor.hopper) if it takes this launch (None: it ran); else the
        policy the Triton lowering runs the launch with (the lowering's fallback for it)."""
        lowering = lowering_for(self.name)
        if lowering is None or kwargs:
            return policy
        if not lowering.launch(policy, *args):
            return lowering.fallback(policy, *args)
        opaque = getattr(_OBSERVER, "opaque", None)
        if opaque is not None:  # a recording of this call would miss the launch: it must not replay
            opaque(f"{self.name} ran its hand-written Gluon lowering, which launch recording cannot see")
        return None


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Decorator: read `fn`'s source into the DSL's IR (the body is never executed). A kernel of a module of yours is
    read here, so that an error in it points at your file when the module is imported. The package's own kernels
    (argus_inductor.*; every one is read by the test suite) are read at their first use: importing the package's
    kernels reads none of them, which keeps about 0.35 s of reading 49 kernels out of a first call whose graph
    needs none yet (the background swap-in runs Inductor's code first)."""
    module = getattr(fn, "__module__", None)  # importable by name elsewhere: not a script's, not a nested function
    if module == "__main__" or "." in getattr(fn, "__qualname__", "."):
        module = None
    if getattr(fn, "__module__", "").startswith(_PACKAGE + "."):
        return Kernel(read=lambda: read_function(fn), name=fn.__name__, module=module)
    try:
        return Kernel(read_function(fn), module=module)
    except DSLError as e:
        raise e.with_traceback(None) from None


def kernels_from_source(source: str, filename: str = "<generated>") -> dict[str, Kernel]:
    """Read every @kernel function of a module's source text without executing any of it.

    Only imports from argus_inductor.dsl are honoured (they bind names for the frontend); any other top-level
    statement, a function not decorated with the DSL's @kernel alone, and text past the bounds of dsl/limits.py are
    rejected with a DSLError (dsl/frontend/module.py), so text from an LLM or a cache file never runs as ordinary
    Python, and reading it never fails otherwise.
    """
    return {name: Kernel(ir) for name, ir in read_module(source, filename).items()}
