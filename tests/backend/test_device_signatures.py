"""Signatures know the device model (issue 44): an entry made on one GPU model is not served as solved on another of
the same architecture; it is the nearest solved starting point there. Signatures from before the field keep their
keys, so old entries still read."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from argus_inductor import ops
from argus_inductor.runtime.signature import Signature

H100 = "NVIDIA H100 80GB HBM3 132sm 79GB"
H200 = "NVIDIA H200 132sm 140GB"


def _sig(device: str = "", m: int = 1) -> Signature:
    return Signature("gemm", "", ("bfloat16", "bfloat16"), ("row", "row"), (("K", 4096), ("N", 4096)),
                     (("M", str(m)),), "sm_90", ("2.11.0", "3.6.0", "0.1.0"), device)


def test_the_device_model_is_part_of_the_key_and_old_keys_stay() -> None:
    old = _sig()
    fields = dataclasses.asdict(old)
    del fields["device"]  # how keys were made before signatures named the device
    assert old.key() == hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]
    assert len({old.key(), _sig(H100).key(), _sig(H200).key()}) == 3
    stored = json.loads(json.dumps(old.as_dict()))
    del stored["device"]  # an old misses line or entry
    assert Signature.from_dict(stored) == old and Signature.from_dict(_sig(H200).as_dict()) == _sig(H200)
    assert _sig(H200).same_family(_sig(H100)) and "[NVIDIA H200" in _sig(H200).short()


def test_another_models_entry_is_a_starting_point_never_served_as_solved(fresh_cache: Path) -> None:
    cache = ops.kernel_cache()
    entry = ops.make_entry(_sig(H100), origin="warmup", target="cuda")
    cache.put(_sig(H100).key(), entry)
    assert ops.plan_for(_sig(H100), "cuda").source == "cache"
    plan = ops.plan_for(_sig(H200), "cuda")
    assert plan.source == "default" and "nearest solved" in plan.detail and H100 in plan.detail, plan.label()
    assert any(m["key"] == _sig(H200).key() and not m["solved"] for m in cache.misses())
