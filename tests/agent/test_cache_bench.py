"""`argus bench` on the CPU: the cached kernels run on fresh inputs against their PyTorch reference (under the
Triton interpreter here), a kernel planted wrong is reported wrong with a failing exit status, and what cannot be
benchmarked on this machine is said in words."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from argus_inductor.agent import cli as warmup_cli
from argus_inductor.cli import main
from argus_inductor.runtime.cache import KernelCache
from argus_inductor.runtime.signature import Signature
from argus_inductor.specs import Problem, signature_for

GEMM = Problem("gemm", "bias+relu", {"N": 24, "K": 40, "M": 9}, "float32")
SOFTMAX = Problem("softmax", "", {"C": 40, "R": 6}, "float32")


@pytest.fixture
def cache(tmp_path: Path) -> KernelCache:
    """A cache `argus warmup` filled (the offline policy, one trial after the template) for GEMM and SOFTMAX."""
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps([{"op": p.op, "epilogue": p.epilogue, "dtype": p.dtype, **p.dims}
                                  for p in (GEMM, SOFTMAX)]))
    root = tmp_path / "cache"
    assert warmup_cli.main(["--shapes", str(shapes), "--cache-dir", str(root), "--policy", "offline",
                            "--trials", "1", "--table-out", str(tmp_path / "t.md")]) == 0
    return KernelCache(root)


def test_every_cached_kernel_is_checked_and_timed(cache: KernelCache, capsys) -> None:
    assert main(["bench", "--cache-dir", str(cache.root)]) == 0
    out, err = capsys.readouterr()
    for problem in (GEMM, SOFTMAX):
        sig = signature_for(problem, "cpu").short()
        row = next(line for line in out.splitlines() if line.startswith(f"| {sig} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == "ok" and float(cells[3]) < 1e-5 and float(cells[4]) > 0, row
    assert "2 of 2 match their reference" in out and "interpreter's wall clock" in out
    assert "[2/2]" in err  # progress


def test_a_kernel_planted_wrong_is_reported_wrong(cache: KernelCache, capsys) -> None:
    """The gemm entry's DSL source adds 0.5 to every output before its store: the benchmark finds the
    difference on fresh random inputs, names the entry and exits 1."""
    key = signature_for(GEMM, "cpu").key()
    entry = cache.get(key)
    assert entry is not None and "store(C[rm, rn], acc)" in entry.dsl_source
    bad = entry.dsl_source.replace("store(C[rm, rn], acc)", "store(C[rm, rn], acc + 0.5)")
    cache.put(key, dataclasses.replace(entry, dsl_source=bad))
    assert main(["bench", "--cache-dir", str(cache.root), "--json"]) == 1
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[key]["status"] == "wrong" and "relative error" in rows[key]["error"], rows[key]
    assert rows[signature_for(SOFTMAX, "cpu").key()]["status"] == "ok"


def test_filters_and_other_devices(cache: KernelCache, capsys) -> None:
    assert main(["bench", "--cache-dir", str(cache.root), "softmax"]) == 0
    out = capsys.readouterr().out
    assert "softmax" in out and "gemm" not in out and "1 of 1 match" in out
    assert main(["bench", "--cache-dir", str(cache.root), "layernorm"]) == 2
    assert "no cached kernel matching 'layernorm'" in capsys.readouterr().err
    # an entry made for a GPU is skipped here, and said so
    entry = cache.get(signature_for(SOFTMAX, "cpu").key())
    gpu_sig = dataclasses.replace(Signature.from_dict(entry.signature), arch="sm_90")
    other = KernelCache(cache.root.parent / "gpu-only")
    other.put(gpu_sig.key(), dataclasses.replace(entry, signature=gpu_sig.as_dict()))
    assert main(["bench", "--cache-dir", str(other.root)]) == 2
    assert "1 for other devices" in capsys.readouterr().err
    # an op this command cannot build inputs for is listed as skipped, not as a failure
    odd_sig = dataclasses.replace(Signature.from_dict(entry.signature), op="frobnicate")
    cache.put(odd_sig.key(), dataclasses.replace(entry, signature=odd_sig.as_dict()))
    assert main(["bench", "--cache-dir", str(cache.root), "softmax", "frobnicate"]) == 0
    out = capsys.readouterr().out
    assert "| skipped |" in out and "1 of 1 match" in out and "1 skipped" in out


def test_a_general_op_class_entry_runs_against_torchs_own_op(tmp_path: Path, capsys) -> None:
    """A library entry (here transformers' RMSNorm, as the backend caches it) is checked against torch's op on
    random operands of its shapes; its DSL source planted to drop eps from the mean square is reported wrong."""
    import torch

    from argus_inductor import ops
    from argus_inductor.ops.library import canonical_args, library_signature

    kc = KernelCache(tmp_path / "lib")
    sig = library_signature("rms_norm_rounded", [torch.randn(5, 96), torch.randn(96)],
                            canonical_args({"eps": 0.5}))
    entry = ops.warm(sig, cache=kc)
    assert main(["bench", "--cache-dir", str(kc.root), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "ok" and row["rel_err"] < 1e-5 and row["ms"] > 0, row
    assert "rstd = rsqrt(ss / C + eps)" in entry.dsl_source
    kc.put(sig.key(), dataclasses.replace(entry, dsl_source=entry.dsl_source.replace(
        "rstd = rsqrt(ss / C + eps)", "rstd = rsqrt(ss / C)")))
    assert main(["bench", "--cache-dir", str(kc.root), "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "wrong" and "relative error" in row["error"], row


def test_shapes_run_the_cached_kernel_or_the_backends_default(cache: KernelCache, tmp_path: Path, capsys) -> None:
    """--shapes: a shape whose signature is cached runs its entry; one that is not runs the template default the
    backend would run on a miss, which is not stored."""
    shapes = tmp_path / "bench-shapes.json"
    shapes.write_text(json.dumps([{"op": "softmax", "R": 7, "C": 40, "dtype": "float32"},  # cached (R 5-8)
                                  {"op": "gemm", "M": 3, "N": 16, "K": 24, "dtype": "float32"}]))
    before = len(cache.entries())
    assert main(["bench", "--cache-dir", str(cache.root), "--shapes", str(shapes), "--json"]) == 0
    rows = {r["signature"].split("(")[0]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["softmax"]["origin"] == "warmup" and rows["gemm"]["origin"] == "default", rows
    assert all(r["status"] == "ok" for r in rows.values()), rows
    assert len(cache.entries()) == before
    (tmp_path / "bad.json").write_text("{")
    assert main(["bench", "--shapes", str(tmp_path / "bad.json")]) == 2
    assert "cannot read shapes file" in capsys.readouterr().err


def test_usage_errors_are_said_in_words(tmp_path: Path, capsys) -> None:
    assert main(["bench", "--cache-dir", str(tmp_path / "nowhere")]) == 2
    assert "no cache at" in capsys.readouterr().err
    assert main(["bench", "--cache-dir", str(tmp_path), "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err
