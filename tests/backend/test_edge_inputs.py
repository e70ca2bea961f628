"""Edge-case inputs to a compiled model (issue 40): NaN, inf, -0.0, empty dims, fully masked attention rows, MoE
routings that leave experts empty. Each case runs the compiled model twice (the second call replays the first's
recorded launches) and compares both with eager: the same shape and dtype, NaN where eager has NaN, the same
infinities, the same sign of zero where the case is about it.

The interpreter's element-wise maximum/minimum are made to drop NaN as a GPU's do (gpu_float_semantics), so a
kernel that loses a NaN on the GPU fails here too."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import argus_inductor  # noqa: F401  (registers backend="argus")
from argus_inductor.kernels.attention import decode_split_chunks
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime.replay import Recording
from tests.kernels._support import gpu_float_semantics

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def _gpu_nan(fresh_cache) -> Iterator[None]:
    with gpu_float_semantics():
        yield


def same(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-4, zero_sign: bool = False) -> None:
    """out is eager's ref: shape, dtype, NaN positions, infinities and values (and the sign of each zero)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, out.dtype, ref.shape, ref.dtype)
    if not ref.is_floating_point():
        assert torch.equal(out, ref), (out, ref)
        return
    assert torch.equal(out.isnan(), ref.isnan()), f"NaN at {out.isnan().nonzero().tolist()}, eager at " \
                                                  f"{ref.isnan().nonzero().tolist()}"
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol, equal_nan=True)
    if zero_sign:
        zeros = ref == 0
        assert torch.equal(out[zeros].signbit(), ref[zeros].signbit()), "a zero of the wrong sign"


def compiled_twice(fn: Callable, *args: torch.Tensor, ops_kinds: str | None = None, tol: float = 1e-4,
                   zero_sign: bool = False, argus: bool = True,
                   reference: torch.Tensor | None = None) -> list[report_mod.Entry]:
    """fn compiled with backend="argus", called twice; each call's result is eager's (or `reference`). `argus`: at
    least one Argus kernel ran (the case did not pass by staying Inductor's), and the second call replayed recorded
    launches. Returns the report's entries."""
    torch._dynamo.reset()
    report_mod.clear()
    replays: list[int] = []
    real = Recording.replay

    def counted(self: Recording, inputs: list[torch.Tensor]) -> torch.Tensor | None:
        replays.append(1)
        return real(self, inputs)

    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        ref = fn(*args) if reference is None else reference
        compiled = torch.compile(fn, backend="argus", options=None if ops_kinds is None else {"ops": ops_kinds})
        outs = [compiled(*args)]
        mp.setattr(Recording, "replay", counted)
        outs.append(compiled(*args))
    for i, out in enumerate(outs):
        refs, got = (ref, out) if isinstance(ref, (tuple, list)) else ((ref,), (out,))
        for o, r in zip(got, refs, strict=True):
            try:
                same(o, r, tol, zero_sign)
            except AssertionError as e:
                raise AssertionError(f"call {i + 1}: {e}") from None
    rows = report_mod.entries()
    if argus:
        assert any(e.source.startswith("default") for e in rows), [(e.op, e.source) for e in rows]
        assert replays, "the second call did not replay"
    return rows


ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "gelu": F.gelu, "silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def gelu_reference(lin: nn.Linear, act: str, x: torch.Tensor) -> torch.Tensor:
    """act(lin(x)) in float64, as float32: eager's vectorized float32 GELU on the CPU gives NaN for gelu(+inf)
    where its scalar path, float64, CUDA and Inductor give +inf (the limit), as the kernels do."""
    with torch.no_grad():
        return ACTS[act](F.linear(x.double(), lin.weight.double(), lin.bias.double())).float()


# ------------------------------------------------------------------------------------------------- GEMM epilogues

