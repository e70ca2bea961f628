"""Fixtures for the backend tests: a fresh kernel cache per test, a clean report and Dynamo state."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from argus_inductor import ops
from argus_inductor.config import Options
from argus_inductor.graph import module_floats
from argus_inductor.runtime import reporting as report_mod


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: compiles a transformers model (tens of seconds on the CPU)")


@pytest.fixture(autouse=True)
def default_options() -> Iterator[None]:
    """Every test starts from the options the environment gives (a test that sets others leaves no trace)."""
    ops.set_active_options(Options.resolve())
    yield
    ops.set_active_options(Options.resolve())


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """ARGUS_CACHE_DIR pointed at an empty folder; no remembered plans; an empty report."""
    root = tmp_path / "argus-cache"
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(root))
    ops.set_active_options(Options.resolve())
    ops.forget_plans()
    report_mod.clear()
    module_floats.forget()
    torch._dynamo.reset()
    yield root
    ops.forget_plans()
