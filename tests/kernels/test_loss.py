"""The loss functions (argus_inductor.kernels.loss) against torch in float64 with every reduction, at odd sizes
that leave ragged blocks and several partial sums, fp32 and bf16; every buffer the module allocates is
NaN-poisoned, so an unwritten element or a partial sum left out fails."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.dsl import Policy
from argus_inductor.kernels import loss

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, randn


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loss, "_alloc", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype,
                                                                                 device=device))


# (7, 45): 315 elements = 5 ragged blocks of 64 in 3 partial sums under the interpreter's policy
SHAPES = [(4093, 4099), (3, 5, 77)] if ON_GPU else [(7, 45), (3, 5, 7)]
REDUCTIONS = ["mean", "sum", "none"]


def _reduce(x: torch.Tensor, reduction: str) -> torch.Tensor:
    return {"mean": x.mean, "sum": x.sum, "none": x.clone}[reduction]()


def _cross_entropy_terms(x: torch.Tensor, tgt: torch.Tensor, reduction: str) -> torch.Tensor:
    """|logsumexp(x)| + |x[target]| per row, reduced like the loss: what bounds its rounding error. The loss is their
    difference, which cancels to nearly zero where the target's logit dominates (a float32 row of 5 logits measured
    5e-5 relative to its loss of 0.0019, 8e-9 relative to these terms)."""
    x64, keep = x.double(), tgt != -100
    rows = torch.logsumexp(x64, 1).abs() + x64.gather(1, tgt.clamp_min(0)[:, None])[:, 0].abs()
    rows = torch.where(keep, rows, torch.zeros_like(rows))
    return {"none": rows, "sum": rows.sum(), "mean": rows.sum() / keep.sum()}[reduction]


def _triplet_terms(a: torch.Tensor, q: torch.Tensor, ng: torch.Tensor, margin: float, p: float, eps: float,
                   swap: bool, reduction: str) -> torch.Tensor:
    """d(a, q) + d(a, ng) + margin per triplet (d(q, ng) too with swap), reduced like the loss: what bounds its
    rounding error. The loss is d(a, q) - d(a, ng) + margin, which cancels to nearly zero for a triplet near the
    margin (an unbatched float32 triplet measured 1.8e-5 relative to its loss)."""
    a64, q64, ng64 = a.double(), q.double(), ng.double()
    terms = F.pairwise_distance(a64, q64, p, eps) + F.pairwise_distance(a64, ng64, p, eps) + margin
    if swap:
        terms = terms + F.pairwise_distance(q64, ng64, p, eps)
    return _reduce(terms, reduction)


def _elementwise_cases():
    yield "mse", lambda p, t, r: loss.mse_loss(p, t, r), lambda p, t, r: F.mse_loss(p, t, reduction=r)
    yield "l1", lambda p, t, r: loss.l1_loss(p, t, r), lambda p, t, r: F.l1_loss(p, t, reduction=r)
    yield ("smooth_l1", lambda p, t, r: loss.smooth_l1_loss(p, t, 0.5, r),
           lambda p, t, r: F.smooth_l1_loss(p, t, reduction=r, beta=0.5))
    yield ("smooth_l1 beta=0", lambda p, t, r: loss.smooth_l1_loss(p, t, 0.0, r),
           lambda p, t, r: F.smooth_l1_loss(p, t, reduction=r, beta=0.0))
    yield ("huber", lambda p, t, r: loss.huber_loss(p, t, 0.7, r),
           lambda p, t, r: F.huber_loss(p, t, reduction=r, delta=0.7))
    yield ("hinge", lambda p, t, r: loss.hinge_loss(p, t.sign(), r),
           lambda p, t, r: _reduce(torch.clamp(1 - p * t.sign(), min=0), r))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_elementwise_losses(dtype, reduction):
    for shape in SHAPES:
        for name, ours, ref in _elementwise_cases():
            seed = fresh_seed()
            p, t = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype)
            out = ours(p, t, reduction)
            expect = ref(p.double(), t.double(), reduction)
            assert out.shape == expect.shape and out.dtype == dtype, name
            check(out, expect, dtype, seed, f"{name} {shape} reduction={reduction}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum", "none"])
def test_kl_div(dtype, reduction):
    for shape in SHAPES:
        seed = fresh_seed()
        lp = torch.log_softmax(randn(*shape, dtype=torch.float32), -1).to(dtype)
        tp = torch.softmax(randn(*shape, dtype=torch.float32) * 2, -1)
        tp[..., 0] = 0.0  # zero targets contribute nothing (0 * log 0 = 0)
        tp = tp.to(dtype)
        out = loss.kl_div(lp, tp, reduction)
        check(out, F.kl_div(lp.double(), tp.double(), reduction=reduction), dtype, seed, f"kl_div {shape} {reduction}")
        out = loss.kl_div(lp, tp.clamp_min(1e-3).log(), reduction, log_target=True)
        ref = F.kl_div(lp.double(), tp.clamp_min(1e-3).log().double(), reduction=reduction, log_target=True)
        check(out, ref, dtype, seed, f"kl_div log_target {shape} {reduction}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_and_nll(dtype, reduction):
    for n, c in ([(4093, 32000), (1, 77)] if ON_GPU else [(13, 37), (1, 5), (70, 20)]):
        seed = fresh_seed()
        x = randn(n, c, dtype=dtype, scale=3.0)
        tgt = torch.randint(0, c, (n,), device=DEVICE)
        if n > 2:
            tgt[1] = -100  # ignored rows count neither in the sum nor in the mean's denominator
        out = loss.cross_entropy(x, tgt, reduction)
        check(out, F.cross_entropy(x.double(), tgt, reduction=reduction), dtype, seed, f"cross_entropy {n}x{c}",
              scale=_cross_entropy_terms(x, tgt, reduction))
        lp = torch.log_softmax(x.double(), 1).to(dtype)
        out = loss.nll_loss(lp, tgt, reduction)
        check(out, F.nll_loss(lp.double(), tgt, reduction=reduction), dtype, seed, f"nll {n}x{c}")
    seed = fresh_seed()
    x = randn(9, dtype=dtype)
    check(loss.cross_entropy(x, torch.tensor(4, device=DEVICE), reduction),
          F.cross_entropy(x.double(), torch.tensor(4, device=DEVICE), reduction=reduction), dtype, seed, "unbatched")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cosine_similarity_loss(dtype, reduction):
    for shape, dim in (((13, 37), 1), ((3, 21, 5), 1), ((4, 6, 19), -1)):
        seed = fresh_seed()
        p, t = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype)
        p[0] = 0  # a zero row meets the eps clamp
        out = loss.cosine_similarity_loss(p, t, dim, 1e-8, reduction)
        ref = _reduce(1 - F.cosine_similarity(p.double(), t.double(), dim=dim), reduction)
        assert out.shape == ref.shape
        check(out, ref, dtype, seed, f"cosine {shape} dim={dim} {reduction}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_triplet_margin_loss(dtype, reduction):
    for (n, d), p, swap in (((13, 37), 2, False), ((9, 21), 1, True), ((5, 17), 3.0, True), ((11, 40), 2, True)):
        seed = fresh_seed()
        a, q, ng = randn(n, d, dtype=dtype), randn(n, d, dtype=dtype), randn(n, d, dtype=dtype)
        q = (a.float() + 0.3 * q.float()).to(dtype)  # some triplets inside the margin, some outside
        out = loss.triplet_margin_loss(a, q, ng, 1.5, p, 1e-6, swap, reduction)
        ref = F.triplet_margin_loss(a.double(), q.double(), ng.double(), margin=1.5, p=p, swap=swap,
                                    reduction=reduction)
        check(out, ref, dtype, seed, f"triplet {n}x{d} p={p} swap={swap} {reduction}",
              scale=_triplet_terms(a, q, ng, 1.5, p, 1e-6, swap, reduction))
    seed = fresh_seed()
    a, q, ng = (randn(19, dtype=dtype) for _ in range(3))
    check(loss.triplet_margin_loss(a, q, ng), F.triplet_margin_loss(a.double(), q.double(), ng.double()), dtype,
          seed, "unbatched triplet", scale=_triplet_terms(a, q, ng, 1.0, 2, 1e-6, False, "mean"))


def test_reductions_are_deterministic_and_use_many_partials():
    seed = fresh_seed()
    n = 5000 if not ON_GPU else 50_000_000
    p, t = randn(n, dtype=torch.float32), randn(n, dtype=torch.float32)
    pols = loss.mse_loss_policies((n,), "interpret" if not ON_GPU else "cuda")
    per = pols["loss_partial_kernel"].const("BLOCK") * pols["loss_partial_kernel"].const("CHUNK")
    assert -(-n // per) > 16, "the stage-two kernel must sum many partials"
    first = loss.mse_loss(p, t)
    for _ in range(2):
        assert torch.equal(loss.mse_loss(p, t), first), f"mse_loss is not deterministic (seed {seed})"
    check(first, F.mse_loss(p.double(), t.double()), torch.float32, seed, "mse over many partials")


def test_policies_and_kernel_substitution():
    for pols in (loss.mse_loss_policies((7, 45), "cuda"), loss.cross_entropy_policies((13, 37), "interpret"),
                 loss.cosine_similarity_loss_policies((13, 37), 1, "cuda"),
                 loss.triplet_margin_loss_policies((13, 37), "hip")):
        names = {k.name for k in loss.KERNELS}
        assert set(pols) <= names and {"loss_partial_kernel", "sum_partials_kernel"} <= set(pols)
    seed = fresh_seed()
    x, tgt = randn(13, 37, dtype=torch.float32), torch.randint(0, 37, (13,), device=DEVICE)
    small = {"cross_entropy_kernel": Policy.make(BR=2, BC=8), "loss_partial_kernel": Policy.make(BLOCK=4, CHUNK=1),
             "sum_partials_kernel": Policy.make(BLOCK=2)}
    check(loss.cross_entropy(x, tgt, policies=small), F.cross_entropy(x.double(), tgt), torch.float32, seed,
          "cross_entropy with policy overrides")
    calls: list[str] = []

    class Spy:
        name = "sum_partials_kernel"

        def __call__(self, *args, policy, target):
            calls.append(target)
            loss.sum_partials_kernel(*args, policy=policy, target=target)

    p, t = randn(7, 45, dtype=torch.float32), randn(7, 45, dtype=torch.float32)
    out = loss.mse_loss(p, t, kernels={"sum_partials_kernel": Spy()})
    assert len(calls) == 1
    check(out, F.mse_loss(p.double(), t.double()), torch.float32, seed, "mse with a substituted kernel")


@pytest.mark.parametrize("call,match", [
    (lambda p, t, i: loss.mse_loss(p, t, "avg"), "reduction must be one of"),
    (lambda p, t, i: loss.mse_loss(p, t[:, :3]), "do not broadcast"),
    (lambda p, t, i: loss.l1_loss(p, t.to(torch.int32)), "floating-point"),
    (lambda p, t, i: loss.smooth_l1_loss(p, t, beta=-1.0), "beta"),
    (lambda p, t, i: loss.huber_loss(p, t, delta=0.0), "delta"),
    (lambda p, t, i: loss.kl_div(p, t, "batchsum"), "reduction"),
    (lambda p, t, i: loss.cross_entropy(p, i + 100), "outside"),
    (lambda p, t, i: loss.cross_entropy(p, i.to(torch.int32)), "int64"),
    (lambda p, t, i: loss.cross_entropy(p, i[:3]), "expected input"),
    (lambda p, t, i: loss.nll_loss(p[None], i), "expected input"),
    (lambda p, t, i: loss.cosine_similarity_loss(p, t, dim=2), "out of range"),
    (lambda p, t, i: loss.triplet_margin_loss(p, t, t[:2]), "share one"),
    (lambda p, t, i: loss.triplet_margin_loss(p, t, t, p=0), "p must be"),
])
def test_bad_input_gives_value_error(call, match):
    p, t = torch.randn(6, 9, device=DEVICE), torch.randn(6, 9, device=DEVICE)
    idx = torch.randint(0, 9, (6,), device=DEVICE)
    with pytest.raises(ValueError, match=match):
        call(p, t, idx)
