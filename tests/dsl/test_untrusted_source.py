"""Kernel text from outside the process (an LLM's reply, a cache file, a file given to `argus verify`) is read only as
the DSL: a function is a kernel only under the DSL's own @kernel, and no text, however long, deep or loop-heavy, makes
reading or checking it fail with anything but a DSLError or take unbounded time (argus_inductor/dsl/limits.py)."""
from __future__ import annotations

import os
import time

import pytest

from argus_inductor.dsl import DSLError, Policy, kernels_from_source
from argus_inductor.dsl.limits import MAX_NESTING, MAX_UNROLL, unrolled_bodies
from argus_inductor.dsl.lowering import resolve_consts

HEADER = "from argus_inductor.dsl import *\n\n\n"
BODY = '''def copy(X: Tensor("N"), Y: Tensor("N"), BLOCK: constexpr = 64):
    (pid,) = tile_grid(cdiv(N, BLOCK))
    r = pid * BLOCK + arange(BLOCK)
    store(Y[r], load(X[r]))
'''
GOOD = HEADER + "@kernel\n" + BODY


def line_of(src: str, needle: str) -> int:
    """The last line holding `needle`."""
    return max(i for i, line in enumerate(src.splitlines(), 1) if needle in line)


def rejected(src: str, message: str, marker: str) -> DSLError:
    with pytest.raises(DSLError) as info:
        kernels_from_source(src, filename="reply.py")
    err = info.value
    assert message in err.message, err.message
    assert err.line == line_of(src, marker), (err.line, str(err))
    assert err.fix and len(err.fix) > 10 and f"reply.py:{err.line}" in str(err)
    return err


# ---- decorators ---------------------------------------------------------------------------------------------------
SENTINEL = "/tmp/argus-dslsafe-decorator-ran"

DECORATORS = [
    ("open", HEADER + "@open('x', 'w')\n" + BODY, "not with the DSL's @kernel", "@open"),
    ("os.system", HEADER + f"@__import__('os').system('touch {SENTINEL}')\n" + BODY, "not with the DSL's @kernel",
     "@__import__"),
    ("a call of kernel", HEADER + "@kernel()\n" + BODY, "not with the DSL's @kernel", "@kernel()"),
    ("kernel and another", HEADER + "@kernel\n@open('x', 'w')\n" + BODY, "has 2 decorators", "@kernel"),
    ("none", HEADER + BODY, "is not decorated with @kernel", "def copy"),
    ("kernel never imported", "from argus_inductor.dsl import Tensor, constexpr, tile_grid, cdiv, arange, store, "
     "load\n\n\n@kernel\n" + BODY, "'kernel' is not imported from argus_inductor.dsl", "@kernel"),
    ("kernel imported as open", HEADER + "from argus_inductor.dsl import kernel as open\n\n\n@open\n" + BODY,
     "imports the DSL name 'kernel' as 'open'", "kernel as open"),
    ("a DSL name imported as a builtin's", "from argus_inductor.dsl import *\nfrom argus_inductor.dsl import load as "
     "exec\n\n\n@kernel\n" + BODY, "imports the DSL name 'load' as 'exec'", "load as exec"),
    ("the DSL module as a builtin's name", "import argus_inductor.dsl as open\n" + HEADER + "@open.kernel\n" + BODY,
     "binds the DSL module to 'open'", "import argus_inductor.dsl as open"),
    ("return annotation", HEADER + "@kernel\n" + BODY.replace("= 64):", "= 64) -> __import__('os').system('x'):"),
     "return annotation", "def copy"),
    ("runtime parameter default", HEADER + "@kernel\n" + BODY.replace('Y: Tensor("N")', 'Y: Tensor("N") = open("x")'),
     "parameter 'Y' has a default", "def copy"),
    ("kernel defined twice", GOOD + "\n\n@kernel\n" + BODY, "'copy' is defined twice", "def copy(X"),
]


@pytest.mark.parametrize("name,src,message,marker", DECORATORS, ids=[d[0] for d in DECORATORS])
def test_a_function_is_a_kernel_only_under_the_dsl_kernel_decorator(name, src, message, marker):
    rejected(src, message, marker)
    assert not os.path.exists(SENTINEL)


