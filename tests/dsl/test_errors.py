"""Bad DSL programs are rejected when the kernel is defined, with one exception type that carries
the line, the offending source and a one-sentence fix; never a traceback from inside the compiler."""
from __future__ import annotations

import importlib.util
import textwrap

import pytest

from argus_inductor.dsl import DSLError, kernels_from_source

HEADER = "from argus_inductor.dsl import *\n\n@kernel\n"
GOOD_BODY = """\
def k(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"), BM: constexpr, BN: constexpr, BK: constexpr):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    store(C[rm, rn], acc)
"""


def mutate(old: str, new: str) -> str:
    assert old in GOOD_BODY, old
    return HEADER + GOOD_BODY.replace(old, new, 1)


def line_of(src: str, needle: str) -> int:
    return next(i for i, line in enumerate(src.splitlines(), 1) if needle in line)


# (name, source, text that must appear in the message, the line's marker)
BAD = [
    ("unknown name", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32) + bias"),
     "unknown name 'bias'", "+ bias"),
    ("tile shape mismatch", mutate("rk = k + arange(BK)", "rk = k + arange(BK) + rm"),
     "do not broadcast", "+ rm"),
    ("tile size not a compile-time constant", mutate("rm = pm * BM + arange(BM)", "rm = pm * BM + arange(M)"),
     "compile-time constant", "arange(M)"),
    ("while loop", mutate("    store(C[rm, rn], acc)\n", "    while acc:\n        pass\n    store(C[rm, rn], acc)\n"),
     "unsupported Python construct 'while'", "while acc"),
    ("mma on integer tiles", mutate("acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)",
                                    "acc = mma(rk[:, None] + rm[None, :], load(B[rk, rn]), acc)"),
     "tensor cores take", "acc = mma(rk"),
    ("mma inner extents", mutate("acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)",
                                 "acc = mma(load(A[rm, rk]), load(B[rn, rk]), acc)"),
     "inner extents differ", "acc = mma"),
    ("loop-carried type change", mutate("acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)",
                                        "acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc).to(bfloat16)"),
     "changes type in the loop", "for k in range"),
    ("view rank", mutate("store(C[rm, rn], acc)", "store(C[rm], acc)"), "has 2 dimensions", "store(C[rm]"),
    ("view used as value", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32)\n    a = A[rm, rm]"),
     "must be read with load", "a = A[rm, rm]"),
    ("if on a tile", mutate("    store(C[rm, rn], acc)\n", "    if rm > 3:\n        acc = acc * 2.0\n    store(C[rm, rn], acc)\n"),
     "scalar condition", "if rm > 3"),
    ("unrolled_range over a runtime bound", mutate("for k in range(0, K, BK):", "for k in unrolled_range(0, K, BK):"),
     "unrolled_range bounds must be compile-time constants", "unrolled_range(0, K, BK)"),
    ("tile_grid in a loop", mutate("        rk = k + arange(BK)", "        rk = k + arange(BK)\n        q = tile_grid(4)"),
     "top level", "q = tile_grid(4)"),
    ("store shape", mutate("store(C[rm, rn], acc)", "store(C[rm, rn], trans(acc))"), "store of a", "store(C"),
    ("python assert", mutate("    store(C[rm, rn], acc)\n", "    assert M > 0\n    store(C[rm, rn], acc)\n"),
     "unsupported Python construct 'assert'", "assert M > 0"),
    ("tag_of outside an assertion", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32)\n"
                                           "    t = tag_of(acc, \"K\")"), "only meaningful inside", "t = tag_of"),
    ("reduction axis", mutate("store(C[rm, rn], acc)", "store(C[rm, rn], sum(acc, 2)[:, None])"),
     "out of range", "sum(acc, 2)"),
    ("loop-local name used after the loop", mutate("store(C[rm, rn], acc)", "store(C[rm, rn], acc + rk[None, :])"),
     "only defined inside the block", "acc + rk"),
    ("power operator", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32) ** 2"),
     "** operator", "** 2"),
    ("missing annotation", mutate("C: Tensor(\"M\", \"N\")", "C"), "has no annotation", "def k("),
    ("unknown keyword", mutate("acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)",
                               "acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc, precision=1)"),
     "has no argument 'precision'", "precision=1"),
    ("mixed mma dtypes", mutate("acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)",
                                "acc = mma(load(A[rm, rk]).to(float16), load(B[rk, rn]).to(bfloat16), acc)"),
     "different dtypes", "acc = mma"),
    ("no grid", mutate("pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))", "pm, pn = 0, 0"),
     "never declares its launch grid", "def k("),
    ("lambda", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32)\n    f = lambda x: x"),
     "lambda", "f = lambda"),
    ("non-power-of-two literal extent is fine, zero is not", mutate("rm = pm * BM + arange(BM)",
                                                                    "rm = pm * BM + arange(0)"),
     "must be positive", "arange(0)"),
    ("bitcast changes width", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32)\n"
                                     "    w = bitcast(acc, int64)"), "changes the width", "bitcast(acc"),
    ("bitcast of an unknown dtype", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32)\n"
                                           "    w = bitcast(load(A[rm, 0]), int32)"), "needs known dtypes",
     "bitcast(load"),
    ("activation kind from a runtime value", mutate("store(C[rm, rn], acc)", "store(C[rm, rn], activation(acc, M))"),
     "activation kind must be an integer literal", "activation(acc, M)"),
    ("activation kind out of range", mutate("store(C[rm, rn], acc)", "store(C[rm, rn], activation(acc, 7))"),
     "activation kind 7 is not one of 0..4", "activation(acc, 7)"),
    ("python helper call", mutate("acc = zeros((BM, BN), float32)", "acc = zeros((BM, BN), float32)\n"
                                  "    n = len(acc)"), "unknown function 'len'", "n = len(acc)"),
]


