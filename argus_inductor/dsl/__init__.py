"""The Argus tile DSL: write a kernel as a Python function, get a typed IR, lower it to Triton.

    from argus_inductor.dsl import *

    @kernel
    def add(X: Tensor("N"), Y: Tensor("N"), Out: Tensor("N"), BLOCK: constexpr = 1024):
        (pid,) = tile_grid(cdiv(N, BLOCK))
        r = pid * BLOCK + arange(BLOCK)
        store(Out[r], load(X[r]) + load(Y[r]))
"""
from . import lang
from .errors import DSLError, LaunchError
from .ir import KernelIR
from .lang import *  # noqa: F403
from .policy import Policy
from .runtime import CompiledKernel, Kernel, kernel, kernels_from_source

__all__ = ["kernel", "Kernel", "CompiledKernel", "KernelIR", "Policy", "DSLError", "LaunchError",
           "kernels_from_source", "lang", *lang.__all__]
