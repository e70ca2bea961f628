"""Normalizations (argus_inductor.kernels.normalize) against torch in float64: layer/RMS/group/instance/batch norm
and Lp normalization, odd shapes, fp32 and bf16, with and without affine parameters, non-contiguous inputs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl import Policy
from argus_inductor.kernels import normalize
from argus_inductor.kernels.normalize import (
    batch_norm,
    batch_norm_policies,
    channel_norm,
    group_norm,
    group_norm_kernel,
    instance_norm,
    layer_norm,
    layer_norm_policies,
    lp_normalize,
    norm_cols,
    norm_rows,
    rms_norm,
    row_moments,
)

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, poisoned, randn

SHAPE = (16, 64, 33, 65) if ON_GPU else (3, 6, 5, 7)


def _rms_ref(x, dims, w):
    y = x.double() * torch.rsqrt(x.double().pow(2).mean(dims, keepdim=True) + 1e-6)
    return y if w is None else y * w.double()


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_trailing_dims(dtype):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype, scale=2.0)
    for k, affine in ((1, True), (2, False), (3, True)):
        ns = SHAPE[-k:]
        w, b = (randn(*ns, dtype=dtype), randn(*ns, dtype=dtype)) if affine else (None, None)
        ref = F.layer_norm(x.double(), ns, None if w is None else w.double(), None if b is None else b.double())
        out = layer_norm(x, ns, w, b)
        assert out.shape == x.shape and out.dtype == dtype
        check(out, ref, dtype, seed, f"layer_norm over {ns} affine={affine}")
    xt = x.transpose(1, 3)
    check(layer_norm(xt, xt.shape[-1]), F.layer_norm(xt.double(), xt.shape[-1:]), dtype, seed, "non-contiguous")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_any_dims(dtype):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype)
    for dim in (-1, 1, (2, 3), (0, 2)):
        dims = (dim,) if isinstance(dim, int) else dim
        wshape = tuple(SHAPE[d] for d in dims)
        w = randn(*wshape, dtype=dtype)
        bshape = [SHAPE[d] if d % len(SHAPE) in [e % len(SHAPE) for e in dims] else 1 for d in range(len(SHAPE))]
        ref = _rms_ref(x, dims, w.reshape(bshape))
        check(rms_norm(x, dim, w), ref, dtype, seed, f"rms_norm dim={dim}")
    check(rms_norm(x, 1), _rms_ref(x, (1,), None), dtype, seed, "rms_norm without weight")


@pytest.mark.parametrize("dtype", DTYPES)
def test_group_and_instance_norm(dtype):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype, scale=3.0)
    c = SHAPE[1]
    w, b = randn(c, dtype=dtype), randn(c, dtype=dtype)
    for groups in (g for g in (1, 2, 3, 4, c) if c % g == 0):
        ref = F.group_norm(x.double(), groups, w.double(), b.double())
        check(group_norm(x, groups, w, b), ref, dtype, seed, f"group_norm G={groups}")
    check(group_norm(x, 2), F.group_norm(x.double(), 2), dtype, seed, "group_norm without affine")
    check(instance_norm(x, w, b), F.instance_norm(x.double(), weight=w.double(), bias=b.double()), dtype, seed,
          "instance_norm")
    x3 = randn(4, 5, 19, dtype=dtype)
    check(instance_norm(x3), F.instance_norm(x3.double()), dtype, seed, "instance_norm 3-D")


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_eval_and_training(dtype):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype, scale=2.0)
    c = SHAPE[1]
    w, b = randn(c, dtype=dtype), randn(c, dtype=dtype)
    rm, rv = torch.randn(c, device=DEVICE), torch.rand(c, device=DEVICE) + 0.5
    rm0, rv0 = rm.clone(), rv.clone()
    check(batch_norm(x, rm, rv, w, b), F.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double()),
          dtype, seed, "batch_norm eval")
    check(batch_norm(x, rm, rv), F.batch_norm(x.double(), rm.double(), rv.double()), dtype, seed,
          "batch_norm eval without affine")
    ref = F.batch_norm(x.double(), None, None, w.double(), b.double(), training=True)
    check(batch_norm(x, rm, rv, w, b, training=True), ref, dtype, seed, "batch_norm training")
    assert torch.equal(rm, rm0) and torch.equal(rv, rv0), "running statistics must not change"
    x2 = randn(9, 5, dtype=dtype)
    ref = F.batch_norm(x2.double(), None, None, training=True)
    check(batch_norm(x2, None, None, training=True), ref, dtype, seed, "batch_norm training on (N, C)")
    assert set(batch_norm_policies(SHAPE, True, "interpret")) == {"channel_norm", "row_moments"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_lp_normalize(dtype):
    seed = fresh_seed()
    x = randn(*SHAPE, dtype=dtype)
    check(lp_normalize(x, 2, 1), x.double() / torch.norm(x.double(), p=2, dim=1, keepdim=True), dtype, seed, "l2 dim 1")
    check(lp_normalize(x, 1, -1), x.double() / x.double().abs().sum(-1, keepdim=True), dtype, seed, "l1 dim -1")
    check(lp_normalize(x, 1, (0, 3)), x.double() / x.double().abs().sum((0, 3), keepdim=True), dtype, seed,
          "l1 dims (0, 3)")
    check(lp_normalize(x, 2, None), x.double() / torch.norm(x.double(), p="fro"), dtype, seed, "frobenius")
    z = torch.zeros(3, 4, dtype=dtype, device=DEVICE)
    z[0] = 1.0
    check(lp_normalize(z, 2, 1, eps=1e-12), F.normalize(z.double(), 2, 1, eps=1e-12), dtype, seed,
          "eps guards all-zero rows")


def test_kernels_write_every_output_element():
    """Outputs poisoned with NaN: any element a kernel misses fails the comparison."""
    seed = fresh_seed()
    o, r, i = 11, 37, 13
    x2, x3 = randn(o, r, dtype=torch.float32), randn(o, r, i, dtype=torch.float32)
    w, b = randn(r, dtype=torch.float32), randn(r, dtype=torch.float32)
    y = poisoned(o, r, dtype=torch.float32)
    norm_rows(x2, w, b, y, 1e-5, policy=Policy.make(BO=4, BR=16, MODE=0, HAS_W=1, HAS_B=1))
    check(y, F.layer_norm(x2.double(), (r,), w.double(), b.double()), torch.float32, seed, "norm_rows")
    y = poisoned(o, r, i, dtype=torch.float32)
    norm_cols(x3, w, b, y, 1e-6, policy=Policy.make(BR=8, BI=8, MODE=1, HAS_W=1))
    check(y, _rms_ref(x3, (1,), w[:, None]), torch.float32, seed, "norm_cols")
    gw, gb = randn(4, 3, dtype=torch.float32), randn(4, 3, dtype=torch.float32)
    xg = randn(2, 12, 5, dtype=torch.float32)
    y = poisoned(2, 4, 15, dtype=torch.float32)
    group_norm_kernel(xg.reshape(2, 4, 15), gw, gb, y, 1e-5, policy=Policy.make(BL=8, HAS_W=1, HAS_B=1))
    ref = F.group_norm(xg.double(), 4, gw.reshape(-1).double(), gb.reshape(-1).double())
    check(y.view(2, 12, 5), ref, torch.float32, seed, "group_norm_kernel")
    mean, var = poisoned(o, dtype=torch.float32), poisoned(o, dtype=torch.float32)
    row_moments(x2, mean, var, policy=Policy.make(BO=4, BR=16))
    check(mean, x2.double().mean(1), torch.float32, seed, "row_moments mean")
    check(var, x2.double().var(1, unbiased=False), torch.float32, seed, "row_moments var")
    y = poisoned(o, r, i, dtype=torch.float32)
    rv = torch.rand(r, device=DEVICE) + 0.5
    channel_norm(x3, w, rv, w, b, y, 1e-5, policy=Policy.make(BC=4, BH=8, HAS_W=1, HAS_B=1))
    ref = F.batch_norm(x3.double(), w.double(), rv.double(), w.double(), b.double())
    check(y, ref, torch.float32, seed, "channel_norm")


def test_user_mistakes_raise_value_errors():
    x = randn(2, 6, 5, dtype=torch.float32)
    with pytest.raises(ValueError, match="normalized_shape"):
        layer_norm(x, (6,))
    with pytest.raises(ValueError, match="weight"):
        layer_norm(x, 5, torch.ones(4))
    with pytest.raises(ValueError, match="divide"):
        group_norm(x, 4)
    with pytest.raises(ValueError, match="num_groups"):
        group_norm(x, 0)
    with pytest.raises(ValueError, match="running_mean"):
        batch_norm(x, None, None)
    with pytest.raises(ValueError, match="p = 1 or 2"):
        lp_normalize(x, 3, 1)
    with pytest.raises(ValueError, match="dim"):
        lp_normalize(x, 2, 3)
    with pytest.raises(ValueError, match="dim"):
        rms_norm(x, None)
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, 1, eps=-1.0)
    with pytest.raises(ValueError, match="at least 3"):
        instance_norm(randn(2, 6, dtype=torch.float32))
    with pytest.raises(ValueError, match="floating-point"):
        layer_norm(torch.ones(2, 3, dtype=torch.int64), 3)
    assert "norm_rows" in layer_norm_policies((2, 6, 5), 5, "cuda")


@pytest.mark.parametrize("p", [1, 2])
def test_whole_tensor_lp_normalize_uses_grid_wide_kernels(p):
    """Above WHOLE_TENSOR_SPLIT elements the norm is a grid-wide reduction plus elementwise kernels."""
    seed = fresh_seed()
    x = randn(301, 251, dtype=torch.float32)
    assert x.numel() > normalize.WHOLE_TENSOR_SPLIT
    ref = x.double() / torch.linalg.vector_norm(x.double(), p)
    check(normalize.lp_normalize(x, p, None), ref, torch.float32, seed, f"whole-tensor L{p}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_long_rows_split_their_statistics(dtype, monkeypatch):
    """Layer, RMS, group and instance norm over a few long rows (KernelBench 37: 16 rows of 4M) gather each row's
    statistics over sub-rows, so more programs than rows read x; the sub-rows' means and variances combine exactly, also where
    the mean is far from zero (x + 40); the result is the single-pass kernels' and torch's."""
    seed = fresh_seed()
    target = None if ON_GPU else "interpret"
    shape = (3, 64, 4, 256) if ON_GPU else (2, 3, 5, 8)
    x = (randn(*shape, dtype=torch.float32, scale=2.0) + 40.0).to(dtype)
    ns = shape[1:]
    w, b = randn(*ns, dtype=dtype), randn(*ns, dtype=dtype)
    length = x[0].numel()
    assert normalize._row_parts(shape[0], length, "cuda" if ON_GPU else "interpret") > 1
    moments = []
    real = normalize.row_moments
    monkeypatch.setattr(normalize, "row_moments", lambda *a, **k: moments.append(a[0].shape) or real(*a, **k))
    ref = F.layer_norm(x.double(), ns, w.double(), b.double(), 1e-5)
    check(layer_norm(x, ns, w, b, target=target), ref, dtype, seed, "layer_norm over few long rows")
    assert moments and moments[0][0] > shape[0], moments  # sub-rows, more of them than rows
    check(layer_norm(x, ns, target=target), F.layer_norm(x.double(), ns), dtype, seed, "without affine")
    dims = (1, 2, 3)
    check(rms_norm(x, dims, w, target=target), _rms_ref(x, dims, w), dtype, seed, "rms_norm over few long rows")
    # group norm over few (image, group) segments (diffusion UNets: 32 groups, batch 1-2), and instance norm
    xg = (randn(*((1, 64, 64, 64) if ON_GPU else (1, 4, 8, 5)), dtype=torch.float32) + 40.0).to(dtype)
    wg, bg = randn(xg.shape[1], dtype=dtype), randn(xg.shape[1], dtype=dtype)
    moments.clear()
    check(group_norm(xg, 2, wg, bg, target=target), F.group_norm(xg.double(), 2, wg.double(), bg.double()), dtype,
          seed, "group_norm over few long segments")
    assert moments and moments[0][0] > 2, moments
    check(instance_norm(xg, target=target), F.instance_norm(xg.double()), dtype, seed, "instance_norm, few planes")
