"""The reduction and normalization kernels prove at odd shapes, and planted bugs in their source are rejected by
the checker at the right line: a reduction loop one block short, a sum of squares that starts a block late, a wrong
inner stride, affine parameters from the
wrong channel or row, and a running max seeded with 0 instead of -inf."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels import normalize, reduce

from .planted import assert_flags_one_of, first_line

KERNELS = {k.name: k for k in reduce.KERNELS + normalize.KERNELS}
ROWS, COLS = dict(O=13, R=37), dict(O=3, R=37, I=21)

# kernel -> (policies to prove, odd shapes); every constexpr variant the host functions launch
CONFIGS = {
    "reduce_rows": ([dict(BO=4, BR=16, KIND=k) for k in range(7)], ROWS),
    "reduce_cols": ([dict(BR=8, BI=16, KIND=k) for k in range(5)], COLS),
    "argreduce_rows": ([dict(BO=4, BR=16, KIND=k) for k in range(2)], ROWS),
    "argreduce_cols": ([dict(BR=8, BI=16, KIND=k) for k in range(2)], COLS),
    "softmax_rows": ([dict(BO=4, BR=16, LOG=k) for k in range(2)], ROWS),
    "softmax_cols": ([dict(BR=8, BI=16, LOG=k) for k in range(2)], COLS),
    "norm_rows": ([dict(BO=4, BR=16, MODE=m, HAS_W=int(m < 2), HAS_B=int(m == 0)) for m in range(4)],
                  dict(O=13, L=37)),
    "norm_cols": ([dict(BR=8, BI=16, MODE=m, HAS_W=int(m < 2), HAS_B=int(m == 0)) for m in range(4)], COLS),
    "group_norm_kernel": ([dict(BL=16, HAS_W=1, HAS_B=1), dict(BL=16)], dict(N=3, G=4, L=35, CG=5)),
    "row_moments": ([dict(BO=4, BR=16)], dict(O=13, L=37)),
    "channel_norm": ([dict(BC=4, BH=16, HAS_W=1, HAS_B=1)], dict(N=3, C=13, HW=37)),
}

# (kernel, policy, old text, new text, text of the assertion that may name it instead of the mutated line)
BUGS = [
    ("reduce_rows", dict(BO=4, BR=16, KIND=0), "for r0 in range(0, R, BR):", "for r0 in range(0, R - BR, BR):",
     "store(Y[ro], acc)"),
    ("reduce_rows", dict(BO=4, BR=16, KIND=5), "v = load(X[ro, rr]).to(float32)",
     "v = load(X[ro, rr + BR]).to(float32)", "assert_tag((tag_of(acc, \"sum(R).lo\") <= 0)"),
    ("norm_rows", dict(BO=4, BR=16, MODE=0, HAS_W=1), "for l0 in range(0, L, BR):", "for l0 in range(BR, L, BR):",
     "assert_tag((tag_of(s, \"sum(L).lo\")"),
    ("reduce_cols", dict(BR=8, BI=16, KIND=1), "ri = pi * BI + arange(BI)", "ri = pi * BI + 2 * arange(BI)",
     "store(Y[o, ri], acc)"),
    ("group_norm_kernel", dict(BL=16, HAS_W=1), "w = load(W[g, rl // hw])", "w = load(W[g, rl % CG])",
     "assert_tag((tag_of(w, \"G\")"),
    ("group_norm_kernel", dict(BL=16, HAS_B=1), "b = load(B[g, rl // hw])", "b = load(B[(g + 1) % G, rl // hw])",
     "assert_tag((tag_of(b, \"G\")"),
    ("norm_cols", dict(BR=8, BI=16, MODE=1, HAS_W=1), "w = load(W[rr])", "w = load(W[rr + 1])",
     "assert_tag(tag_of(w[:, None], \"R\")"),
    ("channel_norm", dict(BC=4, BH=16), "mean = load(Mean[rc])", "mean = load(Mean[rc // 2])",
     "assert_tag(tag_of(mean[:, None], \"C\")"),
]


def _source(name: str) -> str:
    return "from argus_inductor.dsl import *\n" + KERNELS[name].ir.source


def _verify(name: str, text: str, policy: dict):
    k = kernels_from_source(text, filename=f"{name}.py")[name]
    return verify(k, Policy.make(**policy), CONFIGS[name][1])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_library_kernel_proves_at_odd_shapes(name):
    policies, shapes = CONFIGS[name]
    for pol in policies:
        res = verify(KERNELS[name], Policy.make(**pol), shapes)
        assert res.ok and res.proved, res.text()


def test_every_kernel_is_configured():
    assert set(KERNELS) == set(CONFIGS)


@pytest.mark.parametrize("name,policy,old,new,assertion", BUGS, ids=[f"{b[0]}:{b[3]}" for b in BUGS])
def test_planted_bug_is_rejected_at_its_line(name, policy, old, new, assertion):
    text = _source(name)
    assert old in text, f"{name} changed: update this test"
    assert _verify(name, text, policy).ok
    bad = text.replace(old, new, 1)
    res = _verify(name, bad, policy)
    assert not res.ok, f"{name} with `{new}` was not rejected"
    assert res.violations, res.text()
    assert_flags_one_of(res, {first_line(bad, new.strip()), first_line(bad, assertion)})
    assert "thread" in res.text()


@pytest.mark.parametrize("name,policy", [("reduce_rows", dict(BO=4, BR=16, KIND=2)),
                                         ("softmax_rows", dict(BO=4, BR=16, LOG=0))])
def test_running_max_seeded_with_zero_is_rejected(name, policy):
    """A max seeded with 0 is wrong for rows of negative values. The checker does not track float values, so it
    cannot give a counterexample element; the kernels' coverage assertion on the running max rejects the seed
    instead (the seed is no longer a running max over R), naming the assertion's line."""
    text = _source(name)
    var = "acc" if name == "reduce_rows" else "m"
    old = f"{var} = full((BO,), -inf, float32)"
    assert old in text and _verify(name, text, policy).ok
    bad = text.replace(old, f"{var} = full((BO,), 0.0, float32)", 1)
    res = _verify(name, bad, policy)
    assert not res.ok
    line = first_line(bad, f"assert_tag((tag_of({var}, \"max(R).lo\")")
    assert any(e.startswith(f"line {line}:") and "running max" in e for e in res.errors), res.text()
