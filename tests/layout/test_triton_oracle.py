"""Cross-check the TV layouts and heuristics against Triton itself (CPU only, no GPU needed).

Triton's C++ ``toLinearLayout`` gives, for each layout, the tile coordinate of every
register/lane/warp bit (a linear map over GF(2)); its TTGIR passes give the layouts it
picks for loads and ``tl.dot``. Skipped when this Triton build lacks the needed hooks.
"""

from __future__ import annotations

import random
import re

import pytest

from argus_inductor.layout import (
    TVLayout,
    blocked,
    default_blocked,
    dot_accumulator,
    mfma_accumulator,
    mma_v2_accumulator,
    mma_v2_operand_a,
    wgmma_accumulator,
    wgmma_operand_a,
)

gluon_layouts = pytest.importorskip("triton.experimental.gluon.language._layouts")
amd_layouts = pytest.importorskip("triton.experimental.gluon.language.amd._layouts")


@pytest.fixture(scope="module")
def builder():
    try:
        from triton._C.libtriton import gluon_ir, ir

        ctx = ir.context()
        ir.load_dialects(ctx)
        b = gluon_ir.GluonOpBuilder(ctx)
        b.to_linear_layout  # noqa: B018
    except Exception as e:  # pragma: no cover - depends on the Triton build
        pytest.skip(f"Triton linear-layout hooks unavailable: {e}")
    return ctx, b


def _xor(bases, x):
    out = None
    for i, base in enumerate(bases):
        if x >> i & 1:
            out = list(base) if out is None else [a ^ c for a, c in zip(out, base)]
    return out


def _ll_coord(ll, reg, lane, warp):
    z = [0] * len(ll.shape)
    for part in (_xor(ll.reg_bases, reg), _xor(ll.lane_bases, lane), _xor(ll.warp_bases, warp)):
        if part:
            z = [a ^ c for a, c in zip(z, part)]
    return tuple(z)


def assert_same_as_triton(tv: TVLayout, ll, samples: int = 200) -> None:
    nreg, nlane, nwarp = (1 << len(x) for x in (ll.reg_bases, ll.lane_bases, ll.warp_bases))
    assert (tv.values_per_thread, tv.warp_size, tv.num_threads) == (nreg, nlane, nlane * nwarp)
    points = [(1 << i, 0, 0) for i in range(len(ll.reg_bases))]
    points += [(0, 1 << i, 0) for i in range(len(ll.lane_bases))]
    points += [(0, 0, 1 << i) for i in range(len(ll.warp_bases))]
    rng = random.Random(0)
    points += [(rng.randrange(nreg), rng.randrange(nlane), rng.randrange(nwarp)) for _ in range(samples)]
    for reg, lane, warp in points:
        assert tv.coord(warp * nlane + lane, reg) == _ll_coord(ll, reg, lane, warp), (tv, reg, lane, warp)


def _ll(builder, layout, shape):
    _, b = builder
    return b.to_linear_layout(layout._to_ir(b), list(shape))


def test_blocked_vs_triton(builder):
    rng = random.Random(1)
    for _ in range(60):
        rank = rng.choice([1, 2, 2, 3])
        shape = [rng.choice([1, 2, 4, 8, 16, 32, 64]) for _ in range(rank)]
        spt = [rng.choice([1, 1, 2, 4]) for _ in range(rank)]
        tpw, wpc = [1] * rank, [1] * rank
        for vec, total in ((tpw, 32), (wpc, rng.choice([1, 2, 4, 8]))):
            for d in rng.sample(range(rank), rank):
                x = rng.choice([p for p in (1, 2, 4, 8, 16, 32) if total % p == 0])
                vec[d], total = x, total // x
            vec[rng.randrange(rank)] *= total
        order = rng.sample(range(rank), rank)
        tv = blocked(shape, spt, tpw, wpc, order)
        assert_same_as_triton(tv, _ll(builder, gluon_layouts.BlockedLayout(spt, tpw, wpc, order), shape))


@pytest.mark.parametrize("m, n, wpc", [(64, 64, (2, 2)), (128, 32, (4, 2)), (16, 16, (2, 2)), (32, 128, (1, 4))])
def test_mma_v2_vs_triton(builder, m, n, wpc):
    parent = gluon_layouts.NVMMADistributedLayout([2, 0], list(wpc), [16, 8])
    nw = wpc[0] * wpc[1]
    assert_same_as_triton(mma_v2_accumulator(m, n, nw, wpc), _ll(builder, parent, (m, n)))
    dot_a = gluon_layouts.DotOperandLayout(0, parent, 2)
    assert_same_as_triton(mma_v2_operand_a(m, 32, nw, wpc), _ll(builder, dot_a, (m, 32)))


@pytest.mark.parametrize(
    "m, n, wpc, instr_n",
    [(64, 64, (4, 1), 64), (128, 128, (4, 2), 64), (128, 256, (8, 1), 256), (64, 32, (4, 2), 16), (64, 64, (8, 1), 32)],
)
def test_wgmma_vs_triton(builder, m, n, wpc, instr_n):
    parent = gluon_layouts.NVMMADistributedLayout([3, 0], list(wpc), [16, instr_n, 16])
    nw = wpc[0] * wpc[1]
    assert_same_as_triton(wgmma_accumulator(m, n, nw, wpc, instr_n), _ll(builder, parent, (m, n)))
    dot_a = gluon_layouts.DotOperandLayout(0, parent, 2)
    assert_same_as_triton(wgmma_operand_a(m, 64, nw, wpc), _ll(builder, dot_a, (m, 64)))


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(
    "m, n, instr, wpc", [(128, 128, 32, (2, 2)), (64, 32, 32, (1, 1)), (16, 16, 32, (1, 1)), (64, 64, 16, (4, 2))]
)
def test_mfma_vs_triton(builder, m, n, instr, wpc, transposed):
    k = 8 if instr == 32 else 16
    ref = amd_layouts.AMDMFMALayout(3, [instr, instr, k], transposed, list(wpc))
    tv = mfma_accumulator(m, n, wpc[0] * wpc[1], instr, wpc, transposed)
    assert_same_as_triton(tv, _ll(builder, ref, (m, n)))


