"""How pipelined loops stage their loads: the model the checker proves the ring-buffer obligation against.

A `Staging` says how one load of a loop body is buffered (ring slots, how far ahead it is issued, how many
earlier iterations may still be reading); `default_staging` is Triton's software pipelining, and
`warp_specialized_staging` the ring of the Hopper lowerings (argus_inductor.hopper).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..dsl.ir import Block, Op, Value, walk_block
from ..dsl.policy import Policy


@dataclass(frozen=True)
class Staging:
    """How a pipelined loop stages one load: `buffers` ring slots, the load for iteration it+distance
    issued at iteration it, and the tiles of the last `readers` iterations possibly still being read
    (an asynchronous mma that has not retired)."""

    buffers: int
    distance: int
    readers: int = 0


StagingHook = Callable[[Policy, Op, Op], Staging | None]


def default_staging(policy: Policy, loop: Op, load: Op) -> Staging | None:
    """Triton's software pipelining: num_stages buffers, loads issued num_stages - 1 iterations ahead; a
    warp-specialized policy's loops stage as its Gluon lowering does (warp_specialized_staging)."""
    if policy.warp_specialize:
        return warp_specialized_staging(policy, loop, load)
    if policy.num_stages <= 1:
        return None
    return Staging(buffers=policy.num_stages, distance=policy.num_stages - 1, readers=0)


def mmas_reading(loop: Op, load: Op) -> list[Op]:
    """The loop body's mma ops that read the tile `load` makes, through any ops that only reshape it (trans,
    cast), in body order."""
    seen = {id(load.result)}
    out = []
    for op in loop.blocks[0].ops:
        if op.kind == "mma" and any(id(a) in seen for a in op.args):
            out.append(op)
        elif op.kind in ("trans", "cast", "reshape") and any(id(a) in seen for a in op.args):
            seen.update(id(r) for r in op.results)
    return out


def only_accumulates(loop: Op, mma: Op) -> bool:
    """Whether the body uses `mma`'s result only by handing it to the next iteration (an accumulator the
    iteration does not read again; statements for the checker aside), so a lowering may leave that mma in flight
    across the iteration's end."""
    body = loop.blocks[0]
    out = id(mma.result)
    used = any(id(a) == out for op in body.ops if not op.checker_only for a in op.args)
    return not used and any(id(y) == out for y in body.yields)


def warp_specialized_staging(policy: Policy, loop: Op, load: Op) -> Staging | None:
    """The ring of the Hopper lowerings (argus_inductor.hopper): a loader warp fills `num_stages` slots ahead of the
    consumers, each slot guarded by an "empty" barrier that every consumer arrives on once the wgmma reading the
    slot has retired. An mma whose result only accumulates (the iteration does not read it) is left in flight while
    the consumers issue the next iteration's first one (a GEMM: block j's products while block j - 1's finish;
    attention: Q K_j^T together with P_{j-1} V_{j-1}): a tile that such an mma reads is released only in the next
    iteration (`readers` = 1); a tile read only by mma whose result the iteration needs (attention's Q K^T), in its
    own. The loader may refill a slot as soon as it is released, so at iteration it it may have issued the load of
    iteration it + num_stages - 1 - readers."""
    mmas = mmas_reading(loop, load)
    if not mmas or policy.num_stages < 2:  # a Gluon ring has two slots or more; one slot pipelines nothing
        return None
    readers = 1 if any(only_accumulates(loop, m) for m in mmas) else 0
    return Staging(buffers=policy.num_stages, distance=policy.num_stages - 1 - readers, readers=readers)



def first_user(block: Block, v: Value) -> Op | None:
    derived = {v.id}
    for op in walk_block(block):
        if any(a.id in derived for a in op.args):
            if op.kind in ("cast", "trans", "expand", "broadcast_to", "reshape"):
                derived.update(r.id for r in op.results)
                continue
            return op
    return None



__all__ = ["Staging", "StagingHook", "default_staging", "warp_specialized_staging", "mmas_reading",
           "only_accumulates", "first_user"]
