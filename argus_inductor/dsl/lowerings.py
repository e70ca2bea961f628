"""Hand-written lowerings of DSL kernels beside the Triton one, by kernel name: a kernel whose policy says
`warp_specialize=True` takes its registered lowering where the launch meets that lowering's preconditions (on
NVIDIA sm_90), and the Triton lowering otherwise. argus_inductor.hopper registers its Gluon lowerings here when it
is imported (the package root imports it), so the DSL never imports the layers over it.

A lowering is a module with launch(policy, *args) -> bool (whether it ran), fallback(policy, *args) -> the Triton
policy of a launch it declines, policy_fits(policy) -> why it cannot take the policy's tiles (None: it can), and
prove_rings(stages) -> its ring-discipline violations.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_LOADERS: dict[str, Callable[[], Any]] = {}
_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


def register_lowering(kernel_name: str, loader: Callable[[], Any]) -> None:
    """`loader()` returns the module of `kernel_name`'s lowering (it may raise ImportError: a Triton without it)."""
    with _LOCK:
        _LOADERS[kernel_name] = loader
        _LOADED.pop(kernel_name, None)


def has_lowering(kernel_name: str) -> bool:
    return kernel_name in _LOADERS


def lowering_for(kernel_name: str) -> Any:
    """The module of `kernel_name`'s lowering, or None where it has none (or this Triton cannot build it)."""
    if kernel_name in _LOADED:  # the launch path asks on every call
        return _LOADED[kernel_name]
    loader = _LOADERS.get(kernel_name)
    mod = None
    if loader is not None:
        try:
            mod = loader()
        except ImportError:  # a Triton without triton.experimental.gluon
            mod = None
    with _LOCK:
        _LOADED[kernel_name] = mod
    return mod


def takes(kernel_name: str, policy: Any) -> bool:
    """Whether `kernel_name`'s lowering runs with `policy`'s tiles and ring (its launches may still decline
    operands); where not, a warp_specialize request runs the Triton lowering at the policy as it is."""
    mod = lowering_for(kernel_name)
    return mod is not None and mod.policy_fits(policy) is None


def ring_proof(kernel_name: str, stages: int) -> list[str]:
    """The ring-discipline violations of `kernel_name`'s lowering at `stages` slots, as text; empty when proved, or
    when the kernel has no such lowering."""
    mod = lowering_for(kernel_name)
    return [] if mod is None else [str(v) for v in mod.prove_rings(stages)]


__all__ = ["register_lowering", "has_lowering", "lowering_for", "takes", "ring_proof"]
