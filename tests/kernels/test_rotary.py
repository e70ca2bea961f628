"""The rotary tables' kernel (argus_inductor.kernels.rotary) against torch's cos and sin in float64, at ragged row
counts and widths, from float32 and bf16 angles as large as 2048 positions make them; bad inputs are refused with
a message."""
from __future__ import annotations

import pytest
import torch

from argus_inductor.kernels.rotary import MAX_WIDTH, rope_cache, rope_cache_reference, rotary_reference, rotary_table

from ._support import DEVICE, ON_GPU, check, fresh_seed, randn, rel_err

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
    from argus_inductor.ops.library import library_signature

    emb = randn(1, 40, 128, dtype=torch.float32, scale=10.0)
    with pytest.raises(ValueError, match="BD=64 for rows of 128"):
        rotary_table(emb, policies={"rotary_table_rows": Policy.make(BR=4, BD=64)})
    sig = library_signature("rotary_table", [emb], json.dumps({}))
    bad = ops.make_entry(sig, {"rotary_table_rows": {"BR": 4, "BD": 64}}, verify=True)
    assert bad.verification["status"] == "violations", bad.verification
    good = ops.make_entry(sig, {"rotary_table_rows": {"BR": 4, "BD": 128}}, verify=True)
    assert good.verification["status"] == "verified", good.verification


# ------------------------------------------------------------------------- decode rotation + KV-cache write

ROPE_CASES = [(1, 4, 2, 8, 6, 1), (2, 8, 2, 16, 5, 1), (3, 6, 3, 10, 7, 3), (2, 4, 4, 64, 9, 2)] + \
    ([(1, 32, 8, 128, 1040, 1), (32, 32, 8, 128, 1040, 1)] if ON_GPU else [])


def _rope_operands(z: int, h: int, hk: int, d: int, length: int, cos_batch: int, dtype: torch.dtype):
    """q, k and v as transformers makes them (head views of one projection's output), cos and sin of random
    angles (batch 1 broadcasts), random caches and a random position."""
    proj = randn(z, 1, (h + 2 * hk) * d, dtype=dtype)
    q = proj[..., :h * d].view(z, 1, h, d).transpose(1, 2)
    k = proj[..., h * d:(h + hk) * d].view(z, 1, hk, d).transpose(1, 2)
    v = proj[..., (h + hk) * d:].view(z, 1, hk, d).transpose(1, 2)
    ang = randn(cos_batch, 1, d // 2, dtype=torch.float32, scale=100.0)
    ang = torch.cat((ang, ang), -1)
    cos, sin = ang.cos().to(dtype).unsqueeze(1), ang.sin().to(dtype).unsqueeze(1)
    keys, values = randn(z, hk, length, d, dtype=dtype), randn(z, hk, length, d, dtype=dtype)
    index = torch.randint(0, length, (1,), device=DEVICE)
    return q, k, v, cos, sin, keys, values, index


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ROPE_CASES, ids=["x".join(map(str, c)) for c in ROPE_CASES])
def test_rope_cache_matches_torch(case: tuple[int, ...], dtype: torch.dtype) -> None:
    """q rotated, and the caches after the write, against the same ops in float64: the written position holds the
    rotated k and the v, every other position is untouched."""
    seed = fresh_seed()
    q, k, v, cos, sin, keys, values, index = _rope_operands(*case, dtype)
    want_keys, want_values = keys.double(), values.double()
    want_q = rope_cache_reference(q.double(), k.double(), v.double(), cos.double(), sin.double(), want_keys,
                                  want_values, index)
    out = rope_cache(q, k, v, cos, sin, keys, values, index)
    assert out.shape == q.shape and out.dtype == dtype and out.stride() == torch.empty_like(q).stride()  # as the fake
    check(out, want_q, dtype, seed, "rotated q")
    check(keys, want_keys, dtype, seed, "key cache")
    assert torch.equal(values.double(), want_values), f"value cache (seed {seed})"


def test_rope_cache_reference_is_transformers_decode_step() -> None:
    """The reference (the aten fallback) does what transformers' apply_rotary_pos_emb and StaticCache do."""
    q, k, v, cos, sin, keys, values, index = _rope_operands(2, 4, 2, 8, 6, 1, torch.float32)
    k2, v2 = keys.clone(), values.clone()
    out = rope_cache_reference(q, k, v, cos, sin, keys, values, index)
    half = q.shape[-1] // 2

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    k2.index_copy_(2, index, k * cos + rotate_half(k) * sin)
    v2.index_copy_(2, index, v)
    assert torch.equal(out, q * cos + rotate_half(q) * sin) and torch.equal(keys, k2) and torch.equal(values, v2)


def test_a_position_outside_the_cache_writes_nothing() -> None:
    q, k, v, cos, sin, keys, values, _ = _rope_operands(1, 4, 2, 8, 6, 1, torch.float32)
    before = keys.clone(), values.clone()
    out = rope_cache(q, k, v, cos, sin, keys, values, torch.tensor([6], device=DEVICE))
    assert torch.equal(keys, before[0]) and torch.equal(values, before[1])
    torch.testing.assert_close(out, rope_cache_reference(q, k, v, cos, sin, keys.clone(), values.clone(),
                                                         torch.tensor([0], device=DEVICE)))


def test_bad_rope_cache_operands_and_a_narrow_policy_are_refused() -> None:
    from argus_inductor.dsl import Policy

    ops = _rope_operands(1, 4, 2, 8, 6, 1, torch.float32)
    q, k, v, cos, sin, keys, values, index = ops
    with pytest.raises(ValueError, match="1 position"):
        rope_cache(q.expand(1, 4, 2, 8), k, v, cos, sin, keys, values, index)
    with pytest.raises(ValueError, match="dtypes"):
        rope_cache(q, k, v, cos, sin, keys.double(), values, index)
    with pytest.raises(ValueError, match="one int64"):
        rope_cache(q, k, v, cos, sin, keys, values, index.int())
    with pytest.raises(ValueError, match="cos must broadcast"):
        rope_cache(q, k, v, cos[..., :4], sin, keys, values, index)
    with pytest.raises(ValueError, match="BD=4 for heads of 8"):
        rope_cache(*ops, policies={"rope_cache_write": Policy.make(BD=4)})


def test_rope_cache_matches_its_reference_within_the_tuners_tolerance() -> None:
    """The reference the tuner and `argus bench` compare with (and the fallback) rounds once, as the kernel does: in
    bf16 on the GPU the two agree far inside the tuner's 2e-3, where eager's per-op roundings differed by up to
    3e-3 (H100, `argus warmup`). Triton 3.6's interpreter stores float32 into bf16 by truncation, not rounding to
    nearest, so here the bound is one bf16 step (2^-7)."""
    q, k, v, cos, sin, keys, values, index = _rope_operands(2, 32, 8, 128, 40, 1, torch.bfloat16)
    k2, v2 = keys.clone(), values.clone()
    out = rope_cache(q, k, v, cos, sin, keys, values, index)
    ref = rope_cache_reference(q, k, v, cos, sin, k2, v2, index)
    bound = 2e-4 if ON_GPU else 2.0 ** -7
    assert rel_err(out, ref) < bound and rel_err(keys, k2) < bound and torch.equal(values, v2)
