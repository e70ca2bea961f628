"""Run KernelBench-format problems under eager, backend="inductor" and backend="argus".

    python benchmarks/kernelbench/run.py PROBLEMS [PROBLEMS ...] [--out DIR] [--timeout 300] [--filter GLOB]

PROBLEMS is a KernelBench-format .py file or a directory searched recursively for them (e.g. our own
benchmarks/kernelbench/problems, or a checkout of the public KernelBench repository's KernelBench/ folder).
Each file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.

Every problem runs in a child process of its own, so that a crash, a hang (--timeout per problem) or an
out-of-memory of one problem is recorded as that problem's row and the run goes on. Per problem:

* correctness, the KernelBench way: --trials (5) trials of fresh random inputs from get_inputs(), seeded
  identically for all three backends; each compiled output must match eager (torch.allclose,
  atol = rtol = 1e-2);
* timing: on a GPU CUDA events, --warmup calls then the median of --reps (100) calls; on the CPU
  time.perf_counter with fewer calls (defaults 1 warm-up, 5 timed). Under ARGUS_INTERPRET=1 Argus kernels
  run in the Triton interpreter: CPU timings of backend="argus" then measure the interpreter, not a kernel;
* Argus coverage: the share of the model's FLOPs (torch.utils.flop_counter.FlopCounterMode on eager) that
  ran in Argus kernels (the torch.ops.argus.* calls of one compiled call, recorded with their input shapes
  by torch.profiler).

The summary gives fast_0 / fast_1 / fast_2 (KernelBench: the fraction of problems that are correct and
faster than the baseline by more than 0x / 1x / 2x) against eager and against Inductor, geometric-mean
speedups over the correct problems, and the mean coverage. Writes kernelbench-<stamp>.json and .md under
--out (default: $OUT if set, else benchmarks/results) and a .png plot when matplotlib is importable.
On the CPU, run with ARGUS_INTERPRET=1 TRITON_INTERPRET=1 set before Python starts.
"""
from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import datetime
import fnmatch
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.bytecode import env as bytecode_env  # noqa: E402  (first-call processes read compiled bytecode)

BACKENDS = ("eager", "inductor", "argus")
ATOL = RTOL = 1e-2

# Which op classes of KernelBench levels 1 and 2 run in Argus kernels today (see README.md).
COVERAGE_NOTE = (
    "Argus kernels (backend=\"argus\" with --argus-ops, default all): GEMM (nn.Linear / matmul / mm / addmm, with "
    "a folded activation and residual add), batched matmul, gated MLP, attention (SDPA and eager softmax(QK^T)V), "
    "MoE, convolutions (1-3D, transposed, grouped/depthwise, dilated, strided, with a folded activation), "
    "reductions, softmax/log-softmax, normalizations (layer, group, instance, batch in eval mode, RMS, L1/L2/"
    "Frobenius), pooling, scans and losses. Inductor runs what no matcher takes (e.g. unbatched convolutions, "
    "training-mode batch norm, elementwise ops outside those patterns)."
)


# ---------------------------------------------------------------------------------------------- worker


def _bytes(xs: Any) -> int:
    import torch

    total = 0
    for x in xs:
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
    return total


