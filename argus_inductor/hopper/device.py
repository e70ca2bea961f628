"""What both Gluon lowerings need of the device and of Triton's compiler: the compute capability of a launch's
device (looked up once a device), and an offline sm_90 compile of a Gluon kernel (tests and audits on machines
without a GPU: Triton ships ptxas)."""
from __future__ import annotations

import functools
import os
from typing import Any

import torch


@functools.cache
def capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


@functools.cache
def sm_count(device: torch.device) -> int:
    """The device's SMs: a persistent lowering's program count (times its programs_per_sm)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def compile_sm90(fn: Any, descriptors: dict[str, Any], scalars: dict[str, str], consts: dict[str, Any],
                 **options: Any) -> Any:
    """Compile Gluon kernel `fn` for sm_90: `descriptors` (parameter -> a host tensor descriptor of the launch's
    kind), `scalars` (parameter -> Triton type, e.g. "i32", "*bf16"), `consts` (constexpr parameters); returns
    Triton's compiled kernel. Needs a process that does not interpret Triton kernels (TRITON_INTERPRET, or
    ARGUS_INTERPRET, which sets it)."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("this process interprets Triton kernels (TRITON_INTERPRET=1, set by ARGUS_INTERPRET=1): "
                           "compile the Gluon kernel in a process without either")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    sig = {**{n: mangle_type(d) for n, d in descriptors.items()}, **scalars, **{n: "constexpr" for n in consts}}
    src = GluonASTSource(fn, {n: sig[n] for n in fn.arg_names}, constexprs=consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
