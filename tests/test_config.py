"""Configuration in one place: every ARGUS_* variable the code reads is a setting of argus_inductor.config, every
setting is read, README's table is the one config.py generates, and a malformed value is refused with the name of
the variable or option."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from argus_inductor import config

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<!-- config-table:start -->", "<!-- config-table:end -->")


def _env_names_in(paths: list[Path]) -> dict[str, list[str]]:
    """String constants of the form ARGUS_NAME (what the code looks up in the environment), by file."""
    found: dict[str, list[str]] = {}
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"ARGUS_[A-Z0-9_]*[A-Z0-9]", node.value):  # a prefix ("ARGUS_LLM_") is no name
                found.setdefault(node.value, []).append(str(p.relative_to(ROOT)))
    return found


def test_every_variable_the_code_reads_is_a_setting_and_every_setting_is_read() -> None:
    sources = [p for p in (ROOT / "argus_inductor").rglob("*.py") if p.name != "config.py"]
    read = _env_names_in(sources + list((ROOT / "benchmarks").rglob("*.py")) + list((ROOT / "tests").rglob("*.py")))
    names = {s.env for s in config.SETTINGS}
    unknown = {k: v for k, v in read.items() if k not in names}
    assert not unknown, f"ARGUS_* variables read outside config.SETTINGS: {unknown}"
    by_option = {s.env for s in config.SETTINGS if s.option}  # read through config.Options
    unread = names - set(read) - by_option
    assert not unread, f"settings nothing reads: {sorted(unread)}"


def test_readme_carries_the_generated_table() -> None:
    text = (ROOT / "README.md").read_text()
    start, end = (text.index(m) for m in MARKERS)
    body = text[start + len(MARKERS[0]):end].strip("\n") + "\n"
    assert body == config.table_markdown(), "README's table is stale: `argus config --markdown` prints it"


def test_options_resolve_names_what_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARGUS_CUDAGRAPH_COPY_MB", "lots")
    with pytest.raises(ValueError, match="ARGUS_CUDAGRAPH_COPY_MB must be a number"):
        config.Options.resolve()
    monkeypatch.setenv("ARGUS_CUDAGRAPH_COPY_MB", "-1")
    with pytest.raises(ValueError, match="ARGUS_CUDAGRAPH_COPY_MB must be >= 0"):
        config.Options.resolve()
    monkeypatch.delenv("ARGUS_CUDAGRAPH_COPY_MB")
    monkeypatch.setenv("ARGUS_ON_MISS", "sometimes")
    with pytest.raises(ValueError, match="ARGUS_ON_MISS must be one of"):
        config.Options.resolve()
    monkeypatch.delenv("ARGUS_ON_MISS")
    with pytest.raises(ValueError, match="unknown Argus option 'on_mis'"):
        config.Options.resolve({"on_mis": "default"})
    with pytest.raises(ValueError, match="option 'tune_seconds' must be a number"):
        config.Options.resolve({"tune_seconds": "fast"})
    monkeypatch.setenv("ARGUS_REPORT", "off")
    monkeypatch.setenv("ARGUS_TUNE_CANDIDATES", "7")
    opts = config.Options.resolve({"argus_ops": "all"})
    assert opts.report is False and opts.tune_candidates == 7 and opts.enabled_ops == config.OPS


def test_every_option_has_one_setting_with_its_default() -> None:
    from dataclasses import fields

    by_option = {s.option: s for s in config.SETTINGS if s.option}
    assert {f.name for f in fields(config.Options)} == set(by_option)
    for f in fields(config.Options):
        assert f.default == by_option[f.name].default, f.name


def test_argus_config_says_what_auto_comes_to_here(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from argus_inductor.cli import main

    monkeypatch.delenv("ARGUS_CHECKER_WORKERS", raising=False)
    assert main(["config"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "ARGUS_CHECKER_WORKERS" in ln)
    assert f"auto ({config.checker_workers('auto')} here)" in line
    monkeypatch.setenv("ARGUS_CHECKER_WORKERS", "3")
    assert main(["config"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "ARGUS_CHECKER_WORKERS" in ln)
    assert " 3 " in line and "(set)" in line
