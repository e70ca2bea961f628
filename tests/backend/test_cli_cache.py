"""`argus cache`: lists what the cache holds and what ran without a kernel, and clears it on request."""
from __future__ import annotations

import json

import torch

from argus_inductor.cli import main
from argus_inductor.runtime.cache import CacheEntry, KernelCache
from argus_inductor.runtime.signature import make_signature


def test_cache_cli_lists_entries_and_misses_and_clears(tmp_path, capsys):
    root = tmp_path / "cache"
    cache = KernelCache(root)
    a, b = torch.randn(5, 8), torch.randn(8, 3)
    solved = make_signature("gemm", "", [a, b], {"N": 3, "K": 8}, {"M": 5})
    pending = make_signature("gemm", "relu", [a, b], {"N": 3, "K": 8}, {"M": 300})
    cache.put(solved.key(), CacheEntry(signature=solved.as_dict(), dsl_source="# dsl", triton_source="# triton",
                                       policy={"BM": 16}, verification={"status": "proved"},
                                       timings={"ms": 0.5}, origin="warmup"))
    cache.record_miss(pending)
    assert main(["cache", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "1 kernel(s)" in out and "warmup" in out and "proved" in out and "0.5000 ms" in out
    assert main(["cache", "misses", "--cache-dir", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["solved"] for r in rows] == [False] and rows[0]["key"] == pending.key()
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 2  # needs --yes
    assert root.exists()
    assert main(["cache", "clear", "--cache-dir", str(root), "--yes"]) == 0
    assert not root.exists()
