"""The IR the frontend builds, the Triton text the lowering writes, the launcher's checks and caches."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from argus_inductor.dsl import DSLError, LaunchError, Policy, kernels_from_source
from argus_inductor.dsl.ir import walk_block
from argus_inductor.dsl.runtime import _COMPILED
from argus_inductor.kernels import attention_fwd, gemm_epilogue, moe_gate_up
from argus_inductor.kernels.moe import moe_gather

SRC = '''\
from argus_inductor.dsl import *

@kernel
def scaled_copy(X: Tensor("R", "C"), Y: Tensor("R", "C"), alpha: float, BR: constexpr = 4, BC: constexpr = 16):
    pr, pc = tile_grid(cdiv(R, BR), cdiv(C, BC))
    rr = pr * BR + arange(BR)
    rc = pc * BC + arange(BC)
    x = load(X[rr, rc])
    tag(x, row=rr[:, None], col=rc[None, :])
    assert_tag(tag_of(x, "row") < R)
    store(Y[rr, rc], x * alpha)
'''


def test_ir_records_types_lines_and_loop_carried_values():
    ir = gemm_epilogue.ir
    loops = [op for op in walk_block(ir.body) if op.kind == "for"]
    mma_loop = next(op for op in loops if any(o.kind == "mma" for o in walk_block(op.blocks[0])))
    assert mma_loop.attrs["carried"] == ["acc"]
    (acc,) = mma_loop.results
    assert str(acc.type) == "tile[BM, BN]<float32>"
    # the GEMV=1 branch: a static loop over the tile's rows around the K loop carrying a tile of partial sums, as
    # static steps the checker reads as a loop (KSTEPS > 0) or as a range loop
    rows = next(op for op in loops if op.attrs["static"] and not op.attrs["symbolic"])
    steps, k_loop = [op for op in walk_block(rows.blocks[0]) if op.kind == "for"]
    assert steps.attrs["static"] and steps.attrs["symbolic"] and not k_loop.attrs["static"]
    for loop in (steps, k_loop):
        assert loop.attrs["carried"] == ["part"] and str(loop.results[0].type) == "tile[BK, BN]<float32>"
    mma = next(op for op in walk_block(ir.body) if op.kind == "mma")
    src_line = ir.source.splitlines()[mma.line - ir.first_line]
    assert "mma(" in src_line
    assert [p.name for p in ir.constexprs] == ["BM", "BN", "BK", "HAS_BIAS", "ACT", "GEMV", "KSTEPS"]
    assert ir.symbols == {"M": ("A", 0), "K": ("A", 1), "N": ("B", 1), "NB": ("bias", 0)}
    assert "for(" in ir.dump() and "# line" in ir.dump()


def test_tags_and_assertions_are_in_the_ir_but_not_in_the_triton_source():
    k = kernels_from_source(SRC)["scaled_copy"]
    kinds = [op.kind for op in k.ir.walk()]
    assert "tag" in kinds and "assert_tag" in kinds and "tag_of" in kinds
    text = k.triton_source(Policy.make())
    for word in ("tag", "assert", "row", "col"):
        assert word not in text.split("def ", 1)[1], word


def test_source_kernel_runs_and_checks_its_arguments():
    k = kernels_from_source(SRC)["scaled_copy"]
    x = torch.randn(7, 33)
    y = torch.full_like(x, float("nan"))
    k(x, y, 0.5)
    torch.testing.assert_close(y, x * 0.5)
    with pytest.raises(LaunchError, match="dimension C is 33 from X.shape\\[1\\] but 32 from Y.shape\\[1\\]"):
        k(x, torch.empty(7, 32), 0.5)
    with pytest.raises(LaunchError, match="must have 2 dimensions"):
        k(x, torch.empty(7), 0.5)
    with pytest.raises(LaunchError, match="missing argument"):
        k(x, y)
    with pytest.raises(LaunchError, match="must be a number"):
        k(x, y, "half")


def test_static_if_keeps_only_the_branch_the_policy_selects():
    silu = gemm_epilogue.triton_source(Policy.make(BM=64, BN=64, BK=32, ACT=3))
    assert "tl.sigmoid" in silu and "tl.erf" not in silu and "bias_ptrs" not in silu
    plain = gemm_epilogue.triton_source(Policy.make(BM=64, BN=64, BK=32, HAS_BIAS=1))
    assert "tl.sigmoid" not in plain and "bias_ptrs" in plain and "if " not in plain


def test_activation_lowers_the_code_its_constexpr_is_given():
    """activation(acc, ACT) becomes the one expression ACT names (none: nothing), and a code outside the table is
    a DSLError at the line that asks for it, with the fix."""
    markers = ("tl.maximum(", "tl.erf(", "tl.sigmoid(", "1.5957691216057308")  # gelu_tanh: a scaled sigmoid
    expect = {0: set(), 1: {"tl.maximum("}, 2: {"tl.erf("}, 3: {"tl.sigmoid("}, 4: {"tl.sigmoid(", "1.5957691216057308"}}
    act = kernels_from_source("""from argus_inductor.dsl import *

