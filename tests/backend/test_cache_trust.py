"""The cache as a trust boundary (issue 41): an entry is never believed. Whoever can write the cache folder can
write an entry whose checksum matches, so an entry's kernels are proved again by this process before they run and
tested against torch at their first use; an entry that cannot be a plan is set aside and rebuilt; a lookup fails only
into a miss, with a warning, in bounded time."""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import argus_inductor  # noqa: F401  (registers the ops)
from argus_inductor import ops
from argus_inductor.config import Options
from argus_inductor.runtime import reporting as report_mod
from argus_inductor.runtime.cache import CacheEntry, KernelCache, checksum
from argus_inductor.runtime.signature import make_signature

GOOD_STORE = "store(C[rm, rn], acc)"


def _use() -> None:
    ops.set_active_options(Options.resolve({"interpret": True}))
    ops.forget_plans()


def _linear(node: str = "t:trust") -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 24), torch.randn(40, 24), torch.randn(40)
    return torch.ops.argus.linear(x, w, b, "none", node), F.linear(x, w, b)


def _sig():
    return make_signature("gemm", "bias", [torch.empty(6, 24), torch.empty(40, 24)], {"N": 40, "K": 24}, {"M": 6})


def _rewrite(cache: KernelCache, key: str, edit) -> None:
    """Edit an entry's contents and fix up its checksum, as anyone who can write the folder can."""
    p = cache.path(key)
    doc = json.loads(p.read_text())
    edit(doc["entry"])
    doc["checksum"] = checksum(doc["entry"])
    p.write_text(json.dumps(doc))


def _warm() -> tuple[KernelCache, str]:
    _use()
    sig = _sig()
    entry = ops.warm(sig)
    assert entry.verification["status"] == "verified"
    ops.forget_plans()
    return ops.kernel_cache(), sig.key()


def _aside(cache: KernelCache, key: str) -> bool:
    return not cache.path(key).exists() and any(cache.kernels.glob(f"{key}.json.bad-*"))


def test_an_edited_kernel_the_checker_rejects_is_proved_again_and_set_aside(fresh_cache: Path, caplog) -> None:
    cache, key = _warm()
    _rewrite(cache, key, lambda e: e.update(dsl_source=e["dsl_source"].replace(GOOD_STORE,
                                                                                "store(C[rm, rn + 1], acc)")))
    with caplog.at_level(logging.WARNING, logger="argus_inductor"):
        out, ref = _linear()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert _aside(cache, key) and "this checker finds" in caplog.text
    assert not report_mod.entries()[-1].source.startswith("cache")


def test_an_edited_kernel_that_proves_but_computes_wrong_fails_its_first_use(fresh_cache: Path, caplog) -> None:
    cache, key = _warm()  # the epilogue doubled: every obligation still holds, the numbers do not
    _rewrite(cache, key, lambda e: e.update(dsl_source=e["dsl_source"].replace(GOOD_STORE, "store(C[rm, rn], acc * 2)")))
    with caplog.at_level(logging.WARNING, logger="argus_inductor"):
        out, ref = _linear()
        out2, _ = _linear()  # the second call does not use it either
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out2, ref, rtol=1e-4, atol=1e-4)
    assert _aside(cache, key) and "first use" in caplog.text


@pytest.mark.parametrize("policy", [{"BM": 3}, {"BM": -16}, {"num_warps": 0}, "garbage source"])
def test_an_entry_whose_plan_cannot_run_is_set_aside(fresh_cache: Path, policy) -> None:
    cache, key = _warm()
    if policy == "garbage source":
        _rewrite(cache, key, lambda e: e.update(dsl_source="this is not python("))
    else:
        _rewrite(cache, key, lambda e: e["policy"].update(policy))
    out, ref = _linear()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert _aside(cache, key)
    assert any(m["key"] == key and not m["solved"] for m in cache.misses())  # for `argus warmup` to rebuild


def test_a_deeply_nested_entry_is_a_miss_not_a_recursion_error(fresh_cache: Path) -> None:
    cache, key = _warm()
    cache.path(key).write_text('{"format": 2, "entry": ' + "[" * 100000 + "]" * 100000 + "}")
    assert cache.get(key) is None and _aside(cache, key)
    out, ref = _linear()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_a_named_pipe_in_place_of_an_entry_is_a_miss_in_bounded_time(fresh_cache: Path) -> None:
    cache, key = _warm()
    p = cache.path(key)
    p.unlink()
    os.mkfifo(p)
    got: list = []
    t = threading.Thread(target=lambda: got.append(cache.get(key)), daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "the lookup blocked on a named pipe"
    assert got == [None]


def test_an_entry_for_another_signature_or_other_versions_is_not_a_hit(fresh_cache: Path) -> None:
    cache, key = _warm()
    other = make_signature("gemm", "bias", [torch.empty(64, 24), torch.empty(40, 24)], {"N": 40, "K": 24},
                           {"M": 64})
    _rewrite(cache, key, lambda e: e.update(signature=other.as_dict()))
    assert cache.get(key) is None and _aside(cache, key)
    cache, key = _warm()
    _rewrite(cache, key, lambda e: e["versions"].update(torch="0.0"))
    assert cache.get(key) is None and _aside(cache, key)


def test_put_refuses_an_entry_its_own_signature_contradicts(tmp_path: Path) -> None:
    sig = _sig()
    other = make_signature("gemm", "", [torch.empty(6, 24), torch.empty(40, 24)], {"N": 40, "K": 24}, {"M": 6})
    entry = CacheEntry(signature=other.as_dict(), dsl_source="", triton_source="", policy={},
                       verification={}, origin="warmup")
    with pytest.raises(ValueError, match="names another signature"):
        KernelCache(tmp_path).put(sig.key(), entry)
