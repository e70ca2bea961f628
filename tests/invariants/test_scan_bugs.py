"""Planted bugs in the library scan kernel: the checker rejects each at the right line, with a
counterexample that names a thread, and proves the unmodified kernel in every configuration."""
from __future__ import annotations

import itertools

import pytest

from argus_inductor.dsl import kernels_from_source
from argus_inductor.invariants import verify
from argus_inductor.kernels.scan import scan_kernel, scan_policies

from .planted import assert_flags_one_of, first_line, lines_with

SHAPES = {"O": 5, "L": 37, "I": 3}  # L is not a multiple of the chunk
FLAGS = ("PROD", "REVERSE", "EXCLUSIVE", "MASKED")


def _policy(**flags: int):
    return scan_policies((5, 37, 3), 1, "interpret")["scan_kernel"].with_consts(**{f: flags.get(f, 0) for f in FLAGS})


def _source() -> str:
    return "from argus_inductor.dsl import *\n" + scan_kernel.ir.source


@pytest.mark.parametrize("flags", list(itertools.product((0, 1), repeat=4)),
                         ids=lambda f: "-".join(n.lower() for n, v in zip(FLAGS, f) if v) or "plain")
def test_scan_kernel_proves_in_every_configuration(flags):
    res = verify(scan_kernel, _policy(**dict(zip(FLAGS, flags))), SHAPES)
    assert res.proved, res.text()


BUGS = [
    # the carry forgets the chunks before this one
    ("carry not updated", {}, "carry = carry + sum(x, 1)", "carry = sum(x, 1)", "sum(L).lo"),
    ("carry not updated (prod)", {"PROD": 1}, "carry = carry * prod(x, 1)", "carry = prod(x, 1)", "prod(L).lo"),
    # chunk c starts one element late: element c * BL is never read
    ("chunk offset off by one", {}, "rl = start + arange(BL)", "rl = start + 1 + arange(BL)", "sum(L).hi"),
    # reversed chunks that start BL too late: the first chunk lies past the end, the last one is never read
    ("reverse index wrong", {"REVERSE": 1}, "start = c * BL + REVERSE * (L - 2 * c * BL - BL)",
     "start = c * BL + REVERSE * (L - 2 * c * BL)", "sum(L).hi"),
    # an exclusive scan that shifts the wrong way reads the element after it
    ("exclusive shift wrong", {"EXCLUSIVE": 1}, "src = rl - 1 + 2 * REVERSE", "src = rl + 1 - 2 * REVERSE", None),
]


@pytest.mark.parametrize("what,flags,old,new,assertion", BUGS, ids=[b[0] for b in BUGS])
def test_planted_bug_is_rejected_at_the_right_line(what, flags, old, new, assertion):
    text = _source()
    assert old in text, f"scan_kernel changed: update this test ({what})"
    bad = text.replace(old, new, 1)
    k = kernels_from_source(bad, filename="scan.py")["scan_kernel"]
    res = verify(k, _policy(**flags), SHAPES)
    assert not res.ok, f"`{new}` was not rejected"
    expected = {first_line(bad, new.strip())} | (lines_with(bad, assertion) if assertion is not None else set())
    assert_flags_one_of(res, expected)
    assert "thread" in res.text()
