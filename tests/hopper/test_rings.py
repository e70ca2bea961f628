"""The ring-discipline proof of Gluon lowerings (argus_inductor.hopper.rings), on the attention lowering's own
partitions: it proves them at both ring sizes the lowering launches with, and each planted bug below (a text edit
of the real partition source) comes back as the violation it is, with its line and a concrete counterexample."""
from __future__ import annotations

import inspect

import pytest

from argus_inductor.hopper import attention as gluon_attention
from argus_inductor.hopper.rings import Ring, check_kernel, check_rings

RINGS = gluon_attention.RINGS
LOADER = inspect.getsource(gluon_attention._loader.fn)
CONSUMER = inspect.getsource(gluon_attention._consumer.fn)


def edited(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if fragment in ln)


@pytest.mark.parametrize("stages", [2, 3])
def test_the_attention_lowering_keeps_its_rings(stages: int) -> None:
    assert gluon_attention.prove_rings(stages) == ()
    assert check_rings(LOADER, [CONSUMER, CONSUMER], RINGS, (stages,)) == []


def test_releasing_v_before_its_wgmma_retires_is_caught() -> None:
    bad = edited(CONSUMER, "        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))\n"
                           "        mbarrier.arrive(v_empty.index(pslot), count=1)\n",
                 "        mbarrier.arrive(v_empty.index(pslot), count=1)\n"
                 "        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))\n")
    (v,) = check_rings(LOADER, [bad], RINGS, (2,))
    assert (v.kind, v.ring, v.line) == ("release-after-retire", "V", line_of(bad, "arrive(v_empty.index(pslot)"))
    issued = line_of(bad, "acc = warpgroup_mma(p_op, v_bufs.index(pslot)")
    assert f"wgmma issued at line {issued}" in v.message and "j=1" in v.message and "STAGES=2" in v.message


def test_waiting_for_the_wrong_phase_is_caught() -> None:
    bad = edited(CONSUMER, "mbarrier.wait(v_ready.index(pslot), pph)", "mbarrier.wait(v_ready.index(pslot), ph)")
    (v,) = check_rings(LOADER, [bad], RINGS, (2,))
    assert (v.kind, v.ring, v.line) == ("read-after-fill", "V", line_of(bad, "mbarrier.wait(v_ready.index(pslot)"))
    assert "wrong phase" in v.message and "n=" in v.message


def test_a_block_never_released_is_caught() -> None:
    bad = edited(CONSUMER, "    mbarrier.arrive(v_empty.index(lslot), count=1)\n", "")
    (v,) = check_rings(LOADER, [bad], RINGS, (3,))
    assert v.kind == "release-once" and v.ring == "V" and "never" in v.message and "STAGES=3" in v.message


def test_releasing_the_previous_blocks_slot_is_caught() -> None:
    bad = edited(CONSUMER, "mbarrier.arrive(k_empty.index(slot), count=1)", "mbarrier.arrive(k_empty.index(pslot), count=1)")
    (v,) = check_rings(LOADER, [bad], RINGS, (2,))
    assert v.kind == "release-once" and v.ring == "K" and "block 0" in v.message and "2 times" in v.message


def test_reading_without_waiting_for_the_fill_is_caught() -> None:
    bad = edited(CONSUMER, "        mbarrier.wait(k_ready.index(slot), ph)\n", "")
    (v,) = check_rings(LOADER, [bad], RINGS, (2,))
    assert v.kind == "read-after-fill" and v.ring == "K" and "without waiting on k_ready" in v.message


def test_a_loader_refilling_before_the_release_is_caught() -> None:
    bad = edited(LOADER, "mbarrier.wait(v_empty.index(slot), ph ^ 1)", "mbarrier.wait(v_empty.index(slot), ph)")
    (v,) = check_rings(bad, [CONSUMER], RINGS, (2,))
    assert (v.kind, v.ring, v.line) == ("fill", "V", line_of(bad, "mbarrier.wait(v_empty.index(slot)"))
    assert "release of block idx - 2" in v.message


