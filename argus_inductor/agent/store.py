"""Where the agent's results go on disk: the cache entry (through argus_inductor.runtime.cache) and, next to it, the
trail of every trial (kernels/<key>.trials.jsonl), so a person can read how a kernel was found."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def default_root() -> Path:
    return Path(os.environ.get("ARGUS_CACHE_DIR") or Path.home() / ".cache" / "argus")


def open_cache(root: Path | str | None = None) -> Any:
    """The KernelCache at `root` (ARGUS_CACHE_DIR by default)."""
    from ..runtime.cache import KernelCache

    return KernelCache(root)


def make_entry(**fields: Any) -> Any:
    """A CacheEntry (runtime/cache.py) from keyword fields; origin falls back to 'synthesized' where the cache
    does not know the one given."""
    from ..runtime import cache

    origins = getattr(cache, "ORIGINS", None)
    if origins is not None and fields.get("origin") not in origins:
        fields["origin"] = "synthesized"
    return cache.CacheEntry(**fields)


def trail_path(root: Path | str, key: str) -> Path:
    return Path(root) / "kernels" / f"{key}.trials.jsonl"


class Trail:
    """Appends one JSON line per event of a synthesis run (a header, every trial, the result)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.run = f"{int(time.time())}-{os.getpid()}"
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, kind: str, data: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps({"run": self.run, "kind": kind, "time": round(time.time(), 3), **data}, default=str)
        with open(self.path, "a") as f:
            f.write(line + "\n")
