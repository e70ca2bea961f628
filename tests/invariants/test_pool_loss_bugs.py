"""The pooling and loss kernels prove at odd concrete shapes, and a bug planted in their source text is
rejected by the checker with a counterexample at the mutated line or at the assertion it breaks."""
from __future__ import annotations

from typing import Any

import pytest

from argus_inductor.dsl import Kernel, Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels import loss, pool

from .planted import assert_flags_one_of, first_line
from .suite import LIBRARY

KERNELS: dict[str, Kernel] = {k.name: k for k in pool.KERNELS + loss.KERNELS}

# kernel: (policy, concrete shapes not multiples of the tiles, preconditions the host guarantees): the suite's
# configurations, plus adaptive pooling, which the suite leaves out (it proves at concrete shapes only)
SPECS: dict[str, tuple[dict[str, Any], dict[str, int], list[str]]] = {
    **{name: LIBRARY[name] for name in KERNELS if name in LIBRARY},
    "adaptive_avg_pool_kernel": (dict(BC=4, BW=8), dict(NC=5, D=3, H=11, W=13, OD=2, OH=3, OW=4), []),
}

# (kernel, text to replace, its replacement, text of the assertion line the bug breaks)
BUGS = [
    ("max_pool_kernel", "iw = rw * SW - PW + kw * DW", "iw = rw - PW + kw * DW",
     "assert_tag((tag_of(v, \"W\") >="),
    ("max_pool_kernel", "ih = oh * SH - PH + kh * DH", "ih = oh * SH + PH + kh * DH",
     "assert_tag((tag_of(v, \"H\") >="),
    ("max_pool_kernel", "iw = rw * SW - PW + kw * DW", "iw = rw * SW - PW + kw",
     "assert_tag((tag_of(v, \"W\") >="),
    ("avg_pool_kernel", "idd = od * SD - PD + kd", "idd = od - PD + kd", "assert_tag((tag_of(v, \"D\") >="),
    ("avg_pool_kernel", "iw = rw * SW - PW + kw", "iw = rw * SW + PW + kw", "assert_tag((tag_of(v, \"W\") >="),
    ("adaptive_avg_pool_kernel", "w1 = cdiv((ow + 1) * W, OW)", "w1 = cdiv((ow + 1) * W, OW) + 1",
     "assert_tag(((tag_of(v, \"W\") + 1)"),
    ("adaptive_avg_pool_kernel", "h0 = oh * H // OH", "h0 = oh * H // OH - 1", "assert_tag(((tag_of(v, \"H\") + 1)"),
    # the window's columns are summed element-wise over the loop and across the tile after it (each(W))
    ("adaptive_avg_pool_kernel", "for iw0 in range(w0, w1, BW):", "for iw0 in range(w0 + 1, w1, BW):",
     "store(Y[rc, od, oh, ow]"),
    # the window's rows and depth slices are summed a row and a slice an iteration (each(H), each(D)): a skipped
    # one fails the kernel's assertion that the whole window was summed (these proved before session 14)
    ("adaptive_avg_pool_kernel", "for ih in range(h0, h1):", "for ih in range(h0, h1 - 1):",
     "assert_tag((tag_of(total, \"each(H).lo\")"),
    ("adaptive_avg_pool_kernel", "for ih in range(h0, h1):", "for ih in range(h0 + 1, h1):",
     "assert_tag((tag_of(total, \"each(H).lo\")"),
    ("adaptive_avg_pool_kernel", "for idd in range(d0, d1):", "for idd in range(d0 + 1, d1):",
     "assert_tag((tag_of(total, \"each(D).lo\")"),
    ("adaptive_avg_pool_kernel", "plane = plane + sum(acc, 1)", "plane = plane + sum(acc, 1) + sum(acc, 1)",
     "plane = plane + sum(acc, 1)"),
    ("adaptive_avg_pool_kernel", "plane = zeros((BC,), float32)", "plane = total", "total = total + plane"),
    ("loss_partial_kernel", "range(lo, minimum(N, lo + CHUNK * BLOCK), BLOCK)",
     "range(lo, minimum(N - N % BLOCK, lo + CHUNK * BLOCK), BLOCK)", "assert_tag((tag_of(part, \"sum(N).lo\")"),
    ("loss_partial_kernel", "range(lo, minimum(N, lo + CHUNK * BLOCK), BLOCK)",
     "range(lo, minimum(N, lo + CHUNK * BLOCK) - BLOCK, BLOCK)", "assert_tag((tag_of(part, \"sum(N).lo\")"),
    ("loss_partial_kernel", "lo = s * (CHUNK * BLOCK)", "lo = s * (CHUNK * BLOCK) + BLOCK",
     "assert_tag((tag_of(part, \"sum(N).lo\")"),
    ("sum_partials_kernel", "range(0, S, BLOCK)", "range(BLOCK, S, BLOCK)", "store(Out[z + arange(1)]"),
    ("cross_entropy_kernel", "hit = rc[None, :] == tgt[:, None]", "hit = rc[None, :] == tgt[:, None] + 1",
     "assert_tag(implies(hit, tag_of(sel, \"C\")"),
    ("cross_entropy_kernel", "sel = where(hit, x, 0.0)", "sel = where(hit, load(X[rr, rc + 1]).to(float32), 0.0)",
     "assert_tag(implies(hit, tag_of(sel, \"C\")"),
    ("cosine_loss_kernel", "b = load(B[rr, rd]).to(float32)", "b = load(B[rr + 1, rd]).to(float32)",
     "store(Loss[rr], 1.0 - cos)"),
]


def _source(name: str) -> str:
    return "from argus_inductor.dsl import *\n" + KERNELS[name].ir.source


def _verify(name: str, text: str):
    pol, shapes, pre = SPECS[name]
    k = kernels_from_source(text, filename=f"{name}.py")[name]
    return verify(k, Policy.make(**pol), shapes, assumptions=pre)


def test_a_window_row_masked_out_entirely_is_not_proved():
    """A mask that drops a whole row of the window (its lanes all dead in that iteration) leaves the rows summed
    as a union the checker cannot read as one interval: the window assertion fails to evaluate, never passes."""
    text = _source("adaptive_avg_pool_kernel")
    old = "mask=((rw >= w0) & (rw < w1))[None, :]"
    assert old in text
    res = _verify("adaptive_avg_pool_kernel", text.replace(old, "mask=((rw >= w0) & (rw < w1) & (ih != h0 + 1))[None, :]"))
    assert not res.ok and any("each(H)" in e and "not one contiguous interval" in e for e in res.errors), res.text()


def test_every_kernel_has_a_spec():
    assert set(SPECS) == set(KERNELS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_library_kernel_proves_at_odd_shapes(name):
    pol, shapes, pre = SPECS[name]
    res = verify(KERNELS[name], Policy.make(**pol), shapes, assumptions=pre)
    assert res.proved, res.text()


@pytest.mark.parametrize("name,old,new,assertion", BUGS, ids=[f"{b[0]}:{b[2]}" for b in BUGS])
def test_planted_bug_is_rejected_at_the_right_line(name, old, new, assertion):
    text = _source(name)
    assert old in text, f"{name} changed: update this test"
    assert _verify(name, text).ok
    bad = text.replace(old, new, 1)
    res = _verify(name, bad)
    assert not res.ok, f"{name} with `{new}` was not rejected"
    assert_flags_one_of(res, {first_line(bad, new.strip()), first_line(bad, assertion)})
    assert "thread" in res.text()