@pytest.mark.parametrize("src", [
    GOOD,
    GOOD.replace("def copy", "def copy") + "\n\n@kernel\n" + BODY.replace("def copy", "def copy2"),
    "from argus_inductor.dsl import Tensor, constexpr, tile_grid, cdiv, arange, store, load, kernel\n\n\n@kernel\n"
    + BODY,
    "from argus_inductor.dsl import *\nimport argus_inductor.dsl as dsl\n\n\n@dsl.kernel\n" + BODY,
    "from argus_inductor.dsl import *\nimport argus_inductor.dsl\n\n\n@argus_inductor.dsl.kernel\n" + BODY,
    "from argus_inductor.dsl import *\nfrom argus_inductor.dsl import load as load\n\n\n@kernel\n" + BODY,
    HEADER + "@kernel\n" + BODY.replace("= 64):", "= 64) -> None:"),
], ids=["star", "two kernels", "names", "module alias", "module", "alias to itself", "returns None"])
def test_the_dsl_kernel_decorator_in_its_spellings_is_accepted(src):
    assert "copy" in kernels_from_source(src)


# ---- long and deep text -------------------------------------------------------------------------------------------
def _with_line(line: str) -> str:
    """GOOD with `line` (using x, a loaded tile) before its store, which then stores y."""
    return GOOD.replace("    store(Y[r], load(X[r]))\n", f"    x = load(X[r])\n{line}\n    store(Y[r], y)\n")


def _balanced(terms: int) -> str:
    parts = ["x"] * terms
    while len(parts) > 1:
        parts = [f"({a} + {b})" for a, b in zip(parts[::2], parts[1::2])] + (parts[-1:] if len(parts) % 2 else [])
    return parts[0]


LONG = [
    ("20,000-term sum", "    y = " + " + ".join(["x"] * 20_000)),
    ("20,000-term balanced sum", "    y = " + _balanced(20_000)),
    ("5,000 unary minus", "    y = " + "-" * 5000 + "x"),
    ("calls nested past the bound", "    y = " + "exp(" * (MAX_NESTING + 5) + "x" + ")" * (MAX_NESTING + 5)),
    ("30,000-long attribute chain", "    y = x" + ".T" * 30_000),
]


@pytest.mark.parametrize("name,line", LONG, ids=[x[0] for x in LONG])
def test_long_or_deep_text_is_a_dsl_error_never_a_recursion_error(name, line):
    src = _with_line(line)
    t0 = time.perf_counter()
    with pytest.raises(DSLError) as info:
        kernels_from_source(src, filename="reply.py")
    assert time.perf_counter() - t0 < 30
    err = info.value
    assert "fix:" in str(err) and err.filename == "reply.py"
    assert any(w in err.message for w in ("deeper", "larger", "nested", "long")), err.message


def test_a_kernel_near_the_nesting_bound_reads():
    depth = MAX_NESTING - 12  # the statement, assignment and call levels above the innermost x
    kernels_from_source(_with_line("    y = " + "exp(" * depth + "x" + ")" * depth))


def test_the_source_size_is_bounded():
    with pytest.raises(DSLError, match="larger than"):
        kernels_from_source(GOOD + "\n" + "#" * (2 << 20) + "\n")


def test_every_entry_point_reports_long_text_as_a_dsl_error(tmp_path, capsys):
    """kernels_from_source's callers: the checker's verify_source, `argus verify`, the agent's reply reader."""
    from argus_inductor.agent import Problem, synthesizer
    from argus_inductor.cli import main
    from argus_inductor.invariants.api import verify_source
    from argus_inductor.specs import spec
    from argus_inductor.specs.plan import Plan

    src = _with_line("    y = " + " + ".join(["x"] * 20_000))
    with pytest.raises(DSLError):
        verify_source(src, "reply.py")
    path = tmp_path / "long.py"
    path.write_text(src)
    assert main(["verify", str(path)]) == 2
    assert "argus verify:" in capsys.readouterr().err
    problem = Problem("gemm", "", {"N": 24, "K": 40, "M": 20}, "float32")
    reply = f"```python\n{src}```\n"
    got = synthesizer.from_reply(spec("gemm"), problem, reply, Plan({}))
    assert isinstance(got, synthesizer.Rejection) and "DSL frontend rejected" in got.reason


