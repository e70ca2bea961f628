"""The DSL frontend: reads a kernel's Python source (never executes it) into the typed IR.

core.py        the reader's state, errors, op emission, shared helpers
statements.py  assignments, loops, ifs
expressions.py operators, names, attributes, subscripts, calls
operations.py  the DSL operations (load, store, mma, tag, ...)
function.py    a kernel function: parameters and body -> KernelIR
module.py      kernel text as a module (imports, the @kernel decorator, limits) and decorated functions

It imports only the DSL's lower modules (errors, ir, lang, types, evaluate, limits).
"""
from .core import MISSING, Resolver, TensorRef, ViewRef
from .function import Frontend

__all__ = ["Frontend", "MISSING", "Resolver", "TensorRef", "ViewRef"]