def memory_need(model: Any, inputs: list[Any], backends: int) -> int:
    """What a problem's GPU phase holds at once, estimated from its CPU model and inputs: the weights, two sets of
    inputs (a trial's and the timing's) and an output per backend plus a workspace, each as large as the inputs
    or the weights, whichever is larger (a GEMM's output is about its inputs; a conv's activations too)."""
    weights = _bytes(model.parameters()) + _bytes(model.buffers())
    acts = _bytes(inputs)
    return weights + 2 * acts + (backends + 1) * max(acts, weights // 4)


@contextlib.contextmanager
def gpu_memory(pool: str | None, budget: int, need: int) -> Any:
    """Admit this job's GPU phase when the jobs already admitted leave `need` bytes of `budget` (the pool file, shared
    by the parent's jobs, lists them by pid); a job needing more than the budget runs alone. No pool: admitted."""
    if not pool:
        yield
        return
    import fcntl

    me = str(os.getpid())
    while True:
        with open(pool + ".lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                held = json.loads(Path(pool).read_text()) if Path(pool).exists() else {}
            except ValueError:
                held = {}
            held = {p: n for p, n in held.items() if _alive(int(p))}  # a job that died leaves nothing held
            if not held or sum(held.values()) + need <= budget:
                held[me] = need
                Path(pool).write_text(json.dumps(held))
                break
            fcntl.flock(lk, fcntl.LOCK_UN)
        time.sleep(0.5)
    try:
        yield
    finally:
        with open(pool + ".lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                held = json.loads(Path(pool).read_text())
            except (OSError, ValueError):
                held = {}
            held.pop(me, None)
            Path(pool).write_text(json.dumps(held))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def _flatten(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in _flatten(out[k])]
    return [out]


def _compare(ref: Any, out: Any) -> tuple[bool, str]:
    import torch

    a, b = _flatten(ref), _flatten(out)
    if len(a) != len(b):
        return False, f"{len(b)} outputs, expected {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape:
                return False, f"output {i}: shape {getattr(y, 'shape', type(y))}, expected {tuple(x.shape)}"
            x, y = x.detach().float().cpu(), y.detach().float().cpu()
            if not torch.allclose(x, y, atol=ATOL, rtol=RTOL):
                diff = (x - y).abs().nan_to_num(nan=float("inf")).max().item()
                return False, f"output {i}: max abs diff {diff:.3g} > atol=rtol={ATOL}"
        elif x != y:
            return False, f"output {i}: {y!r}, expected {x!r}"
    return True, ""


def _to(x: Any, device: str) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(t, device) for t in x)
    return x


def _argus_flops(name: str, shapes: list[list[int]]) -> int:
    """FLOPs of one torch.ops.argus.* call from its input shapes (2 per multiply-add)."""
    op = name.split("::")[-1]
    p = math.prod
    if op in ("linear", "linear_residual"):            # x (..., K), weight (N, K)
        x, w = shapes[0], shapes[1]
        return 2 * p(x[:-1]) * x[-1] * w[0]
    if op == "gate_up":                                 # two GEMMs x (..., K) @ (N, K)^T
        x, w = shapes[0], shapes[1]
        return 4 * p(x[:-1]) * x[-1] * w[0]
    if op == "bmm":                                     # (B, M, K) @ (B, K, N)
        a, b = shapes[0], shapes[1]
        return 2 * p(a[:-1]) * a[-1] * b[-1]
    if op in ("attention", "attention_mask"):           # q (..., S, D), k (..., T, D), v (..., T, Dv)
        q, k, v = shapes[0], shapes[1], shapes[2]
        return 2 * p(q[:-1]) * k[-2] * q[-1] + 2 * p(q[:-1]) * k[-2] * v[-1]
    if op == "moe":                                     # hidden (T, HD), ids (T, topk), w1 (E, 2I, HD)
        h, ids, w1 = shapes[0], shapes[2], shapes[3]
        inter = w1[1] // 2
        return p(ids) * (2 * h[-1] * 2 * inter + 2 * inter * h[-1])
    return 0


def _register_cpu_sdpa_flops() -> None:
    """FlopCounterMode has formulas for the CUDA SDPA kernels but not for the CPU flash kernel eager uses."""
    import torch
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None or op in flop_registry or op.default in flop_registry:
        return

    def formula(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any) -> int:
        return _argus_flops("attention", [list(query_shape), list(key_shape), list(value_shape)])

    register_flop_formula(op)(formula)


def time_call(fn: Any, args: list[Any], device: str, warmup: int, reps: int) -> float:
    """Median milliseconds per call."""
    import torch

    for _ in range(warmup):
        fn(*args)
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _captures(fn: Any, args: list[Any]) -> bool:
    """Whether a call of `fn` can be captured in a CUDA graph (and replayed)."""
    import torch

    try:
        fn(*args)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*args)
        g.replay()
        torch.cuda.synchronize()
        return True
    except Exception:
        torch.cuda.synchronize()
        return False


def graph_time(fn: Any, args: list[Any], rep_ms: int = 100) -> float:
    """Median milliseconds per call, by CUDA-graph replay."""
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(lambda: fn(*args), rep=rep_ms, return_mode="median"))