def _specials(x: torch.Tensor) -> torch.Tensor:
    """x with a NaN, +inf, -inf in its first rows (one row each, so each reaches its own outputs) and -0.0 in the
    fourth (a matmul's sum of products rounds -0.0 + 0.0 to +0.0, as eager's does for K > 1: values compared)."""
    x = x.clone()
    flat = x.view(-1, x.shape[-1])
    flat[0, 3], flat[1, 5], flat[2, 1] = NAN, INF, -INF
    if flat.shape[0] > 3:
        flat[3, ::2] = -0.0
    return x


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("rows", [8, 1])
def test_linear_activation_keeps_nan_and_inf(act: str, rows: int) -> None:
    """act(Linear(x)) with NaN and infinities in x: NaN and inf reach the outputs as in eager (the ReLU epilogue
    max(x, 0) dropped NaN on the GPU). rows=1 takes the GEMV path."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 24)
    x = torch.randn(max(rows, 3), 16)
    x = _specials(x)[:rows]
    compiled_twice(lambda x: ACTS[act](lin(x)), x, reference=gelu_reference(lin, act, x))


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_linear_residual_and_gate_up_keep_nan(act: str) -> None:
    """The fused residual and gate*up kernels apply the same epilogue: NaN in, NaN out."""
    torch.manual_seed(0)
    up, gate, down = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False), nn.Linear(16, 16)
    x = torch.randn(6, 16)
    x[0, 3] = x[4, 0] = NAN
    compiled_twice(lambda x: ACTS[act](gate(x)) * up(x), x)
    compiled_twice(lambda x: x + ACTS[act](down(x)), x)


# ---------------------------------------------------------------------------------- library ops (ARGUS_OPS=all)

def _with_nans(*shape: int) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    flat = x.view(-1)
    flat[7] = NAN  # one NaN
    x.view(shape[0], -1)[-1, :] = NAN  # a slice of NaN only
    x.view(shape[0], -1)[1, 2:5] = NAN  # several, the first not at the start
    return x


REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "amax_rows": lambda x: torch.amax(x, 1), "amin_rows": lambda x: torch.amin(x, -1),
    "amax_cols": lambda x: torch.amax(x, 0), "amin_cols": lambda x: torch.amin(x, 0),
    "max_values": lambda x: torch.max(x, 1).values, "max_indices": lambda x: torch.max(x, 1).indices,
    "min_values": lambda x: torch.min(x, 0).values,
    "argmax_rows": lambda x: torch.argmax(x, 1), "argmin_rows": lambda x: torch.argmin(x, 1),
    "argmax_cols": lambda x: torch.argmax(x, 0), "argmin_cols": lambda x: torch.argmin(x, 0),
    "amax_all": lambda x: torch.amax(x), "argmax_all": lambda x: torch.argmax(x),
}


@pytest.mark.parametrize("case", list(REDUCTIONS))
def test_reductions_propagate_nan(case: str) -> None:
    """max/min give NaN for a slice with a NaN and argmax/argmin the first NaN's index, as eager (the kernels'
    max dropped NaN: a GPU's max is IEEE maxNum, and the interpreter's max reduction is np.nanmax)."""
    compiled_twice(REDUCTIONS[case], _with_nans(6, 70), ops_kinds="all")


def test_whole_tensor_max_of_many_elements_propagates_nan() -> None:
    """amax over more than 2^16 elements runs as partial maxima, then their max: a NaN in one part reaches the end."""
    x = torch.randn(300, 260)
    x[211, 3] = NAN
    compiled_twice(lambda x: torch.amax(x), x, ops_kinds="all")


def test_reductions_of_infinities() -> None:
    """+-inf take part as numbers: a row of -inf has max -inf and argmax 0; +inf wins."""
    x = torch.randn(4, 9)
    x[0, :] = -INF
    x[1, 4] = INF
    x[2, 0] = x[2, 8] = INF
    compiled_twice(lambda x: (torch.amax(x, 1), torch.argmax(x, 1), torch.amin(x, 1), torch.argmin(x, 0)), x,
                   ops_kinds="all")


LIBRARY_NAN: dict[str, tuple[Callable, tuple[int, ...]]] = {
    "conv2d_relu": (lambda x: F.relu(F.conv2d(x, torch.ones(3, 2, 3, 3) / 9, torch.zeros(3) - 0.1, padding=1)),
                    (2, 2, 6, 5)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), (1, 2, 9, 8)),
    "l1_normalize": (lambda x: x / torch.sum(torch.abs(x), dim=1, keepdim=True), (4, 7)),
    "frobenius": (lambda x: x / torch.norm(x, p="fro"), (3, 4, 5)),
    "hinge": (lambda x: torch.mean(torch.clamp(1 - x * torch.ones_like(x), min=0)), (4, 9)),
    "triplet_swap": (lambda x: F.triplet_margin_loss(x, x.flip(0), x.roll(1, 0), swap=True), (4, 9)),
    # each output a chain of its own, so a NaN one loses is not restored by another's
    "clamps_and_hard_activations": (lambda x: (F.hardtanh(x, -0.5, 0.5) * 2, F.hardsigmoid(x) + 1,
                                               F.hardswish(x) - 1, torch.clamp(x, min=-0.2) * 3,
                                               torch.clamp(x, max=0.3) * 3, F.relu6(x) * 2), (3, 17)),
    "maximum_minimum_relu": (lambda x: (torch.maximum(x, x.flip(1)) * 2, torch.minimum(x.flip(0), x) * 2,
                                        torch.relu(x) * 2, F.softplus(x, 2.0) * 2), (3, 17)),
}


@pytest.mark.parametrize("case", list(LIBRARY_NAN))
@pytest.mark.parametrize("special", ["nan", "inf", "-inf"])
def test_library_ops_keep_nan_and_inf(case: str, special: str) -> None:
    """A NaN or an infinity in the input of a convolution + ReLU, a max pooling, a normalization, a clamp-based
    loss, or an elementwise chain of clamps, maximum/minimum and ReLU: NaN where eager has NaN (max(x, c) and
    min(x, c) in the kernels dropped it on the GPU)."""
    fn, shape = LIBRARY_NAN[case]
    torch.manual_seed(1)
    x = torch.randn(*shape)
    x.view(-1)[[1, 5]] = float(special)
    compiled_twice(fn, x, ops_kinds="all")


def test_elementwise_chains_keep_the_sign_of_zero() -> None:
    """relu, clamp and hardtanh of -0.0 are -0.0 in eager: so in the chain's kernel."""
    x = torch.tensor([[-0.0, 0.0, -1.0, 2.0, -0.0, 0.5]] * 2)
    compiled_twice(lambda x: (torch.relu(x) * 1.0, torch.clamp(x, min=0.0) + 0.0 * x, F.hardtanh(x) * 1.0), x,
                   ops_kinds="all", zero_sign=True)


