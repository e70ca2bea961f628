"""The matchers on small Dynamo graphs: every form of attention, gate*up, residual epilogues; what they
must leave alone. Each rewritten graph is run (kernels under the interpreter) against eager."""
from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from argus_inductor.graph import rewrite
from argus_inductor.kernels.rotary import rotate_half
from argus_inductor.runtime import reporting as report_mod

from .graphs import capture

ALL = ("gemm", "attention", "moe")


def _check(fn: Callable, *args: torch.Tensor, kinds: list[str], tol: float = 1e-4) -> list:
    report_mod.clear()
    gm, inputs = capture(fn, *args)
    matches = rewrite(gm, ALL)
    assert sorted(m.kind for m in matches) == sorted(kinds), [(m.kind, m.nodes) for m in matches]
    with torch.no_grad():
        out = gm(*inputs)
        ref = fn(*args)
    ref = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    torch.testing.assert_close(tuple(out), ref, rtol=tol, atol=tol)
    return matches


def _qkv(z=2, h=4, hk=2, s=7, t=7, d=16):
    torch.manual_seed(0)
    return torch.randn(z, h, s, d), torch.randn(z, hk, t, d), torch.randn(z, hk, t, d)


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:  # as transformers writes it
    b, hk, s, d = x.shape
    return x[:, :, None, :, :].expand(b, hk, n, s, d).reshape(b, hk * n, s, d)


@pytest.mark.parametrize("form", ["positional", "keywords", "scale", "gqa", "repeat_kv", "three_d"])
def test_sdpa_forms(form: str) -> None:
    q, k, v = _qkv()
    if form == "positional":
        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, 1),
                                                  None, 0.0, True)
    elif form == "keywords":
        def f(q, k, v):
            return F.scaled_dot_product_attention(query=q, key=k, value=v, is_causal=False, enable_gqa=True)
    elif form == "scale":
        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    elif form == "gqa":
        q, k, v = _qkv(h=8, hk=1, s=5, t=9)

        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    elif form == "repeat_kv":
        def f(q, k, v):
            return F.scaled_dot_product_attention(q, _repeat_kv(k, 2), _repeat_kv(v, 2), is_causal=True)
    else:
        q, k, v = (t[0] for t in _qkv(h=3, hk=3))

        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    _check(f, q, k, v, kinds=["attention"])
    assert report_mod.entries()[0].source.startswith("default")
    if form in ("positional", "repeat_kv"):  # the repetition is looked through: the kernel reads HK heads
        assert "gqa2" in report_mod.entries()[0].signature


@pytest.mark.parametrize("mask", ["bool_causal", "float_causal", "all_visible", "padding"])
def test_sdpa_with_a_mask_runs_argus(mask: str) -> None:
    q, k, v = _qkv()
    s = q.shape[2]
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    m = {"bool_causal": causal[None, None].expand(2, 1, s, s),
         "float_causal": torch.zeros(s, s).masked_fill(~causal, torch.finfo(torch.float32).min),
         "all_visible": torch.zeros(2, 1, 1, s),
         "padding": torch.ones(2, 1, s, s, dtype=torch.bool).index_fill_(3, torch.tensor([0]), False)}[mask]

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, _repeat_kv(k, 2), _repeat_kv(v, 2), attn_mask=m)

    _check(f, q, k, v, m, kinds=["attention"])
    src = report_mod.entries()[0].source  # any mask runs the kernel, which reads it (no host-side inspection)
    assert src.startswith("default"), src
    assert "mask" in report_mod.entries()[0].signature


def _eager_attention(q, k, v, mask=None, scaling=None, rep="expand", dtype_cast=True, div=False):
    n = q.shape[1] // k.shape[1]
    if rep == "expand":
        k, v = _repeat_kv(k, n), _repeat_kv(v, n)
    else:
        k, v = torch.repeat_interleave(k, n, dim=1), v.repeat_interleave(n, dim=1)
    if div:
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    else:
        w = torch.matmul(q, k.transpose(2, 3)) * scaling
    if mask is not None:
        w = w + mask
    if dtype_cast:
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    else:
        w = w.softmax(-1)
    w = F.dropout(w, p=0.0, training=False)
    return torch.matmul(w, v).transpose(1, 2).contiguous()