def load_problem(path: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"kb_problem_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise AttributeError(f"{path.name} defines no {name} (not a KernelBench-format problem)")
    return mod


def _compile_slot(args: argparse.Namespace) -> Any:
    """With --isolate-timing, a compile's GPU work (its first runs, Argus's swap-in trials, the transfer of the model)
    holds the lock shared: compiles run side by side, but none while another job times (which holds it exclusively,
    and passes a gate that lets no new compile start while it waits). Without it, nothing (compiles overlap others'
    timing windows: faster runs, noisier times)."""
    if not getattr(args, "isolate_timing", False):
        return contextlib.nullcontext()
    from argus_inductor.runtime.timing import shared

    return shared()


def _timing_slot() -> Any:
    """With --jobs > 1 the problems compile in parallel, but only one runs GPU work at once: the ARGUS_TUNE_LOCK the
    parent names, which Argus's own policy and agent timing also take, so no measurement shares the GPU."""
    from argus_inductor.runtime.timing import exclusive

    return exclusive()


def worker(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One problem, in this (child) process."""
    import torch

    row: dict[str, Any] = {"status": "ok", "backends": {}}
    phase = "import"
    try:
        import argus_inductor  # noqa: F401  (registers backend="argus")
        from argus_inductor.runtime import reporting

        device = args.device
        torch.set_grad_enabled(False)
        phase = "load"
        mod = load_problem(path)
        torch.manual_seed(args.seed)
        model = mod.Model(*mod.get_init_inputs()).eval()
        row["memory_need_gb"] = round(memory_need(model, list(mod.get_inputs()), len(args.backends)) / 2**30, 2)
        phase = "waiting for device memory"
        with gpu_memory(args.memory_pool, args.memory_budget, int(row["memory_need_gb"] * 2**30)):
            phase = "device"
            row.update(_gpu_phase(mod, model, args, device, reporting))
    except Exception as e:
        row.update(status="oom" if _is_oom(e) else "error", phase=phase, error=f"{type(e).__name__}: {e}"[:1000],
                   traceback=traceback.format_exc()[-3000:])
    return row


def _gpu_phase(mod: Any, model: Any, args: argparse.Namespace, device: str, reporting: Any) -> dict[str, Any]:
    """The part of a problem that holds device memory: compile, check, count, time."""
    import torch

    import argus_inductor
    from argus_inductor.runtime.timing import waited_s  # seconds this process waited for other jobs' turns

    row: dict[str, Any] = {}
    phase = "to device"
    try:
        with _compile_slot(args):
            model = model.to(device)
        fns: dict[str, Any] = {"eager": model}
        # Argus compiles first, with cold caches: Inductor's first call then finds what it compiles for itself
        # (Triton kernels, FX graphs) already cached where Argus's fallbacks compiled the same, so the first-call
        # ratio is Argus's worst case, not its best
        for b in sorted(args.backends, key=lambda b: b != "argus"):
            if b != "eager":
                fns[b] = torch.compile(model, backend=b, options={"ops": args.argus_ops, "on_miss": args.on_miss}) \
                    if b == "argus" else \
                    torch.compile(model, backend=b)
        results: dict[str, dict[str, Any]] = {b: {"correct": True, "error": None} for b in args.backends}
        phase = "correctness"
        inputs: list[Any] = []
        for trial in range(args.trials):
            # the first trial compiles (and with --on-miss synthesize tunes, taking the lock only to time):
            # outside the lock; later trials run on the GPU alone
            torch.manual_seed(args.seed + trial)
            inputs = _to(list(mod.get_inputs()), device)
            with _timing_slot():
                ref = model(*inputs)
            for b, fn in fns.items():
                if b == "eager" or not results[b]["correct"]:
                    continue
                try:
                    with _timing_slot() if trial else _compile_slot(args):
                        t0, w0 = time.perf_counter(), waited_s()
                        out = fn(*inputs)
                        if trial == 0:  # the first call: compile (and Argus's swap-in) included
                            if device.startswith("cuda"):
                                torch.cuda.synchronize()
                            # less the time its timings waited for other jobs' turns (the lock's, not its own)
                            waited = waited_s() - w0
                            results[b]["first_call_s"] = round(time.perf_counter() - t0 - waited, 3)
                            results[b]["first_call_waited_s"] = round(waited, 3)
                            if b == "argus":  # the background swap-in (runtime/tiers.py) settles before the
                                # later trials check it and the timing times it; how long it took is its own number
                                t1, w1 = time.perf_counter(), waited_s()
                                argus_inductor.settle()
                                results[b]["settle_s"] = round(time.perf_counter() - t1 - (waited_s() - w1), 3)
                                row["argus_compile_phases"] = reporting.phases()
                    ok, why = _compare(ref, out)
                except Exception as e:  # a compile or run failure of this backend only
                    if _is_oom(e):
                        raise
                    ok, why = False, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e) else ''}"
                if not ok:
                    results[b].update(correct=False, error=f"trial {trial}: {why}")
        phase = "flops"
        from torch.utils.flop_counter import FlopCounterMode

        _register_cpu_sdpa_flops()
        with _timing_slot(), FlopCounterMode(display=False) as fc:
            model(*inputs)
        row["flops"] = int(fc.get_total_flops())
        if "argus" in fns and results["argus"]["correct"]:
            from torch.profiler import ProfilerActivity, profile

            with _timing_slot(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                fns["argus"](*inputs)
            calls = [(e.name, e.input_shapes) for e in prof.events() if e.name.startswith("argus::")]
            # each matched subgraph records its FLOPs per call when it runs (also when a CUDA graph replays it
            # later and no op shows in the profile); those that fell back to aten do not count
            argus_flops = sum(e.flops for e in reporting.entries() if e.calls and not e.source.startswith("fallback"))
            row["argus_ops"] = sorted({n for n, _ in calls if n != "argus::library"}
                                      | {f"argus::{e.signature.split('[')[0].split('(')[0]}"
                                         for e in reporting.entries() if e.calls})
            row["argus_flops"] = argus_flops
            # None: FlopCounterMode counts no FLOPs here (it counts matmul, conv and attention, not elementwise
            # ops, norms or reductions), so a share is undefined; "argus_ran" still says whether Argus ran.
            row["coverage"] = min(1.0, argus_flops / row["flops"]) if row["flops"] else None
            row["argus_ran"] = any(e.calls and not e.source.startswith("fallback") for e in reporting.entries())
            row["argus_entries"] = [{"op": e.op, "signature": e.signature, "source": e.source, "calls": e.calls,
                                     # the swap-in's verdict with both sides' times: how far the loser was
                                     "swapin": [n for n in e.notes if n.startswith("swap-in")]}
                                    for e in reporting.entries()]
        phase = "timing"
        with _timing_slot():
            timed = {b: fn for b, fn in fns.items() if results[b]["correct"]}
            # device time by CUDA-graph replay where every backend's call captures (the host's launch latency,
            # which other jobs' compiles make noisy, out of all of them alike), else CUDA events per call for all
            graphs = device.startswith("cuda") and args.graphs and all(_captures(fn, inputs) for fn in timed.values())
            row["timing"] = "CUDA-graph replay, median" if graphs else "CUDA events per call, median"
            for b, fn in timed.items():
                torch.manual_seed(args.seed)
                results[b]["ms"] = graph_time(fn, inputs) if graphs else \
                    time_call(fn, inputs, device, args.warmup, args.reps)
        row["backends"] = results
    except Exception as e:
        if _is_oom(e):
            raise
        row.update(status="error", phase=phase, error=f"{type(e).__name__}: {e}"[:1000],
                   traceback=traceback.format_exc()[-3000:])
    return row


# ---------------------------------------------------------------------------------------------- parent


def find_problems(paths: list[str], pattern: str | None) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such file or directory: {p}")
        if p.is_file():
            if p.suffix != ".py":
                raise ValueError(f"not a .py file: {p}")
            found.append(p)
        else:
            found += sorted(f for f in p.rglob("*.py") if not f.name.startswith(("_", ".")))
    if pattern:
        found = [f for f in found if fnmatch.fnmatch(f.name, pattern) or fnmatch.fnmatch(str(f), pattern)]
    return found


def _level(path: Path) -> int | None:
    for part in reversed(path.parts):
        if part.startswith("level") and part[5:].isdigit():
            return int(part[5:])
    return None


def run_one(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    base = {"problem": path.stem, "path": str(path), "level": _level(path)}
    with tempfile.TemporaryDirectory(prefix="argus-kb-") as tmp:
        out = Path(tmp) / "row.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(path), "--worker-out", str(out),
               "--device", args.device, "--backends", ",".join(args.backends), "--trials", str(args.trials),
               "--warmup", str(args.warmup), "--reps", str(args.reps), "--seed", str(args.seed),
               "--argus-ops", args.argus_ops, "--on-miss", args.on_miss,
               "--memory-budget", str(args.memory_budget)] + (["--isolate-timing"] if args.isolate_timing else [])
        cmd += ([] if args.graphs else ["--no-graphs"]) + (["--memory-pool", args.memory_pool] if args.memory_pool
                                                           else [])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        t0 = time.monotonic()
        # A session of its own, so that a time-out kills the child's compile workers too.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            return {**base, "status": "timeout", "error": f"no result after {args.timeout:g} s (killed)",
                    "stderr_tail": (err or "")[-2000:], "wall_s": round(time.monotonic() - t0, 2), "backends": {}}
        wall = round(time.monotonic() - t0, 2)
        if out.exists():
            row = {**base, **json.loads(out.read_text()), "wall_s": wall}
            if args.first_call and not args.first_call_after:  # each backend cold, alone: the table's numbers
                isolate_first_calls(path, row, args)
            return row
        err = (err or "")[-2000:]
        oom = proc.returncode in (-9, 137) or "out of memory" in err.lower() or "MemoryError" in err
        status = "oom" if oom else "crash"
        return {**base, "status": status, "error": f"child exited with code {proc.returncode} and no result",
                "stderr_tail": err, "wall_s": wall, "backends": {}}


def _ms(row: dict[str, Any], b: str) -> float | None:
    r = row.get("backends", {}).get(b)
    return r.get("ms") if r and r.get("correct") else None


def summarize(rows: list[dict[str, Any]], backends: tuple[str, ...]) -> dict[str, Any]:
    n = len(rows)
    summary: dict[str, Any] = {"problems": n, "status": {}}
    for r in rows:
        summary["status"][r["status"]] = summary["status"].get(r["status"], 0) + 1
    for r in rows:  # speedups per row
        e, i, a = _ms(r, "eager"), _ms(r, "inductor"), _ms(r, "argus")
        r["speedup"] = {
            "inductor_vs_eager": e / i if e and i else None,
            "argus_vs_eager": e / a if e and a else None,
            "argus_vs_inductor": i / a if i and a else None,
        }
    for key in ("inductor_vs_eager", "argus_vs_eager", "argus_vs_inductor"):
        sps = [r["speedup"][key] for r in rows]
        ok = [s for s in sps if s]
        summary[key] = {
            **{f"fast_{p}": (sum(1 for s in sps if s is not None and s > p) / n if n else 0.0) for p in (0, 1, 2)},
            "geomean": math.exp(sum(map(math.log, ok)) / len(ok)) if ok else None,
            "n_correct_timed": len(ok),
        }
    for b in backends:
        if b != "eager":
            summary[f"correct_{b}"] = sum(1 for r in rows if r.get("backends", {}).get(b, {}).get("correct")) / n \
                if n else 0.0
    cov = [r["coverage"] for r in rows if r.get("coverage") is not None]
    summary["coverage_mean"] = sum(cov) / len(cov) if cov else None
    counted = [r for r in rows if r.get("coverage") is not None]
    flops = sum(r["flops"] for r in counted)
    summary["coverage_flop_weighted"] = sum(min(r["argus_flops"], r["flops"]) for r in counted) / flops \
        if flops else None
    summary["argus_ran_share"] = sum(1 for r in rows if r.get("argus_ran")) / n if n else 0.0
    for r in rows:  # the first call (compile included) of argus against inductor's default mode
        fa, fi = (r.get("backends", {}).get(b, {}).get("first_call_s") for b in ("argus", "inductor"))
        r["first_call_ratio"] = fa / fi if fa and fi else None
        settle = r.get("backends", {}).get("argus", {}).get("settle_s")
        r["settled_ratio"] = (fa + settle) / fi if fa and fi and settle is not None else None
    ratios = sorted(r["first_call_ratio"] for r in rows if r.get("first_call_ratio"))
    summary["first_call_argus_vs_inductor_median"] = statistics.median(ratios) if ratios else None
    settled = sorted(r["settled_ratio"] for r in rows if r.get("settled_ratio"))
    summary["settled_argus_vs_inductor_median"] = statistics.median(settled) if settled else None
    summary["by_level"] = {}
    for level in sorted({r.get("level") for r in rows if r.get("level") is not None}):
        sps = [r["speedup"]["argus_vs_inductor"] for r in rows if r.get("level") == level
               and r["speedup"]["argus_vs_inductor"]]
        summary["by_level"][str(level)] = {
            "n": sum(1 for r in rows if r.get("level") == level), "n_timed": len(sps),
            "geomean_argus_vs_inductor": math.exp(sum(map(math.log, sps)) / len(sps)) if sps else None,
            "min_argus_vs_inductor": min(sps) if sps else None,
            "below_0.90": sum(1 for s in sps if s < 0.90)}
    return summary


def _settle(s: float | None) -> str:
    """The background swap-in's seconds after a first call, where it had any."""
    return f" +{s:.1f}" if s and s >= 0.05 else ""


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = [f"# KernelBench-format run, {meta['date']}", "",
             f"Device: {meta['device_name']}; torch {meta['torch']}; timing: {meta['timing']}; "
             f"Argus ON_MISS: {meta.get('argus_on_miss', 'default')}"
             + "".join(f"; {k}={v}" for k, v in meta.get("argus_env", {}).items()), ""]
    if meta.get("note"):
        lines += [f"> {meta['note']}", ""]
    lines += ["| problem | lvl | status | eager ms | inductor ms | argus ms | ind/eager | argus/eager | argus/ind "
              "| first call s ind / argus | argus coverage | argus ops | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.get("backends", {})
        def cell(name: str) -> str:
            x = b.get(name)
            if not x or "correct" not in x:  # not run, or first calls only
                return "-"
            return _f(x.get("ms"), "{:.3f}") if x.get("correct") else "wrong"
        notes = [f"{k}: {v['error']}" for k, v in b.items() if v.get("error")]
        if r["status"] not in ("ok", FIRST_CALLS_ONLY):
            notes.insert(0, str(r.get("error", "")))
        sp = r.get("speedup", {})
        note = "; ".join(notes).replace("|", "/").replace("\n", " ")[:160]
        lines.append(f"| {r['problem']} | {r.get('level') or '-'} | {r['status']} | {cell('eager')} "
                     f"| {cell('inductor')} | {cell('argus')} | {_f(sp.get('inductor_vs_eager'))} "
                     f"| {_f(sp.get('argus_vs_eager'))} | {_f(sp.get('argus_vs_inductor'))} "
                     f"| {_f(b.get('inductor', {}).get('first_call_s'), '{:.1f}')} / "
                     f"{_f(b.get('argus', {}).get('first_call_s'), '{:.1f}')}"
                     f"{_settle(b.get('argus', {}).get('settle_s'))} "
                     f"| {_f(r.get('coverage'), '{:.0%}')} "
                     f"| {' '.join(o.split('::')[-1] for o in r.get('argus_ops', [])) or '-'} | {note} |")
    if meta.get("first_call") == "alone, first calls only":
        lines += ["", f"First call (compile included), argus / inductor's default mode: median "
                  f"{_f(summary.get('first_call_argus_vs_inductor_median'))}x; first call + background / inductor: "
                  f"median {_f(summary.get('settled_argus_vs_inductor_median'))}x. First calls only "
                  f"(--first-call-only): no correctness trials, no timing of the compiled code. Status: "
                  f"{summary['status']}.", ""]
        return "\n".join(lines)
    lines += ["", "| metric | inductor vs eager | argus vs eager | argus vs inductor |", "|---|---|---|---|"]
    keys = ("inductor_vs_eager", "argus_vs_eager", "argus_vs_inductor")
    for m in ("fast_0", "fast_1", "fast_2"):
        lines.append(f"| {m} | " + " | ".join(_f(summary[k][m]) for k in keys) + " |")
    lines.append("| geomean speedup (correct) | " + " | ".join(_f(summary[k]["geomean"]) for k in keys) + " |")
    lines += ["", "| level | problems | timed | argus/inductor geomean | min | below 0.90x |",
              "|---|---|---|---|---|---|"]
    for level, s in summary.get("by_level", {}).items():
        lines.append(f"| {level} | {s['n']} | {s['n_timed']} | {_f(s['geomean_argus_vs_inductor'])} "
                     f"| {_f(s['min_argus_vs_inductor'])} | {s['below_0.90']} |")
    lines += ["", f"First call (compile included), argus / inductor's default mode: median "
              f"{_f(summary.get('first_call_argus_vs_inductor_median'))}x. Argus's background swap-in after it "
              "(+s in the first-call column: Inductor's code runs meanwhile), first call + background / inductor: "
              f"median {_f(summary.get('settled_argus_vs_inductor_median'))}x."]
    lines += ["", f"Correct: inductor {_f(summary.get('correct_inductor'), '{:.0%}')}, "
              f"argus {_f(summary.get('correct_argus'), '{:.0%}')}. "
              f"Argus coverage (share of FLOPs in Argus kernels): mean {_f(summary['coverage_mean'], '{:.0%}')}, "
              f"FLOP-weighted {_f(summary['coverage_flop_weighted'], '{:.0%}')} (FLOPs as FlopCounterMode counts them: "
              "matmul, conv, attention; '-' where a problem has none). Problems where any Argus kernel ran: "
              f"{_f(summary['argus_ran_share'], '{:.0%}')}. Status: {summary['status']}.",
              "", COVERAGE_NOTE, ""]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [r["problem"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(6, 0.6 * len(rows) + 2), 7), sharex=True)
    xs = range(len(rows))
    for off, key, label in ((-0.2, "inductor_vs_eager", "inductor / eager"), (0.2, "argus_vs_eager", "argus / eager")):
        ax1.bar([x + off for x in xs], [r.get("speedup", {}).get(key) or 0 for r in rows], 0.4, label=label)
    ax1.axhline(1.0, color="k", lw=0.8)
    ax1.set_ylabel("speedup vs eager")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.bar(list(xs), [100 * (r.get("coverage") or 0) for r in rows])
    ax2.set_ylabel("Argus coverage (% FLOPs)")
    ax2.set_xticks(list(xs))
    ax2.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problems", nargs="*", help="KernelBench-format .py files or directories (searched recursively)")
    ap.add_argument("--out", default=None, help="output folder (default: $OUT, else benchmarks/results)")
    ap.add_argument("--filter", default=None, help="only problems whose file name or path matches this glob")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per problem before it is killed (300)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated subset of eager,inductor,argus")
    ap.add_argument("--trials", type=int, default=5, help="correctness trials of fresh random inputs (5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up calls before timing (GPU 10, CPU 1)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls, median reported (GPU 100, CPU 5)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--argus-ops", default="all",
                    help="the op kinds backend=\"argus\" takes (ARGUS_OPS syntax; default all)")
    ap.add_argument("--on-miss", default="default", choices=("synthesize", "default", "fallback"),
                    help="ARGUS_ON_MISS for backend=\"argus\": synthesize tunes each new signature on the problem's "
                         "operands first (the agent for GEMM/attention/MoE, a policy search for the other classes); "
                         "default runs template policies (default)")
    ap.add_argument("--name", default=None, help="file stem of the outputs (default kernelbench-<date>)")
    ap.add_argument("--no-graphs", dest="graphs", action="store_false",
                    help="on a GPU, time every call with CUDA events even where the calls capture in a CUDA graph "
                         "(default: CUDA-graph replay where every backend's call captures: device time, the host's "
                         "launch latency out)")
    ap.add_argument("--first-call", action="store_true",
                    help="time argus's and inductor's first call (compile included) each in a process of its own "
                         "with empty caches (two more processes a problem); without it the first calls are those of "
                         "the worker, where Argus compiles first and Inductor finds some of its work cached")
    ap.add_argument("--first-call-after", action="store_true",
                    help="as --first-call, but those processes run one at a time after every problem has run, with "
                         "no other job beside them (compile times without other jobs' compiles on the CPUs; a "
                         "longer run)")
    ap.add_argument("--first-call-only", action="store_true",
                    help="only the isolated first calls of --first-call-after, one problem at a time: no correctness "
                         "trials and no timing of the compiled code (to check the compile time alone, quickly)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="problems compiled and checked at once (each times alone, under a lock; default 1)")
    ap.add_argument("--isolate-timing", action="store_true",
                    help="with --jobs > 1, let no compile run while a job times: compiles hold the timing lock shared "
                         "and timings exclusively (cleaner times, since a compile's first runs and swap-in trials use "
                         "the GPU too; a slower run, as each timing waits for the compiles in flight)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="write one table from the JSON files of earlier runs (no problem is run)")
    ap.add_argument("--memory-pool", default=None, help=argparse.SUPPRESS)  # jobs' GPU memory held (gpu_memory)
    ap.add_argument("--memory-budget", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device.startswith("cuda")
    args.warmup = args.warmup if args.warmup is not None else (10 if gpu else 1)
    args.reps = args.reps if args.reps is not None else (100 if gpu else 5)
    args.backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    bad = [b for b in args.backends if b not in BACKENDS]
    if bad or "eager" not in args.backends:
        ap.error(f"--backends must include eager and name only {', '.join(BACKENDS)} (got {bad or args.backends})")

    out = Path(args.out or os.environ.get("OUT") or REPO / "benchmarks" / "results")
    stem = args.name or f"kernelbench-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    if args.merge:
        return merge(args.merge, out, stem)
    if args.worker:
        row = worker(Path(args.worker), args)
        Path(args.worker_out).write_text(json.dumps(row))
        return 0

    if not args.problems:
        ap.error("give at least one problem file or directory (e.g. benchmarks/kernelbench/problems)")
    try:
        problems = find_problems(args.problems, args.filter)
    except (FileNotFoundError, ValueError) as e:
        ap.error(str(e))
    if not problems:
        ap.error(f"no KernelBench-format .py files under {', '.join(args.problems)}"
                 + (f" matching {args.filter!r}" if args.filter else ""))

    import torch

    interp = os.environ.get("ARGUS_INTERPRET") == "1"
    timing = (f"CUDA events, {args.warmup} warm-up, median of {args.reps}" if gpu else
              f"time.perf_counter on the CPU, {args.warmup} warm-up, median of {args.reps} (indicative only)")
    note = ("ARGUS_INTERPRET=1: Argus kernels ran in the Triton interpreter; their CPU timings measure the "
            "interpreter, not the kernels" if interp and not gpu else "")
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "device": args.device,
            "device_name": torch.cuda.get_device_name() if gpu else platform.processor() or platform.machine(),
            "torch": torch.__version__, "timing": timing, "note": note, "interpret": interp,
            "trials": args.trials, "atol": ATOL, "rtol": RTOL, "timeout_s": args.timeout,
            "full_sizes": os.environ.get("ARGUS_KB_FULL") == "1" or gpu, "coverage_note": COVERAGE_NOTE,
            "argus_on_miss": args.on_miss,
            # the Argus settings of the environment (ARGUS_INLINE, ARGUS_TUNE_SECONDS, ...): what the table ran with
            "argus_env": {k: v for k, v in sorted(os.environ.items())
                          if k.startswith("ARGUS_") and k not in ("ARGUS_CACHE_DIR", "ARGUS_TUNE_LOCK")}}
    out.mkdir(parents=True, exist_ok=True)
    meta["jobs"] = args.jobs
    meta["isolate_timing"] = bool(args.isolate_timing)
    args.first_call_after = args.first_call_after or args.first_call_only
    if args.first_call or args.first_call_after:  # as a user's install has it (bytecode_env)
        meta["first_call_bytecode"] = "compiled ahead (this Python writes none)" if bytecode_env() else \
            "written by Python at first import"
    # where the first calls were timed: in the worker, each in a process of its own beside the other jobs, or after
    # the run with nothing beside them
    meta["first_call"] = "alone, first calls only" if args.first_call_only else \
        "after the run, alone" if args.first_call_after else \
        "own process, beside other jobs" if args.first_call else "worker"
    done: dict[int, dict[str, Any]] = {}
    # the run's turn lock and memory pool live in a folder of its own, gone at its exit
    shared = Path(tempfile.mkdtemp(prefix="argus-kb-run-"))
    atexit.register(shutil.rmtree, shared, ignore_errors=True)
    lock = shared / "timing.lock"
    args.checker_workers_alone = os.environ.get("ARGUS_CHECKER_WORKERS", "auto")
    if args.jobs > 1:  # the workers' GPU phases and Argus's own timing (--on-miss synthesize) take turns on it
        os.environ["ARGUS_TUNE_LOCK"] = str(lock)
        # and the jobs share the CPUs: their checkers' worker processes too (a first call timed alone gets "auto")
        os.environ.setdefault("ARGUS_CHECKER_WORKERS", str((os.cpu_count() or 1) // (4 * args.jobs)))
        if gpu:  # and hold no more device memory together than the device has free now (gpu_memory)
            free, _ = torch.cuda.mem_get_info()
            args.memory_budget = int(0.85 * free)
            args.memory_pool = str(shared / "memory.json")
            meta["memory_budget_gb"] = round(args.memory_budget / 2**30, 1)

    def show(i: int, row: dict[str, Any], what: str = "") -> None:
        b = row.get("backends", {})
        print(f"[{len(done)}/{len(problems)}] {problems[i]}:", row["status"] + what,
              " ".join(f"{k}={'ok' if v.get('correct') else 'WRONG'}" for k, v in b.items()),
              f"coverage={_f(row.get('coverage'), '{:.0%}')}", f"({row.get('wall_s')} s)", flush=True)

    if args.first_call_only:  # rows of first calls alone: nothing else is run
        done.update({i: {"problem": p.stem, "path": str(p), "level": _level(p), "status": NOT_RUN,
                         "backends": {b: {} for b in args.backends if b != "eager"}} for i, p in enumerate(problems)})
        problems_to_run: list[Path] = []
    else:
        problems_to_run = problems
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, p, args): i for i, p in enumerate(problems_to_run)}
        for fut in concurrent.futures.as_completed(futures):
            i = futures[fut]
            row = done[i] = fut.result()
            show(i, row)
            # written after every problem, so a run stopped from outside keeps what it measured
            write_outputs(out, stem, meta, [done[k] for k in sorted(done)], args.backends,
                          final=len(done) == len(problems) and not _oom_rows(done, args.jobs))
    retry = _oom_rows(done, args.jobs)
    if retry:  # an out-of-memory beside other jobs is run again alone before it is recorded
        alone = argparse.Namespace(**{**vars(args), "memory_pool": None})
        for n, i in enumerate(retry):
            row = done[i] = {**run_one(problems[i], alone), "retried_alone": True}
            show(i, row, " (run again alone)")
            write_outputs(out, stem, meta, [done[k] for k in sorted(done)], args.backends, final=n == len(retry) - 1)
    if args.first_call_after:  # one at a time, nothing else running: each written as it comes
        todo = [i for i in sorted(done) if done[i]["status"] in ("ok", NOT_RUN)]
        for n, i in enumerate(todo):
            isolate_first_calls(problems[i], done[i], args)
            if done[i]["status"] == NOT_RUN:
                done[i]["status"] = FIRST_CALLS_ONLY
            b = done[i].get("backends", {})
            ind, arg = (b.get(k, {}).get("first_call_s") for k in ("inductor", "argus"))
            print(f"first call alone [{n + 1}/{len(todo)}] {done[i]['problem']}: inductor {_f(ind)} s, argus "
                  f"{_f(arg)} s{_settle(b.get('argus', {}).get('settle_s'))}", flush=True)
            write_outputs(out, stem, meta, [done[k] for k in sorted(done)], args.backends, final=n == len(todo) - 1)
    return 0


FIRST_CALL = """
import contextlib, sys, time, torch
sys.path.insert(0, {runner!r})
import argus_inductor  # noqa: F401
from argus_inductor.runtime import timing
from run import load_problem
torch.set_grad_enabled(False)
mod = load_problem(__import__("pathlib").Path({path!r}))
torch.manual_seed(0)
with timing.shared() if {isolate!r} else contextlib.nullcontext():
    model = mod.Model(*mod.get_init_inputs()).to({device!r}).eval()
    inputs = [x.to({device!r}) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    kw = {{"options": {{"ops": {ops!r}}}}} if {backend!r} == "argus" else {{}}
    fn = torch.compile(model, backend={backend!r}, **kw)
    t0, w0 = time.perf_counter(), timing.waited_s()
    fn(*inputs)
    torch.cuda.synchronize() if {device!r}.startswith("cuda") else None
    print("FIRST_CALL_S", time.perf_counter() - t0 - (timing.waited_s() - w0), flush=True)
    t1, w1 = time.perf_counter(), timing.waited_s()
    argus_inductor.settle()
    print("SETTLE_S", time.perf_counter() - t1 - (timing.waited_s() - w1))
"""


def isolate_first_calls(path: Path, row: dict[str, Any], args: argparse.Namespace) -> None:
    """`row`'s first calls (and Argus's background seconds after it) measured each in a process of its own."""
    for b in ("argus", "inductor"):
        if b in row.get("backends", {}):
            first, settle = first_call_isolated(path, b, args)
            row["backends"][b]["first_call_s"] = first
            if b == "argus":
                row["backends"][b]["settle_s"] = settle
    row["first_call_isolated"] = "after the run, one at a time" if args.first_call_after else True


NOT_RUN = "not run"  # a row of --first-call-only not reached yet
FIRST_CALLS_ONLY = "first calls only"  # a row of --first-call-only whose first calls were timed
def first_call_isolated(path: Path, backend: str, args: argparse.Namespace) -> tuple[float | None, float | None]:
    """`backend`'s first call of the problem in a process of its own with empty Inductor, Triton and Argus caches:
    what a user's first run pays (a worker compiles several backends in one process, where one's caches serve the
    next); and the seconds after it until Argus's background swap-in settled (0 for Inductor)."""
    with tempfile.TemporaryDirectory(prefix="argus-kb-first-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor", "TRITON_CACHE_DIR": f"{tmp}/triton",
               "ARGUS_CACHE_DIR": f"{tmp}/argus",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               **bytecode_env()}
        if args.first_call_after or args.first_call_only:  # alone on the machine: the checker's workers as a user's
            env["ARGUS_CHECKER_WORKERS"] = getattr(args, "checker_workers_alone", "auto")
        code = FIRST_CALL.format(runner=str(HERE), path=str(path), device=args.device, ops=args.argus_ops,
                                 backend=backend, isolate=bool(args.isolate_timing))
        try:
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                  timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return None, None
        found = {ln.split()[0]: float(ln.split()[1]) for ln in proc.stdout.splitlines()
                 if ln.startswith(("FIRST_CALL_S ", "SETTLE_S "))}
        return found.get("FIRST_CALL_S"), found.get("SETTLE_S")


def _oom_rows(done: dict[int, dict[str, Any]], jobs: int) -> list[int]:
    """The problems that ran out of memory beside other jobs (not yet run again alone)."""
    if jobs <= 1:
        return []
    return sorted(i for i, r in done.items() if r["status"] == "oom" and not r.get("retried_alone"))


def write_outputs(out: Path, stem: str, meta: dict[str, Any], rows: list[dict[str, Any]],
                  backends: tuple[str, ...], final: bool = True) -> None:
    summary = summarize(rows, backends)
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
    md = markdown(meta, rows, summary)
    (out / f"{stem}.md").write_text(md)
    if not final:
        return
    png = plot(rows, out / f"{stem}.png")
    print(md)
    print(f"wrote {out / stem}.json, .md" + (", .png" if png else " (no plot: matplotlib is not installed)"))


def merge(files: list[str], out: Path, stem: str) -> int:
    """One table from several runs' JSON files (e.g. a problem set run in parts on a time-boxed machine): rows
    concatenated in order (a later file's row for the same problem replaces the earlier one: a re-run), metadata
    of the first, the summary recomputed."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    by_problem: dict[str, dict[str, Any]] = {}
    for p in parts:
        for r in p["rows"]:
            if r["status"] == NOT_RUN and (r.get("path") or r["problem"]) in by_problem:
                continue  # a part stopped before it: another part's row stands
            by_problem[r.get("path") or r["problem"]] = r
    rows = list(by_problem.values())
    meta = dict(parts[0]["meta"], merged_from=[Path(f).name for f in files])
    backends = tuple(b for b in BACKENDS if any(b in r.get("backends", {}) for r in rows))
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(out, stem, meta, rows, backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
