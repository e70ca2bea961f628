"""Argus Inductor: a PyTorch compiler backend with proven tile kernels.

Importing it registers backend="argus" with Dynamo (an entry point does the same without the import).
"""
import os as _os

if _os.environ.get("ARGUS_INTERPRET", "") not in ("", "0", "false", "False"):
    # Triton picks interpreting or compiling when triton.language is first imported: decide before that.
    _os.environ["TRITON_INTERPRET"] = "1"

from . import hopper  # noqa: E402,F401  (registers the Gluon lowerings with the DSL)
from .backend import argus_backend, register  # noqa: E402
from .config import VERSION as __version__  # noqa: E402
from .graph.experts import optimize  # noqa: E402
from .ops import install_agent  # noqa: E402
from .runtime.reporting import report  # noqa: E402


def _agent():  # the ops reach the agent above them only through this (ops/plans.py)
    from . import agent

    return agent


install_agent(_agent)
register()

__all__ = ["argus_backend", "optimize", "register", "report", "__version__"]
