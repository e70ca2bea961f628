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
    ("attention_fwd", "visible = (rn[None, :] < T) & (rn[None, :] <= rm[:, None])", "visible = rn[None, :] < T",
     "assert_tag(tag_of(s, \"T\") <= tag_of(s, \"S\")"),
    ("moe_gate_up", "wu = load(W1[e, rn + I, rk])", "wu = load(W1[e, rn + I - 1, rk])", "assert_tag(tag_of(wu"),
    ("moe_down", "w = load(topk_weights[pair]).to(float32)", "w = load(topk_weights[rp]).to(float32)",
     "assert_tag(tag_of(y, \"TK\")"),
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