@pytest.mark.parametrize("variant", ["causal_expand", "no_mask_interleave", "div_scale", "method_softmax"])
def test_hand_written_attention_with_gqa_repetition(variant: str) -> None:
    q, k, v = _qkv()
    s = q.shape[2]
    causal = torch.zeros(2, 1, s, s).masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), -1e38)
    if variant == "causal_expand":
        def f(q, k, v, m):
            return _eager_attention(q, k, v, m, scaling=0.25)
        args = (q, k, v, causal)
    elif variant == "no_mask_interleave":
        def f(q, k, v):
            return _eager_attention(q, k, v, scaling=0.25, rep="interleave")
        args = (q, k, v)
    elif variant == "div_scale":
        def f(q, k, v, m):
            return _eager_attention(q, k, v, m, div=True)
        args = (q, k, v, causal)
    else:
        def f(q, k, v):
            return _eager_attention(q, k, v, scaling=0.5, dtype_cast=False)
        args = (q, k, v)
    matches = _check(f, *args, kinds=["attention"])
    assert len(matches[0].nodes) >= 5  # matmul, scale, [mask,] softmax, [cast, dropout,] matmul
    e = report_mod.entries()[0]
    assert e.source.startswith("default") and "gqa2" in e.signature
    assert ("mask" in e.signature) == (variant in ("causal_expand", "div_scale"))  # the kernel applies the mask


def test_hand_written_attention_whose_weights_are_also_returned_is_not_fused() -> None:
    """The weights are an output, so no attention kernel may swallow them: the two products stay two batched
    GEMMs (one argus::bmm each over the flattened batch) and the softmax between them stays aten."""
    q, k, v = _qkv(hk=4)

    def f(q, k, v):
        w = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
        return w @ v, w

    _check(f, q, k, v, kinds=["bmm", "bmm"])


def test_gate_up_and_residual_epilogues() -> None:
    torch.manual_seed(0)
    x, r = torch.randn(2, 5, 24), torch.randn(2, 5, 24)
    wg, wu, wd = torch.randn(40, 24), torch.randn(40, 24), torch.randn(24, 40)
    b = torch.randn(24)

    def mlp(x, r, wg, wu, wd, b):
        h = F.linear(x, wu) * F.gelu(F.linear(x, wg), approximate="tanh")  # up * act(gate): either order
        return r + F.relu(F.linear(h, wd, b))

    matches = _check(mlp, x, r, wg, wu, wd, b, kinds=["gemm", "gemm"], tol=1e-3)
    sigs = sorted(e.signature.split("(")[0] for e in report_mod.entries())
    assert sigs == ["gemm[bias+relu+residual]", "gemm[gelu_tanh*up]"], sigs
    assert len(matches[0].nodes) == 4 and len(matches[1].nodes) == 3


def test_broadcast_adds_and_shared_intermediates_are_not_fused() -> None:
    torch.manual_seed(0)
    x, w, bias_like = torch.randn(6, 24), torch.randn(24, 24), torch.randn(24)

    def f(x, w, bias_like):
        y = F.linear(x, w)
        g = F.silu(F.linear(x, w))
        return y + bias_like, g * F.linear(x, w), g  # g has two users: no gate*up fusion

    _check(f, x, w, bias_like, kinds=["gemm", "gemm", "gemm"])
    assert sorted(e.signature.split("(")[0] for e in report_mod.entries()) == ["gemm", "gemm", "gemm[silu]"]


def test_in_place_updates_survive_the_rewrite() -> None:
    """Dynamo records x[..., :4].copy_(y) as a node nobody uses; it must not be dropped as dead code."""
    torch.manual_seed(0)
    a, w = torch.randn(3, 8), torch.randn(8, 8)

    def f(a, w):
        out = torch.zeros(3, 8)
        out[:, :4].copy_(a[:, 4:])
        return F.linear(a, w) + out

    _check(f, a, w, kinds=["gemm"])