# ---- unrolled loops -----------------------------------------------------------------------------------------------
def _loop(header: str, params: str = "") -> str:
    return GOOD.replace("BLOCK: constexpr = 64)", f"BLOCK: constexpr = 64{params})").replace(
        "    store(Y[r], load(X[r]))\n",
        f"    acc = load(X[r]).to(float32)\n{header}\n        acc = acc + 1.0\n    store(Y[r], acc)\n")


def test_a_literal_static_range_past_the_bound_is_rejected_when_read():
    t0 = time.perf_counter()
    src = _loop("    for _i in static_range(100000000):")
    err = rejected(src, "unroll to 100,000,000 loop bodies", "static_range(100000000)")
    assert "range(" in err.fix
    assert time.perf_counter() - t0 < 10


def test_nested_static_loops_multiply():
    src = _loop("    for _i in static_range(100):\n        for _j in static_range(100):").replace(
        "        acc = acc + 1.0", "            acc = acc + 1.0")
    rejected(src, "100 times 100, nested", "static_range(100):")


def test_a_static_range_of_zero_step_is_rejected():
    rejected(_loop("    for _i in static_range(0, 4, 0):"), "steps by zero", "static_range(0, 4, 0)")


def test_a_constexpr_static_range_past_the_bound_is_rejected_before_the_checker_unrolls_it():
    """The bound is known only with the policy: verify() and the lowering reject it (resolve_consts), fast."""
    from argus_inductor.invariants.api import verify

    k = kernels_from_source(_loop("    for _i in static_range(STEPS):", ", STEPS: constexpr = 100000000"))["copy"]
    t0 = time.perf_counter()
    with pytest.raises(DSLError, match="more than the 4,096"):
        verify(k, Policy.make(), {"N": 100})
    with pytest.raises(DSLError, match="more than the 4,096"):
        k.triton_source(Policy.make(), "interpret")
    assert time.perf_counter() - t0 < 10
    small = verify(k, Policy.make(STEPS=3), {"N": 100})  # the same kernel within the bound is checked
    assert small.ok, small.text()


def test_unrollable_range_counts_its_static_steps():
    src = GOOD.replace("BLOCK: constexpr = 64)", "BLOCK: constexpr = 64, STEPS: constexpr = 0)").replace(
        "    store(Y[r], load(X[r]))\n",
        "    acc = load(X[r]).to(float32)\n    for _k in unrollable_range(0, N, 1, STEPS):\n        acc = acc + 1.0\n"
        "    store(Y[r], acc)\n")
    k = kernels_from_source(src)["copy"]
    assert unrolled_bodies(k.ir, resolve_consts(k.ir, Policy.make(STEPS=0))) == 0
    assert unrolled_bodies(k.ir, resolve_consts(k.ir, Policy.make(STEPS=7))) == 7
    with pytest.raises(DSLError, match="unroll to"):
        resolve_consts(k.ir, Policy.make(STEPS=MAX_UNROLL + 1))


def test_library_kernels_fit_the_unroll_bound_comfortably():
    """The largest static unrolling the library asks for: a GEMV's rows times its static K steps, and a 7x7x7
    pooling window, each well inside MAX_UNROLL (the checker and Triton unroll every body)."""
    from argus_inductor.kernels.gemm import gemm_epilogue
    from argus_inductor.kernels.policies import GEMV_MAX_STATIC_STEPS
    from argus_inductor.kernels.pool import avg_pool_kernel, max_pool_kernel

    gemv = Policy.make(BM=64, BN=16, BK=256, GEMV=1, KSTEPS=GEMV_MAX_STATIC_STEPS)
    assert unrolled_bodies(gemm_epilogue.ir, resolve_consts(gemm_epilogue.ir, gemv)) * 8 <= MAX_UNROLL
    for k in (max_pool_kernel, avg_pool_kernel):
        window = Policy.make(KD=7, KH=7, KW=7)
        assert unrolled_bodies(k.ir, resolve_consts(k.ir, window)) * 8 <= MAX_UNROLL
