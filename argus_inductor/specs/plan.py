"""A plan: the techniques a kernel uses and the knob values of each of its kernels."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Plan:
    """techniques: knowledge-base ids; knobs: {kernel name: {knob: value}} (Policy fields and constexprs)."""

    knobs: dict[str, dict[str, Any]]
    techniques: tuple[str, ...] = ()
    note: str = field(default="", compare=False)

    def key(self) -> str:
        return json.dumps({k: dict(sorted(v.items())) for k, v in sorted(self.knobs.items())}, sort_keys=True)

    def get(self, kernel: str, knob: str, default: Any = None) -> Any:
        return self.knobs.get(kernel, {}).get(knob, default)

    def with_knob(self, kernel: str, knob: str, value: Any) -> Plan:
        knobs = {k: dict(v) for k, v in self.knobs.items()}
        knobs.setdefault(kernel, {})[knob] = value
        return Plan(knobs, self.techniques, self.note)

    def with_techniques(self, techniques: tuple[str, ...]) -> Plan:
        return Plan({k: dict(v) for k, v in self.knobs.items()}, tuple(dict.fromkeys(techniques)), self.note)

    def describe(self) -> str:
        parts = []
        for kname, kv in sorted(self.knobs.items()):
            inner = ",".join(f"{k}={v}" for k, v in sorted(kv.items()))
            parts.append(f"{kname}({inner})" if len(self.knobs) > 1 else inner)
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"techniques": list(self.techniques), "knobs": self.knobs, "note": self.note}

    @staticmethod
    def from_json(d: dict[str, Any], kernels: tuple[str, ...] = ()) -> Plan:
        """Also accepts flat knobs ({"BM": 64, ...}) for a single-kernel op (what an LLM tends to write)."""
        knobs = d.get("knobs", {})
        if not isinstance(knobs, dict):
            raise ValueError("plan 'knobs' must be an object")
        if knobs and not all(isinstance(v, dict) for v in knobs.values()):
            if len(kernels) != 1:
                raise ValueError(f"flat knobs need a single-kernel op; give one object per kernel of {kernels}")
            knobs = {kernels[0]: knobs}
        techniques = d.get("techniques", [])
        if not isinstance(techniques, list):
            raise ValueError("plan 'techniques' must be a list")
        return Plan({str(k): dict(v) for k, v in knobs.items()}, tuple(str(t) for t in techniques),
                    str(d.get("note", "")))
