"""The knowledge base: optimization techniques as data (kb/*.md, YAML front matter + Markdown).

Each entry says what a technique is, when it applies (ops, shape regimes, hardware), its knobs and
their ranges (knob names are Policy fields or constexpr parameters of the kernels), the invariants a
kernel using it must carry, and its failure modes: the counterexample each produces and the fix.
The offline policy reads the knobs (ranges and preferred values) and the failure modes (a `match`
pattern over an outcome's text and an `action` that edits the plan); the LLM policy renders the
applicable entries into its prompt; templates and rules name the entries they implement.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import config
from .frontmatter import parse

HARDWARE = ("hopper", "cdna3")
ACTIONS = ("set", "halve", "double", "decrement", "increment")


class KBError(ValueError):
    pass


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[Any, ...]
    prefer: Any = None  # a value, or {regime: value}

    def preferred(self, regime: str) -> Any:
        if isinstance(self.prefer, dict):
            return self.prefer.get(regime, self.prefer.get("any"))
        return self.prefer


@dataclass(frozen=True)
class FailureMode:
    name: str
    counterexample: str   # what the checker (or the launch/test) says when this goes wrong
    fix: str              # in words, for a person and the LLM
    match: str            # regex over the outcome text (violation kind, message, error)
    action: dict[str, Any] = field(default_factory=dict)  # plan edit for the offline policy

    def matches(self, text: str) -> bool:
        return bool(self.match) and re.search(self.match, text, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Entry:
    id: str
    title: str
    summary: str
    ops: tuple[str, ...]
    regimes: tuple[str, ...]
    hardware: tuple[str, ...]
    when: str
    knobs: tuple[Knob, ...]
    invariants: tuple[str, ...]
    failure_modes: tuple[FailureMode, ...]
    used_by: tuple[str, ...]
    body: str
    path: str = ""
    dtypes: tuple[str, ...] = ()   # empty: any dtype

    def applies(self, op: str, regime: str | None = None, hardware: str | None = None,
                dtype: str | None = None) -> bool:
        if op not in self.ops:
            return False
        if dtype is not None and self.dtypes and dtype not in self.dtypes:
            return False
        if regime is not None and "any" not in self.regimes and regime not in self.regimes:
            return False
        return hardware is None or hardware in self.hardware

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    def render(self, regime: str | None = None) -> str:
        """The compact form the LLM prompt holds."""
        lines = [f"### {self.id}: {self.title}", self.summary.strip(), f"When: {self.when.strip()}"]
        if self.knobs:
            ks = []
            for k in self.knobs:
                pref = k.preferred(regime or "any")
                ks.append(f"{k.name} in {list(k.values)}" + (f" (prefer {pref})" if pref is not None else ""))
            lines.append("Knobs: " + "; ".join(ks))
        if self.invariants:
            lines.append("Invariants: " + " | ".join(self.invariants))
        for f in self.failure_modes:
            lines.append(f"Failure '{f.name}': counterexample: {f.counterexample.strip()} -> fix: {f.fix.strip()}")
        return "\n".join(lines)


def _tuple(v: Any, what: str, path: str) -> tuple[Any, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise KBError(f"{path}: '{what}' must be a list")
    return tuple(v)


def entry_from_data(data: dict[str, Any], body: str, path: str = "") -> Entry:
    for key in ("id", "title", "summary", "ops", "regimes", "hardware", "when", "knobs", "invariants",
                "failure_modes", "used_by"):
        if key not in data:
            raise KBError(f"{path}: missing field '{key}'")
    knobs = []
    for name, spec in (data["knobs"] or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("values"), list) or not spec["values"]:
            raise KBError(f"{path}: knob '{name}' needs a non-empty 'values' list")
        knobs.append(Knob(str(name), tuple(spec["values"]), spec.get("prefer")))
    modes = []
    for f in data["failure_modes"] or []:
        missing = [k for k in ("name", "counterexample", "fix", "match") if k not in f]
        if missing:
            raise KBError(f"{path}: a failure mode lacks {missing}")
        action = dict(f.get("action") or {})
        bad = sorted(set(action) - set(ACTIONS))
        if bad:
            raise KBError(f"{path}: failure mode '{f['name']}' has unknown action(s) {bad}; known: {ACTIONS}")
        modes.append(FailureMode(str(f["name"]), str(f["counterexample"]), str(f["fix"]), str(f["match"]), action))
    hw = _tuple(data["hardware"], "hardware", path)
    if set(hw) - set(HARDWARE):
        raise KBError(f"{path}: unknown hardware {sorted(set(hw) - set(HARDWARE))}; known: {HARDWARE}")
    return Entry(str(data["id"]), str(data["title"]), str(data["summary"]), _tuple(data["ops"], "ops", path),
                 _tuple(data["regimes"], "regimes", path), hw, str(data["when"]), tuple(knobs),
                 tuple(str(i) for i in _tuple(data["invariants"], "invariants", path)), tuple(modes),
                 tuple(str(u) for u in _tuple(data["used_by"], "used_by", path)), body, path,
                 tuple(str(d) for d in _tuple(data.get("dtypes"), "dtypes", path)))


def kb_root() -> Path:
    """ARGUS_KB_DIR, else the kb/ folder of the source tree this package sits in."""
    folder = config.env("ARGUS_KB_DIR")
    if folder:
        return Path(folder)
    return Path(__file__).resolve().parents[2] / "kb"


@functools.lru_cache(maxsize=4)
def _load(root: str, use_yaml: bool) -> tuple[Entry, ...]:
    out = []
    seen: set[str] = set()
    for p in sorted(Path(root).glob("*.md")):
        if p.name.lower() == "readme.md":
            continue
        data, body = parse(p.read_text(), use_yaml=use_yaml)
        e = entry_from_data(data, body, str(p))
        if e.id in seen:
            raise KBError(f"{p}: duplicate id '{e.id}'")
        if e.id != p.stem:
            raise KBError(f"{p}: id '{e.id}' differs from the file name")
        seen.add(e.id)
        out.append(e)
    return tuple(out)


def load(root: Path | str | None = None, *, use_yaml: bool = True) -> tuple[Entry, ...]:
    """Every entry of the knowledge base (cached per folder)."""
    r = Path(root) if root is not None else kb_root()
    if not r.is_dir():
        raise KBError(f"no knowledge base folder at {r} (set ARGUS_KB_DIR)")
    return _load(str(r), use_yaml)


def by_id(entry_id: str, root: Path | str | None = None) -> Entry:
    for e in load(root):
        if e.id == entry_id:
            return e
    raise KBError(f"no knowledge-base entry '{entry_id}'")


def applicable(op: str, regime: str | None, hardware: str | None, dtype: str | None = None,
               root: Path | str | None = None) -> list[Entry]:
    """The entries for an op in a shape regime on a hardware family for a dtype (None: any)."""
    return [e for e in load(root) if e.applies(op, regime, hardware, dtype)]