@kernel
def act(X: Tensor("N"), Y: Tensor("N"), ACT: constexpr = 0, B: constexpr = 16):
    (p,) = tile_grid(cdiv(N, B))
    r = p * B + arange(B)
    store(Y[r], activation(load(X[r]), ACT))
""")["act"]
    for code, want in expect.items():
        text = act.triton_source(Policy.make(B=16, ACT=code))
        assert {m for m in markers if m in text} == want, code
    # gemm_epilogue's own ReLU is a select that keeps NaN (max(x, 0) drops it on a GPU); the others are activation's
    for code, want in {**expect, 1: set()}.items():
        text = gemm_epilogue.triton_source(Policy.make(BM=32, BN=32, BK=32, ACT=code))
        assert {m for m in markers if m in text} == want, code
    rebound = """from argus_inductor.dsl import *

@kernel
def k(X: Tensor("N"), Y: Tensor("N"), ACT: constexpr = 0, B: constexpr = 16):
    (p,) = tile_grid(cdiv(N, B))
    r = p * B + arange(B)
    ACT = 2
    store(Y[r], activation(load(X[r]), ACT))
"""
    with pytest.raises(DSLError, match="activation kind must be an integer literal"):
        kernels_from_source(rebound)  # the name no longer holds the policy's code: refused, not read as ACT
    with pytest.raises(DSLError, match="activation kind ACT=9") as info:
        gemm_epilogue.triton_source(Policy.make(BM=32, BN=32, BK=32, ACT=9))
    line = gemm_epilogue.ir.source.splitlines()[info.value.line - gemm_epilogue.ir.first_line]
    assert "activation(acc, ACT)" in line and "policy" in info.value.fix


def test_warp_specialize_needs_a_hand_written_lowering():
    """warp_specialize asks for a kernel's Gluon lowering (argus_inductor.hopper), never Triton's automatic pass
    (which gave NaN for the DSL's GEMM loop on the H100: kb/warp-specialization.md). A kernel without one refuses
    the policy when lowered, naming the kernel; attention_fwd, gemm_epilogue and moe_gate_up, which have one, lower
    launches the Gluon kernel cannot take to the same Triton source as without the request; a non-bool is refused
    where it is made."""
    from argus_inductor.dsl.errors import DSLError

    gather = Policy.make(BM=16, BK=64, TOPK=2)
    with pytest.raises(DSLError, match="'moe_gather' has no warp-specialized \\(Gluon\\) lowering"):
        moe_gather.triton_source(replace(gather, warp_specialize=True), "cuda")
    up = Policy.make(BM=128, BN=128, BK=64, num_warps=8, num_stages=3, TOPK=2, GATHERED=1)
    assert moe_gate_up.triton_source(replace(up, warp_specialize=True), "cuda") == \
        moe_gate_up.triton_source(up, "cuda")
    gemm = Policy.make(BM=64, BN=64, BK=32, persistent=True)
    assert gemm_epilogue.triton_source(replace(gemm, warp_specialize=True), "cuda") == \
        gemm_epilogue.triton_source(gemm, "cuda")
    with pytest.raises(ValueError, match="warp_specialize must be True or False"):
        Policy.make(BM=64, warp_specialize=1)
    attn = Policy.make(BM=128, BN=128, BD=64, CAUSAL=1, num_warps=8, num_stages=2)
    src = attention_fwd.triton_source(replace(attn, warp_specialize=True), "cuda")
    assert src == attention_fwd.triton_source(attn, "cuda") and "warp_specialize=True" not in src


@pytest.mark.parametrize("policy", [
    Policy.make(BM=16, BN=16, BK=16),
    Policy.make(BM=16, BN=32, BK=16, grid_order="grouped", group_m=3),
    Policy.make(BM=32, BN=16, BK=16, persistent=True),
    Policy.make(BM=16, BN=16, BK=32, persistent=True, grid_order="grouped", group_m=2),
])
def test_grid_orders_and_persistence_give_the_same_result(policy):
    a, b = torch.randn(50, 37), torch.randn(37, 70)
    c = torch.full((50, 70), float("nan"))
    gemm_epilogue(a, b, torch.empty(1), c, policy=policy)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-4)


def test_grouped_order_and_persistent_loop_appear_in_the_source():
    text = gemm_epilogue.triton_source(Policy.make(BM=64, BN=64, BK=32, grid_order="grouped", persistent=True))
    assert "GROUP_M: tl.constexpr" in text and "NUM_PROGRAMS" in text and "for tile in range(" in text


def test_in_process_cache_reuses_compiled_kernels():
    p = Policy.make(BM=16, BN=16, BK=16)
    a = gemm_epilogue.compile(p, "interpret")
    assert gemm_epilogue.compile(Policy.make(BK=16, BN=16, BM=16), "interpret") is a
    assert gemm_epilogue.compile(p.with_consts(BK=32), "interpret") is not a
    assert len(_COMPILED) >= 2


def test_names_both_branches_use_only_inside_their_loops_stay_loop_local():
    """Each branch of a static if with a loop of its own over the same variable names (`k`, `rk`): the names are
    loop-local after the if, not results the branches must agree on."""
    src = SRC + '''

@kernel
def two_ways(X: Tensor("R", "C"), Y: Tensor("R"), BR: constexpr = 4, BC: constexpr = 16, WAY: constexpr = 0):
    (pr,) = tile_grid(cdiv(R, BR))
    rr = pr * BR + arange(BR)
    total = zeros((BR,), float32)
    if WAY == 1:
        for k in range(0, C, BC):
            rk = k + arange(BC)
            total = total + sum(load(X[rr, rk]).to(float32), 1)
    else:
        for k in range(0, C, BC):
            rk = k + arange(BC)
            total = sum(load(X[rr, rk]).to(float32), 1) + total
    store(Y[rr], total)
'''
    k = kernels_from_source(src)["two_ways"]
    x = torch.randn(7, 37)
    for way in (0, 1):
        y = torch.empty(7)
        k(x, y, policy=Policy.make(BR=4, BC=16, WAY=way), target="interpret")
        torch.testing.assert_close(y, x.sum(1), rtol=1e-5, atol=1e-5)


def test_policy_errors_are_clear():
    from argus_inductor.dsl import DSLError

    with pytest.raises(DSLError, match="not a power of two"):
        gemm_epilogue.triton_source(Policy.make(BM=48, BN=64, BK=32))
    with pytest.raises(DSLError, match="below the tensor-core minimum"):
        gemm_epilogue.triton_source(Policy.make(BM=8, BN=64, BK=32))
    # an mma in the branch a static if never takes for the policy (GEMV=1 reads one row on the CUDA cores) does
    # not constrain the tiles; the branch taken holds no mma
    src = gemm_epilogue.triton_source(Policy.make(BM=1, BN=64, BK=32, GEMV=1))
    assert "tl.dot" not in src and "tl.sum" in src
    with pytest.raises(DSLError, match="does not declare"):
        gemm_epilogue.triton_source(Policy.make(BM=64, BN=64, BK=32, BX=1))
    with pytest.raises(DSLError, match="constexpr .BR. has no value"):
        kernels_from_source(SRC.replace("BR: constexpr = 4", "BR: constexpr"))["scaled_copy"].triton_source()
    assert "BD: tl.constexpr" in attention_fwd.triton_source()  # defaults fill what the policy leaves out
    with pytest.raises(ValueError, match="num_warps"):
        Policy.make(num_warps=3)
    with pytest.raises(ValueError, match="grid_order"):
        Policy.make(grid_order="diagonal")


def test_gather_indices_and_scalar_loads_lower_to_masked_pointer_math():
    text = moe_gate_up.triton_source(Policy.make(BM=16, BN=64, BK=32))
    assert "X_ptrs = X + tok[:, None] * X_stride0" in text
    assert "tl.cast(e, tl.int64) * W1_stride0" in text
    assert "(tok[:, None] >= 0)" in text  # gathered indices are not known to be non-negative


def test_mma_dtype_mismatch_is_a_launch_error():
    a, b = torch.randn(16, 16), torch.randn(16, 16).to(torch.bfloat16)
    with pytest.raises(LaunchError, match="multiplies float32 by bfloat16"):
        gemm_epilogue(a, b, torch.empty(1), torch.empty(16, 16), policy=Policy.make(BM=16, BN=16, BK=16))


def test_unrollable_range_lowers_to_a_static_range_or_a_range():
    """unrollable_range(0, K, BK, KSTEPS) with KSTEPS set is a Triton static_range over KSTEPS steps of BK, its
    bounds numbers (the K steps of a GEMV unrolled, so Triton issues every step's loads before the first product),
    and no range loop is emitted; with KSTEPS 0 the range loop is the only one."""
    from argus_inductor.kernels.gemm_residual import gemm_residual

    pol = Policy.make(BM=1, BN=1, BK=2048, num_warps=8, num_stages=1, GEMV=1, HAS_BIAS=0, ACT=0)
    unrolled = gemm_residual.triton_source(pol.with_consts(KSTEPS=2))
    assert "for k in tl.static_range(0, 4096, 2048):" in unrolled
    assert "for k in range(0, K, BK):" not in unrolled
    plain = gemm_residual.triton_source(pol)
    assert "for k in range(0, K, BK):" in plain and "for k in tl.static_range" not in plain


def test_triton_source_shows_the_launched_policy_for_this_machines_target():
    """README's example: triton_source(policy) is the source of the launch it made, labelled for where this process
    launches (the interpreter here: no GPU), not a default policy for cuda."""
    from argus_inductor.dsl import Policy
    from argus_inductor.kernels import gemm_epilogue

    src = gemm_epilogue.triton_source(Policy.make(BM=32, BN=16, BK=64, num_warps=2))
    assert "# target: interpret" in src and "# policy: BK=64,BM=32,BN=16," in src and "num_warps=2" in src
    assert "# target: cuda" in gemm_epilogue.triton_source(target="cuda")
