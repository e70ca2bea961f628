"""Read sets: what each element of an op's output is specified to read, checked against what the kernel's stored
value actually read.

An op's specification (argus_inductor.specs.reads holds them, one place for the library's kernels and the
agent's) states, for one output tensor:

    facts    predicates the stored value's input tags must satisfy: which element of each input it read, as a function
             of the output element's coordinates. "K.HK == h // (H // HK)": the key/value head of query head h;
             "W1.E == block_expert[p // BM]": the expert of the sorted row's block.
    reduce   per reduced dimension, the indices the element's reduction covers: exactly those in [0, extent) where the
             predicate holds ("" for all of them). "t <= s": a causal row reads keys 0..s and no other.

The names a predicate may use: the output element's coordinate along each of its dimensions (the dimension's name in
lower case: z, h, s, d for O(Z, H, S, D)); the reduced index (the reduced dimension's name in lower case, in its
own predicate); shape symbols and constexprs (as written); a tag of the stored value (`K.HK`, or tag("expert")); an
integer tensor's element (`sorted_ids[p]`); + - * // % comparisons, and/or/not, `implies(a, b)` and `a if c else b`.

The checker proves, at every store of the output: each fact (for every alternative of the tags it reads), that every
reduction of the stored value covers exactly its specified set (a reduction over a dimension the spec does not
reduce, a specified one the value lacks, an index too many or one missing are violations with a counterexample),
whether or not the kernel's author asserted anything. A fact whose tag the stored value does not carry cannot be
checked: it is reported undecided. Atomic adds (partial sums) are checked for the facts only.
"""
from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .exprs import to_z3
from .tags import Expr, Tag


@dataclass(frozen=True)
class ReadSet:
    """What each element of the tensor `output` reads, as its op's specification states it."""

    output: str
    facts: tuple[str, ...] = ()
    reduce: tuple[tuple[str, str], ...] = ()  # (reduced dimension, predicate over its index; "" for all of it)
    op: str = ""  # the op (and variant) the spec is of, for messages: "attention, causal"

    @property
    def reduced(self) -> dict[str, str]:
        return dict(self.reduce)

    def describe(self) -> str:
        parts = list(self.facts) + [f"reduces {d} over {p or f'all of [0, {d})'}" for d, p in self.reduce]
        return f"{self.op or 'the op'}: {self.output}[...] " + "; ".join(parts)


def read_set(output: str, facts: Sequence[str] = (), reduce: Mapping[str, str] | None = None,
             op: str = "") -> ReadSet:
    """A ReadSet from a list of facts and a {dimension: predicate} dict."""
    return ReadSet(output, tuple(facts), tuple((reduce or {}).items()), op)


class SpecError(ValueError):
    """A read set that cannot be read against this kernel (an unknown name, an unsupported expression)."""


def names_in(text: str) -> tuple[set[str], set[str]]:
    """The tags (X.D, tag("name")) and plain names a spec expression mentions."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise SpecError(f"read-set expression {text!r} is not a Python expression: {e.msg}") from None
    tags, plain = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            tags.add(f"{n.value.id}.{n.attr}")
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "tag" and n.args and \
                isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
            tags.add(n.args[0].value)
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not any(t.startswith(n.id + ".") for t in tags) and \
                n.id not in ("tag", "implies"):
            plain.add(n.id)
    return tags, plain


def evaluate(text: str, name: Callable[[str], Any], tag: Callable[[str], Expr],
             element: Callable[[str, list[Expr]], Expr]) -> Expr:
    """A spec expression as a z3 term: `name` resolves plain names, `tag` the stored value's tags (one alternative
    chosen by the caller), `element` an integer tensor's element."""
    tree = ast.parse(text, mode="eval").body
    return to_z3(tree, name, element, lambda n: SpecError(f"read-set expression {text!r}: unsupported "
                                                           f"'{ast.unparse(n)}'"), tag=tag)


def alternatives(tags: Mapping[str, tuple[Tag, ...]], wanted: Sequence[str]) -> list[dict[str, Tag]]:
    """Every choice of one alternative per wanted tag (a stored value may carry a tag with several: a gate row and
    an up row)."""
    pools = [[(n, t) for t in tags[n]] for n in wanted]
    return [dict(c) for c in itertools.product(*pools)]


__all__ = ["ReadSet", "read_set", "SpecError", "evaluate", "names_in", "alternatives"]
