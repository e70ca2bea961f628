"""Warp-specialized persistent Gluon GEMM for Hopper (sm_90): a probe, not yet a lowering of gemm_epilogue.

Measured on the H100 (benchmarks/results/gluon-gemm-probe-h100-2026-11-23.json, `python gluon_gemm_probe.py bench`):
1.00x cuBLAS over the five prefill shapes of benchmarks/ops.py and 1.07x over the four M=128 shapes (1.33x at
N=K=4096, 0.92x at N=6144), plain C = A W^T only (no epilogue). Its first version hung wherever the ring wrapped:
it released the previous k-step's slot through `prev = index` carried in the loop, which Triton 3.6's frontend
does not make a loop-carried value (the TTGIR released the tile's first slot every step); the slot is now computed.

    C[M, N] = A[M, K] @ W[N, K]^T      (bf16 in/out, fp32 accumulate; W is an nn.Linear weight)

Design
------
* Persistent: grid = min(#SMs, #tiles); each CTA walks tiles pid, pid + grid, ... in grouped (GROUP_M) order.
* Partitions (gl.warp_specialize):
    - default partition = the consumer: NUM_CONSUMER_WARPS warps (8 = two warpgroups, each owning 64 rows of a
      128-row tile; 4 = one warpgroup). Issues async wgmma (1 in flight), releases the ring slot of the previous
      k-step once wgmma_wait(1) has retired it, then runs the epilogue: fp32 -> bf16 -> smem -> TMA store. The TMA
      store is only waited for (store_wait(0)) right before the next tile's epilogue writes the C buffer, so it
      overlaps the next tile's mainloop.
    - worker 0 = loader: 1 warp, few registers; issues TMA loads of A[BM, BK] and W[BN, BK] into a NUM_STAGES ring
      guarded by ready (tx-count) / empty mbarriers. It runs ahead across tile boundaries.
* W is consumed K-major: the W slot [BN, BK] is handed to wgmma as the permuted (transposed) view [BK, BN].

Usage
-----
    python benchmarks/gluon_gemm_probe.py compile   # no GPU: compile every config for sm_90 (regs, spills, smem)
    python benchmarks/gluon_gemm_probe.py bench     # on an H100: correctness + timing vs torch.matmul (cuBLAS)
        env: OUT=dir (writes gluon_gemm.json, also partially after each shape), GLUON_GEMM_CONFIGS=a,b (only these
        configs), GLUON_GEMM_WATCHDOG_S=120 (hard-exit with partial JSON if a config hangs).
    Error metric: max |C - ref| / max |ref|, ref = a.float() @ w.float().T.
Note: Triton lowers mbarrier.arrive in the 8-warp consumer as bar.sync(256 threads) + one elected arrive, so a slot
is released only after BOTH warpgroups' wgmma_wait(1) -- hence empty barriers have count=1.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from argus_inductor.dsl.precompile import _resource_usage  # noqa: E402

# --------------------------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------------------------


@gluon.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    # Grouped ordering: walk GROUP_M M-tiles down a column of N before moving to the next N-tile (L2 reuse of W).
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = num_pid_m - first_pid_m
    group_size_m = gl.where(group_size_m < GROUP_M, group_size_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@gluon.jit
def _split_n(x, FACTOR: gl.constexpr):
    # Split [BM, BN] into FACTOR column chunks [BM, BN // FACTOR], in column order (register-only for the wgmma
    # accumulator layout, whose high column bits live in registers).
    xs = (x, )
    for _ in gl.static_range(FACTOR.bit_length() - 1):
        nxt = ()
        for j in gl.static_range(len(xs)):
            y = xs[j]
            nxt += y.reshape(y.shape[0], 2, y.shape[1] // 2).permute(0, 2, 1).split()
        xs = nxt
    return xs


@gluon.jit
def _tile_counts(M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    return num_pid_m, num_pid_n, num_pid_m * num_pid_n, gl.cdiv(K, BK)


@gluon.jit
def _load_partition(a_desc, w_desc, a_bufs, w_bufs, ready_bars, empty_bars, M, N, K,
                    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                    NUM_STAGES: gl.constexpr):
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m, num_pid_n, num_tiles, k_tiles = _tile_counts(M, N, K, BM, BN, BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + w_desc.block_type.nbytes

    index = 0
    phase = 1  # empty barriers start "complete" for the producer: first wait on phase 1 passes immediately
    for tile_id in range(pid, num_tiles, nprog):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        for kk in range(k_tiles):
            mbarrier.wait(empty_bars.index(index), phase)
            bar = ready_bars.index(index)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kk * BK], bar, a_bufs.index(index))
            tma.async_copy_global_to_shared(w_desc, [off_n, kk * BK], bar, w_bufs.index(index))
            index += 1
            if index == NUM_STAGES:
                index = 0
                phase ^= 1


@gluon.jit
def _mma_partition(c_desc, a_bufs, w_bufs, ready_bars, empty_bars, M, N, K,
                   BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                   NUM_STAGES: gl.constexpr, EPI_N: gl.constexpr, NUM_CONSUMER_WARPS: gl.constexpr):
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m, num_pid_n, num_tiles, k_tiles = _tile_counts(M, N, K, BM, BN, BK)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_CONSUMER_WARPS, 1],
                                                         instr_shape=[16, BN, 16])
    # C staging: one [BM, BN] buffer, or (subtiled epilogue) two [BM, EPI_N] buffers used alternately.
    NUM_C_BUFS: gl.constexpr = 1 if EPI_N == BN else 2
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [NUM_C_BUFS] + c_desc.block_type.shape, c_desc.layout)

    index = 0
    phase = 0
    for tile_id in range(pid, num_tiles, nprog):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN

        acc = gl.zeros((BM, BN), gl.float32, acc_layout)
        for kk in range(k_tiles):
            mbarrier.wait(ready_bars.index(index), phase)
            acc = warpgroup_mma(a_bufs.index(index), w_bufs.index(index).permute((1, 0)), acc, is_async=True)
            # <= 1 wgmma in flight: the one of the previous k-step has retired, so its slot may be refilled.
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            # the previous k-step's slot, computed: `prev = index` carried through the loop is not made a loop-carried
            # value by Triton 3.6's frontend (an alias of a carried name) and keeps its value from before the loop
            mbarrier.arrive(empty_bars.index((index + NUM_STAGES - 1) % NUM_STAGES), count=1, pred=kk > 0)
            index += 1
            if index == NUM_STAGES:
                index = 0
                phase ^= 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index((index + NUM_STAGES - 1) % NUM_STAGES), count=1)

        # Epilogue: the previous tile's TMA store had the whole mainloop to drain.
        out = acc.to(c_desc.dtype)
        if EPI_N == BN:
            tma.store_wait(pendings=0)
            c_smem.index(0).store(out)
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem.index(0))
        else:
            outs = _split_n(out, BN // EPI_N)
            for i in gl.static_range(BN // EPI_N):
                buf = c_smem.index(i % 2)
                # the store issued two chunks ago read this buffer; keep only the newest store in flight
                tma.store_wait(pendings=1)
                buf.store(outs[i])
                fence_async_shared()
                tma.async_copy_shared_to_global(c_desc, [off_m, off_n + i * EPI_N], buf)
    tma.store_wait(pendings=0)


@gluon.jit
def gemm_ws_kernel(a_desc, w_desc, c_desc, M, N, K,
                   BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                   NUM_STAGES: gl.constexpr, EPI_N: gl.constexpr, LOADER_REGS: gl.constexpr,
                   num_warps: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + a_desc.block_type.shape, a_desc.layout)
    w_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=1)

    gl.warp_specialize([
        (_mma_partition, (c_desc, a_bufs, w_bufs, ready_bars, empty_bars, M, N, K, BM, BN, BK, GROUP_M, NUM_STAGES,
                          EPI_N, num_warps)),
        (_load_partition, (a_desc, w_desc, a_bufs, w_bufs, ready_bars, empty_bars, M, N, K, BM, BN, BK, GROUP_M,
                           NUM_STAGES)),
    ], [1], [LOADER_REGS])


# --------------------------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------------------------

# num_warps = consumer warps (default partition); +1 loader warp (rounded up to a warpgroup by the hardware).
CONFIGS = {
    # cuBLAS-like: 128x256 tile, two consumer warpgroups (64 rows each), 3 x 48 KiB ring + 64 KiB C buffer.
    "128x256x64_s3_w8": dict(BM=128, BN=256, BK=64, NUM_STAGES=3, GROUP_M=8, num_warps=8, maxnreg=None),
    # 128x128: 4 x 32 KiB ring (+32 KiB C), two warpgroups.
    # same tile, 4-stage ring: the epilogue is subtiled (2 x [128, 64] C buffers) to make room.
    "128x256x64_s4_w8_e64": dict(BM=128, BN=256, BK=64, NUM_STAGES=4, GROUP_M=8, num_warps=8, EPI_N=64,
                                 maxnreg=None),
    "128x128x64_s5_w8": dict(BM=128, BN=128, BK=64, NUM_STAGES=5, GROUP_M=8, num_warps=8, maxnreg=None),
    # 128x128 with one consumer warpgroup (128 acc regs/thread).
    "128x128x64_s5_w4": dict(BM=128, BN=128, BK=64, NUM_STAGES=5, GROUP_M=8, num_warps=4, maxnreg=None),
    # small-M configs: more tiles for 132 SMs.
    "64x128x64_s6_w4": dict(BM=64, BN=128, BK=64, NUM_STAGES=6, GROUP_M=8, num_warps=4, maxnreg=None),
    "64x64x128_s6_w4": dict(BM=64, BN=64, BK=128, NUM_STAGES=6, GROUP_M=8, num_warps=4, maxnreg=None),
    "64x32x128_s8_w4": dict(BM=64, BN=32, BK=128, NUM_STAGES=8, GROUP_M=8, num_warps=4, maxnreg=None),
    "128x64x128_s4_w8": dict(BM=128, BN=64, BK=128, NUM_STAGES=4, GROUP_M=8, num_warps=8, maxnreg=None),
}
LARGE_M_CONFIGS = ["128x256x64_s4_w8_e64", "128x256x64_s3_w8", "128x128x64_s5_w8", "128x128x64_s5_w4"]
SMALL_M_CONFIGS = ["64x64x128_s6_w4", "64x32x128_s8_w4", "64x128x64_s6_w4", "128x64x128_s4_w8"]
LOADER_REGS = 24


def _epi_n(cfg):
    return cfg.get("EPI_N") or cfg["BN"]


def _layouts(cfg):
    BM, BN, BK = cfg["BM"], cfg["BN"], cfg["BK"]
    a_l = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16)
    w_l = gl.NVMMASharedLayout.get_default_for([BN, BK], gl.bfloat16)
    c_l = gl.NVMMASharedLayout.get_default_for([BM, _epi_n(cfg)], gl.bfloat16)
    return a_l, w_l, c_l


def _constexprs(cfg):
    return dict(BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP_M=cfg["GROUP_M"], NUM_STAGES=cfg["NUM_STAGES"],
                EPI_N=_epi_n(cfg), LOADER_REGS=LOADER_REGS, num_warps=cfg["num_warps"])


_NUM_SMS = {}


def _num_sms(device):
    import torch
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _NUM_SMS:
        _NUM_SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _NUM_SMS[idx]


def pick_config(M, N, K):
    return "128x256x64_s3_w8" if M > 512 else "64x64x128_s6_w4"


def gemm(a, w, config=None, out=None):
    """C = a @ w.T ; a: (M, K) bf16, w: (N, K) bf16 (both K-contiguous)."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    assert a.dtype == torch.bfloat16 and w.dtype == torch.bfloat16
    assert a.ndim == 2 and w.ndim == 2 and a.shape[1] == w.shape[1]
    a = a if a.stride(-1) == 1 else a.contiguous()
    w = w if w.stride(-1) == 1 else w.contiguous()
    M, K = a.shape
    N = w.shape[0]
    name = config or pick_config(M, N, K)
    cfg = CONFIGS[name]
    BM, BN, BK = cfg["BM"], cfg["BN"], cfg["BK"]
    c = out if out is not None else torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    a_l, w_l, c_l = _layouts(cfg)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK], a_l)
    w_desc = TensorDescriptor.from_tensor(w, [BN, BK], w_l)
    c_desc = TensorDescriptor.from_tensor(c, [BM, _epi_n(cfg)], c_l)
    num_tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    grid = (max(1, min(_num_sms(a.device), num_tiles)), )
    kw = {}
    if cfg.get("maxnreg"):
        kw["maxnreg"] = cfg["maxnreg"]
    gemm_ws_kernel[grid](a_desc, w_desc, c_desc, M, N, K, cfg["BM"], cfg["BN"], cfg["BK"], cfg["GROUP_M"],
                         cfg["NUM_STAGES"], _epi_n(cfg), LOADER_REGS, num_warps=cfg["num_warps"], **kw)
    return c


