"""The ring-discipline proof of the Gluon GEMM lowering (argus_inductor.hopper.gemm): it keeps one wgmma in
flight from one K block into the next, so a slot is released an iteration after its wgmma was issued. The proof
follows that carried wgmma (argus_inductor.hopper.rings), proves the real partitions at every ring size the
lowering launches with, and each planted bug (a text edit of the real source) comes back with its line and a
concrete counterexample."""
from __future__ import annotations

import inspect

import pytest

from argus_inductor.hopper import gemm as gluon_gemm
from argus_inductor.hopper.rings import check_kernel, check_rings

RINGS = gluon_gemm.RINGS
LOADER = inspect.getsource(gluon_gemm._loader.fn)
CONSUMER = inspect.getsource(gluon_gemm._consumer.fn)
KERNEL = inspect.getsource(gluon_gemm.gemm_epilogue_ws.fn)
PARTITIONS = {"_loader": gluon_gemm._loader, "_consumer": gluon_gemm._consumer}
LOOP_MMA = "acc = warpgroup_mma(a_bufs.index(slot)"
FIRST_MMA = "acc = warpgroup_mma(a_bufs.index(0)"


def edited(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if fragment in ln)


@pytest.mark.parametrize("stages", range(2, 9))
def test_the_gemm_lowering_keeps_its_rings(stages: int) -> None:
    assert gluon_gemm.prove_rings(stages) == ()
    assert check_rings(LOADER, [CONSUMER], RINGS, (stages,)) == []


def test_releasing_a_slot_whose_wgmma_was_issued_last_iteration_before_it_retires_is_caught() -> None:
    """The release of block j - 1 moved above warpgroup_mma_wait(1): block j - 1's wgmma, issued in the previous
    iteration (or before the loop, for j = 1), is still running."""
    bad = edited(CONSUMER, "        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))\n"
                           "        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)\n",
                 "        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)\n"
                 "        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))\n")
    found = check_rings(LOADER, [bad], RINGS, (3,))
    assert found and {v.kind for v in found} == {"release-after-retire"}
    v = found[0]
    assert v.line == line_of(bad, "mbarrier.arrive(empty.index((j - 1) % STAGES)")
    assert "STAGES=3" in v.message and "j=" in v.message
    issued = {line_of(bad, FIRST_MMA), line_of(bad, LOOP_MMA)}
    assert any(f"wgmma issued at line {ln}" in v.message for ln in issued)


def test_keeping_two_wgmma_in_flight_is_caught() -> None:
    bad = edited(CONSUMER, "warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))",
                 "warpgroup_mma_wait(num_outstanding=2, deps=(acc, ))")
    kinds = {v.kind for v in check_rings(LOADER, [bad], RINGS, (4,))}
    assert "release-after-retire" in kinds or "unsupported" in kinds


def test_releasing_the_current_blocks_slot_is_caught() -> None:
    bad = edited(CONSUMER, "mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)",
                 "mbarrier.arrive(empty.index(j % STAGES), count=1)")
    found = {v.kind: v for v in check_rings(LOADER, [bad], RINGS, (2,))}
    v = found["release-after-retire"]
    assert v.line == line_of(bad, "mbarrier.arrive(empty.index(j % STAGES)")
    assert f"wgmma issued at line {line_of(bad, LOOP_MMA)}" in v.message
    assert "release-once" in found  # block 0 is never released, block n - 1 twice


def test_the_last_release_before_the_last_wgmma_retires_is_caught() -> None:
    """After the loop the last block's wgmma is the one carried out of the last iteration (or the first wgmma,
    where the loop ran none): releasing its slot before warpgroup_mma_wait(0) is caught on both paths."""
    bad = edited(CONSUMER, "    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))\n"
                           "    mbarrier.arrive(empty.index((n_blocks - 1) % STAGES), count=1)\n",
                 "    mbarrier.arrive(empty.index((n_blocks - 1) % STAGES), count=1)\n"
                 "    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))\n")
    found = check_rings(LOADER, [bad], RINGS, (2,))
    line = line_of(bad, "empty.index((n_blocks - 1) % STAGES)")
    assert {(v.kind, v.ring, v.line) for v in found} == {("release-after-retire", r, line) for r in ("A", "B")}
    assert all("n=" in v.message for v in found)


def test_a_last_block_never_released_is_caught() -> None:
    bad = edited(CONSUMER, "    mbarrier.arrive(empty.index((n_blocks - 1) % STAGES), count=1)\n", "")
    found = check_rings(LOADER, [bad], RINGS, (5,))
    assert {v.kind for v in found} == {"release-once"} and {v.ring for v in found} == {"A", "B"}
    assert all("never" in v.message and "STAGES=5" in v.message for v in found)


def test_a_b_tile_filled_into_another_slot_is_caught() -> None:
    bad = edited(LOADER, "ready.index(slot), b_bufs.index(slot))", "ready.index(slot), b_bufs.index(0))")
    (v,) = check_rings(bad, [CONSUMER], RINGS, (3,))
    assert (v.kind, v.ring, v.line) == ("fill", "B", line_of(bad, "b_bufs.index(0))"))
    assert "does not fill the slot" in v.message and "STAGES=3" in v.message


def test_reading_a_slot_without_waiting_for_its_fill_is_caught() -> None:
    bad = edited(CONSUMER, "        mbarrier.wait(ready.index(slot), ph)\n", "")
    found = check_rings(LOADER, [bad], RINGS, (2,))
    assert {(v.kind, v.ring) for v in found} == {("read-after-fill", "A"), ("read-after-fill", "B")}
    assert all(v.line == line_of(bad, LOOP_MMA) for v in found)


def test_the_kernel_is_read_from_its_warp_specialize_call() -> None:
    assert check_kernel(KERNEL, RINGS, (2, 6), partitions=PARTITIONS) == []


def test_an_empty_barrier_expecting_two_consumers_is_caught() -> None:
    """The GEMM has one consumer partition: an empty barrier counting two releases never completes a phase."""
    bad = edited(KERNEL, "mbarrier.init(empty.index(i), count=1)", "mbarrier.init(empty.index(i), count=2)")
    found = check_kernel(bad, RINGS, (2,), partitions=PARTITIONS)
    assert {(v.kind, v.line) for v in found} == {("barrier-count", line_of(bad, "mbarrier.init(empty.index(i)"))}
    assert "takes 1 arrival(s)" in found[0].message