def test_conv2d_on_a_channels_last_input() -> None:
    """The op's output has the strides its fake (torch's conv) promises: channels_last for a channels_last input
    (the kernels wrote contiguous output, and the compiled graph's stride check raised)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3, padding=1)
    x = torch.randn(2, 4, 10, 10).to(memory_format=torch.channels_last)
    rows = compiled_twice(conv, x, ops_kinds="all")
    assert [e.op for e in rows] == ["conv"]
    with torch.no_grad():
        out = torch.compile(conv, backend="argus", options={"ops": "all"})(x)
    assert out.stride() == conv(x).stride()


# ------------------------------------------------------------------------------------------------------ attention

SDPA = F.scaled_dot_product_attention


def _qkv(z: int = 1, h: int = 2, s: int = 8, t: int = 8, d: int = 16, hk: int | None = None) -> tuple:
    torch.manual_seed(0)
    return torch.randn(z, h, s, d), torch.randn(z, hk or h, t, d), torch.randn(z, hk or h, t, d)


@pytest.mark.parametrize("shape", [(0, 2, 16, 16, 16), (1, 2, 0, 16, 16), (0, 2, 1, 16, 16)],
                         ids=["empty_batch", "no_queries", "empty_batch_decode"])
def test_attention_with_an_empty_batch_or_no_queries(shape: tuple[int, ...]) -> None:
    """SDPA of q, k, v with an empty batch or zero queries: the right empty tensor on both calls (the second call's
    replay returned an operand, and the op raised that its output aliases an input)."""
    z, h, s, t, d = shape
    q, k, v = _qkv(z, h, s, t, d)
    for causal in (False, True):
        rows = compiled_twice(lambda q, k, v: SDPA(q, k, v, is_causal=causal), q, k, v, argus=False)
        assert [e.op for e in rows] == ["attention"]


@pytest.mark.parametrize("queries", [8, 1], ids=["prefill", "decode"])
@pytest.mark.parametrize("form", ["plain", "causal", "bool_mask", "float_mask"])
def test_attention_with_no_keys_is_zero(queries: int, form: str) -> None:
    """Zero keys and values: eager SDPA gives zeros (the kernels divided 0 by 0: NaN). The op answers zeros without
    a launch."""
    q, k, v = _qkv(s=queries, t=0)
    masks = {"bool_mask": torch.ones(queries, 0, dtype=torch.bool), "float_mask": torch.zeros(queries, 0)}
    if form in masks:
        m = masks[form]
        rows = compiled_twice(lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), q, k, v, m, argus=False)
    else:
        rows = compiled_twice(lambda q, k, v: SDPA(q, k, v, is_causal=form == "causal"), q, k, v, argus=False)
    assert [e.op for e in rows] == ["attention"]


def _hidden_rows(kind: str, s: int, t: int) -> torch.Tensor:
    """A mask hiding every key from query rows 1 and s - 1 (and some keys from the others)."""
    keep = torch.rand(s, t, generator=torch.Generator().manual_seed(3)) > 0.3
    keep[:, 0] = True
    keep[1, :] = False
    keep[s - 1, :] = False
    if kind == "bool":
        return keep
    return torch.where(keep, torch.randn(s, t, generator=torch.Generator().manual_seed(4)), -INF)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("queries,keys,heads", [(8, 8, (2, 2)), (8, 150, (4, 2)), (1, 40, (4, 1))],
                         ids=["prefill", "long_gqa", "decode"])
def test_attention_rows_with_every_key_hidden(kind: str, queries: int, keys: int, heads: tuple[int, int]) -> None:
    """A mask (bool, or float with -inf) that hides every key from a query row: eager SDPA gives zeros for that row
    (the kernel's finite masked score made it the mean of V). The other rows as eager's."""
    h, hk = heads
    q, k, v = _qkv(h=h, hk=hk, s=queries, t=keys)
    m = _hidden_rows(kind, max(queries, 2), keys)
    if queries == 1:
        m = m[1:2]  # the decode row: every key hidden
    compiled_twice(lambda q, k, v, m: SDPA(q, k, v, attn_mask=m, enable_gqa=h != hk), q, k, v, m)


def test_attention_split_kv_decode_with_hidden_chunks() -> None:
    """Split-KV decode (a long cache, few key/value heads): a row whose keys are hidden in some chunks is the softmax
    over the others; a row with every key hidden is zero. (About 15 s interpreted: the split pays only from about 128
    programs, (batch x key/value heads x chunks), which the interpreter runs one by one.)"""
    q, k, v = _qkv(z=2, h=8, hk=4, s=1, t=1024)
    assert decode_split_chunks(2, 4, 1024) > 1
    m = torch.zeros(2, 8, 1, 1024)
    m[0, 0, :, 300:] = -INF  # only the first chunks' keys
    m[0, 1, :, :] = -INF  # none
    m[1, 2, :, :700] = -INF
    m[1, 5, :, 64:] = -INF  # one chunk's
    compiled_twice(lambda q, k, v, m: SDPA(q, k, v, attn_mask=m, enable_gqa=True), q, k, v, m)


def test_attention_masks_with_a_dtype_minimum_nan_and_inf() -> None:
    """finfo.min (transformers' padding mask) averages the row's values as eager does; a NaN or +inf in the mask
    makes its row NaN, as eager (the kernel's max(mask, -1e30) dropped a NaN on the GPU); very negative finite
    entries still order (-1e38 against -3e38)."""
    q, k, v = _qkv(s=6, t=8)
    m = torch.zeros(6, 8)
    m[0, :] = torch.finfo(torch.float32).min
    m[1, 3] = NAN
    m[2, 5] = INF
    m[3, :] = -1e38
    m[3, 2] = -2e38
    m[4, :4] = torch.finfo(torch.float32).min
    compiled_twice(lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), q, k, v, m)


def sdpa_math(*args: torch.Tensor, **kw) -> torch.Tensor:
    """SDPA by its math backend, the reference for non-finite inputs: eager's default CPU path (its flash kernel)
    returns zeros for a query row of NaN, where the math backend (and the definition) give NaN."""
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return SDPA(*args, **kw)


@pytest.mark.parametrize("special", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("where_", ["q", "k", "v"])
def test_attention_inputs_with_nan_and_infinities(special: str, where_: str) -> None:
    """A NaN or an infinity in q, k or v: NaN, infinities and zeros where SDPA's math backend has them (a query
    row of -inf against positive keys has every score -inf: zero, as SDPA's). Causal with a special query row (V
    and K stay finite there: eager multiplies the hidden keys' zero weights into V too, 0 * inf, where a causal
    kernel never reads the keys past the diagonal)."""
    q, k, v = _qkv(s=8, t=8)
    k = k.abs()
    {"q": q[0, 0, 1, :], "k": k[0, 1, 2, 3:4], "v": v[0, 0, 5, 1:2]}[where_].fill_(float(special))
    compiled_twice(lambda q, k, v: SDPA(q, k, v), q, k, v, reference=sdpa_math(q, k, v))
    if where_ == "q":
        compiled_twice(lambda q, k, v: SDPA(q, k, v, is_causal=True), q, k, v,
                       reference=sdpa_math(q, k, v, is_causal=True))


@pytest.mark.parametrize("kind", ["float", "bool"])
def test_written_out_attention_rows_with_every_key_hidden_are_nan(kind: str) -> None:
    """softmax(q k^T * scale + mask) @ v written out: eager's softmax of a row of -inf is NaN (not SDPA's zero), and
    so is the matched kernel's; the other rows as eager's."""
    q, k, v = _qkv(s=8, t=8)
    keep = torch.ones(8, 8, dtype=torch.bool)
    keep[2, :] = False
    keep[4, 3] = False
    m = keep if kind == "bool" else torch.where(keep, 0.0, -INF)

    def f(q, k, v, m):
        bias = torch.where(m, 0.0, -INF) if m.dtype == torch.bool else m
        return torch.softmax(q @ k.transpose(-1, -2) * 0.25 + bias, dim=-1) @ v

    rows = compiled_twice(f, q, k, v, m)
    assert [e.op for e in rows] == ["attention"]


# ------------------------------------------------------------------------------------------------ empty GEMM dims

@pytest.mark.parametrize("dims", [(8, 16, 0), (0, 16, 12), (0, 12, 12), (8, 0, 12), (0, 0, 0)],
                         ids=["K0", "M0", "M0_square", "N0", "all0"])
@pytest.mark.parametrize("epilogue", ["plain", "bias_relu", "bias_gelu"])
def test_linear_and_matmul_with_an_empty_dim(dims: tuple[int, int, int], epilogue: str) -> None:
    """(M, K) @ (K, N) with M, N or K zero: an empty result, or for K = 0 zeros (+ bias, then the activation), as
    eager (a matmul with K = 0 raised "cannot reshape tensor of 0 elements" from the op's host code)."""
    m, n, k = dims
    torch.manual_seed(0)
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    fns = {"plain": lambda x, w, b: x @ w.t(), "bias_relu": lambda x, w, b: F.relu(F.linear(x, w, b)),
           "bias_gelu": lambda x, w, b: F.gelu(F.linear(x, w, b))}
    rows = compiled_twice(fns[epilogue], x, w, b, argus=False)
    assert [e.op for e in rows] == ["gemm"]


def test_matmul_with_an_empty_inner_dim_in_a_batch() -> None:
    """(2, 8, 0) @ (0, 16) and a 3-D linear over zero features (K = 0)."""
    x, w = torch.randn(2, 8, 0), torch.randn(0, 16)
    compiled_twice(lambda x, w: x @ w + 1.0, x, w, argus=False)


@pytest.mark.parametrize("shape", [(0, 8, 12, 16), (3, 0, 12, 16), (3, 8, 0, 16), (3, 8, 12, 0)],
                         ids=["B0", "M0", "K0", "N0"])
def test_bmm_with_an_empty_dim(shape: tuple[int, int, int, int]) -> None:
    """torch.bmm with an empty batch, M, K or N: eager's empty result or zeros."""
    bt, m, k, n = shape
    a, b = torch.randn(bt, m, k), torch.randn(bt, k, n)
    rows = compiled_twice(lambda a, b: torch.bmm(a, b) * 2.0, a, b, argus=False)
    assert [e.op for e in rows] == ["gemm"]  # the report's kind for argus::bmm too


@pytest.mark.parametrize("shapes", [((3, 1, 5, 12), (1, 2, 12, 6)), ((5, 12), (2, 12, 6)), ((0, 1, 5, 12), (1, 2, 12, 6))],
                         ids=["broadcast", "matrix-times-batch", "empty-batch"])
def test_matmul_with_broadcast_batch_dims(shapes) -> None:
    """A matmul whose batch dims broadcast runs Argus's batched kernel, called twice, with eager's values (an empty
    batch: eager's empty result)."""
    a, b = (torch.randn(*s) for s in shapes)
    compiled_twice(lambda a, b: torch.matmul(a, b) + 1.0, a, b, argus=0 not in shapes[0])


def test_gate_up_and_residual_with_zero_rows_or_features() -> None:
    """The fused gate*up and residual GEMMs with no rows (an empty batch) or no input features."""
    for rows, feats in ((0, 16), (4, 0)):
        up, gate, down = (nn.Linear(feats, 32, bias=False), nn.Linear(feats, 32, bias=False),
                          nn.Linear(feats, feats))
        x = torch.randn(rows, feats)
        compiled_twice(lambda x: F.silu(gate(x)) * up(x), x, argus=False)
        compiled_twice(lambda x: x + F.relu(down(x)), x, argus=False)


EMPTY_LIBRARY: dict[str, tuple[Callable, tuple[int, ...]]] = {
    "max_pool_empty_batch": (lambda x: F.max_pool2d(x, 2), (0, 2, 4, 4)),
    "avg_pool_empty_batch": (lambda x: F.avg_pool2d(x, 2), (0, 2, 4, 4)),
    "adaptive_pool_empty_batch": (lambda x: F.adaptive_avg_pool2d(x, 2), (0, 2, 4, 4)),
    "conv_empty_batch": (lambda x: F.conv2d(x, torch.ones(3, 2, 3, 3)), (0, 2, 5, 5)),
    "softmax_empty_dim": (lambda x: torch.softmax(x, -1), (4, 0)),
    "sum_and_mean_of_nothing": (lambda x: (x.sum(-1), x.mean(-1)), (4, 0)),
    "layer_norm_no_rows": (lambda x: F.layer_norm(x, (8,)), (0, 8)),
}


@pytest.mark.parametrize("case", list(EMPTY_LIBRARY))
def test_library_ops_with_an_empty_operand(case: str) -> None:
    """ARGUS_OPS=all with an empty batch or an empty reduced dim: eager's empty result, zeros or NaN (the pooling
    policies raised "has an empty batch" into the user's call)."""
    fn, shape = EMPTY_LIBRARY[case]
    compiled_twice(fn, torch.randn(*shape), ops_kinds="all", argus=False)


# ---------------------------------------------------------------------------------------------------------- MoE

def _moe_fn(k: int) -> Callable:
    def fn(x, scores, w1, w2):
        tw, ti = torch.topk(torch.softmax(scores, -1), k)
        return torch.ops.argus.moe(x, tw, ti, w1, w2, "edge-moe")
    return fn


def _moe_eager(k: int) -> Callable:
    def fn(x, scores, w1, w2):
        tw, ti = torch.topk(torch.softmax(scores, -1), k)
        return argus_inductor.ops.moe_reference(x, tw, ti, w1, w2)
    return fn


def _experts(e: int = 6, hd: int = 32, inter: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(e, 2 * inter, hd) * 0.2, torch.randn(e, hd, inter) * 0.2


@pytest.mark.parametrize("routing", ["no_tokens", "some_experts_unused", "all_to_one_expert", "one_token"])
def test_moe_routings(routing: str) -> None:
    """The MoE op through the backend on routings that leave experts empty: zero tokens, few tokens over many
    experts, every token to the same experts; against the op's torch reference."""
    w1, w2 = _experts(e=8)
    k = 2
    t = {"no_tokens": 0, "some_experts_unused": 3, "all_to_one_expert": 9, "one_token": 1}[routing]
    x = torch.randn(t, 32)
    scores = torch.randn(t, 8)
    if routing == "all_to_one_expert":
        scores[:, 5] += 100.0  # every token's first choice expert 5, second choice expert 2
        scores[:, 2] += 50.0
    compiled_twice(_moe_fn(k), x, scores, w1, w2, reference=_moe_eager(k)(x, scores, w1, w2), argus=t > 0)


@pytest.mark.parametrize("special", ["nan", "inf"])
def test_moe_keeps_nan_and_inf_to_their_token(special: str) -> None:
    """A NaN or an infinity in one token's hidden state reaches that token's output only, as in the reference (the
    other tokens of its expert's row block are not touched)."""
    w1, w2 = _experts()
    x, scores = torch.randn(7, 32), torch.randn(7, 6)
    scores[:, 1] += 10.0  # every token through expert 1: one row block holds them all
    x[3, 4] = float(special)
    compiled_twice(_moe_fn(2), x, scores, w1, w2, reference=_moe_eager(2)(x, scores, w1, w2))


def test_an_empty_result_is_not_recorded_as_an_operand() -> None:
    """The replay recorder tells a result from the operands by its storage; an empty tensor has none, so an empty
    result of an operand's shape was recorded as that operand and its replay returned the operand itself."""
    from argus_inductor.runtime.replay import record

    q = torch.randn(0, 2, 16, 16)
    out, rec, why = record(lambda: torch.empty(0, 2, 16, 16), [q, q.clone()])
    assert out.shape == q.shape and rec is None and why == "the result is empty"


def test_attention_causal_combinations_with_hidden_rows() -> None:
    """is_causal with a mask: a bool mask that is causal and also hides every key from some rows (the kernel reads
    it: those rows zero, as eager), is_causal=True together with such a mask (eager combines them; left to
    Inductor), and is_causal with more queries than keys (top-left aligned: every row sees key 0)."""
    q, k, v = _qkv(s=8, t=8)
    m = torch.ones(8, 8, dtype=torch.bool).tril()
    m[3, :] = False
    m[6, :] = False
    compiled_twice(lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), q, k, v, m)
    compiled_twice(lambda q, k, v, m: SDPA(q, k, v, attn_mask=m, is_causal=True), q, k, v, m, argus=False)
    q2, k2, v2 = _qkv(s=12, t=5)
    compiled_twice(lambda q, k, v: SDPA(q, k, v, is_causal=True), q2, k2, v2)