# --------------------------------------------------------------------------------------------------------------
# Offline compile (no GPU)
# --------------------------------------------------------------------------------------------------------------


def compile_config(name, M=4096, N=4096, K=4096, dump=None):
    import re

    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = CONFIGS[name]
    a_l, w_l, c_l = _layouts(cfg)
    BM, BN, BK = cfg["BM"], cfg["BN"], cfg["BK"]

    def desc_sig(block, layout):
        return f"tensordesc<bf16[{block[0]}, {block[1]}],{layout!r}>"

    fn = gemm_ws_kernel
    sig_by_name = {
        "a_desc": desc_sig([BM, BK], a_l),
        "w_desc": desc_sig([BN, BK], w_l),
        "c_desc": desc_sig([BM, _epi_n(cfg)], c_l),
        "M": "i32", "N": "i32", "K": "i32",
    }
    consts = _constexprs(cfg)
    signature, constexprs, attrs = {}, {}, {}
    for i, arg in enumerate(fn.arg_names):
        if arg in consts:
            signature[arg] = "constexpr"
            constexprs[(i, )] = consts[arg]
        else:
            signature[arg] = sig_by_name[arg]
            if arg in ("N", "K") or (arg == "M" and M % 16 == 0):
                attrs[(i, )] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, signature, constexprs, attrs)
    options = {"num_warps": cfg["num_warps"]}
    if cfg.get("maxnreg"):
        options["maxnreg"] = cfg["maxnreg"]
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    regs, spills = _resource_usage(compiled.asm.get("cubin"))
    ptx = compiled.asm.get("ptx", "")
    if dump:
        os.makedirs(dump, exist_ok=True)
        for k in ("ttgir", "llir", "ptx"):
            with open(os.path.join(dump, f"{name}.{k}"), "w") as f:
                f.write(compiled.asm.get(k, ""))
    return dict(ok=True, registers=regs, spills=spills, shared=compiled.metadata.shared,
                num_warps=compiled.metadata.num_warps, wgmma="wgmma" in ptx,
                tma="cp.async.bulk.tensor" in ptx,
                setmaxnreg=sorted({int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}))


