"""Assertions read as people write them (issue 42): a bound read off a value with two reductions over one dimension
takes the outermost (and says so), an assertion the checker cannot read is an error naming the tag and the fix, and
one whose tags hold nowhere is an error, not a silent pass."""
from __future__ import annotations

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.specs.reads import kernel_reads

from .readset_suite import ROW_SUMS, ROW_SUMS_READS
from .suite import LAYERNORM, SOFTMAX

VARIANCE_ASSERT = '''        ss = ss + sum(d * d, 1)
    assert_tag((tag_of(ss, "sum(C).lo") <= 0) & (tag_of(ss, "sum(C).hi") >= C), "the variance covers the row")
'''
POL = Policy.make(BR=4, BC=64)
SHAPES = dict(R=13, C=150)


def _layernorm(text: str):
    return kernels_from_source(text, "layernorm.py")["layernorm"]


def test_two_reductions_read_the_outermost():
    """The variance sum holds the mean's reduction over C and its own: "2 reductions over C" used to stop the checker;
    now the bound is the variance's (the outermost), proved, with a note saying which was read."""
    text = LAYERNORM.replace("        ss = ss + sum(d * d, 1)\n", VARIANCE_ASSERT)
    assert text != LAYERNORM
    res = verify(_layernorm(text), POL, SHAPES)
    assert res.proved, res.text()
    assert any("holds 2 reductions over C" in n and "outermost" in n for n in res.notes), res.notes
    # and it is the variance's: a variance loop that skips the ragged last tile fails the assertion
    bad = text.replace("range(0, C, BC)", "range(0, C - C % BC, BC)", 2).replace(
        "range(0, C - C % BC, BC)", "range(0, C, BC)", 1)
    res = verify(_layernorm(bad), POL, SHAPES)
    assert not res.ok and "assert-tag" in {v.kind for v in res.violations}, res.text()


def test_an_unreadable_assertion_names_the_tag_and_the_fix():
    text = SOFTMAX.replace("        m = m_new\n", "        m = m_new\n        assert_tag(tag_of(x, \"Q\") >= 0)\n", 1)
    res = verify(kernels_from_source(text, "softmax.py")["softmax"], POL, SHAPES)
    assert not res.ok
    (err,) = res.errors
    assert "tag_of(x, 'Q')" in err and "carries no tag 'Q'" in err and "tag(x, Q=...)" in err, err


def test_a_vacuous_assertion_is_an_error_not_a_pass():
    """The tags it reads are defined nowhere (a where that keeps no lane): it states nothing, so it is reported."""
    text = SOFTMAX.replace("        m = m_new\n", "        m = m_new\n        z = where(rc[None, :] < 0, x, 0.0)\n"
                           "        assert_tag(tag_of(z, \"C\") >= 1000, \"no column past 1000\")\n", 1)
    res = verify(kernels_from_source(text, "softmax.py")["softmax"], POL, SHAPES)
    assert not res.ok and not res.violations
    assert any("holds vacuously" in e and "no column past 1000" in e for e in res.errors), res.text()


def test_a_wrong_axis_is_a_counterexample_not_only_an_unreadable_assertion():
    """The held-out wrong-axis bug, with its author's assertion on the sum over C: that assertion can no longer be read
    (an error naming it), and the read set rejects the bug itself with a counterexample."""
    text = ROW_SUMS.replace("    store(Y[rr], acc)\n", "    assert_tag(tag_of(acc, \"sum(C).hi\") >= C)\n"
                            "    store(Y[rr], acc)\n").replace("sum(load(X[rr, rc]).to(float32), 1)",
                                                          "sum(load(X[rr, rc]).to(float32), 0)")
    k = kernels_from_source(text, "row_sums.py")["row_sums"]
    plain = verify(k, Policy.make(B=16), dict(R=37, C=45))
    assert not plain.ok and any("holds no sum over C" in e for e in plain.errors), plain.text()
    res = verify(k, Policy.make(B=16), dict(R=37, C=45), reads=ROW_SUMS_READS)
    assert any("holds no sum over C" in e for e in res.errors), res.text()
    v = next(v for v in res.violations if v.kind == "read-set" and "over the wrong axis" in v.message)
    assert v.executions and "R index" not in v.message and "sums (or takes the max) over R" in v.message, v.text()


def test_library_assertions_stay_readable_with_read_sets():
    from .suite import LIBRARY, library_kernels

    for name in ("layernorm_kernel", "rmsnorm_kernel", "reduce_cols"):
        pol, shapes, pre = LIBRARY[name]
        res = verify(library_kernels()[name], Policy.make(**pol), shapes, assumptions=pre, reads=kernel_reads(name))
        assert res.proved and not res.errors, res.text()
