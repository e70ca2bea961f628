"""The MoE router's fused top-k (argus_inductor.kernels.router) against torch's softmax, topk and renormalization
in float64: the same experts in the same order, weights by relative error, at odd token and expert counts, fp32 and
bf16 logits, with and without renormalization; bad inputs are refused with a message."""
from __future__ import annotations

import pytest
import torch

from argus_inductor.kernels.router import router_reference, router_topk

from ._support import DEVICE, DTYPES, ON_GPU, check, fresh_seed, randn

CASES = [(1, 8, 2, True), (13, 8, 2, True), (37, 60, 4, False), (5, 5, 5, True), (9, 3, 1, False),
         (21, 128, 8, True)] + ([(4096, 8, 2, True), (2048, 64, 6, False)] if ON_GPU else [])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,e,k,renorm", CASES, ids=[f"T{c[0]}-E{c[1]}-k{c[2]}-{'renorm' if c[3] else 'raw'}"
                                                       for c in CASES])
def test_router_topk_matches_torch(t: int, e: int, k: int, renorm: bool, dtype: torch.dtype) -> None:
    seed = fresh_seed()
    logits = randn(t, e, dtype=dtype, scale=3.0)
    out = router_topk(logits, k, renorm)
    assert out.shape == (t, 2 * k) and out.dtype == torch.float32
    probs = torch.softmax(logits.double(), -1)
    vals, ids = torch.topk(probs, k, dim=-1)
    if renorm:
        vals = vals / vals.sum(-1, keepdim=True)
    ours = out[:, k:].long()
    # the experts picked carry the top-k probabilities in order (bf16 logits can tie, and a tie may pick either)
    check(torch.gather(probs, 1, ours), torch.topk(probs, k, dim=-1).values, torch.float32, seed, "router experts")
    if dtype == torch.float32:  # no ties among random fp32 logits: torch's experts in torch's order
        assert torch.equal(ours.cpu(), ids.cpu()), f"experts differ (seed {seed})"
    assert all(len(set(r)) == k for r in ours.tolist()), f"an expert picked twice (seed {seed})"
    check(out[:, :k], vals, torch.float32, seed, "router weights")
    if renorm:
        torch.testing.assert_close(out[:, :k].sum(-1).cpu(), torch.ones(t, dtype=torch.float32))


def test_router_reference_packs_as_the_kernel_does() -> None:
    logits = randn(6, 8, dtype=torch.float32)
    torch.testing.assert_close(router_topk(logits, 2, True), router_reference(logits, 2, True), rtol=1e-5, atol=1e-6)


def test_a_tie_goes_to_the_lower_expert() -> None:
    logits = torch.tensor([[0.0, 2.0, 2.0, 1.0, 2.0]], device=DEVICE)
    out = router_topk(logits, 3, False)
    assert out[0, 3:].tolist() == [1.0, 2.0, 4.0]


@pytest.mark.parametrize("logits,k,match", [
    (torch.zeros(4, 8, 2), 2, "takes \\(tokens, experts\\)"),
    (torch.zeros(4, 8, dtype=torch.int64), 2, "float logits"),
    (torch.zeros(4, 8), 9, "1 <= k"),
    (torch.zeros(4, 8), 0, "1 <= k"),
    (torch.zeros(4, 300), 2, "at most 256"),
])
def test_bad_inputs_are_refused(logits: torch.Tensor, k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        router_topk(logits.to(DEVICE), k, True)


def test_no_tokens_gives_an_empty_result() -> None:
    assert router_topk(torch.zeros(0, 8, device=DEVICE), 2, True).shape == (0, 4)


def test_a_tile_narrower_than_the_experts_is_refused_and_not_proved() -> None:
    """A policy whose tile holds fewer experts than the router has (BE=4 of 8: the softmax would miss half of them)
    is refused at launch, and the plan's verification at the router's own shape reports it."""
    from argus_inductor import ops
    from argus_inductor.dsl import Policy
    from argus_inductor.ops.library import canonical_args, library_signature

    logits = randn(5, 8, dtype=torch.float32)
    narrow = {"BT": 4, "BE": 4, "K": 2, "BK": 2, "RENORM": 1}
    with pytest.raises(ValueError, match="BE=4, BK=2 for 8 experts"):
        router_topk(logits, 2, True, policies={"router_topk_rows": Policy.make(**narrow)})
    sig = library_signature("router_topk", [logits], canonical_args({"k": 2, "renorm": True}))
    assert ops.make_entry(sig, {"router_topk_rows": narrow}, verify=True).verification["status"] == "violations"
    wide = {**narrow, "BE": 8}
    assert ops.make_entry(sig, {"router_topk_rows": wide}, verify=True).verification["status"] == "verified"