@pytest.mark.parametrize("name,src,message,marker", BAD, ids=[b[0] for b in BAD])
def test_bad_program_is_rejected_with_line_and_fix(name, src, message, marker):
    with pytest.raises(DSLError) as info:
        kernels_from_source(src, filename="bad.py")
    err = info.value
    assert message in err.message, f"{name}: got {err.message!r}"
    assert err.line == line_of(src, marker), f"{name}: line {err.line}, expected {line_of(src, marker)}"
    assert err.fix and err.fix[-1] not in ",;" and len(err.fix) > 10
    assert "internal compiler error" not in err.message
    text = str(err)
    assert f"bad.py:{err.line}" in text and "fix:" in text


def test_good_program_compiles():
    kernels = kernels_from_source(HEADER + GOOD_BODY)
    assert list(kernels) == ["k"]


def test_decorator_error_points_at_the_users_file(tmp_path):
    src = HEADER + GOOD_BODY.replace("rm = pm * BM + arange(BM)", "rm = pm * BM + arange(M)")
    path = tmp_path / "user_kernel.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("user_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    with pytest.raises(DSLError) as info:
        spec.loader.exec_module(mod)
    assert info.value.filename == str(path)
    assert info.value.line == line_of(src, "arange(M)")
    assert info.value.__traceback__ is None or all(
        "dsl/frontend" not in f.co_filename.replace("\\", "/") for f in _frames(info.value.__traceback__))


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame.f_code
        tb = tb.tb_next


def test_source_from_an_llm_may_not_import_anything_else():
    with pytest.raises(DSLError, match="import of 'os' is not allowed"):
        kernels_from_source("import os\n" + HEADER + GOOD_BODY)
    with pytest.raises(DSLError, match="top-level 'Assign'"):
        kernels_from_source(HEADER + GOOD_BODY + "\nx = __import__('os').system('true')\n")


def test_source_is_never_executed(tmp_path):
    marker = tmp_path / "ran"
    body = textwrap.dedent(f"""\
        from argus_inductor.dsl import *

        @kernel
        def k(X: Tensor("N"), Y: Tensor("N"), B: constexpr = 16):
            (p,) = tile_grid(cdiv(N, B))
            r = p * B + arange(B)
            store(Y[r], load(X[r]))
            open({str(marker)!r}, "w").write("x")
        """)
    with pytest.raises(DSLError, match="unknown function 'open'"):
        kernels_from_source(body)
    assert not marker.exists()


def test_syntax_error_is_a_dsl_error():
    with pytest.raises(DSLError, match="syntax error"):
        kernels_from_source(HEADER + "def k(:\n    pass\n")
