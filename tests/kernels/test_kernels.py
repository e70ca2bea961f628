"""The library's DSL kernels against PyTorch at odd shapes (not multiples of the tiles), fp32 and bf16,
with outputs poisoned by NaN before each run. ARGUS_TEST_DEVICE=cuda runs them on the GPU at real sizes."""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl import Policy
from argus_inductor.kernels import (
    attention,
    bmm,
    gemm,
    layernorm,
    moe_align_block,
    moe_align_counted,
    moe_align_fused,
    moe_expert_step,
    moe_gate_up,
    moe_gather,
    rmsnorm,
    softmax,
)
from argus_inductor.kernels.moe import gather_policy

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, poisoned, randn

if ON_GPU:
    GEMM_SHAPES = [(4096, 4096, 4096), (4093, 4101, 4099), (16, 14336, 4096), (1, 4096, 14336)]
    GEMM_POLICY = Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=3, grid_order="grouped")
    SMALL_POLICY = Policy.make(BM=16, BN=64, BK=128, num_warps=4, num_stages=4)
    ROWS = [(4096, 4096), (8191, 14336), (33, 128256)]
    NORM_POLICY = Policy.make(BR=1, BC=2048, num_warps=8)
    ATTN = [(4, 32, 32, 1024, 1024, 128), (2, 32, 8, 4093, 4093, 128), (1, 16, 16, 2047, 2047, 64),
            (2, 8, 2, 1000, 3000, 256), (32, 32, 8, 1, 8192, 128)]
    ATTN_POLICY = Policy.make(BM=64, BN=64, num_warps=4, num_stages=2)
    MOE = [(4096, 4096, 14336, 8, 2), (64, 2048, 768, 128, 8), (3, 4096, 14336, 8, 2)]
    MOE_UP = Policy.make(BM=64, BN=128, BK=64, num_warps=8, num_stages=3)
    MOE_DOWN = Policy.make(BN=128, BK=64, num_warps=8, num_stages=3)
else:
    GEMM_SHAPES = [(37, 45, 53), (1, 19, 70), (50, 33, 17)]
    GEMM_POLICY = Policy.make(BM=16, BN=32, BK=16, grid_order="grouped", group_m=2)
    SMALL_POLICY = Policy.make(BM=16, BN=16, BK=32, persistent=True)
    ROWS = [(13, 100), (1, 7), (5, 130)]
    NORM_POLICY = Policy.make(BR=4, BC=32)
    ATTN = [(2, 4, 2, 37, 37, 64), (1, 2, 1, 21, 45, 16), (1, 3, 3, 50, 50, 32), (3, 8, 2, 1, 45, 32)]
    ATTN_POLICY = Policy.make(BM=16, BN=16)
    MOE = [(13, 40, 24, 4, 2), (1, 32, 16, 8, 2), (20, 24, 40, 6, 3)]
    MOE_UP = Policy.make(BM=16, BN=16, BK=16)
    MOE_DOWN = Policy.make(BN=16, BK=16)



def for_dtype(policy: Policy, dtype: torch.dtype) -> Policy:
    """fp32 tiles take twice the shared memory of bf16 ones: halve the deepest knobs on the GPU."""
    if not ON_GPU or dtype != torch.float32:
        return policy
    small = {k: v // 2 for k, v in policy.consts if k in ("BK", "BN") and v >= 32}
    return replace(policy.with_consts(**small), num_stages=min(policy.num_stages, 2))


TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]
ACTS = ["none", "relu", "gelu", "silu", "gelu_tanh"]


