"""The checker's interfaces: Python API, `argus verify`, counterexample renderings, preconditions,
zero run-time cost, and the library kernels proven without false alarms."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from argus_inductor.cli import main
from argus_inductor.dsl import Kernel, Policy, kernels_from_source
from argus_inductor.invariants import Staging, verify, verify_source
from argus_inductor.invariants.counterexample import owner

from .suite import ATTENTION, CASES, GEMM, LIBRARY, MOE, library_kernels
from .test_accumulation_bugs import GEMV


def strip_ghost_statements(source: str) -> str:
    """The source without its tag / assert_tag / assume statements (each may span several lines)."""
    drop: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id in ("tag", "assert_tag", "assume"):
            drop.update(range(node.lineno, node.end_lineno + 1))
    return "\n".join(line for i, line in enumerate(source.splitlines(), 1) if i not in drop)


def _kernel(source: str, name: str) -> Kernel:
    return kernels_from_source(source, "<test>")[name]


# ---- zero run-time cost --------------------------------------------------------------------------
@pytest.mark.parametrize("source,name,policy,pre", [
    (MOE, "moe_step", Policy.make(TOPK=2, BM=16, BF=32, BK=32), ["P == NB * BM"]),
    (ATTENTION, "attention", Policy.make(BM=32, BN=32, BD=64, CAUSAL=1), ["H % HK == 0", "D <= BD"]),
])
def test_verified_kernel_lowers_to_the_same_triton_source_without_its_ghost_code(source, name, policy, pre):
    k = _kernel(source, name)
    assert verify(k, policy, assumptions=pre).proved
    triton = k.triton_source(policy)
    for word in ("assert_tag", "tag_of", "assume(", "implies", "tag(", "a causal score"):
        assert word not in triton, word
    stripped = strip_ghost_statements(source)
    assert stripped != source
    assert _kernel(stripped, name).triton_source(policy) == triton


# ---- Python API ------------------------------------------------------------------------------------
def test_verify_accepts_a_kernel_or_its_ir_and_a_dict_policy():
    k = _kernel(GEMM, "gemm_bias_act")
    a = verify(k, {"BM": 32, "BN": 32, "BK": 32}, {"M": 200, "N": 136, "K": 100})
    b = verify(k.ir, Policy.make(BM=32, BN=32, BK=32), {"M": 200, "N": 136, "K": 100})
    assert a.ok and b.ok and a.mode == b.mode == "specialized" and a.obligations == b.obligations
    c = verify(k, {"BM": 32, "BN": 32, "BK": 32}, {"M": 200})  # N and K stay symbolic
    assert c.ok and c.mode == "symbolic"
    json.dumps(a.to_json())
    with pytest.raises(ValueError, match="no shape symbol"):
        verify(k, None, {"Q": 3})


def test_json_rendering_of_a_violation():
    case = next(c for c in CASES if c.name == "batched gemm")
    src = case.mutants[0].apply(case.source)
    (res,) = verify_source(src, "bmm.py", case.make_policy(), case.shapes)
    data = json.loads(json.dumps(res.to_json()))
    assert data["ok"] is False and data["violations"]
    v = data["violations"][0]
    for key in ("kind", "line", "op", "source", "message", "executions", "values", "shapes", "related"):
        assert key in v
    ex = v["executions"][0]
    assert set(ex) >= {"program", "iterations", "element", "thread"}


def test_thread_ownership_follows_the_default_blocked_layout():
    from argus_inductor.layout.thread_value import default_blocked

    lay = default_blocked((32, 32), 4, elem_bytes=4)
    for coord in [(0, 0), (5, 2), (31, 31), (17, 8)]:
        w, lane, v = lay.owner_warp_lane(coord)
        got = owner((32, 32), list(coord), 4, 32)
        assert got == {"thread": 32 * w + lane, "warp": w, "lane": lane, "register": v}
    assert owner((3, 5), [0, 0], 4, 32) is None  # not a power-of-two tile


def test_missing_tag_is_a_checker_error_with_its_line():
    src = GEMM.replace("    store(C[rm, rn], acc)", "    assert_tag(tag_of(acc, \"Q\") >= 0)\n    store(C[rm, rn], acc)")
    (res,) = verify_source(src, "g.py", Policy.make(BM=32, BN=32, BK=32))
    assert not res.ok and res.errors and "no tag 'Q'" in res.errors[0] and "line 19" in res.errors[0]


def test_user_tags_and_assertions_are_checked_everywhere():
    """A tag assertion that holds is proven; one that fails somewhere gets that somewhere."""
    good = GEMM.replace("    store(C[rm, rn], acc)",
                        "    assert_tag((tag_of(acc, \"M\") < M) & (tag_of(acc, \"N\") == rn[None, :]))\n"
                        "    store(C[rm, rn], acc)")
    (res,) = verify_source(good, "g.py", Policy.make(BM=32, BN=32, BK=32), {"M": 200, "N": 136, "K": 100})
    assert res.ok, res.text()
    bad = GEMM.replace("    store(C[rm, rn], acc)", "    assert_tag(tag_of(acc, \"M\") < 190, \"rows below 190\")\n"
                                                   "    store(C[rm, rn], acc)")
    (res,) = verify_source(bad, "g.py", Policy.make(BM=32, BN=32, BK=32), {"M": 200, "N": 136, "K": 100})
    (v,) = res.violations
    assert v.kind == "assert-tag" and v.line == 19 and "rows below 190" in v.message
    assert v.values["acc.M"] >= 190 and v.executions[0].program["pm"] == 5


def test_cover_tags_state_what_a_reduction_covered():
    """tag_of(x, "sum(K).lo"/"sum(K).hi") reads the range x has summed over (here after the K loop)."""
    pol, shapes = Policy.make(BM=32, BN=32, BK=32), {"M": 200, "N": 136, "K": 100}
    good = GEMM.replace("    acc = acc + load(bias", "    assert_tag((tag_of(acc, \"sum(K).lo\") == 0) & "
                        "(tag_of(acc, \"sum(K).hi\") >= K))\n    acc = acc + load(bias")
    assert verify_source(good, "g.py", pol, shapes)[0].proved
    bad = GEMM.replace("    acc = acc + load(bias", "    assert_tag(tag_of(acc, \"sum(K).hi\") == K)\n"
                       "    acc = acc + load(bias")
    (v,) = verify_source(bad, "g.py", pol, shapes)[0].violations
    assert v.kind == "assert-tag" and v.line == 16
    wrong = GEMM.replace("    acc = acc + load(bias", "    assert_tag(tag_of(acc, \"max(K).hi\") == K)\n"
                         "    acc = acc + load(bias")
    assert "not a running max" in verify_source(wrong, "g.py", pol, shapes)[0].errors[0]


# ---- preconditions ---------------------------------------------------------------------------------
MOE_NO_ASSUME = MOE.replace("    assume((e >= 0) & (e < E))\n", "")


def test_scalar_index_needs_its_precondition():
    case = next(c for c in CASES if c.name == "moe expert step")
    (res,) = verify_source(MOE_NO_ASSUME, "moe.py", case.make_policy(), case.shapes)
    assert {v.kind for v in res.violations} == {"out-of-bounds"}
    assert "block_expert" in " ".join(v.source for v in res.violations) or res.violations[0].related
    (res,) = verify_source(MOE_NO_ASSUME, "moe.py", case.make_policy(), case.shapes,
                           assumptions=["0 <= block_expert < E"])
    assert res.ok, res.text()


def test_symbolic_proof_uses_stated_shape_constraints():
    case = next(c for c in CASES if c.name == "attention")
    (res,) = verify_source(case.source, "attn.py", case.make_policy(), None)
    assert not res.ok  # without H % HK == 0 the key/value head index can leave [0, HK)
    assert any(v.kind in ("out-of-bounds", "assert-tag", "reduction-complete") for v in res.violations)
    (res,) = verify_source(case.source, "attn.py", case.make_policy(), None, assumptions=case.assumptions)
    assert res.ok and res.mode == "symbolic", res.text()


def test_staging_hook_can_be_disabled_or_replaced():
    case = next(c for c in CASES if c.name == "gemm+bias+act")
    pol = Policy.make(BM=32, BN=32, BK=32, num_stages=4)
    shapes = dict(M=200, N=136, K=1000)
    assert verify_source(case.source, "g.py", pol, shapes)[0].ok
    bad = verify_source(case.source, "g.py", pol, shapes,
                        staging=lambda p, loop, ld: Staging(p.num_stages, p.num_stages + 1))[0]
    assert {v.kind for v in bad.violations} == {"pipeline-stage"}
    v = bad.violations[0]
    assert "ring buffer" in v.message and "mma at line 15" in v.message and v.line in (13, 14)
    # a short K loop never gets far enough ahead to wrap the ring
    assert verify_source(case.source, "g.py", pol, dict(M=200, N=136, K=100),
                         staging=lambda p, loop, ld: Staging(p.num_stages, p.num_stages + 1))[0].ok
    assert verify_source(case.source, "g.py", pol, shapes, staging=None)[0].ok


# ---- the command line ---------------------------------------------------------------------------------
# the element-wise GEMV of test_accumulation_bugs with a running maximum in place of its sum (its lanes past K -inf)
GEMV_MAX = GEMV.replace("acc = acc + a * x[None, :]", "acc = maximum(acc, where(rk[None, :] < K, a * x[None, :], -inf))")


def test_cli_verify_ok_violation_json_and_errors(tmp_path: Path, capsys):
    good = tmp_path / "gemm.py"
    good.write_text(GEMM)
    assert main(["verify", str(good), "--shape", "M=200,N=136,K=100", "--policy", "BM=32,BN=32,BK=32"]) == 0
    assert "gemm_bias_act: OK" in capsys.readouterr().out

    bad = tmp_path / "bad.py"
    bad.write_text(GEMM.replace("range(0, K, BK)", "range(0, K - K % BK, BK)"))
    assert main(["verify", str(bad), "--shape", "M=200", "--shape", "N=136,K=100"]) == 1
    out = capsys.readouterr().out
    assert "reduction-complete violated" in out and "never included K index" in out

    assert main(["verify", str(bad), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["results"][0]["violations"][0]["kind"] == "reduction-complete"

    assert main(["verify", str(bad), "--kernel", "nope"]) == 2  # a typo is an error, never "proved"
    assert "defines no such kernel" in capsys.readouterr().err

    # a running maximum summed across the indices the loop mixed: undecided, so not proved, and not a violation
    unfollowed = tmp_path / "unfollowed.py"
    unfollowed.write_text(GEMV_MAX)
    assert main(["verify", str(unfollowed), "--shape", "M=5,K=37"]) == 3
    out = capsys.readouterr().out
    assert "NOT PROVED" in out and "undecided" in out and "gemv_columns: OK" not in out


def test_cli_never_executes_the_file(tmp_path: Path, capsys):
    marker = tmp_path / "executed"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\n" + GEMM)
    assert main(["verify", str(evil)]) == 2
    assert not marker.exists()
    assert "top-level" in capsys.readouterr().err


# ---- the library ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["specialized", "symbolic"])
@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_kernel_has_no_false_alarm(name: str, mode: str):
    kernels = library_kernels()
    if name not in kernels:
        pytest.skip(f"{name} is not in the library (renamed?)")
    pol, shapes, pre = LIBRARY[name]
    k = kernels[name]
    if set(pol) - {p.name for p in k.ir.constexprs} or set(shapes) - set(k.ir.symbols):
        pytest.skip(f"{name}'s signature changed; update LIBRARY")
    res = verify(k, Policy.make(**pol), shapes if mode == "specialized" else None, assumptions=pre)
    assert res.ok and res.proved, res.text()
