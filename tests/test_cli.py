"""The `argus` command's front door: every `--help` answers without importing torch, and a user's mistake with
`argus verify` (a kernel, shape or policy name the file does not declare, a value that is not a number, a file that
cannot be read) is said in one line with exit status 2, never a traceback, never a silent exit 0."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from argus_inductor.cli import build_parser, main
from tests.invariants.suite import GEMM

ROOT = Path(__file__).resolve().parents[1]


def _subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def test_every_help_exits_0_without_importing_torch() -> None:
    """`argus --help` and each subcommand's `--help` in one fresh interpreter: exit 0, usage printed, and torch
    (seconds to import) never loaded."""
    commands = _subcommands()
    assert {"verify", "warmup", "cache", "bench", "config"} <= set(commands)
    probe = (
        "import sys, io, contextlib\n"
        "from argus_inductor.cli import main\n"
        "for argv in [[]] + [[c] for c in sys.argv[1:]]:\n"
        "    buf = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(buf):\n"
        "            main([*argv, '--help'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, (argv, e.code)\n"
        "    else:\n"
        "        raise AssertionError(f'{argv} --help did not exit')\n"
        "    assert 'usage: argus' in buf.getvalue(), argv\n"
        "    assert 'torch' not in sys.modules, f'{argv} --help imported torch'\n"
        "    assert 'triton' not in sys.modules, f'{argv} --help imported triton'\n"
        "print('ok', len(sys.argv) - 1)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ARGUS_INTERPRET", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", probe, *commands], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"ok {len(commands)}"


def test_warmup_help_documents_the_shapes_file() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["warmup"].format_help()
    assert "shapes file" in text and '"op": "gemm"' in text and '"op": "attention"' in text


@pytest.fixture
def gemm_file(tmp_path: Path) -> Path:
    p = tmp_path / "gemm.py"
    p.write_text(GEMM)
    return p


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return err


def test_verify_a_kernel_the_file_does_not_define_is_an_error_naming_the_ones_it_does(
        gemm_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    buggy = gemm_file.with_name("bad.py")
    buggy.write_text(GEMM.replace("range(0, K, BK)", "range(0, K - K % BK, BK)"))
    for f in (gemm_file, buggy):  # a typo must never read as "proved", even on a file with a bug
        assert main(["verify", str(f), "--kernel", "gemm_bias"]) == 2
        err = _err(capsys)
        assert "gemm_bias" in err and "defines no such kernel" in err and "gemm_bias_act" in err
    assert main(["verify", str(gemm_file), "--kernel", "gemm_bias_act"]) == 0
    assert "gemm_bias_act: OK" in capsys.readouterr().out


@pytest.mark.parametrize("argv,words", [
    (["--shape", "Q=5"], ["--shape Q", "shape symbols: K, M, N"]),
    (["--shape", "BM=64"], ["--shape BM", "shape symbols: K, M, N", "for --policy: ACT, BK, BM, BN"]),
    (["--policy", "BQ=64"], ["--policy BQ", "constexprs: ACT, BK, BM, BN", "num_warps"]),
    (["--policy", "M=64"], ["--policy M", "for --shape: K, M, N"]),
    (["--shape", "M=abc"], ["--shape M=abc", "'abc' is not an integer"]),
    (["--shape", "M=16,N=abc"], ["--shape N=abc", "'abc' is not an integer"]),
    (["--shape", "M=0"], ["--shape M=0", ">= 1"]),
    (["--shape", "M=5", "--shape", "M=6"], ["gives M twice"]),
    (["--shape", "M"], ["NAME=VALUE", "'M'"]),
    (["--policy", "BM=big"], ["--policy BM=big", "integers"]),
    (["--assume", "M >"], ["--assume 'M >'", "not a Python expression"]),
    (["--assume", "Q > 1"], ["Q is not a shape symbol", "shape symbols: K, M, N"]),
    (["--timeout-ms", "0"], ["--timeout-ms"]),
])
def test_verify_names_a_wrong_option_and_what_the_kernel_declares(gemm_file: Path, argv: list[str],
                                                                   words: list[str],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(gemm_file), *argv]) == 2
    err = _err(capsys)
    assert err.startswith("argus verify: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)


def test_verify_files_that_cannot_be_read_are_said_in_words(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00kernel")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "syntax.py").write_text("def (:\n")
    (tmp_path / "plain.py").write_text("import math\n")
    cases = {"missing.py": "no such file", ".": "is a directory", "binary.py": "not UTF-8 text",
             "empty.py": "is empty", "syntax.py": "syntax error", "plain.py": "is not allowed in kernel source"}
    for name, words in cases.items():
        assert main(["verify", str(tmp_path / name)]) == 2, name
        err = _err(capsys)
        assert err.startswith("argus verify: ") and words in err, (name, err)


def test_usage_errors_of_every_command_exit_2_without_a_traceback(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["verify"], ["nope"], ["cache", "frob"], ["warmup", "--time-limit", "x"], ["bench", "--limit", "x"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
        _err(capsys)
