"""The library kernels carry their own invariants as tag assertions: planting a bug in a library kernel's
source makes the checker reject it at the right line (and the unmodified source proves)."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify

from .planted import assert_flags_one_of, first_line
from .suite import LIBRARY, library_kernels

BUGS = [
    ("attention_fwd", "hk = h // (H // HK)", "hk = h % HK", "assert_tag((tag_of(k, \"HK\")"),
    ("attention_fwd", "visible = (rn[None, :] < T) & ((CAUSAL == 0) | (rn[None, :] <= rm[:, None]))",
     "visible = rn[None, :] < T", "on the diagonal never looks ahead"),
    ("attention_fwd", "lo = minimum(lo, pm * BM // BN * BN)", "lo = minimum(lo, (pm + 1) * BM)", "\"a causal score never looks ahead"),
    ("moe_gate_up", "wu = load(W1[e, rn + I, rk])", "wu = load(W1[e, rn + I - 1, rk])", "assert_tag(tag_of(wu"),
    ("moe_down", "w = load(topk_weights[pair]).to(float32)", "w = load(topk_weights[rp]).to(float32)",
     "assert_tag(tag_of(y, \"TK\")"),
    ("moe_gather", "x = load(X[pair // TOPK, rk])", "x = load(X[pair % TOPK, rk])", "assert_tag(tag_of(x, \"T\")"),
    ("moe_gather", "pair = load(sorted_ids[rp])", "pair = load(sorted_ids[rp + 1])", "assert_tag(tag_of(x, \"T\")"),
]


def _source(name: str) -> str:
    return "from argus_inductor.dsl import *\n" + library_kernels()[name].ir.source


def _verify(name: str, text: str):
    pol, shapes, pre = LIBRARY[name]
    k = kernels_from_source(text, filename=f"{name}.py")[name]
    return verify(k, Policy.make(**pol), shapes, assumptions=pre)


@pytest.mark.parametrize("name,old,new,assertion", BUGS, ids=[f"{b[0]}:{b[2]}" for b in BUGS])
def test_library_assertion_catches_planted_bug(name, old, new, assertion):
    text = _source(name)
    assert old in text, f"{name} changed: update this test"
    assert _verify(name, text).ok
    bad = text.replace(old, new, 1)
    res = _verify(name, bad)
    assert not res.ok, f"{name} with `{new}` was not rejected"
    assert_flags_one_of(res, {first_line(bad, new.strip()), first_line(bad, assertion)})
    assert "thread" in res.text()


def test_causal_key_block_straddling_the_diagonal_switch_is_caught():
    """With key blocks wider than query blocks (BN=64 > BM=32), an unmasked loop that runs to pm * BM overlaps the
    diagonal loop: the checker shows a key counted twice and a future key seen. The template rounds the switch
    down to a key-block boundary and proves."""
    text = _source("attention_fwd")
    fixed = "lo = minimum(lo, pm * BM // BN * BN)"
    assert fixed in text
    shapes = dict(Z=1, H=2, HK=1, S=300, T=300, D=64)
    pol = Policy.make(BM=32, BN=64, BD=64, CAUSAL=1)
    ok = verify(kernels_from_source(text)["attention_fwd"], pol, shapes, assumptions=["H % HK == 0", "D <= BD"])
    assert ok.ok, ok.text()
    bad = text.replace(fixed, "lo = minimum(lo, pm * BM)")
    res = verify(kernels_from_source(bad)["attention_fwd"], pol, shapes, assumptions=["H % HK == 0", "D <= BD"])
    assert not res.ok
    kinds = {v.kind for v in res.violations}
    assert {"assert-tag", "reduction-once"} <= kinds, kinds
    assert "counted twice" in res.text() and "never looks ahead" in res.text()


def test_gathered_gate_up_reads_each_slots_own_row():
    """moe_gate_up with GATHERED=1 reads the rows moe_gather laid out in sorted order (X has P rows): it proves, and
    reading the next slot's row instead is caught at the load or its assertion."""
    pol, shapes, pre = LIBRARY["moe_gate_up"]
    policy = Policy.make(**pol, GATHERED=1)
    shapes = {**shapes, "T": shapes["P"]}
    text = _source("moe_gate_up")
    res = verify(kernels_from_source(text)["moe_gate_up"], policy, shapes, assumptions=[*pre, "T == P"])
    assert res.ok, res.text()
    old = "x = load(X[rp, rk])"
    assert old in text
    bad = text.replace(old, "x = load(X[rp + 1, rk])", 1)
    res = verify(kernels_from_source(bad)["moe_gate_up"], policy, shapes, assumptions=[*pre, "T == P"])
    assert not res.ok
    assert_flags_one_of(res, {first_line(bad, "x = load(X[rp + 1, rk])"),
                              first_line(bad, "assert_tag(tag_of(x, \"T\") == rp")})
