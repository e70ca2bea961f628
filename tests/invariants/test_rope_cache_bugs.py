"""The decode step's rotation and KV-cache write (rope_cache_write) proves at Llama's and small ragged shapes and over
symbolic ones, and planted bugs are rejected at their line: the rotated half's element stored at its own place (the
tag that moves it to rd's dropped: a coordinate mix-up), the cache position's range mask dropped (a loaded position
can be anything: out of bounds), the write one position late (out of bounds at the cache's end), two key heads
written to one row (written twice), q's output one column off, the key/value heads' programs counted from one
(the last head's read past the end, the first's never written)."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy
from argus_inductor.invariants import verify
from argus_inductor.kernels.rotary import rope_cache_write

from .planted import assert_planted_bug_rejected

CASES = [(dict(BD=128), dict(Z=1, H=32, HK=8, S=1, D=128, L=1040)), (dict(BD=16), dict(Z=3, H=6, HK=3, S=1, D=10, L=7))]


@pytest.mark.parametrize("pol,shapes", CASES, ids=["llama", "ragged"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
def test_rope_cache_kernel_proves(pol: dict, shapes: dict, symbolic: bool) -> None:
    res = verify(rope_cache_write, Policy.make(**pol), None if symbolic else shapes)
    assert res.ok and res.proved, res.text()


BUGS = [
    ("q_half = tag(load(Q[z, h, 0, partner]), D=rd)", "q_half = load(Q[z, h, 0, partner])", "store(QO[z, h, 0, rd]"),
    ("k_half.to(float32) * sn, mask=inside)", "k_half.to(float32) * sn)", "store(KC[z, hk, p, rd]"),
    ("store(VC[z, hk, p, rd], load(V[z, hk, 0, rd]), mask=inside)",
     "store(VC[z, hk, p + 1, rd], load(V[z, hk, 0, rd]), mask=inside)", "store(VC[z, hk, p + 1, rd]"),
    ("store(KC[z, hk, p, rd]", "store(KC[z, hk // 2, p, rd]", "store(KC[z, hk // 2, p, rd]"),
    ("store(QO[z, h, 0, rd]", "store(QO[z, h, 0, rd + 1]", "store(QO[z, h, 0, rd + 1]"),
    ("hk = h - H", "hk = h - H + 1", "hk = h - H + 1"),
]


@pytest.mark.parametrize("old,new,line", BUGS, ids=[b[1] for b in BUGS])
def test_planted_rope_cache_bug_is_rejected_at_its_line(old: str, new: str, line: str) -> None:
    pol, shapes = CASES[1]
    assert_planted_bug_rejected(rope_cache_write, Policy.make(**pol), shapes, old, new, line, "rotary.py")
