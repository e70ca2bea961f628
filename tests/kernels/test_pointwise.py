"""Generated elementwise kernels and fused GEMM/conv epilogues against a float64 torch reference: every op
of the chain IR, broadcasting, ranks 0..6, non-contiguous inputs, fp32 and bf16, odd shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl import Policy
from argus_inductor.kernels.pointwise import (
    OPS,
    Chain,
    Step,
    conv_chain,
    linear_chain,
    pointwise,
    pointwise_kernel,
    pointwise_policies,
)

from ._support import DEVICE, ON_GPU, check, fresh_seed, poisoned, randn

X0, X1, X2 = ("in", 0), ("in", 1), ("in", 2)


def c(v: float) -> tuple[str, float]:
    return ("const", v)


def s(j: int) -> tuple[str, int]:
    return ("step", j)


def rn(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """randn that also makes 0-dim tensors."""
    return torch.randn(tuple(shape), dtype=torch.float32, device=DEVICE).to(dtype)


def ref64(chain: Chain, inputs: list[torch.Tensor]) -> torch.Tensor:
    return chain.reference([t.double() for t in inputs])


# op -> (extra const params, input domain); binary ops take a second (1, W) tensor input
OP_CASES: dict[str, tuple[tuple[float, ...], str]] = {
    "add": ((), "any"), "sub": ((), "any"), "mul": ((), "any"), "div": ((), "away0"),
    "maximum": ((), "any"), "minimum": ((), "any"), "neg": ((), "any"), "abs": ((), "any"),
    "exp": ((), "any"), "log": ((), "pos"), "sqrt": ((), "pos"), "rsqrt": ((), "pos"),
    "sigmoid": ((), "any"), "tanh": ((), "any"), "erf": ((), "any"), "relu": ((), "any"),
    "gelu": ((), "any"), "gelu_tanh": ((), "any"), "silu": ((), "any"), "selu": ((), "any"),
    "hardsigmoid": ((), "wide"), "hardswish": ((), "wide"), "mish": ((), "wide"), "softsign": ((), "any"),
    "reciprocal": ((), "away0"), "square": ((), "any"), "pow": ((3.0,), "any"),
    "clamp": ((-0.5, 0.7), "any"), "clamp_min": ((-0.25,), "any"), "clamp_max": ((0.3,), "any"),
    "leaky_relu": ((0.2,), "any"), "hardtanh": ((-0.6, 0.8), "any"), "softplus": ((2.0, 3.0), "wide"),
    "elu": ((0.7,), "any"),
}


def _domain(t: torch.Tensor, dom: str) -> torch.Tensor:
    if dom == "pos":
        return t.abs() + 0.05
    if dom == "away0":
        return torch.where(t >= 0, t + 0.5, t - 0.5)
    if dom == "wide":
        return t * 6.0
    return t


def test_every_op_has_a_case():
    assert set(OP_CASES) == set(OPS)


@pytest.mark.parametrize("op", sorted(OP_CASES))
def test_each_op_fp32(op):
    seed = fresh_seed()
    params, dom = OP_CASES[op]
    spec = OPS[op]
    shape = (5, 37) if not ON_GPU else (1000, 4099)
    a = _domain(randn(*shape, dtype=torch.float32), dom)
    inputs = [a]
    values: list = [X0]
    if spec.values == 2:
        inputs.append(_domain(randn(1, shape[1], dtype=torch.float32), dom))
        values.append(X1)
    chain = Chain((Step(op, tuple(values) + tuple(c(p) for p in params)),))
    out = pointwise(chain, inputs)
    assert out.shape == a.shape and out.dtype == torch.float32
    check(out, ref64(chain, inputs), torch.float32, seed, f"{op}{params}")


@pytest.mark.parametrize("p", [2.0, 0.5, -0.5, 0.0, 1.0, -3.0, 7.0, 20.0, 21.0, 1.7, -0.3])
def test_pow_exponents(p):
    seed = fresh_seed()
    a = randn(3, 29, dtype=torch.float32)
    if p != int(p) or abs(p) > 16:
        a = a.abs() + 0.5 if p != int(p) else a.clamp(-1.1, 1.1)
    chain = Chain((Step("pow", (X0, c(p))),))
    check(pointwise(chain, [a]), ref64(chain, [a]), torch.float32, seed, f"pow {p}")


def test_binary_ops_with_const_operands():
    seed = fresh_seed()
    a = randn(4, 33, dtype=torch.float32)
    chain = Chain((Step("sub", (c(1.5), X0)), Step("div", (c(2.0), s(0))), Step("maximum", (s(1), c(-3.0))),
                   Step("minimum", (c(4.0), s(2))), Step("clamp_max", (s(3), c(float("inf")))), Step("sub", (s(4), s(1)))))
    check(pointwise(chain, [a]), ref64(chain, [a]), torch.float32, seed, chain.describe())


BF16_CHAINS = [
    Chain((Step("mul", (X0, c(0.5))), Step("gelu", (s(0),)), Step("add", (s(1), X1)))),
    Chain((Step("leaky_relu", (X0, c(0.1))), Step("mish", (s(0),)))),
    Chain((Step("hardswish", (X0,)), Step("softplus", (s(0),)), Step("mul", (s(1), X1)))),
]


@pytest.mark.parametrize("chain", BF16_CHAINS, ids=lambda ch: ch.describe())
def test_chains_bf16(chain):
    seed = fresh_seed()
    inputs = [randn(3, 7, 41, dtype=torch.bfloat16) * 3, randn(7, 1, dtype=torch.bfloat16)][:max(1, chain.n_inputs)]
    out = pointwise(chain, inputs)
    assert out.dtype == torch.bfloat16
    check(out, ref64(chain, inputs), torch.bfloat16, seed, chain.describe())


def test_mixed_dtypes_promote():
    seed = fresh_seed()
    a, b = randn(6, 19, dtype=torch.bfloat16), randn(6, 19, dtype=torch.float32)
    chain = Chain((Step("mul", (X0, X1)), Step("sigmoid", (s(0),))))
    out = pointwise(chain, [a, b])
    assert out.dtype == torch.float32
    check(out, ref64(chain, [a, b]), torch.float32, seed, "bf16 * fp32")


BCAST = [
    ((2, 5, 7, 9), [(5, 1, 1), (1, 9), ()]),         # per-channel, row vector, 0-dim
    ((3, 11, 13), [(3, 1, 1), (1,), (1, 11, 1)]),
    ((4, 1, 6, 5), [(1, 3, 1, 1), (4, 1, 1, 5), (6, 1)]),  # output grows along a size-1 dim of x0
]


@pytest.mark.parametrize("shape,others", BCAST, ids=[str(b[0]) for b in BCAST])
def test_broadcasting(shape, others):
    seed = fresh_seed()
    inputs = [rn(shape)] + [rn(o) for o in others]
    chain = Chain((Step("mul", (X0, X1)), Step("sub", (s(0), X2)), Step("add", (s(1), ("in", 3))),
                   Step("tanh", (s(2),))))
    out = pointwise(chain, inputs)
    ref = ref64(chain, inputs)
    assert out.shape == ref.shape
    check(out, ref, torch.float32, seed, f"broadcast {shape} {others}")


RANKS = [(), (37,), (5, 17), (3, 4, 21), (2, 3, 5, 19), (2, 3, 4, 5, 7), (2, 1, 3, 2, 5, 7)]


@pytest.mark.parametrize("shape", RANKS, ids=[f"rank{len(r)}" for r in RANKS])
def test_ranks(shape):
    seed = fresh_seed()
    a = rn(shape)
    # a per-"channel" operand along dim 1 (or a scalar) so that dims cannot all merge
    bshape = tuple(v if d == 1 else 1 for d, v in enumerate(shape)) if len(shape) >= 2 else ()
    b = rn(bshape)
    chain = Chain((Step("add", (X0, X1)), Step("silu", (s(0),))))
    out = pointwise(chain, [a, b])
    check(out, ref64(chain, [a, b]), torch.float32, seed, f"rank {len(shape)}")


def test_rank6_blocked_merge_materializes():
    """A rank-6 result whose inputs block every merge: the blocking input is copied, the result still right."""
    seed = fresh_seed()
    a = randn(2, 3, 2, 3, 2, 3, dtype=torch.float32)
    b = randn(2, 1, 2, 1, 2, 1, dtype=torch.float32)
    chain = Chain((Step("mul", (X0, X1)),))
    check(pointwise(chain, [a, b]), ref64(chain, [a, b]), torch.float32, seed, "rank 6 alternating")


def test_non_contiguous_inputs():
    seed = fresh_seed()
    base = randn(9, 40, 3, dtype=torch.float32)
    a = base[1::2, 3:, 1]                    # strided slice (4, 37)
    b = randn(37, 4, dtype=torch.float32).t()  # transposed
    cc = randn(4, 1, dtype=torch.float32).expand(4, 37)  # already expanded
    chain = Chain((Step("mul", (X0, X1)), Step("add", (s(0), X2)), Step("abs", (s(1),)), Step("sqrt", (s(2),))))
    out = pointwise(chain, [a, b, cc])
    assert out.is_contiguous()
    check(out, ref64(chain, [a, b, cc]), torch.float32, seed, "non-contiguous")


def test_kernel_direct_with_poisoned_output_and_policy():
    """The generated kernel called directly writes every element of a NaN-filled output (odd tiles)."""
    seed = fresh_seed()
    chain = Chain((Step("elu", (X0, c(1.3))), Step("mul", (s(0), X1))))
    k = pointwise_kernel(chain, 2)
    assert k is pointwise_kernel(chain, 2)  # memoized
    x, w = randn(2, 3, 13, 37, dtype=torch.float32), randn(1, 3, 1, 1, dtype=torch.float32)
    y = poisoned(2, 3, 13, 37, dtype=torch.float32)
    for pol in (Policy.make(B2=4, B3=16), Policy.make(B2=1, B3=64), pointwise_policies(y.shape, "interpret")["pointwise"]):
        y.fill_(float("nan"))
        k(x, w.expand_as(x), y, policy=pol)
        check(y, ref64(chain, [x, w]), torch.float32, seed, f"direct {pol.key()}")
    out = pointwise(chain, [x, w], policies={"pointwise": Policy.make(B2=2, B3=32)}, kernels={"pointwise": k})
    check(out, ref64(chain, [x, w]), torch.float32, seed, "override")


def test_empty_output():
    chain = Chain((Step("exp", (X0,)),))
    assert pointwise(chain, [torch.empty(0, 5, device=DEVICE)]).shape == (0, 5)


def test_key_and_describe():
    a = Chain((Step("mul", (X0, c(2))), Step("tanh", (s(0),))))
    b = Chain((Step("mul", (X0, c(2.0))), Step("tanh", (s(0),))))
    d = Chain((Step("mul", (X0, c(3.0))), Step("tanh", (s(0),))))
    assert a.key() == b.key() != d.key()
    assert a.key().isidentifier() and len(a.key()) <= 16
    assert a.describe() == "s0 = mul(x0, 2.0); s1 = tanh(s0) -> s1"


@pytest.mark.parametrize("make", [
    lambda: Step("frobnicate", (X0,)),
    lambda: Step("add", (X0,)),
    lambda: Step("exp", (X0, X1)),
    lambda: Step("exp", (c(1.0),)),
    lambda: Step("pow", (X0, X1)),
    lambda: Step("clamp", (X0, c(1.0))),
    lambda: Step("add", (X0, ("input", 1))),
    lambda: Step("add", (X0, ("in", -1))),
    lambda: Step("add", (X0, c(float("nan")))),
    lambda: Chain((Step("exp", (s(0),)),)),
    lambda: Chain((Step("exp", (X0,)), Step("add", (s(0), s(2))), Step("exp", (s(1),)))),
    lambda: Chain(()),
], ids=["unknown-op", "too-few", "too-many", "const-only", "pow-tensor-exp", "clamp-one-bound", "bad-kind",
        "negative-index", "nan-const", "self-reference", "forward-reference", "empty"])
def test_bad_chains_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_bad_inputs_raise_value_error():
    chain = Chain((Step("add", (X0, X1)),))
    a = torch.randn(3, 4, device=DEVICE)
    with pytest.raises(ValueError, match="reads input 1"):
        pointwise(chain, [a])
    with pytest.raises(ValueError, match="broadcast"):
        pointwise(chain, [a, torch.randn(5, device=DEVICE)])
    with pytest.raises(ValueError, match="dtype"):
        pointwise(chain, [a, torch.ones(3, 4, dtype=torch.int32, device=DEVICE)])
    with pytest.raises(ValueError, match="sequence"):
        pointwise(chain, a)
    with pytest.raises(ValueError, match="n_inputs|reads input"):
        pointwise_kernel(chain, 1)


# ---- fused epilogues ----------------------------------------------------------------------------------------------
LINEAR_CHAINS = [
    (Chain((Step("mul", (X0, c(0.7))), Step("add", (s(0), X1)), Step("tanh", (s(1),)))), [(1, "N")]),
    (Chain((Step("leaky_relu", (X0, c(0.05))), Step("clamp", (s(0), c(-0.5), c(0.9))))), []),
    (Chain((Step("sub", (X0, X1)), Step("mul", (s(0), X2)), Step("hardswish", (s(1),)))), [("M", "N"), ("M", 1)]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("i", range(len(LINEAR_CHAINS)))
def test_linear_chain(i, dtype):
    chain, extra_shapes = LINEAR_CHAINS[i]
    seed = fresh_seed()
    m, n, k = (37, 29, 45) if not ON_GPU else (1021, 2053, 517)
    x, w = randn(m, k, dtype=dtype), randn(n, k, dtype=dtype, scale=k ** -0.5)
    bias = randn(n, dtype=dtype) if i != 1 else None
    extras = [randn(*[{"M": m, "N": n}.get(d, d) for d in sh], dtype=dtype) for sh in extra_shapes]
    out = linear_chain(x, w, bias, chain, extras)
    y = x.double() @ w.double().t() + (bias.double() if bias is not None else 0.0)
    ref = chain.reference([y] + [e.double() for e in extras])
    assert out.shape == (m, n) and out.dtype == dtype
    check(out, ref, dtype, seed, f"linear_chain {chain.describe()}")


def test_linear_chain_bad_input():
    chain = LINEAR_CHAINS[0][0]
    x, w = torch.randn(4, 5, device=DEVICE), torch.randn(3, 5, device=DEVICE)
    with pytest.raises(ValueError, match="extra"):
        linear_chain(x, w, None, chain, [])
    with pytest.raises(ValueError, match="broadcast"):
        linear_chain(x, w, None, chain, [torch.randn(4, 2, device=DEVICE)])
    with pytest.raises(ValueError, match="weight"):
        linear_chain(x, torch.randn(3, 6, device=DEVICE), None, chain, [torch.randn(3, device=DEVICE)])


CONV_CASES = [
    # (x shape, w shape, stride, padding, dilation, groups, transposed, output_padding, chain, extra shapes)
    ((2, 4, 9, 11), (6, 2, 3, 3), 1, 1, 1, 2, False, 0,
     Chain((Step("sub", (X0, c(0.5))), Step("hardswish", (s(0),)))), []),
    ((2, 3, 10, 9), (8, 3, 3, 3), 2, 1, 1, 1, False, 0,
     Chain((Step("mul", (X0, X1)), Step("sigmoid", (s(0),)), Step("add", (s(1), X2)))), [(8, 1, 1), (8, 1, 1)]),
    ((3, 6, 7), (6, 2, 3), 2, 1, 1, 3, True, 1,
     Chain((Step("add", (X0, X1)), Step("mish", (s(0),)))), [(3, 6, 14)]),
    ((1, 2, 3, 5, 4), (4, 2, 2, 3, 2), 1, (0, 1, 1), 1, 1, False, 0,
     Chain((Step("gelu", (X0,)), Step("mul", (s(0), X1)))), [(4, 1, 1, 1)]),
    ((3, 8, 9), (5, 3, 3, 3), 1, 1, 1, 1, False, 0,  # unbatched 2-D input
     Chain((Step("relu", (X0,)), Step("add", (s(0), X1)))), [(5, 8, 1)]),
]

_CONV = {1: (F.conv1d, F.conv_transpose1d), 2: (F.conv2d, F.conv_transpose2d), 3: (F.conv3d, F.conv_transpose3d)}


# every case in fp32, two in bf16 (interpreter time)
CONV_RUNS = [(i, torch.float32) for i in range(len(CONV_CASES))] + [(0, torch.bfloat16), (1, torch.bfloat16)]


@pytest.mark.parametrize("i,dtype", CONV_RUNS)
def test_conv_chain(i, dtype):
    xs, ws, st, pad, dil, g, tr, opad, chain, extra_shapes = CONV_CASES[i]
    seed = fresh_seed()
    x, w = randn(*xs, dtype=dtype), randn(*ws, dtype=dtype, scale=0.3)
    cout = ws[1] * g if tr else ws[0]
    bias = randn(cout, dtype=dtype)
    extras = [randn(*sh, dtype=dtype) for sh in extra_shapes]
    out = conv_chain(x, w, bias, st, pad, dil, g, tr, opad, chain, extras)
    fwd, bwd = _CONV[len(ws) - 2]
    if tr:
        y = bwd(x.double(), w.double(), bias.double(), st, pad, opad, g, dil)
    else:
        y = fwd(x.double(), w.double(), bias.double(), st, pad, dil, g)
    ref = chain.reference([y] + [e.double() for e in extras])
    assert out.shape == ref.shape and out.dtype == dtype
    check(out, ref, dtype, seed, f"conv_chain case {i} {chain.describe()}")


def test_conv_chain_non_viewable_extra():
    """An extra whose expanded view cannot be split into (N, G, COG, OS) is materialized and still right."""
    seed = fresh_seed()
    x, w = randn(2, 4, 6, 7, dtype=torch.float32), randn(6, 2, 3, 3, dtype=torch.float32, scale=0.3)
    e = randn(5, 6, 4, 2, dtype=torch.float32).permute(3, 1, 2, 0)  # (2, 6, 4, 5), spatial dims unmergeable
    chain = Chain((Step("add", (X0, X1)),))
    out = conv_chain(x, w, None, 1, 0, 1, 2, False, 0, chain, [e])
    check(out, F.conv2d(x.double(), w.double(), None, 1, 0, 1, 2) + e.double(), torch.float32, seed, "strided extra")


def test_conv_chain_bad_input():
    chain = CONV_CASES[1][8]
    x, w = torch.randn(2, 3, 10, 9, device=DEVICE), torch.randn(8, 3, 3, 3, device=DEVICE)
    with pytest.raises(ValueError, match="extra"):
        conv_chain(x, w, None, 1, 1, 1, 1, False, 0, chain, [torch.randn(8, 1, 1, device=DEVICE)])
    with pytest.raises(ValueError, match="broadcast"):
        conv_chain(x, w, None, 1, 1, 1, 1, False, 0, chain, [torch.randn(3, 1, 1, device=DEVICE)] * 2)
    with pytest.raises(ValueError, match="divisible|channels"):
        conv_chain(x, w, None, 1, 1, 1, 2, False, 0, chain, [])
