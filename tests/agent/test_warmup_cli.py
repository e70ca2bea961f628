"""`argus warmup` and `argus cache` as a user reads them: the time limit holds for the whole run, the progress count
never restarts, misses recorded under other torch/Triton versions are re-keyed to this environment's (an entry is
never stored under a key its own versions contradict), listings tell apart signatures that print alike, library
signatures read as shapes, the shapes file is documented in `--help`, and a GPU-sized preset on the CPU is said before
it starts."""
from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from argus_inductor.agent import cli, shapes
from argus_inductor.agent import warmup as warmup_mod
from argus_inductor.cli import build_parser
from argus_inductor.cli import main as argus
from argus_inductor.ops.library import canonical_args, library_signature
from argus_inductor.runtime.cache import CacheEntry, KernelCache
from argus_inductor.runtime.signature import Signature, current_versions, labels
from argus_inductor.specs import SPECS, Problem, signature_for

OLD = ("2.12.0", "3.5.0")  # the torch and Triton of "another environment"


def _other_env(sig: Signature) -> Signature:
    return dataclasses.replace(sig, versions=(*OLD, sig.versions[2]))


def _shapes(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    p = tmp_path / "shapes.json"
    p.write_text(json.dumps(entries))
    return p


SMALL = [{"op": "softmax", "R": r, "C": 40, "dtype": "float32"} for r in (3, 6, 12, 24, 48)]  # 5 signatures


# ---- the shapes file ---------------------------------------------------------------------------------------

def test_the_shapes_file_format_is_in_warmup_help_and_matches_the_ops() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["warmup"].format_help()
    assert "The --shapes file" in text
    doc = text[text.index("The --shapes file"):]
    table = {m[1]: m[2].split() for m in re.finditer(r"^  (\w+) {2,}((?:[A-Z]+ )*[A-Z]+)", doc, re.M)}
    assert {op: set(d) for op, d in table.items()} == {op: {*s.static, *s.dynamic} for op, s in SPECS.items()}
    example = text[text.index("Example shapes.json:") + len("Example shapes.json:"):].strip()
    jobs = shapes.from_shapes_file(_write(example), "bfloat16")
    assert [j.problem.op for j in jobs] == ["gemm", "attention", "moe", "rmsnorm"]
    assert jobs[0].problem.epilogue == "bias+silu" and jobs[1].problem.epilogue == "causal,gqa4"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()
    assert '"op": "attention"' in docs and "shapes file" in docs.lower()


def _write(text: str) -> Path:
    import tempfile

    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    f.write(text)
    f.close()
    return Path(f.name)


@pytest.mark.parametrize("entry,words", [
    ({"op": "gemm", "M": 1, "N": 8, "KK": 8}, ["entry 2", "lacks K"]),
    ({"op": "gemm", "M": 1, "N": 8, "K": 8, "epilog": "relu"}, ["entry 2", "unknown key(s) epilog"]),
    ({"op": "gemm", "M": 1, "N": "8", "K": 8}, ["entry 2", "N='8' must be integers"]),
    ({"op": "gemv", "M": 1}, ["entry 2", "unknown op 'gemv'"]),
    ({"op": "gemm", "M": 1, "N": 8, "K": 8, "epilogue": "bias+swish"}, ["entry 2", "unknown GEMM epilogue"]),
    ({"op": "gemm", "M": 1, "N": 8, "K": 8, "dtype": "float8"}, ["entry 2", "dtype 'float8' is not one of"]),
])
def test_a_wrong_shapes_entry_is_named(tmp_path: Path, entry: dict[str, Any], words: list[str], capsys) -> None:
    sf = _shapes(tmp_path, [SMALL[0], entry])
    assert cli.main(["--shapes", str(sf), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(sf) in err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("argv,words", [
    (["--config", "c.json", "--tokens", "1,abc"], ["--tokens", "'1,abc'"]),
    (["--tokens", "1,16"], ["--tokens goes with --config"]),  # not ignored in silence
    (["--batch", "4", "--context", "64"], ["--context, --batch go with --config"]),
    (["--ops", "gemmm"], ["--ops gemmm: no such op", "gemm, bmm"]),
    (["--dtype", "float8"], ["--dtype float8", "bfloat16"]),
    (["--time-limit", "0"], ["--time-limit takes a positive number"]),
    (["--trials", "-1"], ["--trials"]),
    (["--reference", "nowhere.json"], ["no reference file nowhere.json"]),
])
def test_usage_mistakes_are_said_before_any_work(tmp_path: Path, argv: list[str], words: list[str], capsys) -> None:
    (tmp_path / "c.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    argv = [str(tmp_path / a) if a == "c.json" else a for a in argv]
    assert cli.main(["--shapes", str(_shapes(tmp_path, SMALL[:1])), "--cache-dir", str(tmp_path / "c"), *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not (tmp_path / "c" / "kernels").exists()
    for w in words:
        assert w in err, (w, err)


# ---- the time limit ------------------------------------------------------------------------------------------

class SlowSynthesis:
    """Stands in for the agent: records each job's start and budget, then works for `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.calls = seconds, []

    def __call__(self, what: Any, budget: Any = None, **kw: Any) -> Any:
        self.calls.append((time.time(), budget.seconds))
        time.sleep(self.seconds)
        raise warmup_mod_loop().SynthesisError("the fake job ended")


def warmup_mod_loop() -> Any:
    from argus_inductor.agent import loop

    return loop


def test_the_time_limit_holds_for_the_whole_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A job far longer than the limit is stopped at the limit; the others never start; the run ends on time and
    says what was not done."""
    slow = SlowSynthesis(60.0)
    monkeypatch.setattr(warmup_mod_loop(), "synthesize", slow)
    t0 = time.time()
    rc = cli.main(["--shapes", str(_shapes(tmp_path, SMALL)), "--cache-dir", str(tmp_path / "c"), "--time-limit", "2",
                   "--json-out", str(tmp_path / "rows.json")])
    took = time.time() - t0
    assert rc == 1 and took < 6, took
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["source"] for r in rows] == [warmup_mod.STOPPED] + [warmup_mod.NOT_STARTED] * 4
    assert len(slow.calls) == 1 and slow.calls[0][1] <= 2.0
    out, err = capsys.readouterr()
    assert "4 not done (time limit: a new run resumes)" in out or "5 not done" in out
    assert "[5/5]" in err and "[1/5]" in err


def test_each_job_gets_at_most_the_time_left_and_none_starts_past_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowSynthesis(0.7)
    monkeypatch.setattr(warmup_mod_loop(), "synthesize", slow)
    t0 = time.time()
    rows = warmup_mod.warmup(shapes.from_shapes_file(_shapes(tmp_path, SMALL)),
                             warmup_mod.WarmupOptions(cache_root=tmp_path / "c", time_limit=2.0, started=t0),
                             out=open("/dev/null", "w"))
    assert time.time() - t0 < 4
    assert 2 <= len(slow.calls) <= 3
    for started, budget in slow.calls:
        assert started < t0 + 2.0 and budget <= t0 + 2.0 - started + 0.05, (started - t0, budget)
    assert [r["source"] for r in rows][len(slow.calls):] == [warmup_mod.NOT_STARTED] * (5 - len(slow.calls))


# ---- one progress count ----------------------------------------------------------------------------------------

def test_progress_counts_library_and_agent_jobs_as_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys) -> None:
    """A recorded library miss (tuned) and two agent jobs: [1/3], [2/3], [3/3]; never a count that restarts."""
    from argus_inductor import ops
    from argus_inductor.config import Options

    monkeypatch.setenv("ARGUS_TUNE_CANDIDATES", "2")
    ops.set_active_options(Options.resolve())
    root = tmp_path / "c"
    cache = KernelCache(root)
    cache.record_miss(library_signature("rms_norm_rounded", [torch.randn(3, 32), torch.randn(32)],
                                        canonical_args({"eps": 0.5})))
    for m in (5, 9):
        cache.record_miss(signature_for(Problem("softmax", "", {"R": m, "C": 24}, "float32"), "cpu"))
    try:
        assert cli.main(["--cache-dir", str(root), "--trials", "0"]) == 0
    finally:
        monkeypatch.delenv("ARGUS_TUNE_CANDIDATES")
        ops.set_active_options(Options.resolve())
    err = capsys.readouterr().err
    counts = re.findall(r"\[(\d+)/(\d+)\]", err)
    assert counts and {t for _, t in counts} == {"3"}, err
    done = [int(n) for n, _ in counts]
    assert done == sorted(done) and done[-1] == 3


def test_the_workers_tune_library_signatures_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With worker processes (one a GPU on the device; here one CPU worker that interprets), a library signature is
    one more job of their queue, not a serial step in the parent before they start (17 s of a two-GPU run of
    2026-11-29): its row, tuned entry and checker verdict are the run in this process's."""
    from argus_inductor import ops
    from argus_inductor.agent import warmup
    from argus_inductor.config import Options

    monkeypatch.setenv("ARGUS_TUNE_CANDIDATES", "2")
    ops.set_active_options(Options.resolve())
    monkeypatch.setattr(warmup, "interpreting", lambda: False)  # as on a GPU machine: the jobs go to workers
    spawned: list[int] = []
    real_spawn = warmup._spawn

    def spawn(todo, opts, arch, nworkers, deadline, progress, library=()):
        spawned.append(len(library))
        return real_spawn(todo, opts, arch, nworkers, deadline, progress, library)

    monkeypatch.setattr(warmup, "_spawn", spawn)
    root = tmp_path / "c"
    cache = KernelCache(root)
    lib = library_signature("rms_norm_rounded", [torch.randn(3, 32), torch.randn(32)], canonical_args({"eps": 0.5}))
    cache.record_miss(lib)
    cache.record_miss(signature_for(Problem("softmax", "", {"R": 5, "C": 24}, "float32"), "cpu"))
    try:
        assert cli.main(["--cache-dir", str(root), "--trials", "0", "--workers", "2",
                         "--json-out", str(tmp_path / "rows.json")]) == 0
    finally:
        monkeypatch.delenv("ARGUS_TUNE_CANDIDATES")
        ops.set_active_options(Options.resolve())
    assert spawned == [1], spawned  # one library signature went to the workers
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 2 and rows[0]["source"].startswith("library: tuned") and rows[0]["key"] == lib.key(), rows
    entry = KernelCache(root).get(lib.key())
    assert entry is not None and entry.verification.get("status") == "verified", entry
    assert rows[1]["source"].split("/")[0] in ("baseline", "offline"), rows


# ---- versions ---------------------------------------------------------------------------------------------------

def test_an_entry_is_never_stored_under_a_key_its_versions_contradict(tmp_path: Path) -> None:
    sig = _other_env(signature_for(Problem("softmax", "", {"R": 4, "C": 8}, "float32"), "cpu"))
    here = current_versions()
    entry = CacheEntry(signature=sig.as_dict(), dsl_source="", triton_source="", policy={}, verification={},
                       versions={"torch": here[0] + "+cpu", "triton": here[1], "argus_inductor": here[2]})
    with pytest.raises(ValueError, match=r"says it was made with (torch|triton) .*, but its signature says"):
        KernelCache(tmp_path).put(sig.key(), entry)
    assert not KernelCache(tmp_path).keys()
    ok = dataclasses.replace(entry, versions={"torch": OLD[0], "triton": OLD[1], "argus_inductor": here[2]})
    KernelCache(tmp_path).put(sig.key(), ok)
    assert KernelCache(tmp_path).get(sig.key()) is not None


def test_misses_of_other_versions_are_made_here_under_this_environments_keys(tmp_path: Path, capsys) -> None:
    root = tmp_path / "c"
    cache = KernelCache(root)
    here_sig = signature_for(Problem("softmax", "", {"R": 6, "C": 40}, "float32"), "cpu")
    old_sig = _other_env(here_sig)
    lib = library_signature("rms_norm_rounded", [torch.randn(3, 32), torch.randn(32)], canonical_args({"eps": 0.5}))
    cache.record_miss(old_sig)
    cache.record_miss(_other_env(lib))
    assert argus(["cache", "misses", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.count("pending") == 2 and out.count("[made under torch 2.12.0, triton 3.5.0]") == 2, out

    assert cli.main(["--cache-dir", str(root), "--trials", "0", "--json-out", str(tmp_path / "rows.json")]) == 0
    out, err = capsys.readouterr()
    assert "2 recorded signature(s) were made under torch 2.12.0, triton 3.5.0" in err
    assert out.count("(recorded under torch 2.12.0, triton 3.5.0)") == 2, out
    kc = KernelCache(root)
    assert sorted(kc.keys()) == sorted([here_sig.key(), dataclasses.replace(lib, versions=here_sig.versions).key()])
    for e in kc.entries():  # what each entry says it was made under is what its key records
        assert (e.versions["triton"], e.versions["torch"].split("+")[0]) == (e.sig().versions[1], e.sig().versions[0])
    assert argus(["cache", "misses", "--cache-dir", str(root)]) == 0
    assert capsys.readouterr().out.count("\n  solved here ") == 2
    # a second run has nothing to do for them
    assert cli.main(["--cache-dir", str(root), "--json-out", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["source"] for r in rows] == ["cache (already there)"], rows


# ---- listings ---------------------------------------------------------------------------------------------------

def _entry(sig: Signature, ms: float | None = 0.5) -> CacheEntry:
    return CacheEntry(signature=sig.as_dict(), dsl_source="# dsl", triton_source="# triton", policy={},
                      verification={"status": "verified"}, timings={"ms": ms} if ms else {},
                      versions=dict(zip(("torch", "triton", "argus_inductor"), sig.versions)), origin="warmup")


def test_cache_listing_tells_apart_what_prints_alike_and_sizes_its_columns(tmp_path: Path, capsys) -> None:
    base = signature_for(Problem("gemm", "bias+relu", {"M": 9, "N": 24, "K": 40}, "float32"), "cpu")
    col = dataclasses.replace(base, layouts=("row", "col", "vec"))
    old = _other_env(base)
    gpu = dataclasses.replace(base, arch="sm_90")
    lib = library_signature("rms_norm_rounded", [torch.randn(1, 4096), torch.randn(4096)],
                            canonical_args({"eps": 1e-6}))
    long = signature_for(Problem("attention", "causal,gqa4", {"Z": 1, "H": 32, "HK": 8, "S": 2048, "T": 2048,
                                                              "D": 128}, "bfloat16"), "sm_90")
    kc = KernelCache(tmp_path)
    for s in (base, col, old, gpu, lib, long):
        kc.put(s.key(), _entry(s))
    assert argus(["cache", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("  ") and not ln.startswith("  origin")]
    texts = [ln[ln.index("gemm") if "gemm" in ln else ln.index("  ", 30):].strip() for ln in rows]
    assert len(rows) == 6 and len(set(texts)) == 6, out  # no two rows read alike
    assert "[made under torch 2.12.0, triton 3.5.0]" in out and "layouts row/col/vec" in out and " sm_90" in out
    assert "rms_norm_rounded([1,4096] [4096]; eps=1e-06) float32 cpu" in out and "t0d0" not in out
    head = next(ln for ln in out.splitlines() if ln.startswith("  origin"))
    start = head.index("signature")
    assert start < 45  # sized to the columns' contents, not a fixed pad
    for ln in rows:  # every signature starts in the same column
        assert ln[start - 2:start] == "  " and ln[start] != " ", ln
    assert "* the Triton interpreter's wall clock" in out


def test_labels_add_only_what_is_needed() -> None:
    a = signature_for(Problem("softmax", "", {"R": 4, "C": 8}, "float32"), "cpu")
    assert labels([a], current_versions()) == [a.short()]
    b = dataclasses.replace(a, layouts=("col",))
    la, lb = labels([a, b], current_versions())
    assert la != lb and "layouts" in la and "layouts col" in lb
    twin = dataclasses.replace(a, static_dims=(), dynamic_dims=(("C", "8"), ("R", "3-4")))
    assert len(set(labels([a, twin]))) == 2


# ---- a GPU-sized preset on the CPU ---------------------------------------------------------------------------

def test_a_gpu_preset_on_the_cpu_is_refused_before_it_starts_unless_forced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    t0 = time.time()
    assert cli.main(["--preset", "fast-kernels", "--policy", "offline", "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert time.time() - t0 < 5
    assert "meant for a GPU" in err and "16384" in err and "--force" in err and "Not starting it" in err
    assert not (tmp_path / "c" / "kernels").exists()
    # forced: it runs, but only until the time limit (600 s unless given; 1 s here)
    slow = SlowSynthesis(60.0)
    monkeypatch.setattr(warmup_mod_loop(), "synthesize", slow)
    monkeypatch.setattr(cli, "CPU_PRESET_LIMIT_S", 1.0)
    t0 = time.time()
    assert cli.main(["--preset", "fast-kernels", "--ops", "gemm", "--force", "--cache-dir", str(tmp_path / "c")]) == 1
    assert time.time() - t0 < 6
    err = capsys.readouterr().err
    assert "--force: running it on the CPU until the time limit (1 s)" in err and len(slow.calls) == 1
