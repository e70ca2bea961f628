"""ARGUS_ON_MISS=synthesize on a library op class: the policy search runs on the call's operands (interpreted
here), keeps only candidates that agree with torch, hands the winner to the checker and caches it; the next
process reads the cache. Planted faults: a candidate that computes a wrong answer or fails to launch is
dropped, and a wrong template is not tuned at all."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import argus_inductor.ops.library  # noqa: F401  (registers torch.ops.argus.library)
from argus_inductor import ops
from argus_inductor.agent import tune
from argus_inductor.config import Options
from argus_inductor.runtime import reporting as report_mod


def _library_sum(x: torch.Tensor, node: str = "t:sum") -> torch.Tensor:
    return torch.ops.argus.library("reduce", [x], json.dumps({"kind": "sum", "dim": [1], "keepdim": True}), node)


def _use(**opts: object) -> None:
    ops.set_active_options(Options.resolve({"interpret": True, "ops": "all", **opts}))
    ops.forget_plans()


def test_synthesize_tunes_a_library_miss_verifies_and_caches_it(fresh_cache: Path) -> None:
    _use(on_miss="synthesize", tune_candidates=6, tune_seconds=60)
    x = torch.randn(3, 37, 21)
    out = _library_sum(x)
    torch.testing.assert_close(out, x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    (entry,) = report_mod.entries()
    assert entry.source.startswith("synthesized (tuned, "), entry.source
    cached = list(ops.kernel_cache().entries())
    assert len(cached) == 1
    stored = cached[0]
    assert stored.origin == "synthesized" and stored.verification["status"] == "verified"
    assert stored.timings["candidates"] >= 2 and stored.timings["ms"] <= stored.timings["template_ms"] * 1.0001
    # a fresh process (no plan memo) takes the stored policy from the cache, with fresh operands
    _use(on_miss="fallback")
    report_mod.clear()
    y = torch.randn(3, 37, 21)
    torch.testing.assert_close(_library_sum(y), y.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    assert report_mod.entries()[0].source.startswith("cache (synthesized, verified")


def test_moves_stay_in_range_and_touch_one_knob() -> None:
    p = {"k": {"BR": 1, "BI": 8192, "KIND": 3, "HAS_W": 1, "num_warps": 16, "num_stages": 1}}
    assert tune.knobs(p) == [("k", "BI"), ("k", "BR"), ("k", "num_warps"), ("k", "num_stages")]
    moves = list(tune.neighbours(p))
    assert {"BR": 2} in [{k: v for k, v in m["k"].items() if v != p["k"][k]} for m in moves]
    assert all(m["k"]["KIND"] == 3 and m["k"]["HAS_W"] == 1 for m in moves)  # semantic constexprs never move
    assert all(1 <= m["k"]["BR"] and m["k"]["BI"] <= tune.MAX_TILE and m["k"]["num_warps"] <= 16
               and m["k"]["num_stages"] >= 1 for m in moves)
    assert all(sum(m["k"][k] != p["k"][k] for k in p["k"]) == 1 for m in moves)


def test_wrong_or_failing_candidates_are_dropped() -> None:
    """A planted fault: with BR=64 the 'kernel' answers wrong, with num_warps=8 it fails to launch; the search
    drops both and never returns them, whatever their time."""
    x = torch.randn(64, 64)
    ref = x.sum(1)

    def run(policy: dict) -> torch.Tensor:
        p = policy["k"]
        if p["num_warps"] == 8:
            raise RuntimeError("out of resources: shared memory")
        return x.sum(1) * (1.5 if p["BR"] == 64 else 1.0)

    res = tune.search({"k": {"BR": 32, "num_warps": 4, "num_stages": 3}}, run, "interpret", ref,
                      max_candidates=12, gain=-10.0)  # gain < 0: every agreeing move is taken
    dropped = {tune.key(r["policy"]): r.get("dropped", "") for r in res.tried}
    assert any("relative error" in why for why in dropped.values())
    assert any("out of resources" in why for why in dropped.values())
    assert res.policy["k"]["BR"] != 64 and res.policy["k"]["num_warps"] != 8
    assert all(p["k"]["BR"] != 64 and p["k"]["num_warps"] != 8 for p, _ in tune.ranked(res))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the device allocator's block reuse needs a GPU")
def test_a_candidate_that_leaves_part_of_its_output_unwritten_is_dropped() -> None:
    """A planted fault: with BR=64 the 'kernel' writes only the first half of a fresh torch.empty output. The
    caching allocator hands it the block the previous run freed, which held a correct output; the search
    poisons that block first, so the unwritten half reads NaN and the candidate is dropped."""
    x = torch.randn(4096, 256, device="cuda")
    ref = x.sum(1)

    def run(policy: dict) -> torch.Tensor:
        out = torch.empty(4096, device="cuda")
        rows = 2048 if policy["k"]["BR"] == 64 else 4096
        out[:rows] = x[:rows].sum(1)
        return out

    res = tune.search({"k": {"BR": 32, "num_warps": 4, "num_stages": 3}}, run, "cuda", ref, max_candidates=12,
                      gain=-10.0)
    dropped = {r["policy"]["k"]["BR"]: r.get("dropped", "") for r in res.tried}
    assert 64 in dropped and "NaN" in dropped[64], res.tried
    assert all(p["k"]["BR"] != 64 for p, _ in tune.ranked(res))


def test_a_wrong_template_is_not_tuned() -> None:
    x = torch.randn(8, 8)
    with pytest.raises(ValueError, match="disagrees with torch"):
        tune.search({"k": {"BR": 32, "num_warps": 4}}, lambda p: x.sum(1) + 1.0, "interpret", x.sum(1))


def test_tune_budget_options_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARGUS_TUNE_SECONDS", "soon")
    with pytest.raises(ValueError, match="ARGUS_TUNE_SECONDS must be a number"):
        Options.resolve()
    monkeypatch.setenv("ARGUS_TUNE_SECONDS", "5")
    assert Options.resolve().tune_seconds == 5.0


def test_tiles_do_not_grow_past_the_limit() -> None:
    p = {"k": {"BM": 64, "BN": 64, "num_warps": 4, "num_stages": 3}}
    grown = [m for m in tune.neighbours(p, {"k": 64 * 64}) if m["k"]["BM"] * m["k"]["BN"] > 64 * 64]
    assert grown == []
    assert len([m for m in tune.neighbours(p, {"k": 64 * 64 * 2})
                if m["k"]["BM"] * m["k"]["BN"] > 64 * 64]) == 2


def test_timing_lock_excludes_other_processes_and_nests_in_one(tmp_path: Path) -> None:
    import subprocess
    import sys

    from argus_inductor.runtime.timing import exclusive

    lock = str(tmp_path / "gpu.lock")
    probe = ("import fcntl, sys\nf = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
             "except BlockingIOError:\n    print('held')\n")
    with exclusive(lock):
        with exclusive(lock):  # a search timing inside a benchmark's locked phase: no self-deadlock
            inner = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True).stdout
        outer = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True).stdout
    after = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True).stdout
    assert (inner.strip(), outer.strip(), after.strip()) == ("held", "held", "free")


def test_float32_precision_follows_torch_settings_per_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Matmuls follow torch's float32 matmul precision; convolutions follow cuDNN's allow_tf32 (tf32 by default,
    as cuDNN runs them), so a float32 conv is not slowed to three-pass tf32 that torch itself does not use."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert ops.fp32_precision("gemm") == "ieee" and ops.fp32_precision("conv") == "tf32"
        torch.set_float32_matmul_precision("high")
        assert ops.fp32_precision("bmm") == "tf32x3"
        torch.set_float32_matmul_precision("medium")
        assert ops.fp32_precision("bmm") == "tf32"
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
        assert ops.fp32_precision("conv_chain") == "tf32x3"
    finally:
        torch.set_float32_matmul_precision(old)