# -- the layouts Triton's passes choose (TTGIR on a fake target) -----------------------------

_KERNELS = """
import triton.language as tl

def copy(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, M)[:, None]
    c = tl.arange(0, N)[None, :]
    tl.store(y_ptr + r * N + c, tl.load(x_ptr + r * N + c))

def mm(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn)
    tl.store(c_ptr + rm * N + rn, tl.dot(a, b))
"""


@pytest.fixture(scope="module")
def ttgir(tmp_path_factory):
    try:
        import importlib.util

        from triton._C.libtriton import ir
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.compiler.compiler import make_backend
        from triton.runtime.jit import JITFunction

        path = tmp_path_factory.mktemp("kern") / "argus_layout_kernels.py"
        path.write_text(_KERNELS)
        spec = importlib.util.spec_from_file_location("argus_layout_kernels", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        kernels = {name: JITFunction(getattr(mod, name)) for name in ("copy", "mm")}

        def compile_ttgir(name, sig, consts, target, num_warps):
            target = GPUTarget(*target)
            div = {(i,): [["tt.divisibility", 16]] for i in range(len(sig))}
            src = ASTSource(kernels[name], sig, consts, attrs=div)
            backend = make_backend(target)
            opts = backend.parse_options({"num_warps": num_warps})
            ctx = ir.context()
            ir.load_dialects(ctx)
            backend.load_dialects(ctx)
            module = src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), ctx)
            stages: dict = {}
            backend.add_stages(stages, opts, src.language)
            module = stages["ttgir"](stages["ttir"](module, {}), {})
            return str(module)

        compile_ttgir("copy", {"x_ptr": "*fp32", "y_ptr": "*fp32"}, {"M": 16, "N": 16}, ("cuda", 90, 32), 4)
    except Exception as e:  # pragma: no cover - depends on the Triton build
        pytest.skip(f"cannot run Triton's TTGIR passes here: {type(e).__name__}: {e}")
    return compile_ttgir


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",")]


@pytest.mark.parametrize(
    "shape, dtype, eb, nw",
    [
        ((64, 64), "fp32", 4, 4),
        ((128, 64), "fp16", 2, 8),
        ((2, 1024), "i8", 1, 4),
        ((64, 1), "fp32", 4, 1),
        ((8, 8), "fp16", 2, 2),
    ],
)
def test_default_blocked_vs_triton(ttgir, shape, dtype, eb, nw):
    s = ttgir(
        "copy", {"x_ptr": "*" + dtype, "y_ptr": "*" + dtype}, {"M": shape[0], "N": shape[1]}, ("cuda", 90, 32), nw
    )
    name = re.search(r"tt\.load [^:]*: tensor<[^,]*, #(\w+)>", s).group(1)
    pat = (
        "#" + name + r" = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = \[([\d, ]+)\], "
        r"warpsPerCTA = \[([\d, ]+)\], order = \[([\d, ]+)\]"
    )
    spt, tpw, wpc, order = (_ints(g) for g in re.search(pat, s).groups())
    assert default_blocked(shape, nw, 32, eb).layout == blocked(shape, spt, tpw, wpc, order).layout


@pytest.mark.parametrize(
    "m, n, nw, arch",
    [
        (128, 128, 8, "sm90"),
        (64, 64, 8, "sm90"),
        (64, 8, 4, "sm90"),
        (32, 64, 4, "sm90"),
        (128, 64, 4, "sm80"),
        (64, 64, 4, "gfx942"),
        (16, 64, 4, "gfx942"),
        (128, 32, 8, "gfx942"),
    ],
)
def test_dot_accumulator_vs_triton(ttgir, m, n, nw, arch):
    target = ("hip", arch, 64) if arch.startswith("gfx") else ("cuda", int(arch[2:]), 32)
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"}
    s = ttgir("mm", sig, {"M": m, "N": n, "K": 32}, target, nw)
    mine = dot_accumulator(m, n, nw, arch, k=32)
    nv = re.search(
        r"#ttg\.nvidia_mma<\{versionMajor = (\d+), versionMinor = \d+, warpsPerCTA = \[([\d, ]+)\], "
        r"instrShape = \[([\d, ]+)\]",
        s,
    )
    if nv:
        ver, wpc, instr = int(nv.group(1)), _ints(nv.group(2)), _ints(nv.group(3))
        ref = wgmma_accumulator(m, n, nw, wpc, instr[1]) if ver == 3 else mma_v2_accumulator(m, n, nw, wpc)
    else:
        amd = re.search(r"#ttg\.amd_mfma<\{[^}]*\}>", s).group(0)
        wpc = _ints(re.search(r"warpsPerCTA = \[([\d, ]+)\]", amd).group(1))
        instr = _ints(re.search(r"instrShape = \[([\d, ]+)\]", amd).group(1))
        ref = mfma_accumulator(m, n, nw, instr[0], wpc, "isTransposed = true" in amd)
    assert mine.layout == ref.layout and mine.warp_size == ref.warp_size
