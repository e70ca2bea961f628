"""Abstract interpretation of a kernel's IR over the tag domain, collecting proof obligations.

One pass over the IR computes an `AVal` for every SSA value. Loops are summarised by induction:
the body runs once on the initial values (to discover what each iteration contributes), the
carried values are generalised to their form at iteration `it` (an integer grows linearly, a
reduction cover is the union of the earlier iterations' contributions), and the body runs again
on that form; the obligations of this second run hold for every iteration, and the induction step
(the body maps the form at `it` to the form at `it + 1`) becomes an obligation too.

The rules are grouped by IR op family, one module each: base (state, obligations), elementwise (constants,
arithmetic, selects, shape changes), reductions (reduce, scan, mma, covers), memory (loads, stores), ghosts
(tags, assertions, assumptions), loops (if, for, staging), readcheck (an op's read set at its stores);
staging holds the pipelining model.
"""
from __future__ import annotations

from .base import CheckerError, InterpreterBase
from .elementwise import Elementwise
from .ghosts import Ghosts
from .loops import Loops
from .memory import Memory
from .readcheck import ReadChecks
from .reductions import Reductions
from .staging import (
    Staging,
    StagingHook,
    default_staging,
    first_user,
    mmas_reading,
    only_accumulates,
    warp_specialized_staging,
)
from .tags import PADDING_TAG, padding


class Interpreter(Elementwise, Reductions, Memory, ReadChecks, Ghosts, Loops, InterpreterBase):
    """The checker's abstract interpreter: every IR op's rule (op_<kind>) from the family modules."""


__all__ = ["Interpreter", "CheckerError", "Staging", "StagingHook", "default_staging", "warp_specialized_staging",
           "mmas_reading", "only_accumulates", "first_user", "PADDING_TAG", "padding"]
