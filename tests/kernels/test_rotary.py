"""The rotary tables' kernel (argus_inductor.kernels.rotary) against torch's cos and sin in float64, at ragged row
counts and widths, from float32 and bf16 angles as large as 2048 positions make them; bad inputs are refused with
a message."""
from __future__ import annotations

import pytest
import torch

from argus_inductor.kernels.rotary import MAX_WIDTH, rotary_reference, rotary_table

from ._support import DEVICE, ON_GPU, check, fresh_seed, randn

CASES = [(1, 13, 16), (2, 5, 24), (7, 8), (3, 1, 128), (1, 33, 6)] + ([(1, 2048, 128), (8, 512, 64)] if ON_GPU else [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", CASES, ids=["x".join(map(str, c)) for c in CASES])
def test_rotary_table_matches_torch(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    seed = fresh_seed()
    emb = randn(*shape, dtype=dtype, scale=500.0)  # angles of positions up to a few thousand
    out = rotary_table(emb)
    assert out.shape == (2, *shape) and out.dtype == torch.float32
    want = torch.stack([emb.double().cos(), emb.double().sin()])
    check(out, want, torch.float32, seed, "rotary table")
    assert out.abs().max() <= 1.0 + 1e-6


def test_the_reference_packs_as_the_kernel_does() -> None:
    emb = randn(4, 10, dtype=torch.float32, scale=10.0)
    torch.testing.assert_close(rotary_table(emb), rotary_reference(emb), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad,message", [
    (torch.arange(8, device=DEVICE).view(2, 4), "float tensor of angles"),
    (torch.zeros(2, MAX_WIDTH + 1, device=DEVICE), "rows of 1 to"),
])
def test_bad_inputs_are_refused_with_a_message(bad: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rotary_table(bad)


def test_a_tile_narrower_than_the_rows_is_refused_and_not_proved() -> None:
    """A policy whose tile does not cover a row (BD=64 for 128 angles: half of each row would stay unwritten) is
    refused at launch, and the plan's verification at the table's own shape reports it (it once proved
    vacuously over symbolic sizes and was cached by the library tuner)."""
    import json

    from argus_inductor import ops
    from argus_inductor.dsl import Policy
    from argus_inductor.library_ops import library_signature

    emb = randn(1, 40, 128, dtype=torch.float32, scale=10.0)
    with pytest.raises(ValueError, match="BD=64 for rows of 128"):
        rotary_table(emb, policies={"rotary_table_rows": Policy.make(BR=4, BD=64)})
    sig = library_signature("rotary_table", [emb], json.dumps({}))
    bad = ops.make_entry(sig, {"rotary_table_rows": {"BR": 4, "BD": 64}}, verify=True)
    assert bad.verification["status"] == "violations", bad.verification
    good = ops.make_entry(sig, {"rotary_table_rows": {"BR": 4, "BD": 128}}, verify=True)
    assert good.verification["status"] == "verified", good.verification
