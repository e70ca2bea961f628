"""Whether an output agrees with its reference: the test every kernel Argus did not just prove and write itself
meets before its results are used (a tuned candidate, a cached entry at its first use on a device, `argus bench`)."""
from __future__ import annotations

from typing import Any

import torch

TOLERANCE = {torch.float32: 2e-3, torch.float64: 1e-9}  # relative error against torch's output, at least
LOW_PRECISION_TOLERANCE = 2e-2                          # bf16 / fp16 outputs


def tolerance(out: torch.Tensor) -> float:
    return TOLERANCE.get(out.dtype, LOW_PRECISION_TOLERANCE)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, str]:
    """Relative Frobenius error, and where the largest difference is (for feedback). Where the reference is NaN
    (or +-inf) the output must be the same there: such elements are compared exactly and left out of the norm."""
    o, r = out.detach().double(), ref.detach().double()
    if o.shape != r.shape:
        return float("inf"), f"output shape {tuple(o.shape)}, expected {tuple(r.shape)}"
    special = ~torch.isfinite(r)
    if special.any():
        same = (o[special] == r[special]) | (torch.isnan(o[special]) & torch.isnan(r[special]))
        if not bool(same.all()):
            idx = tuple(int(i) for i in special.nonzero()[int((~same).nonzero()[0])])
            return float("inf"), f"got {float(o[idx]):.6g} where the reference has {float(r[idx]):.6g}, at {idx}"
        o, r = o.masked_fill(special, 0.0), r.masked_fill(special, 0.0)
    bad = ~torch.isfinite(o)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        return float("inf"), f"{int(bad.sum())} output element(s) are NaN/inf (never written?), first at {idx}"
    diff = (o - r).abs()
    err = float((o - r).norm() / r.norm().clamp_min(1e-30))
    if diff.numel():
        flat = int(diff.argmax())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
        return err, f"largest difference at {idx}: got {float(o[idx]):.6g}, expected {float(r[idx]):.6g}"
    return err, ""


def agrees(out: Any, ref: Any, tol: float) -> tuple[bool, str]:
    """Whether `out` matches `ref` (same shape and dtype; integers exactly; floats within `tol` relative error, NaN
    and inf where the reference has them), and why not."""
    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
        return False, f"output is {type(out).__name__}, expected a tensor"
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return False, f"output {tuple(out.shape)} {out.dtype}, expected {tuple(ref.shape)} {ref.dtype}"
    if not out.is_floating_point():
        same = bool(torch.equal(out, ref))
        return same, "" if same else "integer output differs from the reference"
    err, where = rel_error(out, ref)
    ok = err <= tol
    return ok, "" if ok else f"relative error {err:.3g} > {tol:.3g} against the reference ({where})"


__all__ = ["TOLERANCE", "LOW_PRECISION_TOLERANCE", "tolerance", "rel_error", "agrees"]
