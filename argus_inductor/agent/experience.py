"""The experience store: one JSON line per solved signature (its winning plans and rewards) in the cache
directory, experience.jsonl. Synthesis of a new signature warm-starts from the nearest solved ones of the
same family (same op, epilogue, dtypes, layouts, device)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..runtime.signature import Signature
from ..specs.plan import Plan

FILENAME = "experience.jsonl"


class ExperienceStore:
    def __init__(self, root: Path | str) -> None:
        self.path = Path(root) / FILENAME

    def add(self, signature: Signature, plans: list[tuple[Plan, float]], reward_source: str,
            extra: dict[str, Any] | None = None) -> None:
        """Record a solved signature: its best plans (best first) with their rewards."""
        line = json.dumps({"key": signature.key(), "signature": signature.as_dict(), "time": time.time(),
                           "reward_source": reward_source,
                           "plans": [{"plan": p.to_json(), "reward": r} for p, r in plans], **(extra or {})},
                          sort_keys=True, default=str) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())  # one write per line: appends from several processes do not interleave
        finally:
            os.close(fd)

    def records(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for ln in lines:
            try:
                d = json.loads(ln)
                Signature.from_dict(d["signature"])
                out.append(d)
            except (ValueError, KeyError, TypeError):
                continue  # a torn or foreign line is skipped
        return out

    def nearest(self, signature: Signature, k: int = 2, per_signature: int = 2) -> list[tuple[Plan, float]]:
        """Plans of the k nearest solved signatures of the same family (not the signature itself), with their
        distance; nearest first."""
        found: dict[str, tuple[float, list[Plan]]] = {}
        for d in self.records():
            other = Signature.from_dict(d["signature"])
            if d.get("key") == signature.key() or not signature.same_family(other):
                continue
            dist = signature.distance(other)
            if dist == float("inf"):
                continue
            plans = []
            for p in d.get("plans", [])[:per_signature]:
                try:
                    plans.append(Plan.from_json(p["plan"]))
                except (ValueError, KeyError, TypeError):
                    continue
            found[d["key"]] = (dist, plans)  # the latest record of a signature wins
        ranked = sorted(found.values(), key=lambda t: t[0])[:k]
        return [(p, dist) for dist, plans in ranked for p in plans]
