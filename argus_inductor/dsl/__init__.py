"""The Argus tile DSL: write a kernel as a Python function, get a typed IR, lower it to Triton.

    from argus_inductor.dsl import *

    @kernel
    def add(X: Tensor("N"), Y: Tensor("N"), Out: Tensor("N"), BLOCK: constexpr = 1024):
        (pid,) = tile_grid(cdiv(N, BLOCK))
        r = pid * BLOCK + arange(BLOCK)
        store(Out[r], load(X[r]) + load(Y[r]))

May import: nothing of argus_inductor outside dsl/ (torch and triton only). Imported by every layer above it.
"""
from . import lang
from .errors import DSLError, LaunchError
from .ir import KernelIR
from .lang import *  # noqa: F403
from .policy import Policy
from .runtime import CompiledKernel, Kernel, kernel, kernels_from_source

__all__ = ["kernel", "Kernel", "CompiledKernel", "KernelIR", "Policy", "DSLError", "LaunchError",
           "kernels_from_source", "lang", *lang.__all__]