@pytest.mark.parametrize("eq,shapes,kinds", [
    ("bijl,lk->bijk", ((2, 3, 5, 16), (16, 7)), ["gemm"]),          # 4-D tensor times a matrix
    ("bik,bkj->bij", ((3, 5, 16), (3, 16, 7)), ["bmm"]),            # batched
    ("ij,kj->ik", ((5, 16), (7, 16)), []),                          # B transposed: left to Inductor
    ("ij,ij->i", ((5, 16), (5, 16)), []),                           # not a matmul
])
def test_einsum_matmuls_are_gemms(eq, shapes, kinds) -> None:
    torch.manual_seed(0)
    a, b = (torch.randn(*s) for s in shapes)

    def f(a, b):
        return torch.einsum(eq, a, b)

    _check(f, a, b, kinds=kinds)


@pytest.mark.parametrize("shapes", [((4, 1, 8, 16), (1, 3, 16, 8)), ((8, 16), (3, 16, 8)),
                                    ((2, 3, 8, 16), (2, 3, 16, 4)), ((2, 8, 16), (1, 16, 8))],
                         ids=["both-broadcast", "matrix-times-batch", "4d-same-batch", "3d-broadcast"])
def test_matmuls_whose_batch_dims_broadcast_are_one_bmm(shapes) -> None:
    """(4, 1, M, K) @ (1, 3, K, N): one argus::bmm over the broadcast batch flattened (the operands broadcast and
    reshaped in the graph, the output viewed back), the values torch.matmul's."""
    torch.manual_seed(0)
    a, b = (torch.randn(*s) for s in shapes)
    _check(torch.matmul, a, b, kinds=["bmm"])
    gm, _ = capture(torch.matmul, a, b)
    rewrite(gm, ALL)
    ops = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.argus.bmm.default]
    assert len(ops) == 1 and all(a.meta["val"].dim() == 3 for a in ops[0].args[:2]), gm.graph


def test_outer_products_are_left_to_inductor() -> None:
    """A reduced dim of 1 (rotary embeddings' inv_freq @ position_ids) is one multiply an element: no GEMM op, and
    a matmul or bmm of that form becomes the broadcast multiply, which Inductor fuses into the cos and sin that read
    it (bitwise the same values). A K of 2 still is a GEMM."""
    import operator

    torch.manual_seed(0)
    inv_freq, pos = torch.rand(8), torch.arange(12.0)

    def rope(inv_freq, pos):
        freqs = inv_freq[None, :, None] @ pos[None, None, :]     # (1, 8, 1) @ (1, 1, 12): matmul of K = 1
        emb = torch.cat((freqs, freqs), 1)
        return emb.cos() + torch.bmm(inv_freq[None, :, None], pos[None, None, :]).sin().sum()

    _check(rope, inv_freq, pos, kinds=[])
    gm, inputs = capture(rope, inv_freq, pos)
    rewrite(gm, ALL)
    targets = [n.target for n in gm.graph.nodes]
    assert not {torch.matmul, torch.bmm, operator.matmul} & set(targets), targets
    assert targets.count(torch.mul) == 2
    assert torch.equal(gm(*inputs)[0], rope(inv_freq, pos))

    def k2(a, b):
        return torch.bmm(a, b).cos()

    _check(k2, torch.randn(2, 5, 2), torch.randn(2, 2, 7), kinds=["bmm"])
    for f in (lambda a, b: a @ b, lambda a, b: F.linear(a, b.t()), lambda a, b: torch.addmm(b[0], a, b)):
        _check(f, torch.randn(6, 1), torch.randn(1, 5), kinds=[])


