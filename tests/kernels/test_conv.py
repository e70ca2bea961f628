"""conv() against torch.nn.functional.conv{1,2,3}d / conv_transpose{1,2,3}d in float64, at odd sizes, with
outputs allocated NaN-poisoned (an element the kernel never writes fails the comparison)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl import Policy
from argus_inductor.kernels import conv as conv_module
from argus_inductor.kernels.conv import KERNELS, conv, conv_policies

from ._support import DEVICE, check, fresh_seed, randn

# id: (x shape, weight shape, conv arguments, bias, activation)
CASES = {
    "conv1d": ((2, 3, 13), (5, 3, 3), dict(padding=1), True, "none"),
    "conv1d_dilated_strided": ((2, 4, 17), (6, 4, 3), dict(stride=2, dilation=3, padding=2), False, "relu"),
    "conv2d_3x3": ((2, 4, 9, 7), (5, 4, 3, 3), dict(padding=1), True, "gelu"),
    "conv2d_asym_pad_stride": ((1, 3, 10, 9), (4, 3, 3, 2), dict(stride=(2, 3), padding=(2, 0)), False, "silu"),
    "conv2d_grouped": ((2, 6, 7, 8), (9, 2, 3, 3), dict(groups=3, padding=1, dilation=(2, 1)), True, "gelu_tanh"),
    "conv2d_depthwise": ((1, 5, 8, 7), (5, 1, 3, 3), dict(groups=5, padding=1), True, "none"),
    "conv1d_depthwise_strided": ((2, 7, 19), (7, 1, 5), dict(groups=7, stride=3, dilation=2, padding=3), True, "gelu"),
    "conv3d_depthwise": ((1, 3, 4, 6, 5), (3, 1, 2, 3, 3), dict(groups=3, padding=(0, 1, 2), stride=(1, 2, 1)),
                         False, "silu"),
    "conv2d_same_even_kernel": ((1, 3, 8, 9), (4, 3, 4, 3), dict(padding="same", dilation=(1, 2)), False, "none"),
    "conv2d_valid": ((1, 3, 6, 6), (2, 3, 3, 3), dict(padding="valid"), True, "none"),
    "conv2d_pointwise_k_tail": ((2, 20, 5, 6), (17, 20, 1, 1), dict(), True, "relu"),
    "conv3d": ((1, 3, 5, 6, 4), (4, 3, 2, 3, 2), dict(padding=(1, 0, 2), stride=(1, 2, 1)), True, "relu"),
    "conv_transpose1d": ((2, 4, 7), (4, 3, 4), dict(stride=3, padding=2, dilation=2), False, "none"),
    "conv_transpose2d": ((2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2), True,
                         "relu"),
    "conv_transpose3d": ((1, 4, 3, 4, 3), (4, 2, 3, 2, 3), dict(stride=(2, 1, 2), padding=1), True, "none"),
    # output phases: k=4, s=2, p=1 (each output takes 2 of 4 taps per dim); a stride and dilation sharing a factor
    # (odd phases take no tap: bias alone); 3-D stride 2 with output padding (phases with 1 or 2 taps per dim)
    "conv_transpose2d_k4_s2": ((2, 3, 5, 4), (3, 4, 4, 4), dict(stride=2, padding=1), True, "none"),
    "conv_transpose2d_gcd": ((1, 3, 4, 5), (3, 2, 3, 3), dict(stride=2, dilation=2, padding=(0, 1)), True, "silu"),
    "conv_transpose3d_s2": ((1, 3, 3, 4, 3), (3, 2, 3, 3, 3), dict(stride=2, padding=1, output_padding=1), False,
                            "none"),
}
BF16 = ["conv1d_dilated_strided", "conv2d_grouped", "conv3d", "conv_transpose2d", "conv2d_depthwise"]
ACT_REF = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
           "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}


@pytest.fixture(autouse=True)
def poison_empty(monkeypatch):
    """torch.empty returns NaN-filled floating-point tensors while a test runs (conv's output included)."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t
    monkeypatch.setattr(torch, "empty", empty)


def reference(x, w, b, kw, act):
    kw = dict(kw)
    transposed = kw.pop("transposed", False)
    nsp = w.dim() - 2
    f = getattr(F, f"conv_transpose{nsp}d" if transposed else f"conv{nsp}d")
    out = f(x.double(), w.double(), None if b is None else b.double(), **kw)
    return ACT_REF[act](out)


def run_case(name, dtype):
    xs, ws, kw, has_bias, act = CASES[name]
    transposed = name.startswith("conv_transpose")
    seed = fresh_seed()
    x, w = randn(*xs, dtype=dtype), randn(*ws, dtype=dtype, scale=0.5)
    b = randn(ws[1] * kw.get("groups", 1) if transposed else ws[0], dtype=dtype) if has_bias else None
    out = conv(x, w, b, transposed=transposed, activation=act, **kw)
    assert out.dtype == dtype and out.device == x.device
    ref = reference(x, w, b, dict(kw, transposed=transposed), act)
    assert out.shape == ref.shape, f"{name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    check(out, ref, dtype, seed, name)


@pytest.mark.parametrize("name", list(CASES))
def test_conv_matches_torch_float32(name):
    run_case(name, torch.float32)


@pytest.mark.parametrize("name", BF16)
def test_conv_matches_torch_bfloat16(name):
    run_case(name, torch.bfloat16)


def test_conv_unbatched_and_strided_input():
    seed = fresh_seed()
    x = randn(2, 7, 9, 4, dtype=torch.float32).permute(0, 3, 1, 2)  # channels-last storage
    w = randn(3, 4, 3, 3, dtype=torch.float32)
    check(conv(x, w, padding=1), F.conv2d(x.double(), w.double(), padding=1), torch.float32, seed, "strided x")
    out = conv(x[1], w, stride=2)
    assert out.shape == (3, 3, 4)
    check(out, F.conv2d(x[1].double(), w.double(), stride=2), torch.float32, seed, "unbatched")


def test_conv_policy_override_and_kernel_substitution():
    seed = fresh_seed()
    x, w = randn(1, 3, 9, 8, dtype=torch.float32), randn(4, 3, 3, 3, dtype=torch.float32)
    ref = F.conv2d(x.double(), w.double(), padding=1)
    pol = Policy.make(BM=32, BN=16, BK=16)
    check(conv(x, w, padding=1, policies={"conv_fwd": pol}), ref, torch.float32, seed, "policy override")
    calls = []

    def substitute(*args, **kwargs):
        calls.append(kwargs["policy"])
        return conv_module.conv_fwd(*args, **kwargs)
    out = conv(x, w, padding=1, policies={"conv_fwd": pol}, kernels={"conv_fwd": substitute})
    check(out, ref, torch.float32, seed, "kernel substitution")
    assert len(calls) == 1 and calls[0].const("BM") == 32 and calls[0].const("KH") == 3


def test_conv_empty_batch():
    out = conv(torch.zeros(0, 3, 5, 5, device=DEVICE), torch.zeros(4, 3, 3, 3, device=DEVICE))
    assert out.shape == (0, 4, 3, 3)


def test_conv_policies_templates():
    for target in ("cuda", "hip", "interpret"):
        pols = conv_policies((8, 64, 56, 56), (128, 64, 3, 3), 1, 1, 1, 1, False, 0, target)
        (name, pol), = pols.items()
        assert name == "conv_fwd"
        assert all(16 <= pol.const(k) <= 128 for k in ("BM", "BN", "BK"))
    pols = conv_policies((8, 64, 28, 28), (64, 32, 4, 4), 2, 1, 1, 1, True, 0, "interpret")
    assert list(pols) == ["conv_transpose_fwd"]
    assert {k.name for k in KERNELS} == {"conv_fwd", "conv_transpose_fwd", "conv_depthwise"}
    # depthwise (one output per input channel) takes the direct kernel, unless the implicit GEMM is asked for
    dw = ((8, 32, 56, 56), (32, 1, 3, 3), 1, 1, 1, 32, False, 0, "cuda")
    assert list(conv_policies(*dw)) == ["conv_depthwise"]
    assert list(conv_policies(*dw, direct=False)) == ["conv_fwd"]
    assert list(conv_policies((8, 32, 56, 56), (64, 1, 3, 3), 1, 1, 1, 32, False, 0, "cuda")) == ["conv_fwd"]
    with pytest.raises(ValueError, match="target"):
        conv_policies((1, 3, 5, 5), (4, 3, 3, 3), 1, 0, 1, 1, False, 0, "tpu")


BAD = [
    (dict(x=(2, 4, 9, 9), w=(5, 3, 3, 3)), "expects 3 \\* groups\\(1\\) = 3 input channels, but the input has 4"),
    (dict(x=(4, 9), w=(5, 4, 3, 3)), "needs an input of rank 4 \\(N, C, spatial...\\) or 3"),
    (dict(x=(2, 4, 9, 9), w=(5, 4)), "weight must have rank 3, 4 or 5"),
    (dict(x=(2, 6, 9, 9), w=(5, 3, 3, 3), groups=2), "out_channels \\(5\\) must be divisible by groups"),
    (dict(x=(2, 5, 9, 9), w=(6, 5, 3, 3), groups=0), "groups must be a positive integer"),
    (dict(x=(2, 4, 9, 9), w=(3, 2, 3, 3), transposed=True), "in_channels = weight.shape\\[0\\] = 3"),
    (dict(x=(2, 4, 9, 9), w=(4, 2, 3, 3), transposed=True, padding="same"), "only supported for non-transposed"),
    (dict(x=(2, 4, 9, 9), w=(4, 4, 3, 3), stride=2, padding="same"), "not supported for strided"),
    (dict(x=(2, 4, 9, 9), w=(4, 4, 3, 3), padding="full"), "padding must be 'same', 'valid'"),
    (dict(x=(2, 4, 9, 9), w=(4, 4, 3, 3), stride=(1, 2, 1)), "stride must be an int or a tuple of 2 ints"),
    (dict(x=(2, 4, 9, 9), w=(4, 4, 3, 3), stride=0), "stride and dilation must be >= 1"),
    (dict(x=(2, 4, 2, 2), w=(4, 4, 3, 3)), "the output would be empty"),
    (dict(x=(2, 4, 5, 5), w=(4, 4, 3, 3), transposed=True, output_padding=1), "output_padding must be smaller"),
    (dict(x=(2, 4, 9, 9), w=(4, 4, 3, 3), activation="tanh"), "activation must be one of"),
    (dict(x=(2, 4, 9, 9), w=(4, 4, 3, 3), bias=(3,)), "bias must have shape \\(4,\\)"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[m[:30] for _, m in BAD])
def test_conv_rejects_bad_input(args, message):
    args = dict(args)
    x = torch.zeros(args.pop("x"), device=DEVICE)
    w = torch.zeros(args.pop("w"), device=DEVICE)
    b = torch.zeros(args.pop("bias"), device=DEVICE) if "bias" in args else None
    with pytest.raises(ValueError, match=message):
        conv(x, w, b, **args)


def test_conv_rejects_dtype_mismatch():
    with pytest.raises(ValueError, match="share one floating-point dtype"):
        conv(torch.zeros(1, 2, 5, 5, device=DEVICE), torch.zeros(3, 2, 3, 3, dtype=torch.float64, device=DEVICE))
