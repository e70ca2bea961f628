"""What every planted-bug test checks of the checker's rejection: it names the mutated line or an assertion line."""
from __future__ import annotations

from typing import Any


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