def test_nothing_under_autocast_is_matched() -> None:
    """Autocast runs a matmul in its own dtype (float32 operands, a bfloat16 product); an Argus op has no autocast
    kernel and returned float32 there (a linear and the outer-product rewrite both did). Inside an enabled autocast
    region nothing is matched; outside it, and inside a nested disabled region, the GEMMs are."""
    torch.manual_seed(0)
    x, w, a, b = torch.randn(32, 64), torch.randn(48, 64), torch.randn(4, 8, 1), torch.randn(4, 1, 16)
    q = torch.randn(2, 4, 8, 16)

    def f(x, w, a, b, q):
        y0 = F.linear(x, w)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.linear(x, w)
            z = torch.bmm(a, b)
            e = torch.einsum("ik,kn->in", x, w.t())
            o = F.scaled_dot_product_attention(q, q, q)
            with torch.autocast("cpu", enabled=False):
                u = F.linear(x, w)
        return y0, y, z, e, o, u

    _check(f, x, w, a, b, q, kinds=["gemm", "gemm"])  # assert_close checks each output's dtype too


def _rope_operands(s: int = 1) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    ang = torch.randn(1, 1, s, 4)
    ang = torch.cat((ang, ang), -1)
    return (torch.randn(2, 4, s, 8), torch.randn(2, 2, s, 8), torch.randn(2, 2, s, 8), ang.cos(), ang.sin(),
            torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8), torch.tensor([3] if s == 1 else [2, 3]))


def _cache_result(fn: Callable, args: tuple[torch.Tensor, ...], kinds: list[str]) -> None:
    """fn's rewritten graph against eager, on copies of the caches: the result and both caches."""
    report_mod.clear()
    mine = [a.clone() for a in args]
    gm, inputs = capture(fn, *mine)
    assert sorted(m.kind for m in rewrite(gm, ALL)) == kinds
    theirs = [a.clone() for a in args]
    position = {id(a): i for i, a in enumerate(mine)}
    fresh = [a.clone() for a in args]
    with torch.no_grad():
        out = gm(*[fresh[position[id(a)]] for a in inputs])
        ref = fn(*theirs)
    torch.testing.assert_close(out[0], ref[0] if isinstance(ref, tuple) else ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fresh[5], theirs[5], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fresh[6], theirs[6], rtol=1e-5, atol=1e-5)


def test_a_decode_steps_rotation_and_cache_writes_become_one_op() -> None:
    def step(q, k, v, cos, sin, keys, values, index):
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (cos * k) + (sin * rotate_half(k))  # the products in the other order
        keys.index_copy_(2, index, k_embed)
        values.index_copy_(2, index, v)
        return q_embed

    _cache_result(step, _rope_operands(), ["rope_cache"])


def test_what_the_rope_cache_matcher_must_leave_alone() -> None:
    """A read of a cache between the two writes (moving the second write before it would change what it reads),
    two positions a step (a prefill into the cache), the two caches written at different positions, a rotation
    of only part of the head (cat with a pass-through part): each stays Inductor's and matches eager."""
    def read_between(q, k, v, cos, sin, keys, values, index):
        q_embed = q * cos + rotate_half(q) * sin
        keys.index_copy_(2, index, k * cos + rotate_half(k) * sin)
        before = values.sum()
        values.index_copy_(2, index, v)
        return q_embed, before

    def two_positions(q, k, v, cos, sin, keys, values, index):
        q_embed = q * cos + rotate_half(q) * sin
        keys.index_copy_(2, index, k * cos + rotate_half(k) * sin)
        values.index_copy_(2, index, v)
        return q_embed

    def other_position(q, k, v, cos, sin, keys, values, index):
        q_embed = q * cos + rotate_half(q) * sin
        keys.index_copy_(2, index, k * cos + rotate_half(k) * sin)
        values.index_copy_(2, index + 1, v)
        return q_embed

    def partial(q, k, v, cos, sin, keys, values, index):
        c, s = cos[..., :4], sin[..., :4]
        q_embed = torch.cat((q[..., :4] * c + rotate_half(q[..., :4]) * s, q[..., 4:]), -1)
        k_embed = torch.cat((k[..., :4] * c + rotate_half(k[..., :4]) * s, k[..., 4:]), -1)
        keys.index_copy_(2, index, k_embed)
        values.index_copy_(2, index, v)
        return q_embed

    for fn, s in ((read_between, 1), (two_positions, 2), (other_position, 1), (partial, 1)):
        _cache_result(fn, _rope_operands(s), [])