def _operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    """A (rows, cols) operand stored either row-major or as the transpose of a row-major tensor."""
    if transposed:
        return randn(cols, rows, dtype=dtype).t()
    return randn(rows, cols, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_gemm_bias_activation_all_layouts(dtype, ta, tb):
    for i, (m, n, k) in enumerate(GEMM_SHAPES):
        seed = fresh_seed()
        act = ACTS[(i + 2 * ta + tb) % len(ACTS)]
        a, b = _operand(m, k, ta, dtype), _operand(k, n, tb, dtype)
        bias = randn(n, dtype=dtype)
        out = poisoned(m, n, dtype=dtype)
        policy = SMALL_POLICY if m <= 64 else GEMM_POLICY
        gemm(a, b, bias, act, out=out, policy=for_dtype(policy, dtype))
        ref = a.double() @ b.double() + bias.double()
        ref = {"none": ref, "relu": F.relu(ref), "gelu": F.gelu(ref), "silu": F.silu(ref),
               "gelu_tanh": F.gelu(ref, approximate="tanh")}[act]
        check(out, ref, dtype, seed, f"gemm {m}x{n}x{k} ta={ta} tb={tb} act={act}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_gemm_through_tensor_descriptors(dtype, ta, tb):
    """policy.tma on every layout: a K-contiguous operand is read through a descriptor, a transposed one (stride 1
    not innermost) makes the launch take the kernel's pointer-load twin; both match."""
    for m, n, k in GEMM_SHAPES:
        seed = fresh_seed()
        a, b = _operand(m, k, ta, dtype), _operand(k, n, tb, dtype)
        out = poisoned(m, n, dtype=dtype)
        policy = SMALL_POLICY if m <= 64 else GEMM_POLICY
        gemm(a, b, out=out, policy=replace(for_dtype(policy, dtype), tma=True))
        check(out, a.double() @ b.double(), dtype, seed, f"tma gemm {m}x{n}x{k} ta={ta} tb={tb}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("split", [2, 3])
def test_split_k_gemm_with_epilogue(dtype, split):
    for i, (m, n, k) in enumerate(GEMM_SHAPES[:2]):
        seed = fresh_seed()
        act = ACTS[(i + split) % len(ACTS)]
        a, b = randn(m, k, dtype=dtype), _operand(k, n, True, dtype)
        bias = randn(n, dtype=dtype)
        out = poisoned(m, n, dtype=dtype)
        gemm(a, b, bias, act, out=out, policy=for_dtype(SMALL_POLICY, dtype).with_consts(SPLIT_K=split))
        ref = a.double() @ b.double() + bias.double()
        ref = {"none": ref, "relu": F.relu(ref), "gelu": F.gelu(ref), "silu": F.silu(ref),
               "gelu_tanh": F.gelu(ref, approximate="tanh")}[act]
        check(out, ref, dtype, seed, f"split-k {split} gemm {m}x{n}x{k} act={act}")


GEMV_POLICY = Policy.make(BM=1, BN=1, BK=2048, num_warps=8, num_stages=1, GEMV=1) if ON_GPU else \
    Policy.make(BM=1, BN=1, BK=32, GEMV=1)


def _check_gemv_kernels(m: int, n: int, k: int, act: str, b2_k_major: bool, policy: Policy, dtype: torch.dtype,
                        label: str) -> None:
    """gemm_epilogue (bias and `act`), gemm_residual and gemm_gate_up under `policy` against float64, on fresh
    inputs (an nn.Linear-like K-contiguous weight, the gate*up pair's second one K-contiguous or not)."""
    from argus_inductor.kernels.gemm_residual import gate_up, gemm_add

    seed = fresh_seed()
    a, b, b2 = randn(m, k, dtype=dtype), _operand(k, n, True, dtype), _operand(k, n, b2_k_major, dtype)
    bias, res = randn(n, dtype=dtype), randn(m, n, dtype=dtype)
    ref = a.double() @ b.double() + bias.double()
    ref = {"none": ref, "relu": F.relu(ref), "gelu": F.gelu(ref), "silu": F.silu(ref),
           "gelu_tanh": F.gelu(ref, approximate="tanh")}[act]
    out = poisoned(m, n, dtype=dtype)
    check(gemm(a, b, bias, act, out=out, policy=policy), ref, dtype, seed, f"gemv {m}x{n}x{k} act={act}{label}")
    out = poisoned(m, n, dtype=dtype)
    check(gemm_add(a, b, res, out=out, policy=policy), a.double() @ b.double() + res.double(), dtype, seed,
          f"gemv residual {m}x{n}x{k}{label}")
    out = poisoned(m, n, dtype=dtype)
    check(gate_up(a, b, b2, out=out, policy=policy), F.silu(a.double() @ b.double()) * (a.double() @ b2.double()),
          dtype, seed, f"gemv gate*up {m}x{n}x{k}{label}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bm", [1, 2])
def test_gemm_gemv_path_with_epilogues(dtype, bm):
    """GEMV=1 (CUDA cores, no mma) for decode rows: gemm_epilogue with bias and activations, gemm_residual and
    gemm_gate_up, against float64; with BM=2 at odd M the last tile's second row lies past M (clamped, not stored).
    One column a program (the template's tile) and several; K ragged against the K step."""
    policy = GEMV_POLICY.with_consts(BM=bm, BN=1 if bm == 1 else 4)
    shapes = [(1, 128256, 4096), (3, 4101, 4099)] if ON_GPU else [(1, 45, 70), (3, 33, 53)]
    for i, (m, n, k) in enumerate(shapes):
        _check_gemv_kernels(m, n, k, ACTS[(i + bm) % len(ACTS)], i % 2 == 1, policy, dtype, "")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_path_with_static_k_steps(dtype):
    """KSTEPS > 0: the GEMV path's K loop as that many static steps (unrolled, every load issued before the first
    product), gemm_epilogue, gemm_residual and gemm_gate_up against float64, K ragged against the K step (the last
    step partly masked) and one step more than K needs (a step that reads nothing)."""
    m, n, k = (1, 4101, 4099) if ON_GPU else (1, 45, 70)
    for extra in (0, 1):
        policy = GEMV_POLICY.with_consts(KSTEPS=math.ceil(k / GEMV_POLICY.const("BK")) + extra)
        _check_gemv_kernels(m, n, k, "relu", True, policy, dtype, f", {policy.const('KSTEPS')} static K steps")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_cat_is_three_projections_side_by_side(dtype):
    """gemv_cat (decode's q, k and v in one launch) against three float64 products: one to three rows, segment
    widths that are and are not multiples of BN, K ragged against BK, weights K-contiguous as nn.Linear's."""
    from argus_inductor.kernels.gemm import gemv_cat
    from argus_inductor.kernels.policies import gemv_cat_policy

    base = gemv_cat_policy("cuda" if ON_GPU else "interpret")
    cases = [(1, (4096, 1024, 1024), 4096), (3, (100, 36, 20), 1000)] if ON_GPU else \
        [(1, (32, 16, 16), 40), (3, (20, 7, 33), 37)]
    for (m, widths, k), steps in itertools.product(cases, (False, True)):
        # KSTEPS: each K loop as static steps (the last partly masked where BK does not divide K)
        pol = base.with_consts(KSTEPS=math.ceil(k / base.const("BK"))) if steps else base
        seed = fresh_seed()
        a = randn(m, k, dtype=dtype)
        ws = [randn(w, k, dtype=dtype, scale=k ** -0.5) for w in widths]
        out = poisoned(m, sum(widths), dtype=dtype)
        gemv_cat(a, *(w.t() for w in ws), out, policy=pol)
        ref = torch.cat([a.double() @ w.double().t() for w in ws], 1)
        check(out, ref, dtype, seed, f"gemv_cat {m} rows, widths {widths}, K={k}, KSTEPS={pol.const('KSTEPS', 0)}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_without_bias(dtype):
    m, n, k = GEMM_SHAPES[0]
    seed = fresh_seed()
    a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
    out = poisoned(m, n, dtype=dtype)
    gemm(a, b, out=out, policy=for_dtype(GEMM_POLICY, dtype))
    check(out, a.double() @ b.double(), dtype, seed, "gemm without bias")


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_gemm(dtype):
    for (m, n, k), batch in zip(GEMM_SHAPES[:2], (3, 2)):
        seed = fresh_seed()
        a, b = randn(batch, m, k, dtype=dtype), randn(batch, k, n, dtype=dtype)
        out = poisoned(batch, m, n, dtype=dtype)
        bmm(a, b, out=out, policy=for_dtype(GEMM_POLICY, dtype))
        check(out, a.double() @ b.double(), dtype, seed, f"bmm {batch}x{m}x{n}x{k}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rms_layer_norm(dtype):
    for r, c in ROWS:
        seed = fresh_seed()
        x = randn(r, c, dtype=dtype, scale=3.0)
        w, b = randn(c, dtype=dtype), randn(c, dtype=dtype)
        out = poisoned(r, c, dtype=dtype)
        softmax(x, out=out, policy=NORM_POLICY)
        check(out, torch.softmax(x.double(), -1), dtype, seed, f"softmax {r}x{c}")
        out = poisoned(r, c, dtype=dtype)
        rmsnorm(x, w, 1e-6, out=out, policy=NORM_POLICY)
        ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        check(out, ref, dtype, seed, f"rmsnorm {r}x{c}")
        out = poisoned(r, c, dtype=dtype)
        layernorm(x, w, b, 1e-5, out=out, policy=NORM_POLICY)
        check(out, F.layer_norm(x.double(), (c,), w.double(), b.double(), 1e-5), dtype, seed,
              f"layernorm {r}x{c}")


def _attention_ref(q, k, v, causal):
    rep = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tma", [False, True])
def test_attention_online_softmax_gqa(dtype, causal, tma):
    """With tma=True the query, key and value tiles come through tensor descriptors (zero-filled past the
    ragged edges by the copy engine, or by the interpreter's model of it)."""
    for z, h, hk, s, t, d in ATTN:
        seed = fresh_seed()
        q, k, v = randn(z, h, s, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype)
        out = poisoned(z, h, s, d, dtype=dtype)
        attention(q, k, v, causal, out=out, policy=replace(for_dtype(ATTN_POLICY, dtype), tma=tma))
        check(out, _attention_ref(q, k, v, causal), dtype, seed,
              f"attention z={z} h={h} hk={hk} s={s} t={t} d={d} causal={causal} tma={tma}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_key_blocks_wider_than_query_blocks_and_a_negative_scale(dtype):
    """BN > BM: the unmasked key loop must stop at a key-block boundary below the diagonal (it once ran to
    pm * BM and counted the straddling block's keys twice). A negative scale flips which score is the row maximum;
    the host negates q so the kernel's max-before-scale softmax stays right."""
    bm, bn = (64, 128) if ON_GPU else (16, 32)
    for z, h, hk, s, t, d in ATTN[:3]:
        for scale in (None, -0.3):
            seed = fresh_seed()
            q, k = randn(z, h, s, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype)
            v = randn(z, hk, t, d, dtype=dtype)
            out = poisoned(z, h, s, d, dtype=dtype)
            pol = for_dtype(Policy.make(BM=bm, BN=bn, num_warps=4, num_stages=2), dtype)
            attention(q, k, v, True, scale=scale, out=out, policy=pol)
            sc = 1 / math.sqrt(d) if scale is None else scale
            ref = _attention_ref(q.double() * (sc * math.sqrt(d)), k, v, True)
            check(out, ref, dtype, seed, f"causal attention BM={bm} BN={bn} scale={scale} s={s} t={t}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_kv_decode_matches_the_whole_cache(dtype, monkeypatch):
    """Split-KV decode (attention_decode_part over chunks of the cache, attention_decode_merge): against float64 on
    fresh data, with and without a key mask that empties whole chunks (a short sequence in a long static cache),
    for chunk counts the host picks and for one chunk per key block; the host takes it only where the batch's
    key/value heads are few programs and a chunk count divides the cache."""
    import sys

    attn_mod = sys.modules["argus_inductor.kernels.attention"]  # the module (the package exports the function)
    z, h, hk, d = 2, 8, 2, 16
    t = 4096 if ON_GPU else 96
    if not ON_GPU:  # small caches: chunks of 16 keys, 24 programs wanted
        monkeypatch.setattr(attn_mod, "SPLIT_MIN_KEYS", 16)
        monkeypatch.setattr(attn_mod, "SPLIT_TARGET_PROGRAMS", 24)
    chunks = attn_mod.decode_split_chunks(z, hk, t)
    assert chunks > 1 and t % chunks == 0 and attn_mod.decode_split_chunks(64, 8, t) == 1
    calls = []
    real = attn_mod.attention_decode_split
    monkeypatch.setattr(attn_mod, "attention_decode_split",
                        lambda *a, **kw: calls.append(real(*a, **kw)) or calls[-1])
    for masked in (False, True):
        seed = fresh_seed()
        q, k, v = randn(z, h, 1, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype)
        keep = torch.arange(t, device=DEVICE)[None, None, None, :] < torch.tensor([t, 5], device=DEVICE).view(z, 1, 1, 1)
        out = poisoned(z, h, 1, d, dtype=dtype)
        attention(q, k, v, out=out, mask=keep if masked else None,
                  policy=Policy.make(BN=64 if ON_GPU else 16, num_warps=4, num_stages=2))
        rep = h // hk
        sc = q.double() @ k.double().repeat_interleave(rep, 1).transpose(-1, -2) / math.sqrt(d)
        if masked:
            sc = sc.masked_fill(~keep, float("-inf"))
        ref = torch.softmax(sc, -1) @ v.double().repeat_interleave(rep, 1)
        check(out, ref, dtype, seed, f"split-KV decode, {chunks} chunks, masked={masked}")
    assert calls == [chunks, chunks]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", ["bool_padding", "float_kv_cache_decode", "float_bias_gqa"])
def test_attention_with_a_mask_tensor(dtype, form):
    """The kernels read a broadcast mask themselves: key padding (bool), a static KV cache's decode mask (float,
    dtype minimum beyond each sequence's length, one query token: the head-packed decode kernel) and an
    arbitrary additive bias."""
    z, h, hk, d = 2, 4, 2, 16
    s, t = (1, 37) if form == "float_kv_cache_decode" else (7, 13)
    seed = fresh_seed()
    q, k, v = randn(z, h, s, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype), randn(z, hk, t, d, dtype=dtype)
    keys = torch.arange(t, device=DEVICE)
    lengths = torch.tensor([t - 5, 3], device=DEVICE).view(z, 1, 1, 1)
    if form == "bool_padding":
        mask = (keys.view(1, 1, 1, t) < lengths).expand(z, 1, s, t)
        add = torch.zeros(mask.shape, dtype=torch.float64, device=DEVICE).masked_fill(~mask, float("-inf"))
    elif form == "float_kv_cache_decode":
        mask = torch.zeros(z, 1, s, t, dtype=dtype, device=DEVICE).masked_fill(keys >= lengths, torch.finfo(dtype).min)
        add = mask.double().clamp_min(-1e30)
    else:
        mask = randn(1, h, s, t, dtype=dtype)
        add = mask.double()
    out = poisoned(z, h, s, d, dtype=dtype)
    attention(q, k, v, False, out=out, mask=mask, policy=for_dtype(ATTN_POLICY, dtype))
    rep = h // hk
    kk, vv = k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1)
    ref = torch.softmax(q.double() @ kk.transpose(-1, -2) / math.sqrt(d) + add, -1) @ vv
    check(out, ref, dtype, seed, f"attention with {form} mask")


def test_attention_mask_that_does_not_broadcast_is_a_clear_error():
    q, k = randn(1, 2, 3, 16, dtype=torch.float32), randn(1, 2, 5, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match="does not broadcast"):
        attention(q, k, k, mask=torch.zeros(4, 5))


def _moe_ref(x, w1, w2, tw, ti):
    inter = w1.shape[1] // 2
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64, device=x.device)
    for e in range(w1.shape[0]):
        rows, slot = (ti == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        xe = x[rows].double()
        hcur = F.silu(xe @ w1[e, :inter].double().t()) * (xe @ w1[e, inter:].double().t())
        y.index_add_(0, rows, tw[rows, slot].double()[:, None] * (hcur @ w2[e].double().t()))
    return y


def _routing(tokens: int, experts: int, topk: int, dtype: torch.dtype):
    logits = torch.randn(tokens, experts, device=DEVICE)
    tw, ti = torch.topk(torch.softmax(logits, -1), topk)
    return tw.to(dtype), ti


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["row", "grouped+tma", "gathered+persistent+tma"])
def test_moe_expert_step(dtype, order):
    """Also with the grid in bands of row blocks and the weights through tensor descriptors (the prefill
    candidates of benchmarks/sweep.py), and with the routed rows gathered into expert order first (moe_gather),
    read as dense tiles by persistent programs."""
    for t, hd, inter, e, topk in MOE:
        seed = fresh_seed()
        x = randn(t, hd, dtype=dtype)
        w1 = randn(e, 2 * inter, hd, dtype=dtype, scale=hd**-0.5)
        w2 = randn(e, hd, inter, dtype=dtype, scale=inter**-0.5)
        tw, ti = _routing(t, e, topk, dtype)
        up, down = for_dtype(MOE_UP, dtype), for_dtype(MOE_DOWN, dtype)
        if order != "row":
            up = replace(up, grid_order="grouped", group_m=2, tma=True, persistent="persistent" in order)
            down = replace(down, grid_order="grouped", group_m=2, tma=True, persistent="persistent" in order)
        if order.startswith("gathered"):
            up = up.with_consts(GATHERED=1)
        y = moe_expert_step(x, w1, w2, tw, ti, policy_up=up, policy_down=down)
        check(y, _moe_ref(x, w1, w2, tw, ti), dtype, seed, f"moe t={t} hd={hd} i={inter} e={e} topk={topk} {order}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_gather_lays_out_each_pairs_token_row(dtype):
    """moe_gather: slot p of the output holds the row of sorted pair p's token, and padding slots hold zeros."""
    t, hd, _, e, topk = MOE[0]
    x = randn(t, hd, dtype=dtype)
    _, ti = _routing(t, e, topk, dtype)
    sorted_ids, _ = moe_align_block(ti, e, MOE_UP.const("BM"))
    xs = poisoned(sorted_ids.numel(), hd, dtype=dtype)
    moe_gather(x, sorted_ids, xs, policy=gather_policy(None if ON_GPU else "interpret", topk))
    valid = sorted_ids < t * topk
    assert torch.equal(xs[valid], x[sorted_ids[valid].long() // topk])
    assert (xs[~valid] == 0).all(), "padding slots must be zero"


@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_gate_up_writes_every_sorted_row(dtype):
    t, hd, inter, e, topk = MOE[0]
    seed = fresh_seed()
    x = randn(t, hd, dtype=dtype)
    w1 = randn(e, 2 * inter, hd, dtype=dtype, scale=hd**-0.5)
    _, ti = _routing(t, e, topk, dtype)
    bm = MOE_UP.const("BM")
    sorted_ids, block_expert = moe_align_block(ti, e, bm)
    h = poisoned(sorted_ids.numel(), inter, dtype=dtype)
    moe_gate_up(x, w1, sorted_ids, block_expert, h, policy=for_dtype(MOE_UP, dtype).with_consts(TOPK=topk))
    valid = sorted_ids < t * topk
    row_expert = block_expert.repeat_interleave(bm).long()
    ref = torch.zeros(sorted_ids.numel(), inter, dtype=torch.float64, device=DEVICE)
    for ex in range(e):
        rows = (valid & (row_expert == ex)).nonzero(as_tuple=True)[0]
        xe = x[sorted_ids[rows].long() // topk].double()
        ref[rows] = F.silu(xe @ w1[ex, :inter].double().t()) * (xe @ w1[ex, inter:].double().t())
    check(h[valid], ref[valid], dtype, seed, "moe gate-up rows")
    padding = ~valid & (row_expert < e)  # padding rows inside real expert blocks
    assert not torch.isnan(h[padding]).any(), "padding rows of real blocks were left unwritten"
    assert (h[padding] == 0).all(), "padding rows must be zero"
    assert torch.isnan(h[row_expert == e]).all(), "blocks past the last real one must be skipped"


def test_moe_align_block_groups_pairs_by_expert():
    ti = torch.tensor([[0, 2], [2, 1], [0, 2], [1, 0]], device=DEVICE)
    sorted_ids, block_expert = moe_align_block(ti, 4, 4)
    assert block_expert.tolist() == [0, 1, 2, 4, 4, 4]  # min(E, n) + n // BM blocks; unused ones carry E
    ids = sorted_ids.tolist()
    assert ids[:4] == [0, 4, 7, 8] and ids[4:8] == [3, 6, 8, 8] and ids[8:12] == [1, 2, 5, 8]
    assert ids[12:] == [8] * 12
    with pytest.raises(ValueError, match="expert ids"):
        moe_align_block(torch.tensor([[5]]), 4, 4)


def test_fused_routing_kernel_sorts_as_the_torch_ops_do():
    """moe_route (one launch) against moe_align_block (torch ops): the same slots, order and padding, on fresh random
    routings, a skewed one (every pair to one expert), routings of several chunks of pairs (prefill sizes), and a
    hand-checked case."""
    ti = torch.tensor([[0, 2], [2, 1], [0, 2], [1, 0]], device=DEVICE)
    sorted_ids, block_expert = moe_align_fused(ti, 4, 4)
    assert block_expert.tolist() == [0, 1, 2, 4, 4, 4]
    assert sorted_ids.tolist()[:12] == [0, 4, 7, 8, 3, 6, 8, 8, 1, 2, 5, 8] and sorted_ids.tolist()[12:] == [8] * 12
    fresh_seed()
    cases = [(1, 8, 2, 16), (3, 128, 8, 16), (16, 256, 8, 16), (128, 8, 2, 64), (50, 6, 3, 32),
             (600, 8, 2, 128), (333, 60, 4, 16)]  # the last two: several chunks of pairs, the last one ragged
    for t, e, k, bm in cases:
        ids = torch.stack([torch.randperm(e, device=DEVICE)[:k] for _ in range(t)])
        for routing in (ids, ids.sort(1).values):
            want, got = moe_align_block(routing, e, bm), moe_align_fused(routing, e, bm)
            assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]), (t, e, k, bm)
    skew = torch.full((40, 1), 3, device=DEVICE)
    assert all(torch.equal(a, b) for a, b in zip(moe_align_block(skew, 5, 16), moe_align_fused(skew, 5, 16)))
    with pytest.raises(ValueError, match="256 experts"):
        moe_align_fused(torch.zeros(6, 2, dtype=torch.long, device=DEVICE), 300, 16)


def test_counted_routing_kernels_sort_as_the_torch_ops_do():
    """moe_count + moe_place (two launches, for routings too large for moe_route) against moe_align_block: the same
    slots, order and padding on fresh random routings of one chunk and of many (the last ragged), sorted and
    unsorted top-k, 60 and 256 experts, a skewed routing (every pair to one expert) and experts no pair chose."""
    fresh_seed()
    cases = [(1, 8, 2, 128), (600, 8, 2, 128), (2048, 8, 2, 128), (333, 60, 4, 64), (100, 256, 8, 64),
             (50, 6, 3, 32), (40, 5, 1, 16)]
    for t, e, k, bm in cases:
        ids = torch.stack([torch.randperm(e, device=DEVICE)[:k] for _ in range(t)])
        for routing in (ids, ids.sort(1).values):
            want, got = moe_align_block(routing, e, bm), moe_align_counted(routing, e, bm)
            assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]), (t, e, k, bm)
    for skew in (torch.full((700, 1), 3, device=DEVICE), torch.randint(2, 4, (300, 2), device=DEVICE)):
        assert all(torch.equal(a, b) for a, b in zip(moe_align_block(skew, 8, 64), moe_align_counted(skew, 8, 64)))
    with pytest.raises(ValueError, match="256 experts"):
        moe_align_counted(torch.zeros(6, 2, dtype=torch.long, device=DEVICE), 300, 16)
    # any slots a program that divides the block sorts the same (benchmarks/sweep.py --ops route times them)
    ids = torch.stack([torch.randperm(8, device=DEVICE)[:2] for _ in range(300)])
    want = moe_align_block(ids, 8, 64)
    for slots in (64, 32, 8):
        got = moe_align_counted(ids, 8, 64, slots=slots)
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]), slots
    for bad in (3, 24):
        with pytest.raises(ValueError, match="power of two dividing BM=64"):
            moe_align_counted(ids, 8, 64, slots=bad)


def test_moe_align_takes_the_routing_kernel_for_its_size(monkeypatch):
    """moe_align sorts with moe_route where the H100 measured it fastest (up to FUSED_ROUTE_MAX_CELLS pairs x experts:
    decode), with moe_count + moe_place beyond (512 and 2048 prefill tokens of 8 experts), and with the torch ops
    past COUNTED_ROUTE_MAX_CELLS (4200 tokens of 128 experts) or 256 experts; every path gives moe_align_block's
    result. 1100 tokens of 60 experts take the two launches too."""
    from argus_inductor.kernels import moe as moe_mod

    taken = []
    fused, counted, torch_ops = moe_mod.moe_align_fused, moe_mod.moe_align_counted, moe_mod.moe_align_block
    monkeypatch.setattr(moe_mod, "moe_align_fused", lambda *a: taken.append("fused") or fused(*a))
    monkeypatch.setattr(moe_mod, "moe_align_counted", lambda *a: taken.append("counted") or counted(*a))
    monkeypatch.setattr(moe_mod, "moe_align_block", lambda *a: taken.append("torch") or torch_ops(*a))
    fresh_seed()
    for t, e, want in ((4, 8, "fused"), (512, 8, "counted"), (2048, 8, "counted"), (4200, 128, "torch"),
                       (8, 300, "torch")):
        ids = torch.stack([torch.randperm(e, device=DEVICE)[:2] for _ in range(t)])
        got = moe_mod.moe_align(ids, e, 128)
        assert taken[-1] == want, (t, taken)
        ref = torch_ops(ids, e, 128)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]), t
    # 1100 tokens of 60 experts (140K cells) sort with the two launches since moe_place splits its blocks (they
    # sort as the torch ops do: test_counted_routing_kernels_sort_as_the_torch_ops_do)
    assert moe_mod.counted_route_takes(2200, 60) and not moe_mod.counted_route_takes(8400, 128)


def test_device_is_what_the_run_asked_for():
    assert randn(2, dtype=torch.float32).device.type == ("cpu" if DEVICE == "cpu" else "cuda")
