"""What every planted-bug test checks of the checker's rejection: it names the mutated line or an assertion line."""
from __future__ import annotations

from typing import Any

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify


def first_line(text: str, needle: str) -> int:
    """The number of the first line of `text` that contains `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def lines_with(text: str, needle: str) -> set[int]:
    """The numbers of every line of `text` that contains `needle`."""
    return {i for i, line in enumerate(text.splitlines(), 1) if needle in line}


def assert_flags_one_of(res: Any, expected: set[int]) -> None:
    """The verdict's violations (their own lines and the related ones) name at least one of `expected`."""
    flagged = {v.line for v in res.violations} | {r for v in res.violations for r in v.related}
    assert flagged & expected, f"flagged lines {sorted(flagged)}; expected one of {sorted(expected)}\n{res.text()}"


def assert_planted_bug_rejected(kernel: Any, policy: Policy, shapes: dict[str, int], old: str, new: str,
                                line: str, filename: str) -> None:
    """`kernel`'s own DSL source proves at `policy` and `shapes`; with its first `old` replaced by `new` the checker
    rejects it, naming the planted line or the line holding `line`, and says which thread."""
    text = "from argus_inductor.dsl import *\n" + kernel.ir.source
    assert old in text, f"{kernel.name} changed: update this test"

    def check(src: str) -> Any:
        return verify(kernels_from_source(src, filename=filename)[kernel.name], policy, shapes)

    assert check(text).ok
    bad = text.replace(old, new, 1)
    res = check(bad)
    assert not res.ok, f"`{new}` was not rejected"
    assert_flags_one_of(res, {first_line(bad, new.strip()), first_line(bad, line)})
    assert "thread" in res.text()