def cmd_compile():
    os.environ.pop("TRITON_INTERPRET", None)
    dump = os.environ.get("GLUON_DUMP")
    ok = True
    for name in CONFIGS:
        try:
            r = compile_config(name, dump=dump)
            print(f"{name:22s} {r}")
        except Exception:
            ok = False
            print(f"{name:22s} FAILED")
            traceback.print_exc()
    return 0 if ok else 1


# --------------------------------------------------------------------------------------------------------------
# Benchmark (H100)
# --------------------------------------------------------------------------------------------------------------

SHAPES = [(M, N, K) for M in (128, 4096) for (N, K) in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))]
SHAPES.append((8192, 8192, 8192))


def _bench_fn(fn):
    try:
        return triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")
    except Exception:
        return triton.testing.do_bench(fn, warmup=10, rep=30, return_mode="median")


def _write_json(results, extra=None):
    out = os.environ.get("OUT")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gluon_gemm.json"), "w") as f:
        json.dump(dict(results=results, **(extra or {})), f, indent=1)


class _Watchdog:
    """A hung kernel (a barrier-phase bug deadlocks the GPU) must not lose the results so far: after `seconds`
    without a reset, print what was running, write the partial JSON and hard-exit."""

    def __init__(self, seconds, results):
        import threading
        self.seconds, self.results, self.what = seconds, results, "start"
        self.deadline = time.time() + seconds
        self.lock = threading.Lock()
        t = threading.Thread(target=self._run, daemon=True)
        t.start()

    def reset(self, what):
        with self.lock:
            self.what, self.deadline = what, time.time() + self.seconds

    def _run(self):
        while True:
            time.sleep(1.0)
            with self.lock:
                late = time.time() > self.deadline
                what = self.what
            if late:
                print(f"WATCHDOG: no progress for {self.seconds}s while running {what} -> probably a HANG "
                      f"(deadlock); writing partial results and exiting", flush=True)
                try:
                    _write_json(self.results, dict(hang=what))
                finally:
                    os._exit(3)


