"""argus_inductor.runtime.cuda_graphs: Argus graphs replayed as CUDA graphs with little host work, and Inductor's trees
wherever the lean model does not hold. The replays need a GPU (run on the device with ARGUS_TEST_DEVICE=cuda);
the installation is checked everywhere."""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from argus_inductor.runtime import cuda_graphs

on_gpu = pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("ARGUS_TEST_DEVICE") != "cuda",
                            reason="CUDA graphs need a GPU (ARGUS_TEST_DEVICE=cuda)")


def test_the_trees_are_replaced_only_while_inductor_compiles_with_graphs(monkeypatch) -> None:
    """The backend swaps Inductor's cudagraphify for GraphReplay's during its compile_fx call when CUDA graphs are
    on and ARGUS_GRAPH_REPLAY is not 0, and puts Inductor's back afterwards (other backends keep the trees)."""
    import torch._inductor.compile_fx as cfx

    from argus_inductor import backend

    original = cfx.cudagraphify
    seen = []

    def fake_compile_fx(gm, example_inputs, config_patches=None):
        seen.append((config_patches["triton.cudagraphs"], cfx.cudagraphify is not original))
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", fake_compile_fx)
    monkeypatch.setattr(backend, "_devices", lambda inputs: {torch.device("cuda", 0)})
    monkeypatch.setattr(backend, "target_for", lambda device, opts=None: "cuda")
    from .graphs import capture

    gm, example = capture(F.linear, torch.randn(2, 4), torch.randn(4, 4))  # a graph with an Argus op
    for options in ({}, {"graph_replay": False}, {"cudagraphs": False}):
        backend.argus_backend(gm, list(example), options={**options, "inline": False, "swapin": "always"})
        assert cfx.cudagraphify is original
    assert seen == [(True, True), (True, False), (False, False)]


def test_a_declining_wrapper_hands_its_calls_to_inductors(monkeypatch) -> None:
    """A graph that mutates an input with no static address is not GraphReplay's: every call goes to the wrapper
    Inductor would have made (made once, with the same arguments), and the report says why."""
    monkeypatch.setattr(cuda_graphs, "counters", {"captured": 0, "replayed": 0, "declined": 0})
    monkeypatch.setattr(cuda_graphs, "reasons", {})
    made = []

    def inductor_cudagraphify(model, static_input_idxs, **kwargs):
        made.append((tuple(static_input_idxs), kwargs["mutated_input_idxs"]))
        return lambda inputs: ("inductor's", model(inputs))

    wrap = cuda_graphs.cudagraphify_with(inductor_cudagraphify)(lambda inputs: sum(inputs), (0,), device_index=0,
                                                                 mutated_input_idxs=(1,))
    assert wrap.declined == "it mutates an input that is not static"
    assert wrap([1, 2]) == ("inductor's", 3) and wrap([3, 4]) == ("inductor's", 7)
    assert made == [((0,), (1,))]
    assert "1 handed to Inductor's trees (1x it mutates an input that is not static)" in cuda_graphs.summary()


def test_a_graph_in_several_partitions_stays_with_the_trees(monkeypatch) -> None:
    """Inductor wraps each partition of a split graph: those GraphReplays all hand over to Inductor's wrapper when
    the compile ends (a partition's outputs would be copied out of one graph and into the next); a graph of one
    partition keeps its GraphReplay."""
    import torch._inductor.compile_fx as cfx

    monkeypatch.setattr(cuda_graphs, "counters", {"captured": 0, "replayed": 0, "declined": 0})
    monkeypatch.setattr(cuda_graphs, "reasons", {})
    monkeypatch.setattr(cfx, "cudagraphify", lambda model, idxs, **kw: (lambda inputs: ("trees", model(inputs))))
    for partitions in (1, 2):
        with cuda_graphs.replacing_trees():
            wrappers = [cfx.cudagraphify(sum, (), device_index=0) for _ in range(partitions)]
        assert all(isinstance(w, cuda_graphs.GraphReplay) for w in wrappers)
        assert [bool(w.declined) for w in wrappers] == [partitions > 1] * partitions
    assert [w([1, 2]) for w in wrappers] == [("trees", 3)] * 2
    assert "Inductor split the graph into 2 partitions" in cuda_graphs.summary()


# ------------------------------------------------------------------------------------------------ on the GPU
# mode="reduce-overhead": a graph whose Argus ops were all inlined takes CUDA graphs only where the mode asks


@pytest.fixture
def gpu_counters(monkeypatch) -> dict[str, int]:
    torch._dynamo.reset()
    monkeypatch.setattr(cuda_graphs, "counters", {"captured": 0, "replayed": 0, "declined": 0})
    monkeypatch.setattr(cuda_graphs, "reasons", {})
    return cuda_graphs.counters


