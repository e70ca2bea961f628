"""Argus Inductor: a PyTorch compiler backend with proven tile kernels.

    import argus_inductor                       # registers backend="argus" with Dynamo
    compiled = torch.compile(model, backend="argus")

Importing the package registers the Gluon lowerings with the DSL, the backend with Dynamo (the
`torch_dynamo_backends` entry point does that without the import) and the agent with the ops. Where torch is not
imported yet (the `argus` command), the last two wait until the package's API is first used, so `argus --help` needs
no torch.
"""
import os as _os
import sys as _sys

if _os.environ.get("ARGUS_INTERPRET", "") not in ("", "0", "false", "False"):
    # Triton picks interpreting or compiling when triton.language is first imported: decide before that.
    _os.environ["TRITON_INTERPRET"] = "1"

from . import hopper  # noqa: E402,F401  (registers the Gluon lowerings with the DSL: cheap, no torch)
from .config import VERSION as __version__  # noqa: E402

_API = ("argus_backend", "optimize", "register", "report", "settle")


def _load() -> None:
    """Import the backend (which registers everything) and bind the package's API."""
    from . import backend
    from .graph.experts import optimize
    from .runtime.reporting import report
    from .runtime.tiers import settle

    globals().update(argus_backend=backend.argus_backend, register=backend.register, optimize=optimize,
                     report=report, settle=settle)


def __getattr__(name: str):  # noqa: ANN202
    if name in _API:
        _load()
        return globals()[name]
    raise AttributeError(f"module 'argus_inductor' has no attribute {name!r}")


if "torch" in _sys.modules:  # a program that uses torch: register now, as importing the package promises
    _load()

__all__ = [*_API, "__version__"]
