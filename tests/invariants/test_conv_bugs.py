"""The convolution kernels prove at odd concrete shapes, and bugs planted in their source (group offset,
tap index, K loop, transposed divisibility, flipped taps, a transposed phase's first tap, output positions and
tap loop; the depthwise kernel's channel and tap) are rejected
with a counterexample at the right line that names the thread."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.conv import conv_depthwise, conv_fwd, conv_geometry, conv_policies, conv_transpose_fwd

from .planted import assert_flags_one_of, first_line, lines_with

KERNELS = {"conv_fwd": conv_fwd, "conv_transpose_fwd": conv_transpose_fwd, "conv_depthwise": conv_depthwise}

# x shape, weight shape, conv arguments: odd sizes, CG = 20 > BK = 16 (a partial K block), KH != KW,
# groups with CG != COG, strides and dilations that differ per dimension
FWD = ((2, 40, 9, 7), (6, 20, 3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2))
TRANSPOSED = ((1, 40, 4, 5), (40, 3, 3, 2), dict(transposed=True, stride=(2, 3), padding=(1, 0), output_padding=(1, 0),
                                                 dilation=(1, 2), groups=2))
# a stride and dilation sharing a factor (2) along W: odd phases there take no tap at all
TRANSPOSED_GCD = ((1, 4, 4, 5), (4, 3, 2, 3), dict(transposed=True, stride=(2, 2), padding=(0, 1), dilation=(1, 2)))

DEPTHWISE = ((2, 5, 9, 7), (5, 1, 3, 2), dict(groups=5, stride=(2, 1), padding=(1, 2), dilation=(1, 2)))

GOOD = [
    FWD,
    TRANSPOSED,
    TRANSPOSED_GCD,
    DEPTHWISE,
    ((1, 3, 4, 6, 5), (3, 1, 2, 3, 3), dict(groups=3, padding=(0, 1, 2), stride=(1, 2, 1))),
    ((2, 3, 13), (5, 3, 3), dict(stride=2, dilation=3, padding=2)),
    ((1, 3, 5, 6, 4), (4, 3, 2, 3, 2), dict(padding=(1, 0, 2), stride=(1, 2, 1))),
    ((1, 6, 8, 7), (6, 1, 3, 3), dict(groups=6, padding="same")),
    ((2, 20, 5, 6), (17, 20, 1, 1), dict()),
    ((2, 4, 7), (4, 3, 4), dict(transposed=True, stride=3, padding=2, dilation=2)),
    ((1, 4, 3, 4, 3), (4, 2, 3, 2, 3), dict(transposed=True, stride=(2, 1, 2), padding=1)),
]


def _setup(case, has_bias: int = 1, act: int = 2):
    xs, ws, kw = case
    name, consts, shapes = conv_geometry(xs, ws, **kw)
    pol = conv_policies(xs, ws, **kw, target="interpret")[name]
    return name, pol.with_consts(**consts, HAS_BIAS=has_bias, ACT=act), shapes


@pytest.mark.parametrize("case", GOOD, ids=[f"{c[0]}x{c[1]}" for c in GOOD])
def test_conv_kernels_prove_at_odd_shapes(case):
    name, pol, shapes = _setup(case)
    res = verify(KERNELS[name], pol, shapes)
    assert res.ok, res.text()
    assert not res.undecided and not res.errors, res.text()


# (kernel, case, old text, new text, text of the assertion line that may flag it instead)
BUGS = [
    ("conv_fwd", FWD, "a = load(X[n, g, rc, s]", "a = load(X[n, (g + 1) % G, rc, s]",
     "assert_tag(tag_of(a, \"G\") == g"),
    ("conv_fwd", FWD, "w = load(Wk[g, rn,", "w = load(Wk[0, rn,", "acc = mma(w, a, acc)"),
    ("conv_fwd", FWD, "iw = ow * SW - PW + kw * DW", "iw = ow * SW - PW + (kw + 1) * DW",
     "assert_tag((tag_of(a, \"S\")"),
    ("conv_fwd", FWD, "kh = (t // KW) % KH", "kh = (t // KW + 1) % KH", "assert_tag((tag_of(a, \"S\")"),
    ("conv_fwd", FWD, "for c0 in range(0, CG, BK):", "for c0 in range(0, CG - CG % BK, BK):", "store(Y["),
    ("conv_fwd", FWD, "for t in range(0, KD * KH * KW):", "for t in range(0, KD * KH * KW - 1):", "store(Y["),
    ("conv_transpose_fwd", TRANSPOSED_GCD, "hit_w = (nw >= 0) & (nw % SW == 0) & (iw < IW)",
     "hit_w = (nw >= 0) & (iw < IW)", "assert_tag((tag_of(a, \"S\")"),
    ("conv_transpose_fwd", TRANSPOSED, "k0w = (rw + PW) // GW * VW % (SW // GW)",
     "k0w = (rw + PW + 1) // GW * VW % (SW // GW)", "assert_tag(implies((rd + PD) % GD == 0"),
    ("conv_transpose_fwd", TRANSPOSED, "ow = qw * SW + rw", "ow = qw * SW", "store(Y["),
    ("conv_transpose_fwd", TRANSPOSED_GCD, "oh = qh * SH + rh", "oh = qh + rh", "assert_tag((tag_of(a, \"S\")"),
    ("conv_transpose_fwd", TRANSPOSED, "for t in range(0, JD * JH * JW):", "for t in range(0, JD * JH * JW - 1):",
     "store(Y["),
    ("conv_fwd", FWD, "(iw >= 0) & (iw < IW)", "(iw >= 0)", "assert_tag((tag_of(a, \"S\")"),
    ("conv_transpose_fwd", TRANSPOSED, "w = load(Wk[ph, g, rn, t * CG + rc]",
     "w = load(Wk[ph, g, rn, (JD * JH * JW - 1 - t) * CG + rc]", "acc = mma(w, a, acc)"),
    ("conv_transpose_fwd", TRANSPOSED, "w = load(Wk[ph, g, rn, t * CG + rc]",
     "w = load(Wk[(ph + 1) % NP, g, rn, t * CG + rc]", "assert_tag(tag_of(w, \"NP\") == ph"),
    ("conv_transpose_fwd", TRANSPOSED, "a = load(X[n, g, rc, s]", "a = load(X[n, G - 1 - g, rc, s]",
     "assert_tag(tag_of(a, \"G\") == g"),
    ("conv_depthwise", DEPTHWISE, "w = load(Wk[rc, t])", "w = load(Wk[(rc + 1) % C, t])",
     "assert_tag(tag_of(x, \"C\") == tag_of(w[:, None], \"C\")"),
    ("conv_depthwise", DEPTHWISE, "iw = ow * SW - PW + kw * DW", "iw = ow * SW - PW + kw",
     "assert_tag((tag_of(x, \"S\")"),
    ("conv_depthwise", DEPTHWISE, "w = load(Wk[rc, t])", "w = load(Wk[rc, KD * KH * KW - 1 - t])",
     "assert_tag((tag_of(x, \"S\")"),
]


@pytest.mark.parametrize("name,case,old,new,assertion", BUGS, ids=[f"{b[0]}:{b[3]}" for b in BUGS])
def test_conv_planted_bug_is_rejected(name, case, old, new, assertion):
    text = "from argus_inductor.dsl import *\n" + KERNELS[name].ir.source
    assert text.count(old) == 1, f"{name} changed: update this test"
    kname, pol, shapes = _setup(case)
    assert kname == name
    bad = text.replace(old, new)
    res = verify(kernels_from_source(bad, filename=f"{name}.py")[name], pol, shapes)
    assert not res.ok, f"{name} with `{new}` was not rejected"
    assert res.violations, res.text()
    assert_flags_one_of(res, {first_line(bad, new.strip())} | lines_with(bad, assertion))
    # a tile's violation names the thread; a scalar one (a phase's first tap) the program and its values
    assert "thread" in res.text() or "program (" in res.text(), res.text()


@pytest.mark.parametrize("case", [
    ((16, 64, 64, 64), (64, 32, 4, 4), dict(transposed=True, stride=2, padding=1)),            # KernelBench 26
    ((8, 32, 16, 16, 16), (32, 16, 3, 3, 3), dict(transposed=True, stride=2, padding=1, output_padding=1)),  # 27
    ((16, 64, 8192), (64, 32, 5), dict(transposed=True, stride=3, padding=2, dilation=2)),     # 28
], ids=["kb26", "kb27", "kb28"])
def test_transposed_conv_proves_at_full_size(case):
    """Every obligation decided at the benchmark sizes, none left to z3's time-out: each output coordinate is a
    mixed-radix number in program ids, lanes and phase loop counters, which the checker inverts directly."""
    xs, ws, kw = case
    name, consts, shapes = conv_geometry(xs, ws, **kw)
    pol = conv_policies(xs, ws, **kw, target="cuda")[name].with_consts(**consts, HAS_BIAS=1, ACT=0)
    res = verify(conv_transpose_fwd, pol, shapes)
    assert res.proved, res.text()
