"""Compile a DSL kernel for a GPU architecture without the GPU: Triton's compiler (and the ptxas it ships) runs on
any machine, so a kernel and policy can be taken through TTIR, TTGIR, LLVM IR, PTX and the cubin here, and the
result says whether it compiles at all, what it costs (registers, spills, shared memory) and which Hopper
features it uses (wgmma, tensor descriptors, warp specialization).

The arguments are specialized as a launch on aligned, contiguous operands would be: pointers and integer sizes
16-divisible where they are, unit strides as constants. A process that interprets Triton kernels
(TRITON_INTERPRET=1) cannot do this; run `python -m argus_inductor.dsl.precompile` in a clean environment then.

    python -m argus_inductor.dsl.precompile argus_inductor.kernels:gemm_epilogue \\
        --policy BM=128,BN=256,BK=64,num_warps=8,persistent=True,tma=True --shapes M=4096,N=4096,K=4096,NB=4096
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

from .ir import ScalarParam, TensorParam
from .policy import LAUNCH_FIELDS, Policy

ARCHS = {"sm_90": ("cuda", 90, 32), "sm_100": ("cuda", 100, 32), "gfx942": ("hip", "gfx942", 64)}
_POINTER = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "int32": "*i32", "int64": "*i64",
            "int8": "*i8"}


@dataclass
class CompileReport:
    ok: bool
    error: str = ""
    registers: int | None = None     # per thread
    spills: int | None = None        # bytes of local memory a thread spills to
    shared_bytes: int | None = None
    wgmma: bool = False              # the PTX issues Hopper's warp-group mma
    descriptors: bool = False        # tensor-descriptor (TMA) copies in the PTX
    warp_specialized: bool = False   # the TTGIR has warp-specialized partitions (not just the loop's request)
    async_copies: int = 0            # cp.async copies in the PTX (a pipelined load of global into shared memory)
    vector_loads: int = 0            # ld.global of 2 or 4 elements at once
    scalar_loads: int = 0            # ld.global of one element (operands whose alignment Triton could not prove)


def _strides(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def compile_report(kernel: Any, policy: Policy, shapes: dict[str, int], dtype: str = "bfloat16",
                   dtypes: dict[str, str] | None = None, arch: str = "sm_90",
                   strides: dict[str, tuple[int, ...]] | None = None) -> CompileReport:
    """Compile `kernel` (a dsl Kernel) under `policy` for `arch`, its tensors contiguous with the sizes of `shapes`
    (every shape symbol) unless `strides` gives a tensor's (in elements: a transposed view), floating tensors of
    `dtype` unless `dtypes` names theirs."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("this process interprets Triton kernels; run argus_inductor.dsl.precompile in a process "
                           "without TRITON_INTERPRET")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .runtime import compile_ir

    backend, cap, warp = ARCHS[arch]
    try:
        ck = compile_ir(kernel.ir, policy, "cuda" if backend == "cuda" else "hip")
    except Exception as e:  # the DSL refused the policy (a tile below the mma minimum, an unknown constexpr)
        return CompileReport(False, f"{type(e).__name__}: {e}"[:500])
    dtypes = dtypes or {}
    values: dict[str, Any] = dict(shapes)
    kinds: dict[str, str] = {}
    for p in kernel.ir.params:
        if isinstance(p, TensorParam):
            dt = dtypes.get(p.name) or p.fixed_dtype or (dtype if p.dtype_kind == "float" else "int32")
            kinds[p.name] = _POINTER[dt]
            for d, st in enumerate((strides or {}).get(p.name) or _strides([shapes[s] for s in p.dims])):
                values[f"{p.name}_stride{d}"] = st
        elif isinstance(p, ScalarParam):
            kinds[p.name] = "fp32" if p.dtype == "float32" else "i32"
    if policy.persistent:
        values["NUM_PROGRAMS"] = 132
    signature: dict[str, str] = {}
    constexprs: dict[Any, Any] = {}
    divisible: list[int] = []
    for i, name in enumerate(ck.fn.arg_names):
        if name in ck.consts:
            signature[name] = "constexpr"
            constexprs[(i,)] = ck.consts[name]
        elif name in kinds and kinds[name].startswith("*"):
            signature[name] = kinds[name]
            divisible.append(i)  # a fresh allocation: 16-byte aligned
        elif values.get(name) == 1:
            signature[name] = "constexpr"  # Triton specializes an integer 1 into the kernel
            constexprs[(i,)] = 1
        else:
            signature[name] = kinds.get(name, "i32")
            v = values.get(name)
            if isinstance(v, int) and v % 16 == 0:
                divisible.append(i)
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    src = ASTSource(fn=ck.fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {k: getattr(policy, k) for k in ("num_warps", "num_stages")}
    try:
        compiled = triton.compile(src, target=GPUTarget(backend, cap, warp), options=options)
    except Exception as e:  # a policy that does not compile is a result, not a crash
        first = str(e).strip().splitlines()
        return CompileReport(False, f"{type(e).__name__}: {first[-1] if first else ''}"[:500])
    ptx = compiled.asm.get("ptx", "") or ""
    ttgir = compiled.asm.get("ttgir", "") or ""
    registers, spills = _resource_usage(compiled.asm.get("cubin"))
    loads = re.findall(r"\bld\.global[.\w]*", ptx)
    vector = sum(1 for ld in loads if ".v2" in ld or ".v4" in ld)
    return CompileReport(True, registers=registers, spills=spills,
                         shared_bytes=getattr(compiled.metadata, "shared", None), wgmma="wgmma" in ptx,
                         descriptors="cp.async.bulk.tensor" in ptx,
                         warp_specialized="ttg.warp_specialize" in ttgir,
                         async_copies=len(re.findall(r"\bcp\.async\.c[ag]\b", ptx)),
                         vector_loads=vector, scalar_loads=len(loads) - vector)


def _resource_usage(cubin: bytes | None) -> tuple[int | None, int | None]:
    """Registers per thread and spilled (local) bytes of a cubin, from the cuobjdump Triton ships; None where
    there is no cubin or tool."""
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not cubin or not os.path.exists(tool):
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"REG:(\d+).*LOCAL:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _parse_kv(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, _, v = part.partition("=")
        out[k] = True if v == "True" else False if v == "False" else int(v) if v.lstrip("-").isdigit() else v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", help="module:name of a DSL kernel, e.g. argus_inductor.kernels:gemm_epilogue")
    ap.add_argument("--policy", default="", help="constexprs and launch fields, k=v comma-separated")
    ap.add_argument("--shapes", required=True, help="every shape symbol of the kernel, k=v comma-separated")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(k for k in _POINTER if not k.startswith("int")))
    ap.add_argument("--arch", default="sm_90", choices=sorted(ARCHS))
    args = ap.parse_args(argv)
    mod_name, _, name = args.kernel.partition(":")
    try:
        kernel = getattr(importlib.import_module(mod_name), name)
    except (ImportError, AttributeError) as e:
        ap.error(f"no kernel {args.kernel!r} ({e})")
    pol = _parse_kv(args.policy)
    launch = {k: pol.pop(k) for k in list(pol) if k in LAUNCH_FIELDS}
    try:
        policy = Policy.make(**pol, **launch)
    except (TypeError, ValueError) as e:
        ap.error(f"--policy: {e}")
    if policy.warp_specialize:
        ap.error(f"--policy: warp_specialize: this command compiles the Triton lowering; {kernel.name}'s "
                 "warp-specialized lowering, where it has one, is Gluon code in argus_inductor.hopper (e.g. "
                 "argus_inductor.hopper.attention.compile_for_sm90)")
    shapes = _parse_kv(args.shapes)
    missing = [s for s in kernel.ir.symbols if s not in shapes]
    if missing:
        ap.error(f"--shapes needs {', '.join(missing)}")
    report = compile_report(kernel, policy, shapes, args.dtype, arch=args.arch)
    print(json.dumps(asdict(report)))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