def test_a_slot_is_free_only_while_nothing_outside_holds_its_outputs() -> None:
    """_Slot.free: a returned view (or a view of it) held by the caller makes the slot's output busy until it is
    dropped; a caller's resize_ of a returned view moves the storage to new memory, which the graph would not
    write, and the slot is never free again. Outputs that are a static input's (not the graph's own) are not
    counted."""
    out, static = torch.randn(4, 8), torch.randn(3)
    slot = cuda_graphs._Slot(None, [out, static], [True, False], shared=True)
    assert slot.free()
    held = cuda_graphs._view(out)
    assert held.data_ptr() == out.data_ptr() and not slot.free()
    row = held[1]
    del held
    assert not slot.free()
    del row
    assert slot.free()
    held_static = static.view(3)
    assert slot.free()
    del held_static
    moved = cuda_graphs._view(out)
    moved.resize_(64)
    del moved
    assert not slot.free() and out.data_ptr() != slot.ptrs[0]


@on_gpu
def test_outputs_kept_across_calls_are_not_overwritten(gpu_counters) -> None:
    """Each call's output is never overwritten while it is held: four calls with fresh inputs, all outputs held
    and checked afterwards against a float64 reference (a replay writing into a held tensor would leave only the
    last one right). The second and third calls' graphs return their own buffers (each captured when the
    earlier ones were held), the fourth's copies."""
    f = torch.compile(lambda x, w: F.linear(x, w).relu() + 1, backend="argus", mode="reduce-overhead")
    w = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16)
    xs = [torch.randn(32, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    outs = [f(x, w) for x in xs]
    for x, o in zip(xs, outs):
        ref = (x.double() @ w.double().T).relu() + 1
        assert ((o.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert len({o.data_ptr() for o in outs}) == 4
    assert gpu_counters["captured"] == 1 + cuda_graphs.SHARED_SLOTS and gpu_counters["replayed"] == 3, gpu_counters


@on_gpu
def test_a_loop_that_drops_or_keeps_the_last_output_pays_no_copy(gpu_counters) -> None:
    """A decode loop that drops each call's output replays one graph, which returns its own buffer each call (no
    copy); a loop that keeps the previous output while it makes the next (a generation loop's logits) alternates
    two graphs. Every output is right when read."""
    f = torch.compile(lambda x, w: F.linear(x, w) * 2, backend="argus", mode="reduce-overhead")
    w = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16)

    def ref(x: torch.Tensor) -> torch.Tensor:
        return (x.double() @ w.double().T) * 2

    def close(o: torch.Tensor, x: torch.Tensor) -> bool:
        return ((o.double() - ref(x)).norm() / ref(x).norm()).item() < 1e-2

    ptrs = set()
    for _ in range(6):
        x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
        out = f(x, w)
        assert close(out, x)
        ptrs.add(out.data_ptr())
        del out
    assert gpu_counters["captured"] == 1 and gpu_counters["replayed"] == 5, gpu_counters
    assert len(ptrs) == 2  # the warm-up's own output, then the graph's buffer every replay
    prev_x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
    prev = f(prev_x, w)
    for _ in range(4):
        x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
        out = f(x, w)
        assert close(prev, prev_x) and close(out, x)
        prev, prev_x = out, x
    assert gpu_counters["captured"] == 2 and gpu_counters["replayed"] == 10, gpu_counters


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 64, device="cuda")
        self.register_buffer("calls", torch.zeros((), device="cuda"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.lin(x) * self.calls


@on_gpu
def test_a_static_buffer_mutated_in_place_is_updated_once_per_call(gpu_counters) -> None:
    """The warm-up call runs the graph, the capture runs nothing and each replay runs it once: a buffer counter
    reads the number of calls, and each output is scaled by it."""
    m = Counting()
    f = torch.compile(m, backend="argus", mode="reduce-overhead")
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        ref = m.lin(x)
        for k in range(1, 6):
            out = f(x)
            assert m.calls.item() == k
            torch.testing.assert_close(out, ref * k, rtol=1e-2, atol=1e-2)
    assert gpu_counters["replayed"] == 4 and gpu_counters["declined"] == 0, gpu_counters


@on_gpu
def test_a_mutated_user_input_goes_to_inductors_wrapper(gpu_counters) -> None:
    def f(x, w):
        x.add_(1)
        return F.linear(x, w)

    g = torch.compile(f, backend="argus", mode="reduce-overhead")
    x = torch.zeros(16, 32, device="cuda")
    w = torch.randn(32, 32, device="cuda")
    for k in range(1, 4):
        out = g(x, w)
        assert torch.equal(x, torch.full_like(x, float(k)))
        torch.testing.assert_close(out, F.linear(torch.full_like(x, float(k)), w), rtol=1e-2, atol=1e-2)
    assert gpu_counters["declined"] == 1 and gpu_counters["replayed"] == 0, gpu_counters


@on_gpu
def test_each_size_and_each_scalar_value_has_its_own_graph(gpu_counters) -> None:
    """dynamic=True: sizes arrive as integers and a Python float may arrive as a CPU scalar tensor, whose value a
    graph bakes in; both are part of the key, so alternating them gives each call its own right answer."""
    f = torch.compile(lambda x, w, s: F.linear(x, w) * s, backend="argus", mode="reduce-overhead", dynamic=True)
    w = torch.randn(48, 64, device="cuda")
    for _ in range(3):
        for rows, s in ((8, 2.0), (24, 2.0), (8, 3.0)):
            x = torch.randn(rows, 64, device="cuda")
            torch.testing.assert_close(f(x, w, s), F.linear(x, w) * s, rtol=1e-2, atol=1e-2)
    assert gpu_counters["replayed"] >= 3, gpu_counters


@on_gpu
def test_a_parameter_that_moved_is_captured_again(gpu_counters) -> None:
    """A parameter whose storage was replaced (weight.data = ...) is read at its new address: the replay notices
    the moved static input and captures again rather than reading the old memory."""
    lin = nn.Linear(64, 32, device="cuda")
    f = torch.compile(lin, backend="argus", mode="reduce-overhead")
    x = torch.randn(4, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            f(x)
        lin.weight.data = torch.randn(32, 64, device="cuda")
        for _ in range(2):
            torch.testing.assert_close(f(x), lin(x), rtol=1e-2, atol=1e-2)
    assert gpu_counters["captured"] >= 2, gpu_counters


def test_small_inputs_are_copied_in_one_launch_into_aligned_slices() -> None:
    """PackedCopy (a replay's copy of small inputs): every buffer starts 16 bytes aligned, keeps its input's dtype
    and shape, and one call fills them all with the sources' values, also where a source is not contiguous (then
    a copy each); inputs too large, alone or not contiguous are left to the per-input copy."""
    like = [torch.zeros(1, 1, dtype=torch.int64), torch.zeros(3, dtype=torch.bool), torch.zeros(2, 3),
            torch.zeros(5, dtype=torch.bfloat16), torch.zeros((), dtype=torch.int32)]
    assert cuda_graphs.PackedCopy.fits(like)
    packed = cuda_graphs.PackedCopy(like)
    for buf, t in zip(packed.buffers, like):
        assert buf.data_ptr() % cuda_graphs.ALIGN == 0 and buf.dtype == t.dtype and buf.shape == t.shape
        assert buf.untyped_storage().data_ptr() == packed.packed.untyped_storage().data_ptr()
    for contiguous in (True, False):
        srcs = [torch.randint(0, 1000, (1, 1)), torch.rand(3) < 0.5, torch.randn(3, 2).t() if not contiguous
                else torch.randn(2, 3), torch.randn(5).bfloat16(), torch.tensor(7, dtype=torch.int32)]
        packed.copy(srcs)
        for buf, src in zip(packed.buffers, srcs):
            assert torch.equal(buf, src)
    # one dtype (a decode step's int64 ids and positions): the cat takes the sources in it, pads included
    same = [torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64)]
    packed = cuda_graphs.PackedCopy(same)
    assert packed.dtype == torch.int64
    for _ in range(2):
        srcs = [torch.randint(-9, 9, tuple(t.shape)) for t in same]
        packed.copy(srcs)
        assert all(torch.equal(buf, src) for buf, src in zip(packed.buffers, srcs))
        assert all(buf.data_ptr() % cuda_graphs.ALIGN == 0 for buf in packed.buffers)
        assert not packed.packed[8:16].any() and not packed.packed[24:32].any()  # the pads stay zero
    big = torch.zeros(cuda_graphs.PACK_MAX_BYTES // 4 + 1)
    assert not cuda_graphs.PackedCopy.fits([like[0], big])
    assert not cuda_graphs.PackedCopy.fits([like[0]])
    assert not cuda_graphs.PackedCopy.fits([like[0], torch.zeros(3, 2).t()])


@on_gpu
def test_a_step_of_small_inputs_replays_with_each_calls_values(gpu_counters) -> None:
    """A decode-like step whose inputs besides the weight are small (ids, a position, a bool flag): their buffers
    are filled in one launch per replay, and every call sees its own values."""
    emb = torch.randn(100, 64, device="cuda")
    w = torch.randn(32, 64, device="cuda")

    def step(ids, pos, keep):
        return F.linear(emb[ids] * (pos + 1).unsqueeze(-1) * keep.unsqueeze(-1), w)

    f = torch.compile(step, backend="argus", mode="reduce-overhead")
    for _ in range(5):
        ids = torch.randint(0, 100, (4,), device="cuda")
        pos = torch.randint(0, 9, (4,), device="cuda").float()
        keep = torch.rand(4, device="cuda") < 0.5
        torch.testing.assert_close(f(ids, pos, keep), step(ids, pos, keep), rtol=1e-2, atol=1e-2)
    assert gpu_counters["replayed"] >= 3 and gpu_counters["declined"] == 0, gpu_counters