def cmd_bench():
    import torch
    torch.manual_seed(0)
    dev = torch.device("cuda")
    t_start = time.time()
    results = []
    dog = _Watchdog(int(os.environ.get("GLUON_GEMM_WATCHDOG_S", "120")), results)
    only = [c for c in os.environ.get("GLUON_GEMM_CONFIGS", "").split(",") if c]
    for (M, N, K) in SHAPES:
        flops = 2.0 * M * N * K
        dog.reset(f"inputs/reference/cuBLAS at M={M} N={N} K={K}")
        a = torch.randn((M, K), device=dev, dtype=torch.bfloat16)
        w = torch.randn((N, K), device=dev, dtype=torch.bfloat16)
        ref = (a.float() @ w.float().T)
        ref_scale = ref.abs().max().item()
        wt = w.T
        try:
            ms_cublas = _bench_fn(lambda: torch.matmul(a, wt))
        except Exception:
            traceback.print_exc()
            ms_cublas = float("nan")
        configs = only or (SMALL_M_CONFIGS if M <= 512 else LARGE_M_CONFIGS)
        per_cfg = {}
        c = torch.empty((M, N), device=dev, dtype=torch.bfloat16)
        for name in configs:
            dog.reset(f"{name} at M={M} N={N} K={K}")
            try:
                c.fill_(float("nan"))
                gemm(a, w, name, out=c)
                torch.cuda.synchronize()
                err = ((c.float() - ref).abs().max().item()) / ref_scale
                if not (err <= 1e-2):
                    raise AssertionError(f"WRONG RESULT: max rel err {err:.3e} > 1e-2 for {name} at {(M, N, K)}")
                ms = _bench_fn(lambda: gemm(a, w, name, out=c))
                per_cfg[name] = dict(ms=ms, err=err, tflops=flops / ms * 1e-9)
                print(f"  M={M:5d} N={N:5d} K={K:5d} {name:20s} {ms:8.4f} ms {flops / ms * 1e-9:7.1f} TF/s "
                      f"err={err:.2e} ratio={ms_cublas / ms:.3f}", flush=True)
            except Exception as e:
                print(f"  M={M} N={N} K={K} {name}: FAILED {type(e).__name__}: {e}", flush=True)
                traceback.print_exc()
                per_cfg[name] = dict(error=f"{type(e).__name__}: {e}"[:500])
        good = {k: v for k, v in per_cfg.items() if "ms" in v}
        best = min(good, key=lambda k: good[k]["ms"]) if good else None
        row = dict(M=M, N=N, K=K, cublas_ms=ms_cublas, cublas_tflops=flops / ms_cublas * 1e-9, configs=per_cfg,
                   best=best, best_ms=good[best]["ms"] if best else None,
                   ratio=(ms_cublas / good[best]["ms"]) if best else None)
        results.append(row)
        _write_json(results, dict(partial=True))
        if best:
            print(f"M={M:5d} N={N:5d} K={K:5d}  cuBLAS {ms_cublas:8.4f} ms ({flops / ms_cublas * 1e-9:6.1f} TF/s) | "
                  f"best {best} {row['best_ms']:8.4f} ms ({flops / row['best_ms'] * 1e-9:6.1f} TF/s) | "
                  f"speedup vs cuBLAS {row['ratio']:.3f}x", flush=True)
        else:
            print(f"M={M:5d} N={N:5d} K={K:5d}  cuBLAS {ms_cublas:8.4f} ms | ALL CONFIGS FAILED", flush=True)
        torch.cuda.empty_cache()
    dog.reset("summary")
    ratios = [r["ratio"] for r in results if r["ratio"]]
    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    gm_big = [r["ratio"] for r in results if r["ratio"] and r["M"] > 512]
    gm_small = [r["ratio"] for r in results if r["ratio"] and r["M"] <= 512]
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")  # noqa: E731
    print(f"geomean speedup vs cuBLAS: all {gm:.3f}x  (M>512: {g(gm_big):.3f}x, M<=512: {g(gm_small):.3f}x) "
          f"over {len(ratios)}/{len(results)} shapes; wall {time.time() - t_start:.1f}s")
    _write_json(results, dict(geomean=gm, geomean_large=g(gm_big), geomean_small=g(gm_small),
                              device=torch.cuda.get_device_name(), wall_s=time.time() - t_start))
    n_fail = sum(1 for r in results for v in r["configs"].values() if "error" in v)
    if n_fail:
        print(f"{n_fail} shape/config runs FAILED (see tracebacks above)")
    return 1 if any(r["best"] is None for r in results) else 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "compile"
    sys.exit({"compile": cmd_compile, "bench": cmd_bench}[cmd]())
