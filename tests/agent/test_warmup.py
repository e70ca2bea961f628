"""`argus warmup` on the CPU: fills the cache from a shapes file, and a second run skips everything."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argus_inductor.agent import cli, shapes
from argus_inductor.runtime.cache import KernelCache
from argus_inductor.specs import Problem, signature_for

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [
    {"op": "softmax", "R": 6, "C": 40, "dtype": "float32"},
    {"op": "softmax", "R": 7, "C": 40, "dtype": "float32"},   # same signature (R bucket 5-8): one job
    {"op": "gemm", "M": 9, "N": 24, "K": 40, "dtype": "float32", "epilogue": "bias+relu"},
]


def args(shapes_file: Path, cache: Path, tmp: Path, *more: str) -> list[str]:
    return ["--shapes", str(shapes_file), "--cache-dir", str(cache), "--policy", "offline", "--trials", "1",
            "--json-out", str(tmp / "rows.json"), "--table-out", str(tmp / "table.md"), *more]


def test_warmup_fills_the_cache_and_a_second_run_skips_everything(tmp_path: Path, capsys) -> None:
    sf = tmp_path / "shapes.json"
    sf.write_text(json.dumps(SHAPES))
    cache = tmp_path / "cache"
    assert cli.main(args(sf, cache, tmp_path)) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 2
    assert all(r["source"].split("/")[0] in ("baseline", "offline") for r in rows), rows
    kc = KernelCache(cache)
    assert len(kc.entries()) == 2
    for r in rows:
        e = kc.get(r["key"])
        assert e is not None and e.origin == "warmup" and e.verification["ok"]
        assert (cache / "kernels" / f"{r['key']}.trials.jsonl").is_file()
    assert len((cache / "experience.jsonl").read_text().splitlines()) == 2
    out = capsys.readouterr()
    assert "| signature | source |" in out.out and "2 synthesized" in out.out
    assert "2/2" in out.err  # the progress line

    t0 = time.perf_counter()
    assert cli.main(args(sf, cache, tmp_path)) == 0
    rows2 = json.loads((tmp_path / "rows.json").read_text())
    assert [r["source"] for r in rows2] == ["cache (already there)"] * 2
    assert time.perf_counter() - t0 < 20
    assert "0 synthesized, 2 already cached" in (tmp_path / "table.md").read_text()


def test_without_a_gpu_warmup_and_bench_follow_one_rule(tmp_path: Path) -> None:
    """A process started without ARGUS_INTERPRET on a machine without a GPU: `argus warmup` and `argus bench` both
    turn the Triton interpreter on for themselves and say so (bench used to refuse while warmup ran)."""
    sf = tmp_path / "shapes.json"
    sf.write_text(json.dumps(SHAPES[:1]))
    env = {k: v for k, v in os.environ.items() if k not in ("ARGUS_INTERPRET", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    rule = "no GPU here: Argus kernels run under the Triton interpreter (ARGUS_INTERPRET=1 for this run)"
    for argv in (["warmup", *args(sf, tmp_path / "c", tmp_path)], ["bench", "--cache-dir", str(tmp_path / "c")]):
        proc = subprocess.run([sys.executable, "-m", "argus_inductor.cli", *argv], env=env, capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"argus {argv[0]}: {rule}" in proc.stderr
        assert "interpreter" in proc.stdout  # the times it prints are marked as the interpreter's
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert rows[0]["source"].split("/")[0] in ("baseline", "offline")


def test_misses_and_model_configs_become_jobs(tmp_path: Path) -> None:
    kc = KernelCache(tmp_path)
    sig = signature_for(Problem("gemm", "", {"N": 24, "K": 40, "M": 9}, "float32"), "cpu")
    kc.record_miss(sig)
    jobs = shapes.from_misses(kc.misses())
    assert len(jobs) == 1 and jobs[0].signature_on("cpu") == sig
    mixtral = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
               "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
    jobs = shapes.from_config(mixtral, [1, 2048])
    ops = [(j.problem.op, j.problem.epilogue, j.problem.dims.get("M", j.problem.dims.get("T"))) for j in jobs]
    assert ("moe", "top2,silu", 1) in ops and ("moe", "top2,silu", 2048) in ops
    # decode's q, k and v as the one launch the backend fuses them into; prefill's as three GEMMs
    assert ("gemm", "cat4096/1024/1024", 1) in ops and ("gemm", "", 2048) in ops
    assert not any(e.startswith("cat") and m == 2048 for _, e, m in ops)
    assert ("attention", "causal,gqa4", None) in [(o, e, None) for o, e, _ in ops]
    decode = [j for j in jobs if j.problem.op == "attention" and j.problem.dims["S"] == 1]
    assert decode and decode[0].problem.dims["T"] == 4096 and decode[0].problem.epilogue == "gqa4"
    llama = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "head_dim": 16}
    jobs = shapes.from_config(llama, [16])
    names = {j.label.split(" ")[0] for j in jobs}
    assert {"q_proj", "o_proj", "gate/up_proj", "down_proj", "prefill"} <= names
    assert any(j.problem.epilogue == "silu*up" for j in jobs)


def test_the_fast_kernels_preset_matches_the_benchmark() -> None:
    ops_mod = __import__("benchmarks.ops", fromlist=["GEMM_M"])
    jobs = shapes.from_preset("fast-kernels")
    gemm = {(j.problem.dims["M"], j.problem.dims["N"], j.problem.dims["K"]) for j in jobs if j.problem.op == "gemm"}
    want = {(m, n, k) for m in ops_mod.GEMM_M for n, k in ops_mod.GEMM_NK} | {(8192, 8192, 8192)}
    assert gemm == want
    attn = [j for j in jobs if j.problem.op == "attention"]
    moe = [j for j in jobs if j.problem.op == "moe"]
    assert len(attn) == len(ops_mod.ATTN) and len(moe) == len(ops_mod.MOE)


def test_library_op_misses_are_tuned_here_or_stored_with_their_template(tmp_path: Path, capsys,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A miss of this machine's device (the CPU under ARGUS_INTERPRET=1 here) is tuned on random operands of its
    shapes; a miss recorded on another device (sm_90) gets the template policy. Both are stored verified."""
    import dataclasses

    import torch

    from argus_inductor import ops
    from argus_inductor.config import Options
    from argus_inductor.ops.library import library_signature

    monkeypatch.setenv("ARGUS_TUNE_CANDIDATES", "3")
    ops.set_active_options(Options.resolve())  # what a fresh `argus warmup` process reads from its environment
    root = tmp_path / "cache"
    cache = KernelCache(root)
    args_json = ('{"activation":"relu","dilation":[1],"groups":1,"output_padding":[0],"padding":[1],"stride":[2],'
                 '"transposed":false}')
    here = library_signature("conv", [torch.empty(2, 3, 11), torch.empty(5, 3, 3), torch.empty(5)], args_json)
    there = dataclasses.replace(here, arch="sm_90")
    cache.record_miss(here)
    cache.record_miss(there)
    assert cli.main(["--cache-dir", str(root), "--misses"]) == 0
    err = capsys.readouterr().err
    tuned, template = KernelCache(root).get(here.key()), KernelCache(root).get(there.key())
    assert tuned is not None and tuned.verification["status"] == "verified", tuned and tuned.verification
    assert tuned.origin == "synthesized" and 1 <= tuned.timings["candidates"] <= 3 and "conv_fwd" in tuned.policy
    assert template is not None and template.verification["status"] == "verified" and template.origin == "warmup"
    assert "def conv_fwd(" in template.dsl_source
    assert "tuned, " in err and "template policy, verified" in err
    assert all(m["solved"] for m in KernelCache(root).misses())
    monkeypatch.delenv("ARGUS_TUNE_CANDIDATES")
    ops.set_active_options(Options.resolve())


