"""Data-flow invariants: tags, tag assertions and kernel-wide obligations, proven with z3.

    from argus_inductor.invariants import verify
    res = verify(kernel, policy, shapes={"M": 200, "N": 136, "K": 100})   # shapes=None: symbolic
    if not res.ok:
        print(res.text())   # program ids, loop iteration, element, thread (warp, lane), line, values

    argus verify FILE.py [--shape M=..,N=..] [--policy BM=64,..] [--assume "H % HK == 0"] [--json]

Nothing here runs a kernel or changes its generated code: tags, assertions and assumptions are ghost
operations the lowering never emits.

Proven for every kernel without being asked: mma operands agree on their reduction indices (and on
shared batch/head indices); a store writes each element to the coordinates its tags name; scalar
indices stay in bounds (tile indices are masked); every output element is written exactly once across
the grid (and, for atomic_add outputs, the partial sums partition each reduction); every reduction that
reaches an output covers its whole range exactly once (K loops, key loops, split-k); values normalised
to running maxima (online softmax) are only combined when normalised to the same one; a pipelined load
never overwrites a ring buffer a reader still needs (model: `Staging`, from the policy's num_stages).

Stating kernel-specific invariants, inside the kernel:

    tag(x, name=expr)               attach a tag (an integer expression per element) to tile x
    tag_of(x, "T")                  a tag: loads give each element T.<dim> and <dim> (its index along dim)
    tag_of(x, "sum(T).lo" | "sum(T).hi" | "max(T).lo" | "max(T).hi" | "scale(T).lo" | "scale(T).hi")
                                    the range of T that x has summed over / that its running max covers /
                                    that the max it is normalised to covers
    assert_tag(pred, "why")         pred must hold for every element (where the tags involved are defined)
    implies(a, b)                   for conditional assertions
    assume(pred)                    a precondition (e.g. on index-tensor contents) relied on, never checked

    assert_tag(implies(CAUSAL == 1, tag_of(s, "T") <= tag_of(s, "S")))         # causal: no key after its query
    assert_tag((tag_of(k, "HK") * (H // HK) <= h) & (h < (tag_of(k, "HK") + 1) * (H // HK)))   # GQA group
    tag(x, expert=load(block_expert[rp // BM])[:, None])                        # MoE: the row's own expert
    assert_tag(tag_of(gate, "expert") == tag_of(gate, "E"))                     # ... meets that expert's W
    assume((e >= 0) & (e < E))                                                  # block_expert holds expert ids

Preconditions on shapes can also be given from outside (`assumptions=` / `--assume`), with a tensor
name standing for each of its elements: "H % HK == 0", "0 <= block_expert <= E".
"""
from .api import VerificationResult, parse_assumption, verify, verify_file, verify_source
from .counterexample import Execution, Violation
from .interpreter import CheckerError, Staging, StagingHook, default_staging
from .readsets import ReadSet, read_set

__all__ = ["verify", "verify_source", "verify_file", "parse_assumption", "VerificationResult", "Violation",
           "Execution", "Staging", "StagingHook", "default_staging", "CheckerError", "ReadSet", "read_set"]
