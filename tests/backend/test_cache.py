"""The disk cache: entries round-trip, bad files are reported once and rebuilt, misses are recorded,
and several processes writing the same signature leave a working cache."""
from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing as mp
from pathlib import Path

import pytest
import torch

from argus_inductor import ops
from argus_inductor.runtime.cache import CacheEntry, KernelCache
from argus_inductor.runtime.signature import Signature, make_signature


def _sig(m: int = 8, n: int = 32, k: int = 16, epi: str = "bias") -> Signature:
    return make_signature("gemm", epi, [torch.empty(m, k), torch.empty(n, k)], {"N": n, "K": k}, {"M": m})


def _entry(sig: Signature, bm: int = 16) -> CacheEntry:
    return CacheEntry(signature=sig.as_dict(), dsl_source="# dsl", triton_source="# triton",
                      policy={"BM": bm, "BN": 32, "BK": 32, "num_warps": 4}, verification={"status": "not verified"},
                      timings={"ms": 1.5}, versions={"torch": torch.__version__}, origin="warmup")


def test_put_get_entries_and_signature_round_trip(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    sig = _sig()
    assert c.get(sig.key()) is None and c.entries() == [] and c.misses() == []
    c.put(sig.key(), _entry(sig))
    got = c.get(sig.key())
    assert got == _entry(sig) and got.sig() == sig
    assert Signature.from_dict(json.loads(json.dumps(sig.as_dict()))).key() == sig.key()
    assert [e.policy["BM"] for e in c.entries()] == [16]
    with pytest.raises(ValueError, match="origin"):
        CacheEntry({}, "", "", {}, {}, {}, {}, "guessed")
    with pytest.raises(ValueError, match="not a cache key"):
        c.get("../etc/passwd")


@pytest.mark.parametrize("damage", ["truncate", "tamper", "garbage", "wrong_key"])
def test_bad_entry_is_reported_once_then_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                 damage: str) -> None:
    c = KernelCache(tmp_path)
    sig = _sig()
    c.put(sig.key(), _entry(sig))
    p = c.path(sig.key())
    text = p.read_text()
    if damage == "truncate":
        p.write_text(text[: len(text) // 2])
    elif damage == "tamper":  # a policy changed by hand: the checksum no longer matches
        p.write_text(text.replace('"BM": 16', '"BM": 64'))
    elif damage == "garbage":
        p.write_bytes(b"\x00\xff not json")
    else:
        other = _sig(m=64)
        KernelCache(tmp_path / "other").put(other.key(), _entry(other))
        p.write_text((tmp_path / "other" / "kernels" / f"{other.key()}.json").read_text())
    with caplog.at_level(logging.WARNING, logger="argus_inductor"):
        assert c.get(sig.key()) is None
        assert c.get(sig.key()) is None
        assert c.entries() == []
    warned = [r for r in caplog.records if str(p) in r.getMessage()]
    assert len(warned) == 1 and "rebuilt" in warned[0].getMessage()
    assert list(p.parent.glob(f"{p.name}.bad-*")), "the bad file is kept aside for a person to look at"
    c.put(sig.key(), _entry(sig, bm=32))
    assert c.get(sig.key()).policy["BM"] == 32


def test_misses_are_recorded_once_per_process_and_read_back(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    a, b = _sig(m=8), _sig(m=100)
    for s in (a, b, a):
        c.record_miss(s)
    KernelCache(tmp_path).record_miss(a)  # another process (a fresh object) counts again
    with open(c.misses_file, "a") as f:
        f.write("{half a line\n")
    got = {m["key"]: m for m in c.misses()}
    assert got[a.key()]["count"] == 2 and got[b.key()]["count"] == 1
    assert Signature.from_dict(got[b.key()]["signature"]) == b and not got[b.key()]["solved"]
    c.put(b.key(), _entry(b))
    assert {m["key"]: m["solved"] for m in c.misses()} == {a.key(): False, b.key(): True}


def test_nearest_solved_signature_of_the_same_family(tmp_path: Path) -> None:
    c = KernelCache(tmp_path)
    for m, bm in ((8, 16), (1000, 64)):
        s = _sig(m=m)
        c.put(s.key(), _entry(s, bm=bm))
    other = _sig(m=8, epi="bias+relu")
    c.put(other.key(), _entry(other, bm=128))
    entry, dist = c.nearest(_sig(m=20))
    assert entry.policy["BM"] == 16 and dist > 0
    assert c.nearest(_sig(m=700))[0].policy["BM"] == 64
    assert c.nearest(_sig(epi="silu")) is None


def _warm_worker(root: str, rounds: int) -> int:
    import os

    os.environ["ARGUS_CACHE_DIR"] = root
    from argus_inductor import ops as o
    from argus_inductor.runtime.cache import KernelCache as KC

    c = KC(Path(root))
    sig = _sig()
    bad = 0
    for i in range(rounds):
        o.warm(sig, policy={"BM": 16, "BN": 32, "BK": 32, "num_warps": 4 if i % 2 else 8}, cache=c)
        KC(Path(root)).record_miss(sig)
        if c.get(sig.key()) is None:
            bad += 1
    return bad


def test_two_processes_warming_one_signature_leave_a_working_cache(tmp_path: Path) -> None:
    root = str(tmp_path / "shared")
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        bad = pool.starmap(_warm_worker, [(root, 12), (root, 12)])
    assert bad == [0, 0]
    c = KernelCache(Path(root))
    sig = _sig()
    e = c.get(sig.key())
    assert e is not None and e.origin == "warmup" and "gemm_epilogue" in e.dsl_source
    assert "@triton.jit" in e.triton_source and e.policy["num_warps"] in (4, 8)
    assert e.verification.get("status") in ("verified", "undecided", "violations", "not verified")
    assert [m["count"] for m in c.misses()] == [24]
    assert not list((Path(root) / "kernels").glob("*.tmp")), "no temporary file is left behind"


def test_entry_sources_and_verification(fresh_cache: Path) -> None:
    sig = _sig(epi="bias+silu")
    e = ops.warm(sig)
    assert e.dsl_source.startswith("from argus_inductor.dsl import *")
    assert "def gemm_epilogue" in e.dsl_source and "def gemm_epilogue" in e.triton_source
    assert e.policy == ops.SPECS["gemm"].template(sig, "interpret")
    assert e.versions["torch"] == sig.versions[0]
    v = e.verification
    assert v["status"] in ("verified", "undecided", "violations", "not verified")
    if v["status"] != "not verified":
        assert "gemm_epilogue" in v["kernels"]
    assert ops.kernel_cache().get(sig.key()) == e


def test_an_undecided_obligation_is_stored_as_undecided(fresh_cache: Path, monkeypatch) -> None:
    """No counterexample but an obligation the checker could not settle in time is not a proof: the entry says
    "undecided" (and the report line how many), and the plan still runs (only violations reject one)."""

    class Result:
        ok = True

        def to_json(self) -> dict:
            return {"ok": True, "violations": [], "undecided": ["write-all at line 12"]}

    monkeypatch.setattr(ops.entries, "_verifier", lambda: (lambda kernel, policy, shapes, **kw: Result()))
    e = ops.warm(_sig(epi="bias"))
    assert e.verification["status"] == "undecided" and e.verification["undecided"] == 1
    assert "1 obligation(s) undecided" in ops.core.verification_summary(e.verification)


def test_moe_entries_are_verified_under_the_routing_layout_the_host_guarantees(fresh_cache: Path,
                                                                              monkeypatch) -> None:
    """ops.moe's host lays the routed rows out in NB blocks of BM (P = NB * BM, real blocks' experts below E): the
    plan checker is told so, as the agent's MoE proofs are, so the template plans prove at Mixtral prefill (rows
    gathered, T == P), decode and interpreter sizes. Without it a warmup stored "violations" (gate-up rows never
    written, overlapping atomics in the down GEMM). A down GEMM that weights a row by the wrong pair is still
    caught."""
    from argus_inductor.dsl import kernels_from_source
    from argus_inductor.kernels import moe_down, moe_gate_up
    from argus_inductor.specs import Problem, moe_epilogue, signature_for

    for t, hd, inter, e, arch in ((4096, 4096, 14336, 8, "sm_90"), (1, 4096, 14336, 8, "sm_90"),
                                  (37, 64, 48, 4, "cpu")):
        sig = signature_for(Problem("moe", moe_epilogue(2), dict(HD=hd, I=inter, E=e, TOPK=2, T=t), "bfloat16", (),
                                    "cpu"), arch)
        entry = ops.make_entry(sig)
        assert entry.verification["status"] == "verified", (t, arch, entry.verification)
        gathered = entry.policy["moe_gate_up"].get("GATHERED") == 1
        assert gathered == (t == 4096)  # and then the row gather the host runs first is proven with the plan
        assert ("moe_gather" in entry.verification["kernels"]) == gathered
    good = "w = load(topk_weights[pair]).to(float32)"
    assert good in moe_down.ir.source
    bad = kernels_from_source("from argus_inductor.dsl import *\n" + moe_down.ir.source.replace(
        good, "w = load(topk_weights[rp]).to(float32)"))["moe_down"]
    entry = ops.make_entry(sig, kernels={"moe_gate_up": moe_gate_up, "moe_down": bad})
    v = entry.verification
    assert v["status"] == "violations" and v["kernels"]["moe_gate_up"]["ok"] and not v["kernels"]["moe_down"]["ok"]
    # a gather that copies the next slot's token row: caught where the gathered plan proves its host kernels
    gather_good = "pair = load(sorted_ids[rp])"
    assert gather_good in ops.moe.moe_gather.ir.source
    bad_gather = kernels_from_source("from argus_inductor.dsl import *\n" + ops.moe.moe_gather.ir.source.replace(
        gather_good, "pair = load(sorted_ids[rp + 1])"))["moe_gather"]
    sig = signature_for(Problem("moe", moe_epilogue(2), dict(HD=4096, I=14336, E=8, TOPK=2, T=4096), "bfloat16", (),
                                "cpu"), "sm_90")
    real = ops.moe._moe_host_kernels
    monkeypatch.setitem(ops.SPECS, "moe", dataclasses.replace(
        ops.SPECS["moe"], host_kernels=lambda *a: {n: (bad_gather, p) for n, (_, p) in real(*a).items()}))
    v = ops.make_entry(sig).verification
    assert v["status"] == "violations" and not v["kernels"]["moe_gather"]["ok"], v
