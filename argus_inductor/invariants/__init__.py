"""Data-flow invariants: tags, tag assertions and kernel-wide obligations, proven with z3.

    from argus_inductor.invariants import verify
    res = verify(kernel, policy, shapes={"M": 200, "N": 136, "K": 100})   # shapes=None: symbolic
    if not res.ok:
        print(res.text())   # program ids, loop iteration, element, thread (warp, lane), line, values

    argus verify FILE.py [--shape M=..,N=..] [--policy BM=64,..] [--assume "H % HK == 0"] [--json]
                         [--op attention --causal] [--budget-s 60]

Nothing here runs a kernel or changes its generated code: tags, assertions and assumptions are ghost
operations the lowering never emits.

Proven for every kernel without being asked: mma operands agree on their reduction indices (and on
shared batch/head indices); a store writes each element to the coordinates its tags name; scalar
indices stay in bounds (tile indices are masked); every output element is written exactly once across
the grid (and, for atomic_add outputs, the partial sums partition each reduction); every reduction that
reaches an output covers its whole range exactly once (K loops, key loops, split-k); values normalised
to running maxima (online softmax) are only combined when normalised to the same one; a pipelined load
never overwrites a ring buffer a reader still needs (model: `Staging`, from the policy's num_stages); a
reduction (sum, max, min, prod, mma, and a loop's running one) takes only its identity on the lanes that read
no input element: what a masked load's `other` or a where's other side put there is tracked as a value class
(-inf, 0, 1, positive, +inf, finite, NaN) through the arithmetic (fills.py); a loop that runs zero times
leaves an empty reduction, not a complete one.

Checked against an op's specification when one is given (`reads=` / `--op`, readsets.py; the library's op
classes in argus_inductor.specs.reads): which input element each output element reads, and exactly
which indices each of its reductions covers ("t <= s" for a causal row), with a counterexample naming the input
coordinate read or missed.

Every verify has a time budget (DEFAULT_BUDGET_S, `budget_s=` / `--budget-s`): past it the result is
"NOT PROVED: budget", never a hang; static_range loops are unrolled only up to STATIC_UNROLL_LIMIT iterations.

Stating kernel-specific invariants, inside the kernel:

    tag(x, name=expr)               attach a tag (an integer expression per element) to tile x
    tag_of(x, "T")                  a tag: loads give each element T.<dim> and <dim> (its index along dim)
    tag_of(x, "sum(T).lo" | "sum(T).hi" | "max(T).lo" | "max(T).hi" | "scale(T).lo" | "scale(T).hi")
                                    the range of T that x has summed over / that its running max covers /
                                    that the max it is normalised to covers
    assert_tag(pred, "why")         pred must hold for every element (where the tags involved are defined)
    implies(a, b)                   for conditional assertions
    assume(pred)                    a precondition (e.g. on index-tensor contents) relied on, never checked
    assume("nondecreasing(cu)")     a quantified fact about an index tensor the host guarantees (assumptions.py):
                                    nondecreasing / increasing / permutation(T), or "cu[i] <= cu[j] ..." with free
                                    lower-case element variables
    assume(p > 0.0)                 a float parameter's sign (p times a -inf fill stays -inf)

    assert_tag(implies(CAUSAL == 1, tag_of(s, "T") <= tag_of(s, "S")))         # causal: no key after its query
    assert_tag((tag_of(k, "HK") * (H // HK) <= h) & (h < (tag_of(k, "HK") + 1) * (H // HK)))   # GQA group
    tag(x, expert=load(block_expert[rp // BM])[:, None])                        # MoE: the row's own expert
    assert_tag(tag_of(gate, "expert") == tag_of(gate, "E"))                     # ... meets that expert's W
    assume((e >= 0) & (e < E))                                                  # block_expert holds expert ids

Preconditions on shapes can also be given from outside (`assumptions=` / `--assume`), with a tensor
name standing for each of its elements: "H % HK == 0", "0 <= block_expert <= E", "nondecreasing(cu_seqlens)".

A bound read off a value with several reductions over one dimension (a LayerNorm's variance) is the outermost's;
an assertion the checker cannot read, or one whose tags hold nowhere, is an error naming it, never a pass.

May import: dsl, layout (and z3). Imported by specs, ops, agent and cli; never imports them.
"""
from .api import VerificationResult, parse_assumption, verify, verify_file, verify_source
from .counterexample import Execution, Violation
from .interpreter import CheckerError, Staging, StagingHook, default_staging
from .readsets import ReadSet, read_set

__all__ = ["verify", "verify_source", "verify_file", "parse_assumption", "VerificationResult", "Violation",
           "Execution", "Staging", "StagingHook", "default_staging", "CheckerError", "ReadSet", "read_set"]
