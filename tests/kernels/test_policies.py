"""Template policies: the GEMM regimes pick split-K where a long K meets few output tiles, and the pool tiles stay
near 256 outputs a program (both measured on the H100; see argus_inductor.kernels.policies and kernels.pool)."""
from __future__ import annotations

import torch

from argus_inductor.kernels.policies import (
    ATTENTION_SMEM_BUDGET,
    attention_policy,
    fit_attention,
    gemm_policy,
    moe_policies,
)
from argus_inductor.kernels.pool import max_pool_policies


def test_long_k_over_few_tiles_splits_k():
    p = gemm_policy(256, 256, 131072, "cuda")  # KernelBench 15: 4 output tiles of 128x128
    assert p.const("SPLIT_K", 1) >= 16 and not p.persistent
    assert p.const("SPLIT_K", 1) * 4 <= 256  # about one wave of programs, not thousands
    big = gemm_policy(4096, 4096, 4096, "cuda")
    assert big.const("SPLIT_K", 1) == 1 and big.persistent
    assert gemm_policy(1024, 1024, 4096, "cuda").const("SPLIT_K", 1) == 1  # K only 4x: enough tiles anyway


def test_prefill_tiles_fill_the_gpu_and_a_router_streams_its_rows():
    """The k/v projections at 2048 rows (N = 1024) get 128x128 tiles: 128 programs, where 128x256 would run 64 on
    132 SMs (29.1 against 42.3 us on the H100). At 4096 rows the wide tile already makes a wave and stays."""
    kv = gemm_policy(2048, 1024, 4096, "cuda")
    assert (kv.const("BM"), kv.const("BN"), kv.num_stages, kv.persistent) == (128, 128, 4, True)
    assert 100 <= (2048 // 128) * (1024 // 128) <= 132
    for m, n in ((4096, 1024), (2048, 4096), (4096, 14336)):
        assert gemm_policy(m, n, 4096, "cuda").const("BN") == 256, (m, n)
    router = gemm_policy(2048, 8, 4096, "cuda")  # x @ W^T of 8 experts
    assert (router.const("BN"), router.const("BK")) == (16, 256)


def test_pool_tiles_are_about_256_outputs():
    p = max_pool_policies((16, 64, 224, 224), 3, 2, 1, 2)["max_pool_kernel"]
    assert p.const("BC") * p.const("BW") == 256 and p.const("BW") >= 64


def test_attention_tiles_fit_shared_memory_with_and_without_a_mask():
    """A mask tensor adds a BM x BN tile to every pipeline stage: the 128x128, 3-stage head-dim-128 template (192 KB
    of K/V stages) ran out of shared memory with one on the H100 (Llama prefill), so a masked signature takes 64x64
    tiles, and fit_attention counts the mask when shrinking a policy."""
    plain = attention_policy(4096, 128, "cuda")  # the Gluon lowering's ring: two slots up to 4096 queries
    assert (plain.const("BM"), plain.const("BN"), plain.num_stages, plain.tma) == (128, 128, 2, True)
    assert plain.warp_specialize and fit_attention(plain, 128, 2) == plain
    long = attention_policy(16384, 128, "cuda")  # three slots (224 KB with the Q tile) still fit
    assert long.num_stages == 3 and fit_attention(long, 128, 2) == long
    masked = attention_policy(4096, 128, "cuda", has_mask=True)
    assert masked.const("BM") * masked.const("BN") <= 64 * 64 and not masked.tma
    assert fit_attention(masked, 128, 2, has_mask=True) == masked
    squeezed = fit_attention(plain, 128, 2, has_mask=True)
    bm, bn, st = squeezed.const("BM"), squeezed.const("BN"), squeezed.num_stages
    assert (bm * 128 + st * 2 * bn * 128) * 2 + st * bm * bn * 4 <= ATTENTION_SMEM_BUDGET
    assert attention_policy(4096, 128, "hip").tma is False  # no descriptors on AMD targets


def test_moe_prefill_walks_row_blocks_in_bands():
    """With 1024 rows an expert (Mixtral dims, 4096 tokens) a row-ordered grid reads each expert's weights once per
    row block; the prefill templates band the row blocks so each weight column block is read once per band. Decode
    routings have one row block an expert, where the order changes nothing."""
    up, down = moe_policies(4096, 2, 8, "cuda")
    assert (up.grid_order, down.grid_order) == ("grouped", "grouped") and min(up.group_m, down.group_m) >= 8
    assert up.const("BM") * up.group_m >= 1024  # one band covers an expert's rows
    for tokens in (1, 64):
        dec_up, dec_down = moe_policies(tokens, 2, 8, "cuda")
        assert dec_up.const("BM") >= tokens * 2 / 8  # one row block an expert


def test_moe_prefill_gathers_rows_only_where_it_was_measured_faster():
    """The H100 measured the gathered gate-up faster at 512 and 1024 rows an expert (Mixtral dims, 2048 and 4096
    tokens); decode, small prefills and targets without descriptors read the rows by token id."""
    assert moe_policies(4096, 2, 8, "cuda")[0].const("GATHERED") == 1
    assert moe_policies(2048, 2, 8, "cuda")[0].const("GATHERED") == 1
    for tokens, topk, experts, target in ((1, 2, 8, "cuda"), (64, 2, 8, "cuda"), (1024, 2, 8, "cuda"),
                                          (4096, 8, 128, "cuda"), (4096, 2, 8, "hip")):
        assert moe_policies(tokens, topk, experts, target)[0].const("GATHERED", 0) == 0, (tokens, target)


def test_one_row_against_a_weight_read_along_k_takes_the_cuda_core_path():
    """M = 1 against an nn.Linear weight streamed 2.98-3.19 TB/s on the CUDA cores (GEMV=1, one column a program, K
    in steps of 2048) against 2.37-3.06 for the tensor-core tile and the earlier GEMV tile
    (gemv-probe-h100-2026-11-24.log), and a router's 8-256 columns in long K steps; a weight read along N, M > 1
    and targets off NVIDIA keep the templates."""
    from argus_inductor.invariants import verify
    from argus_inductor.kernels.gemm import gemm_epilogue
    from argus_inductor.kernels.policies import gemv_policy

    for n in (128256, 14336, 4096, 257):
        p = gemv_policy(1, n, "cuda", 4096)
        assert p is not None and (p.const("GEMV"), p.const("BM"), p.const("BN"), p.const("BK")) == (1, 1, 1, 2048)
    assert gemv_policy(1, 4096, "cuda", 1024).const("BK") == 1024  # a shorter K: the step that covers it
    assert gemv_policy(1, 4096, "cuda", 100).const("BK") == 256
    assert gemv_policy(1, 4096, "cuda", 4096, k_major=False) is None  # a column a program would stride over N
    assert gemv_policy(2, 128256, "cuda") is None
    router = gemv_policy(1, 8, "cuda")  # a MoE router's few columns: long K steps on the CUDA cores
    assert router.const("GEMV") == 1 and router.const("BN") == 8 and router.const("BK") == 2048
    assert gemv_policy(1, 8, "cuda", k_major=False) == router and gemv_policy(4, 8, "cuda") is None
    assert gemv_policy(1, 128256, "hip") is None and gemv_policy(1, 128256, "interpret") is None
    p = gemv_policy(1, 128256, "cuda", 4096)
    assert verify(gemm_epilogue, p.with_consts(HAS_BIAS=0, ACT=0), {"M": 1, "N": 128256, "K": 4096}).proved
    assert verify(gemm_epilogue, router.with_consts(HAS_BIAS=0, ACT=0), {"M": 1, "N": 8, "K": 4096}).proved


def test_the_gemm_templates_take_the_cuda_core_path_where_their_kernel_has_one():
    """gemm, gemm_residual and gate_up (kernels with a GEMV constexpr) take it at an LM head's M = 1; bmm's kernel has
    no such path and keeps its tensor-core tile."""
    from argus_inductor import ops
    from argus_inductor.runtime.signature import Signature

    def template(op: str, **dims: int) -> dict:
        sig = Signature(op, "", ("bfloat16", "bfloat16"), ("row", "row"), tuple(dims.items()), (), "sm_90",
                        ("torch", "triton", "argus"))
        return ops.SPECS[op].template(sig, "cuda")

    for op in ("gemm", "gemm_residual", "gate_up"):
        assert template(op, M=1, N=128256, K=4096).get("GEMV") == 1, op
        assert template(op, M=1, N=14336, K=4096).get("GEMV") == 1, op
    assert "GEMV" not in template("bmm", M=1, N=128256, K=4096, B=2)
    assert "GEMV" not in template("gemm", M=16, N=128256, K=4096)
    sig = Signature("gemm", "", ("bfloat16", "bfloat16"), ("row", "col"), (("M", 1), ("N", 4096), ("K", 4096)), (),
                    "sm_90", ("torch", "triton", "argus"))
    assert "GEMV" not in ops.SPECS["gemm"].template(sig, "cuda")  # a weight read along N: the tensor-core tile


def test_gemv_templates_take_static_k_steps_where_the_loop_is_short_over_one_weight():
    """The CUDA-core templates of gemm and gemm_residual, and gemv_cat's, take KSTEPS = ceil(K / BK) where K is a
    static dim and the loop has at most 4 steps; gate_up (two weights a step), a longer loop or a dynamic K keep the
    range loop."""
    from argus_inductor import ops
    from argus_inductor.config import Options
    from argus_inductor.kernels.policies import GEMV_MAX_STATIC_STEPS
    from argus_inductor.runtime.signature import Signature

    def template(op: str, static: tuple, dynamic: tuple = ()) -> dict:
        sig = Signature(op, "", ("bfloat16", "bfloat16"), ("row", "row"), static, dynamic, "sm_90",
                        ("torch", "triton", "argus"))
        return ops.SPECS[op].template(sig, "cuda")

    before = ops.active_options()
    try:
        ops.set_active_options(Options.resolve({}))
        for op in ("gemm", "gemm_residual"):
            t = template(op, (("M", 1), ("N", 4096), ("K", 4096)))
            assert t.get("GEMV") == 1 and t.get("KSTEPS") == -(-4096 // t["BK"]) <= GEMV_MAX_STATIC_STEPS, (op, t)
            assert "KSTEPS" not in template(op, (("M", 1), ("N", 4096), ("K", 14336))), op  # 7 steps
            assert "KSTEPS" not in template(op, (("M", 1), ("N", 4096)), (("K", "2049-4096"),)), op
        for op, epilogue in (("gate_up", ""), ("gemm", "silu*up")):  # the backend signs gate*up as gemm[silu*up]
            sig = Signature(op, epilogue, ("bfloat16",) * 3, ("row",) * 3, (("M", 1), ("N", 14336), ("K", 4096)), (),
                            "sm_90", ("torch", "triton", "argus"))
            t = ops.spec_for(sig).template(sig, "cuda")
            assert t.get("GEMV") == 1 and "KSTEPS" not in t, (op, epilogue, t)
        assert "KSTEPS" not in template("gemm", (("M", 1), ("N", 8), ("K", 4096))), "a router's narrow tile"
        # the plan is proved at the signature's shapes (the steps cover its K), M dynamic as under dynamic=True
        sig = Signature("gemm_residual", "", ("bfloat16", "bfloat16"), ("row", "row"), (("K", 4096), ("N", 4096)),
                        (("M", "1"),), "sm_90", ("torch", "triton", "argus"))
        entry = ops.make_entry(sig, target="cuda", verify=True)  # the template's plan, proved
        assert entry.policy["KSTEPS"] == 2 and entry.verification["status"] == "verified", entry.verification
        # gemv_cat (decode's q, k, v in one launch) alike
        sig = Signature("gemv_cat", "cat4096/1024/1024", ("bfloat16",) * 4, ("row",) * 4, (("K", 4096), ("N", 6144)),
                        (("M", "1"),), "sm_90", ("torch", "triton", "argus"))
        entry = ops.make_entry(sig, target="cuda", verify=True)
        assert entry.policy["KSTEPS"] == -(-4096 // entry.policy["BK"])
        assert entry.verification["status"] == "verified", entry.verification
    finally:
        ops.set_active_options(before)


def test_gemv_templates_take_two_columns_where_a_one_weight_loop_is_long():
    """policies.gemv_columns: a K loop longer than static steps take (the down projection's 14336 in 7 steps of
    2048) gets two columns a program over one weight; a short loop, gate*up's two weights, a dynamic K and a
    router's narrow tile keep theirs. The two-column plan is proved at the signature's shapes."""
    from argus_inductor import ops
    from argus_inductor.kernels.policies import GEMV_MAX_STATIC_STEPS, gemv_columns
    from argus_inductor.runtime.signature import Signature

    assert gemv_columns(14336, 2048) == 2 and gemv_columns(4096, 2048) == 1
    assert gemv_columns(2048 * GEMV_MAX_STATIC_STEPS, 2048) == 1 and gemv_columns(2048 * GEMV_MAX_STATIC_STEPS + 1,
                                                                                     2048) == 2
    assert gemv_columns(14336, 2048, weights=2) == 1

    def sig(op: str, static: tuple, dynamic: tuple = (("M", "1"),), epilogue: str = "") -> Signature:
        n = 3 if epilogue else 2
        return Signature(op, epilogue, ("bfloat16",) * n, ("row",) * n, static, dynamic, "sm_90",
                         ("torch", "triton", "argus"))

    down = sig("gemm_residual", (("K", 14336), ("N", 4096)))
    entry = ops.make_entry(down, target="cuda", verify=True)
    assert (entry.policy["GEMV"], entry.policy["BN"]) == (1, 2) and "KSTEPS" not in entry.policy, entry.policy
    assert entry.verification["status"] == "verified", entry.verification
    assert ops.SPECS["gemm"].template(sig("gemm", (("K", 14336), ("N", 4096))), "cuda")["BN"] == 2
    assert ops.SPECS["gemm_residual"].template(sig("gemm_residual", (("K", 4096), ("N", 4096))), "cuda")["BN"] == 1
    gate_up = sig("gemm", (("K", 14336), ("N", 4096)), epilogue="silu*up")
    assert ops.spec_for(gate_up).template(gate_up, "cuda")["BN"] == 1
    dynamic_k = sig("gemm_residual", (("N", 4096),), (("M", "1"), ("K", "8193-16384")))
    assert ops.SPECS["gemm_residual"].template(dynamic_k, "cuda")["BN"] == 1
    assert ops.SPECS["gemm"].template(sig("gemm", (("K", 14336), ("N", 8))), "cuda")["BN"] == 8  # a router


def test_a_search_moving_the_k_step_keeps_static_steps_covering_k():
    """tune.moved and the planner's space rescale KSTEPS with BK: halving BK of a 2-step plan gives 4 steps, which
    the checker proves cover K; BK halved with KSTEPS kept would leave K's second half out, which it rejects."""
    from argus_inductor import ops
    from argus_inductor.agent import tune
    from argus_inductor.config import Options
    from argus_inductor.runtime.signature import Signature

    sig = Signature("gemm_residual", "", ("bfloat16", "bfloat16"), ("row", "row"), (("K", 4096), ("N", 4096)),
                    (("M", "1"),), "sm_90", ("torch", "triton", "argus"))
    spec = ops.SPECS["gemm_residual"]
    before = ops.active_options()
    try:
        ops.set_active_options(Options.resolve({}))
        template = {"gemm_residual": spec.template(sig, "cuda")}
    finally:
        ops.set_active_options(before)
    assert template["gemm_residual"]["KSTEPS"] == 2 and template["gemm_residual"]["BK"] == 2048

    def verdict(policy: dict) -> str:
        return ops.make_entry(sig, policy["gemm_residual"], target="cuda", verify=True).verification["status"]

    down = tune.moved(template, "gemm_residual", "BK", up=False)
    up = tune.moved(template, "gemm_residual", "BK", up=True)
    assert down is not None and up is not None
    assert (down["gemm_residual"]["BK"], down["gemm_residual"]["KSTEPS"]) == (1024, 4)
    assert (up["gemm_residual"]["BK"], up["gemm_residual"]["KSTEPS"]) == (4096, 1)
    assert verdict(down) == "verified"
    stale = {"gemm_residual": {**template["gemm_residual"], "BK": 1024}}
    assert verdict(stale) == "violations"


def test_kernels_that_keep_the_whole_k_loop_get_tiles_that_fill_the_gpu():
    """The residual and gate*up kernels cannot split K. Their template used to be the split tile without the split:
    64 programs of 128x64 at Llama's down projection (N = 4096, K = 14336), 0.074 ms at 128 rows on the H100 where
    64x64 tiles take 0.0565, and 32-column tiles at 17-64 rows (128 programs) 0.046 against cuBLAS + the add's 0.048."""
    from argus_inductor import ops
    from argus_inductor.runtime.signature import make_signature

    for m in (17, 32, 64, 128):
        p = gemm_policy(m, 4096, 14336, "cuda", split=False)
        assert p.const("SPLIT_K", 1) == 1
        assert -(-m // p.const("BM")) * -(-4096 // p.const("BN")) >= 128, m
        x, w, r = (torch.empty(*s, dtype=torch.bfloat16, device="meta") for s in ((m, 14336), (4096, 14336), (m, 4096)))
        sig = make_signature("gemm", "residual", [x, w, r], {"N": 4096, "K": 14336}, {"M": m})
        assert ops.gemm._gemm_fused_template(sig, "cuda")["BN"] == p.const("BN")
    assert gemm_policy(32, 4096, 14336, "cuda").const("SPLIT_K", 1) == 2  # gemm_epilogue still splits
