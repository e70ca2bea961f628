"""benchmarks/warmup_workers.py (issue 44, item 5): its audit finds every kind of lost or torn write in a cache
directory the workers shared, its comparison finds signatures one run warmed and the other did not, and the
script runs `argus warmup` for real (here one worker under the interpreter; two GPUs on the device)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from benchmark_scripts import load

from argus_inductor.runtime.cache import CacheEntry, KernelCache
from argus_inductor.runtime.signature import make_signature


@pytest.fixture(scope="module")
def ww():
    return load("warmup_workers")


def _one(n: int, bm: int = 16) -> tuple[str, CacheEntry]:
    sig = make_signature("gemm", "", [torch.empty(8, 16), torch.empty(n, 16)], {"N": n, "K": 16}, {"M": 8})
    return sig.key(), CacheEntry(signature=sig.as_dict(), dsl_source="# dsl", triton_source="# triton",
                                 policy={"BM": bm, "BN": 32}, verification={"status": "verified"},
                                 versions={"torch": torch.__version__}, origin="warmup")


def _fill(root: Path, ns: list[int]) -> list[str]:
    cache = KernelCache(root)
    keys = []
    for n in ns:
        key, entry = _one(n)
        cache.put(key, entry)
        keys.append(key)
    (root / "experience.jsonl").write_text(json.dumps({"n": 1}) + "\n" + json.dumps({"n": 2}) + "\n")
    return keys


def test_a_cache_written_whole_passes_the_audit(ww, tmp_path: Path) -> None:
    keys = _fill(tmp_path, [32, 64, 96])
    a = ww.audit(tmp_path)
    assert a["whole"] and sorted(keys) == a["keys"] and len(a["plans"]) == 3


@pytest.mark.parametrize("plant, field", [
    ("torn_entry", "unreadable"), ("temporary", "leftover_tmp"), ("torn_jsonl", "unparsable"),
    ("set_aside", "set_aside"),
])
def test_the_audit_finds_each_kind_of_lost_or_torn_write(ww, tmp_path: Path, plant: str, field: str) -> None:
    keys = _fill(tmp_path, [32, 64])
    entry = tmp_path / "kernels" / f"{keys[0]}.json"
    if plant == "torn_entry":  # a writer that wrote half a file in place
        entry.write_text(entry.read_text()[:200])
    elif plant == "temporary":  # a writer that died between its temporary file and the rename
        (tmp_path / "kernels" / f".{keys[0]}.abc.tmp").write_text("{")
    elif plant == "torn_jsonl":  # two appends interleaved mid-line
        with (tmp_path / "experience.jsonl").open("a") as f:
            f.write('{"n": 3, "pl')
    else:  # the cache's reader met a bad entry and moved it aside
        entry.rename(entry.with_name(entry.name + ".bad-1-2"))
    a = ww.audit(tmp_path)
    assert not a["whole"] and a[field], a


def test_the_comparison_names_signatures_only_one_run_warmed_and_counts_same_plans(ww, tmp_path: Path) -> None:
    ka = _fill(tmp_path / "a", [32, 64, 96])
    kb = _fill(tmp_path / "b", [32, 64])
    KernelCache(tmp_path / "b").put(*_one(64, bm=64))  # the same signature, another plan
    c = ww.compare(ww.audit(tmp_path / "a"), ww.audit(tmp_path / "b"))
    assert not c["same_keys"] and c["only_first"] == [ka[2]] and c["only_second"] == []
    assert c["shared"] == 2 and c["same_plan"] == 1 and set(kb) <= set(ka)


def test_the_script_warms_a_model_for_real_and_writes_its_table(ww, tmp_path: Path) -> None:
    rc = ww.main(["--model", "tiny", "--tokens", "1", "--workers", "1", "--trials", "1",
                  "--seconds-per-signature", "3", "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path),
                  "--tag", "t"])
    doc = json.loads((tmp_path / f"{_stamp()}-t.json").read_text())
    run = doc["runs"][0]
    assert rc == 0 and run["rc"] == 0 and run["audit"]["whole"] and run["rows"] >= 5
    assert len(run["audit"]["keys"]) >= 5 and "| 1 |" in (tmp_path / f"{_stamp()}-t.md").read_text()


def _stamp() -> str:
    import datetime

    return "warmup-workers-" + datetime.date.today().isoformat()


def test_repeated_or_bad_worker_counts_are_usage_errors(ww, tmp_path: Path) -> None:
    for bad in ("1,1", "0", "x"):
        with pytest.raises(SystemExit) as e:
            ww.main(["--workers", bad, "--work-dir", str(tmp_path)])
        assert e.value.code == 2


def test_rows_stored_untuned_for_want_of_the_agent_are_counted_and_fail_the_table(ww) -> None:
    """The workers of a 2-GPU run stored every library signature untuned (no agent in a spawned process): the rows
    say so, the script counts them, and the table says the runs did not do the same work."""
    from argus_inductor.ops.plans import NO_AGENT

    rows = [{"source": f"library: template policy ({NO_AGENT}), verified"}, {"source": "library: tuned, 1.00x"},
            {"source": "baseline/template"}]
    assert ww.unsearched(rows) == 1
    audit = {"keys": [], "whole": True, "unreadable": [], "leftover_tmp": [], "set_aside": [], "unparsable": []}
    runs = [{"workers": 1, "wall_s": 2.0, "rc": 0, "rows": 3, "sources": {}, "unsearched": 0, "audit": audit},
            {"workers": 2, "wall_s": 1.0, "rc": 0, "rows": 3, "sources": {}, "unsearched": 1, "audit": audit}]
    md = ww.table(runs, [])
    assert "2 worker(s): 1 signature(s) stored untuned" in md and md.count("stored untuned") == 1