def test_what_the_reader_cannot_follow_is_reported_not_passed() -> None:
    """A slot carried in a loop variable (`index += 1`, the GEMM probe's style) is not `block % STAGES`: the proof
    says so instead of passing."""
    carried = edited(CONSUMER, "        slot = j % STAGES\n", "        slot += 1\n")
    kinds = {v.kind for v in check_rings(LOADER, [carried], RINGS, (2,))}
    assert kinds & {"read-after-fill", "release-once"}
    unknown_ring = [Ring("Q", "q_bufs", "q_ready", "q_empty")]
    found = {(v.kind, v.function): v.message for v in check_rings(LOADER, [CONSUMER], unknown_ring, (2,))}
    assert "never fills q_bufs" in found["fill", "_loader"] and "never" in found["release-once", "_consumer"]


def test_a_release_under_a_runtime_condition_is_reported_not_counted() -> None:
    """`if j > 1: arrive(...)` never releases block 0's K slot. The reader used to read a wait or release under a
    condition as unconditional (to let attention's turn-taking barriers through) and passed it; now a ring barrier
    under a condition is reported, while the turn barriers, which no ring uses, still pass."""
    bad = edited(CONSUMER, "        mbarrier.arrive(k_empty.index(slot), count=1)\n",
                 "        if j > 1:\n            mbarrier.arrive(k_empty.index(slot), count=1)\n")
    found = check_rings(LOADER, [bad], RINGS, (2,))
    assert ("unsupported", line_of(bad, "            mbarrier.arrive(k_empty.index(slot)")) in \
        {(v.kind, v.line) for v in found}
    assert any("arrive under a runtime condition" in v.message for v in found)
    assert "if PINGPONG:" in CONSUMER and check_rings(LOADER, [CONSUMER], RINGS, (3,)) == []


def test_verify_reports_a_lowering_whose_rings_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    from argus_inductor.dsl.policy import Policy
    from argus_inductor.invariants.api import verify
    from argus_inductor.kernels.attention import attention_fwd

    pol = Policy.make(BM=128, BN=128, num_warps=8, num_stages=2, warp_specialize=True).with_consts(
        BD=64, CAUSAL=0, HAS_MASK=0)
    shapes = dict(Z=1, H=2, HK=2, S=1024, T=1024, D=64)
    good = verify(attention_fwd, pol, shapes)
    assert good.ok and any("rings are proved at 2 slots" in n for n in good.notes)
    bad_consumer = edited(CONSUMER, "        mbarrier.wait(k_ready.index(slot), ph)\n", "")
    monkeypatch.setattr(gluon_attention, "prove_rings",
                        lambda stages: tuple(check_rings(LOADER, [bad_consumer], RINGS, (stages,))))
    bad = verify(attention_fwd, pol, shapes)
    assert not bad.ok and bad.errors and "Gluon lowering: read-after-fill (K)" in bad.errors[0]


KERNEL = inspect.getsource(gluon_attention.attention_fwd_ws.fn)
PARTITIONS = {"_loader": gluon_attention._loader, "_consumer": gluon_attention._consumer}


def test_the_kernel_is_read_from_its_warp_specialize_call() -> None:
    """check_kernel finds the loader and the two consumer partitions in the kernel's gl.warp_specialize call and
    proves the rings and the barrier counts (what prove_rings runs)."""
    assert check_kernel(KERNEL, RINGS, (2, 3), partitions=PARTITIONS) == []


@pytest.mark.parametrize("count", [1, 3])
def test_an_empty_barrier_counting_the_wrong_number_of_consumers_is_caught(count: int) -> None:
    """count=1 with two consumers: the first release completes the phase and the loader refills a slot the other
    warp group still reads; count=3: the phase never completes and the loader hangs."""
    bad = edited(KERNEL, "mbarrier.init(v_empty.index(i), count=2)", f"mbarrier.init(v_empty.index(i), count={count})")
    (v,) = check_kernel(bad, RINGS, (2,), partitions=PARTITIONS)
    assert (v.kind, v.ring, v.line) == ("barrier-count", "V", line_of(bad, "mbarrier.init(v_empty.index(i)"))
    assert f"count={count}" in v.message and "takes 2 arrival(s)" in v.message


def test_a_partition_it_cannot_resolve_is_reported() -> None:
    (v,) = check_kernel(KERNEL, RINGS, (2,), partitions={"_loader": gluon_attention._loader})
    assert v.kind == "unsupported" and "_consumer cannot be resolved" in v.message
