"""How the checker writes terms and index ranges in its messages: as a person would write them."""
from __future__ import annotations

import re

from .tags import Expr, Pieces, Tag, conjuncts, mentions, simp


def pretty(e: Expr) -> str:
    """A term as a person would write it: variable names without the checker's prefixes and ids."""
    text = " ".join(str(simp(e)).split())
    text = re.sub(r"\b(?:pid|it|crd|param|carried|uf):", "", text)
    return re.sub(r"#\d+", "", text)


def from_line(t: Tag) -> str:
    """Where a tag comes from, for a message: " (line L)", the line of the load (or tag) that made it."""
    return f" (line {t.src[0]})" if t.src else ""


def rng_text(ps: Pieces) -> str:
    if not ps:
        return "nothing"
    parts = []
    for p in ps:
        s = f"[{pretty(p.lo)}, {pretty(p.hi)})"
        if p.t is not None and p.count is not None:
            s = f"the union over t < {pretty(p.count)} of {s}"
            if any(mentions(c, p.t.decl().name()) and not mentions(c, "_x") for c in conjuncts(p.cond)):
                s += " in the iterations t whose mask was on at this element"  # a lane mask that moves (moving_lanes)
        parts.append(s)
    return " and ".join(parts)
