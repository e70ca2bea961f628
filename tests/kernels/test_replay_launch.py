"""Replayed launches on the device the tests run on: a recorded layer norm (two DSL launches with a statistics
buffer between them) replays on fresh operands with the kernels' own results; on a GPU the replay goes straight
through Triton's launcher, and a pointer aligned differently from the recorded one is refused."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from argus_inductor.kernels.normalize import layer_norm
from argus_inductor.runtime.replay import record

from ._support import DEVICE, ON_GPU, fresh_seed, rel_err

TARGET = None if ON_GPU else "interpret"


def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return layer_norm(x, x.shape[-1], w, b, 1e-5, target=TARGET)


def _recorded(rows: int, cols: int):
    """A layer norm call on fresh operands, recorded: (its output, the recording)."""
    x, w, b = (torch.randn(rows, cols, device=DEVICE), torch.randn(cols, device=DEVICE),
               torch.randn(cols, device=DEVICE))
    out, rec, why = record(lambda: _ln(x, w, b), [x, w, b])
    assert why is None, why
    return out, rec


def test_layer_norm_replays_on_fresh_operands():
    seed = fresh_seed()
    rows, cols = 37, 300
    out, rec = _recorded(rows, cols)
    x, w, b = torch.randn(rows, cols, device=DEVICE), torch.randn(cols, device=DEVICE), torch.randn(cols, device=DEVICE)
    assert rec.launches, "the layer norm's kernels were seen"
    # on a GPU every launch keeps Triton's compiled kernel, so a replay skips Triton's binding
    assert rec.direct == ON_GPU and all((ln.launched is not None) == ON_GPU for ln in rec.launches)
    for _ in range(3):
        x2, w2, b2 = torch.randn_like(x), torch.randn_like(w), torch.randn_like(b)
        again = rec.replay([x2, w2, b2])
        ref = F.layer_norm(x2.double(), (cols,), w2.double(), b2.double(), 1e-5)
        assert rel_err(again, ref) < 1e-5, f"seed {seed}"
        assert again.untyped_storage().data_ptr() != out.untyped_storage().data_ptr()
    big = torch.randn(rows * cols + 1, device=DEVICE)
    shifted = big[1:].view(rows, cols)  # 4 bytes off a 16-byte boundary
    assert rec.replay([shifted, w, b]) is None


def test_replay_follows_operands_inside_bigger_buffers():
    """Operands that are views at an offset (16-byte aligned) into larger buffers: on a GPU the replay passes each
    view's address as an int, which must point where the view starts."""
    seed = fresh_seed()
    rows, cols = 19, 260
    _, rec = _recorded(rows, cols)
    for shift in (4, 12):  # floats: 16 and 48 bytes
        big = torch.randn(rows * cols + 2 * cols + shift, device=DEVICE)
        x2 = big[shift:shift + rows * cols].view(rows, cols)
        w2 = big[shift + rows * cols:shift + rows * cols + cols]
        b2 = big[-cols:]
        out = rec.replay([x2, w2, b2])
        assert out is not None
        ref = F.layer_norm(x2.double(), (cols,), w2.double(), b2.double(), 1e-5)
        assert rel_err(out, ref) < 1e-5, f"seed {seed}, shift {shift}"
