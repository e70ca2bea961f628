"""The versions the project declares are the ones it tests: pyproject's bounds admit this environment's torch and
Triton (what the suite runs on) and README names the same bounds."""
from __future__ import annotations

import re
from pathlib import Path

import torch
import triton
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _bounds() -> dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text()
    deps = text[text.index("dependencies = ["):text.index("]", text.index("dependencies = ["))]
    return {m.group(1): m.group(2) for m in re.finditer(r'"(torch|triton)([^"]+)"', deps)}


def test_declared_bounds_are_closed_and_admit_the_tested_versions() -> None:
    bounds = _bounds()
    assert set(bounds) == {"torch", "triton"}
    for name, version in (("torch", torch.__version__), ("triton", triton.__version__)):
        spec = SpecifierSet(bounds[name])
        assert any(s.operator == "<" for s in spec), f"{name}: an upper bound (only tested versions are declared)"
        assert Version(version.split("+")[0]) in spec, f"{name} {version} is outside the declared {bounds[name]}"
    readme = (ROOT / "README.md").read_text()
    for name, spec in bounds.items():
        assert f"`{name}{spec}`" in readme, f"README does not name {name}'s bounds {spec}"
