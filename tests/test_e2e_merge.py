"""benchmarks/e2e.py --merge: runs split across GPUs (by phase, or by backend) joined into one table, each model's
cells from the run that measured them; here on the H200 runs of 2026-11-29 (prefill on one GPU, decode on the
other)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import BENCHMARKS, load

RESULTS = BENCHMARKS / "results"


@pytest.fixture(scope="module")
def e2e():
    return load("e2e")


def _doc(name: str) -> dict:
    return json.loads((RESULTS / f"e2e-2026-11-29-{name}-h200.json").read_text())


def test_a_prefill_run_and_a_decode_run_make_one_table(e2e, tmp_path: Path) -> None:
    rc = e2e.main(["--merge", str(RESULTS / "e2e-2026-11-29-qwen2-prefill-h200.json"),
                   str(RESULTS / "e2e-2026-11-29-qwen2-decode-h200.json"), "--tag", "t", "--out", str(tmp_path)])
    assert rc == 0
    merged = json.loads((tmp_path / "e2e-2026-11-29-t.json").read_text())
    (model,) = merged["results"]
    argus = model["results"]["argus"]
    prefill, decode = _doc("qwen2-prefill"), _doc("qwen2-decode")
    assert argus["prefill 1x2048"] == prefill["results"][0]["results"]["argus"]["prefill 1x2048"]
    assert argus["decode b=32"] == decode["results"][0]["results"]["argus"]["decode b=32"]
    assert set(model["results"]) == {"eager", "argus", "max-autotune", "argus-all-rows"}
    assert merged["meta"]["merged_from"] == ["e2e-2026-11-29-qwen2-prefill-h200.json",
                                             "e2e-2026-11-29-qwen2-decode-h200.json"]
    md = (tmp_path / "e2e-2026-11-29-t.md").read_text()
    assert "| prefill 8x512 | 8.424 | 3.504 | 7.030 | 6.452 |" in md and "| decode b=1 (per token) | 3.868 |" in md


def test_the_same_cell_measured_twice_is_refused(e2e) -> None:
    with pytest.raises(ValueError, match="measured by two of the runs"):
        e2e.merge([_doc("qwen2-decode"), _doc("qwen2-decode")])


def test_a_backend_one_run_skipped_and_another_measured_is_not_shown_skipped(e2e) -> None:
    cell = {"ms": 1.0, "rel_err": 0.01, "ok": True, "rows": 1, "rows_off": [], "first_call_s": 2.0}
    skipped = {"results": [{"model": "m", "layers": 2, "results": {"argus-all-rows": {"skipped": "time box"}}}]}
    measured = {"results": [{"model": "m", "layers": 2, "results": {"argus-all-rows": {"prefill 1x2048": cell}}}]}
    results, backends, _ = e2e.merge([skipped, measured])
    row = results[0]["results"]["argus-all-rows"]
    assert backends == ["argus-all-rows"] and "skipped" not in row and row["prefill 1x2048"] == cell


def test_a_wrong_answer_gets_no_speed_ratio(e2e) -> None:
    """The H200's Llama decode at batch 32 (2026-11-29, morning) gave wrong logits 1.68x faster than max-autotune: the
    table says it is wrong instead of how fast it was. That run's cell, put into a right run's table."""
    doc = _doc("llama-decode")
    res = doc["results"][0]["results"]
    would_be = res["max-autotune"]["decode b=32"]["ms"] / 0.864844024181366
    right = res["max-autotune"]["decode b=1"]["ms"] / res["argus"]["decode b=1"]["ms"]
    res["argus"]["decode b=32"] = {
        "ms": 0.864844024181366, "host_ms": 0.284, "rel_err": 0.6953, "median_row_err": 0.6962,
        "rows_off": list(range(32)), "rows": 32, "ok": False, "first_call_s": 87.99}
    md = e2e.table(doc["results"], ["eager", "max-autotune", "argus"])
    row = next(line for line in md.splitlines() if line.startswith("| decode b=32 (per token)"))
    assert "(MISMATCH)" in row and "| wrong answer | wrong answer |" in row and f"{would_be:.2f}x" not in row, row
    row1 = next(line for line in md.splitlines() if line.startswith("| decode b=1 (per token)"))
    assert f"| {right:.2f}x |" in row1, row1