def test_the_worker_processes_fill_the_cache_as_the_run_in_process_does(tmp_path: Path, capsys,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The path `argus warmup --workers N` takes on GPUs (warmup._spawn: jobs through a queue to worker processes,
    rows back through another), run here with one CPU worker that interprets: the same rows, entries and progress as
    the run in this process. Before this test it had run only on the device (two H200s, 2026-11-29)."""
    from argus_inductor.agent import warmup

    spawned = []
    real_spawn = warmup._spawn
    monkeypatch.setattr(warmup, "interpreting", lambda: False)  # as on a GPU machine: jobs go to workers
    monkeypatch.setattr(warmup, "_spawn", lambda *a, **k: spawned.append(1) or real_spawn(*a, **k))
    sf = tmp_path / "shapes.json"
    sf.write_text(json.dumps(SHAPES))
    cache = tmp_path / "cache"
    assert cli.main(args(sf, cache, tmp_path, "--workers", "2")) == 0
    assert spawned == [1]
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 2 and all(r["source"].split("/")[0] in ("baseline", "offline") for r in rows), rows
    kc = KernelCache(cache)
    assert len(kc.entries()) == 2
    for r in rows:
        e = kc.get(r["key"])
        assert e is not None and e.origin == "warmup" and e.verification["ok"]
    assert "2/2" in capsys.readouterr().err
