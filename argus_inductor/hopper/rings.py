"""Prove the staging discipline of a Gluon lowering from its source: the shared-memory rings its loader partition
fills and its consumer partitions read, the mbarriers that order them, and the asynchronous wgmma that read them.

The partitions are read as Python ASTs (as the DSL's frontend reads kernels) and executed symbolically: the block
index of the loop (`j`), the number of blocks (`n`) and every scalar derived from them become z3 terms, at each
ring size the lowering launches with. A slot is named by the block whose tile it holds: `slot = idx % STAGES` (a
literal 0 is block 0), and the phase of its barriers by `(idx // STAGES) & 1`. Proved, for every block count n >= 1
and every block index:

- fill: the loader's copy of block idx lands in slot idx % STAGES and signals that slot's ready barrier; before it,
  the loader waits on the slot's empty barrier at the phase the release of block idx - STAGES completes
  (((idx // STAGES) & 1) ^ 1: the first pass does not wait); it fills each block 0..n-1 once, in order;
- read-after-fill: a wgmma reads a slot only after the consumer waited on that slot's ready barrier, at the phase
  of the block the slot holds ((idx // STAGES) & 1);
- release-after-retire: a consumer arrives on a slot's empty barrier only when no wgmma it issued that reads the
  slot is still in flight (warpgroup_mma_wait(k) retires all but the k newest);
- release-once: each consumer releases each block 0..n-1 of each ring exactly once (the empty barriers count one
  arrival per consumer).

A failed obligation comes back as a RingViolation with the line, the ring and a concrete counterexample (block
count, block index, ring size). A fill, a wgmma reading a ring, or a wait or release on a ring's barrier under a
runtime condition, or wgmma left in flight across loop iterations, are outside what this reads and are reported as
such rather than passed. A `warpgroup_mma_wait` under a condition is read as not there (it only retires more: the
proof keeps what it would retire in flight), and so is a barrier of no ring (attention's turn-taking).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

try:  # the proofs need z3; the lowerings' launch path (which imports Ring) must not
    import z3
except ImportError:  # pragma: no cover - z3-solver is a dependency of argus_inductor
    z3 = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Ring:
    """One staged operand: its shared-memory buffers and their ready/empty barrier arrays, by parameter name."""
    name: str
    buffers: str
    ready: str
    empty: str


@dataclass(frozen=True)
class RingViolation:
    kind: str       # fill | read-after-fill | release-after-retire | release-once | barrier-count | unsupported
    ring: str
    function: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.ring}) in {self.function}, line {self.line}: {self.message}"


@dataclass
class _Access:
    kind: str                 # wait | arrive | fill | mma | mma_wait
    line: int
    array: str = ""           # barrier array (wait/arrive/fill's barrier) or buffer array (mma reads)
    slot: Any = None          # z3 term
    idx: Any = None           # the block index the slot expression names, or None
    phase: Any = None         # z3 term (wait)
    reads: list[tuple[str, Any, Any]] = field(default_factory=list)  # mma: (buffer array, slot, idx)
    buffer: str = ""          # fill: the buffer array written
    buffer_slot: Any = None
    keep: int = 0             # mma_wait: how many stay in flight


@dataclass
class _Region:
    accesses: list[_Access]
    loop_var: Any = None      # z3 term of the loop index, for a loop body
    lo: Any = None
    hi: Any = None


def _function_ast(fn: Any) -> tuple[ast.FunctionDef, int, dict[str, Any]]:
    """A (Gluon) function's definition as an AST, the line its source starts at, and its module globals; `fn` may
    also be source text (starting at line 1, no globals)."""
    if isinstance(fn, str):
        text, first, env = fn, 1, {}
    else:
        py = getattr(fn, "fn", fn)
        lines, first = inspect.getsourcelines(py)
        text, env = "".join(lines), py.__globals__
    tree = ast.parse(textwrap.dedent(text))
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef)), first, env


class _Reader:
    """Symbolic execution of one partition function: straight-line code and one level of `for ... in range`."""

    def __init__(self, fn: Any, env: dict[str, Any], stages_name: str,
                 ring_barriers: frozenset[str] = frozenset()) -> None:
        fdef, self.first, _ = _function_ast(fn)
        self.name = fdef.name
        self.body = fdef.body
        self.env = dict(env)
        self.stages_name = stages_name
        self.ring_barriers = ring_barriers
        self.regions: list[_Region] = [_Region([])]
        self.problems: list[tuple[int, str]] = []
        self.fresh = 0

    def line(self, node: ast.AST) -> int:
        return self.first + node.lineno - 1

    # ---- expressions: (z3 term or None, block index or None)
    def value(self, node: ast.AST) -> tuple[Any, Any]:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
            return z3.IntVal(int(node.value)), (z3.IntVal(int(node.value)) if node.value == 0 else None)
        if isinstance(node, ast.Name):
            got = self.env.get(node.id)
            return got if isinstance(got, tuple) else (got, None)
        if isinstance(node, ast.BinOp):
            a, _ = self.value(node.left)
            b, _ = self.value(node.right)
            if a is None or b is None:
                return None, None
            op = type(node.op)
            if op is ast.Add:
                return a + b, None
            if op is ast.Sub:
                return a - b, None
            if op is ast.Mult:
                return a * b, None
            if op is ast.FloorDiv:
                return a / b, None  # z3 integer division floors for a positive divisor
            if op is ast.Mod:
                idx = a if isinstance(node.right, ast.Name) and node.right.id == self.stages_name else None
                return a % b, idx
            if op is ast.BitAnd and z3.is_int_value(b) and b.as_long() == 1:
                return a % 2, None
            if op is ast.BitXor and z3.is_int_value(b) and b.as_long() == 1:
                return (a + 1) % 2, None
        return None, None

    # ---- statements
    def run(self) -> list[_Region]:
        for stmt in self.body:
            self.stmt(stmt, in_loop=False, conditional=False)
        return self.regions

    def stmt(self, node: ast.stmt, in_loop: bool, conditional: bool) -> None:
        if isinstance(node, ast.Assign):
            self.calls(node.value, node, conditional)
            val = self.value(node.value)
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.env[t.id] = val if val[0] is not None else None
                elif isinstance(t, ast.Tuple):
                    for e in t.elts:
                        if isinstance(e, ast.Name):
                            self.env[e.id] = None
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.env[node.target.id] = None
            self.calls(node.value, node, conditional)
        elif isinstance(node, ast.Expr):
            self.calls(node.value, node, conditional)
        elif isinstance(node, ast.If):
            for s in node.body + node.orelse:
                self.stmt(s, in_loop, True)
        elif isinstance(node, ast.For):
            if in_loop or conditional:
                self.problems.append((self.line(node), "a loop inside a loop or under a condition"))
                return
            self.loop(node)
        elif isinstance(node, (ast.AnnAssign, ast.Pass, ast.Return)):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self.env[node.target.id] = None

    def loop(self, node: ast.For) -> None:
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"
                and isinstance(node.target, ast.Name) and 1 <= len(call.args) <= 2):
            self.problems.append((self.line(node), "a loop that is not `for i in range(a[, b])`"))
            return
        bounds = [self.value(a)[0] for a in call.args]
        lo, hi = (z3.IntVal(0), bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        if lo is None or hi is None:
            self.problems.append((self.line(node), "loop bounds the reader cannot follow"))
            return
        self.fresh += 1
        var = z3.Int(f"{node.target.id}#{self.fresh}")
        self.env[node.target.id] = var
        self.regions.append(_Region([], var, lo, hi))
        for s in node.body:
            self.stmt(s, in_loop=True, conditional=False)
        self.regions.append(_Region([]))

    def calls(self, expr: ast.AST, stmt: ast.stmt, conditional: bool) -> None:
        for call in [n for n in ast.walk(expr) if isinstance(n, ast.Call)]:
            acc = self.access(call)
            if acc is None:
                continue
            acc.line = self.line(stmt)
            if conditional:
                if acc.kind == "mma_wait" or (acc.kind in ("wait", "arrive") and acc.array not in self.ring_barriers):
                    # a wgmma wait only retires more (the proof keeps those it would retire in flight: sound); a
                    # barrier of no ring (attention's turn-taking) orders nothing the proof follows
                    continue
                self.problems.append((acc.line, f"a ring {acc.kind} under a runtime condition"))
            self.regions[-1].accesses.append(acc)

    def indexed(self, node: ast.AST) -> tuple[str, Any, Any] | None:
        """`name.index(e)` (optionally `.permute(...)`): (name, slot term, block index)."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "permute":
            node = node.func.value
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "index"
                and isinstance(node.func.value, ast.Name) and node.args):
            slot, idx = self.value(node.args[0])
            return node.func.value.id, slot, idx
        return None

    def access(self, call: ast.Call) -> _Access | None:
        f = call.func
        name = f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else (
            f.id if isinstance(f, ast.Name) else "")
        kw = {k.arg: k.value for k in call.keywords}
        if name == "mbarrier.wait" and call.args:
            got = self.indexed(call.args[0])
            if got is None:
                return None
            phase = self.value(call.args[1] if len(call.args) > 1 else kw["phase"])[0]
            return _Access("wait", 0, got[0], got[1], got[2], phase)
        if name == "mbarrier.arrive" and call.args:
            got = self.indexed(call.args[0])
            return None if got is None else _Access("arrive", 0, got[0], got[1], got[2])
        if name == "tma.async_copy_global_to_shared" and len(call.args) >= 4:
            bar, buf = self.indexed(call.args[2]), self.indexed(call.args[3])
            if bar is None or buf is None:
                return None
            return _Access("fill", 0, bar[0], bar[1], bar[2], buffer=buf[0], buffer_slot=buf[1])
        if name == "warpgroup_mma":  # every buffer slot inside an operand (a view helper's argument too)
            reads = [r for a in call.args[:2] for node in ast.walk(a) if (r := self.indexed(node)) is not None]
            return _Access("mma", 0, reads=reads)
        if name == "warpgroup_mma_wait":
            k = kw.get("num_outstanding", call.args[0] if call.args else ast.Constant(0))
            keep = k.value if isinstance(k, ast.Constant) else None
            if keep is None:
                self.problems.append((call.lineno, "warpgroup_mma_wait with a count the reader cannot follow"))
                keep = 0
            return _Access("mma_wait", 0, keep=keep)
        return None


class _Prover:
    def __init__(self, stages: int, n: Any, facts: list[Any]) -> None:
        self.stages = stages
        self.n = n
        self.facts = facts

    def counterexample(self, claim_fails: Any, extra: Sequence[Any] = ()) -> dict[str, int] | None:
        s = z3.Solver()
        s.set("timeout", 10_000)
        s.add(*self.facts, *extra, claim_fails)
        if s.check() != z3.sat:
            return None
        m = s.model()
        out = {"n": m.eval(self.n, model_completion=True).as_long()}
        for d in m.decls():
            if "#" in d.name():
                out[d.name().split("#")[0]] = m[d].as_long()
        return out


def _where(cex: dict[str, int], stages: int) -> str:
    return ", ".join([f"{k}={v}" for k, v in cex.items()] + [f"STAGES={stages}"])


def check_rings(loader: Any, consumers: Sequence[Any], rings: Sequence[Ring], stages: Sequence[int],
                blocks: str = "n_blocks", stages_name: str = "STAGES") -> list[RingViolation]:
    """Prove the ring discipline of `loader` (the partition that fills every ring) against each of `consumers`
    (a partition function; one entry per consumer partition, the same function twice for two warp groups running
    it), at each ring size in `stages`. A partition is a (Gluon) function or its source text. Returns the
    violations; an empty list is the proof."""
    if z3 is None:
        raise ImportError("proving a Gluon lowering's rings needs z3 (pip install z3-solver)")
    out: list[RingViolation] = []
    for s in stages:
        n = z3.Int("n")
        env = {blocks: n, stages_name: z3.IntVal(s)}
        facts = [n >= 1]
        prover = _Prover(s, n, facts)
        barriers = frozenset(b for r in rings for b in (r.ready, r.empty))
        reader = _Reader(loader, env, stages_name, barriers)
        regions = reader.run()
        out += [RingViolation("unsupported", "-", reader.name, ln, why) for ln, why in reader.problems]
        out += _check_loader(reader.name, regions, rings, prover)
        for fn in dict.fromkeys(consumers):  # each consumer function once: its copies run the same code
            cr = _Reader(fn, env, stages_name, barriers)
            cregions = cr.run()
            out += [RingViolation("unsupported", "-", cr.name, ln, why) for ln, why in cr.problems]
            out += _check_consumer(cr.name, cregions, rings, prover)
    return _dedupe(out)


def check_kernel(kernel: Any, rings: Sequence[Ring], stages: Sequence[int], partitions: dict[str, Any] | None = None,
                 blocks: str = "n_blocks", stages_name: str = "STAGES") -> list[RingViolation]:
    """Prove the ring discipline of a warp-specialized Gluon kernel: its `gl.warp_specialize` call names the
    partitions (resolved in `partitions`, by default the kernel's module globals); the one that fills the rings is
    the loader, the ones whose wgmma read them are consumers (a function listed twice is two consumers). Besides
    `check_rings`, the barrier counts: each ring's empty barrier is initialised to the number of consumers (each
    releases a block once: fewer and the loader refills a slot another consumer still reads, more and it waits
    forever), its ready barrier to 1 (the loader's one expect-arrive a fill)."""
    if z3 is None:
        raise ImportError("proving a Gluon lowering's rings needs z3 (pip install z3-solver)")
    fdef, first, env = _function_ast(kernel)
    names = dict(env if partitions is None else partitions)
    inits: dict[str, tuple[int | None, int]] = {}
    entries: list[tuple[str, int]] = []
    for node in ast.walk(fdef):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        if (owner, node.func.attr) == ("mbarrier", "init") and node.args:
            target = node.args[0]
            if isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) and \
                    isinstance(target.func.value, ast.Name):
                count = next((k.value for k in node.keywords if k.arg == "count"), None)
                inits[target.func.value.id] = (count.value if isinstance(count, ast.Constant) else None,
                                               first + node.lineno - 1)
        if (owner, node.func.attr) == ("gl", "warp_specialize") and node.args and isinstance(node.args[0], ast.List):
            for e in node.args[0].elts:
                if isinstance(e, ast.Tuple) and e.elts and isinstance(e.elts[0], ast.Name):
                    entries.append((e.elts[0].id, first + e.lineno - 1))
    kname = fdef.name
    if not entries:
        return [RingViolation("unsupported", "-", kname, first, "no gl.warp_specialize([...]) call to read")]
    loaders, consumers = [], []
    for name, line in entries:
        part = names.get(name)
        if part is None:
            return [RingViolation("unsupported", "-", kname, line, f"partition {name} cannot be resolved")]
        probe_env = {blocks: z3.Int("n"), stages_name: z3.IntVal(max(stages))}
        accesses = [a for r in _Reader(part, probe_env, stages_name).run() for a in r.accesses]
        buffers = {r.buffers for r in rings}
        if any(a.kind == "fill" and a.buffer in buffers for a in accesses):
            loaders.append(part)
        elif any(a.kind == "mma" and any(b in buffers for b, _, _ in a.reads) for a in accesses):
            consumers.append(part)
    if len(loaders) != 1 or not consumers:
        return [RingViolation("unsupported", "-", kname, entries[0][1], f"{len(loaders)} loader partition(s) and "
                              f"{len(consumers)} consumer partition(s); the proof reads one loader and consumers")]
    out: list[RingViolation] = []
    for ring in rings:
        for barrier, want, why in ((ring.empty, len(consumers), "one release from each consumer"),
                                   (ring.ready, 1, "the loader's one expect-arrive a fill")):
            got, line = inits.get(barrier, (None, first))
            if got != want:
                out.append(RingViolation("barrier-count", ring.name, kname, line, f"{barrier} is initialised to "
                                         f"count={got}, but it takes {want} arrival(s) a phase ({why}, "
                                         f"{len(consumers)} consumer partition(s))"))
    return out + check_rings(loaders[0], consumers, rings, stages, blocks, stages_name)


def _dedupe(vs: list[RingViolation]) -> list[RingViolation]:
    seen, out = set(), []
    for v in vs:
        key = (v.kind, v.ring, v.function, v.line)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _in_range(region: _Region) -> list[Any]:
    return [] if region.loop_var is None else [region.loop_var >= region.lo, region.loop_var < region.hi]


def _check_loader(fn: str, regions: list[_Region], rings: Sequence[Ring], pv: _Prover) -> list[RingViolation]:
    out: list[RingViolation] = []
    s = pv.stages
    for ring in rings:
        fills = [(r, i, a) for r in regions for i, a in enumerate(r.accesses) if a.kind == "fill" and a.buffer ==
                 ring.buffers]
        if not fills:
            out.append(RingViolation("fill", ring.name, fn, 0, f"the loader never fills {ring.buffers}"))
            continue
        for region, i, a in fills:
            rng = _in_range(region)
            where = f"{ring.buffers}.index(...) at line {a.line}"
            if a.array != ring.ready:
                out.append(RingViolation("fill", ring.name, fn, a.line, f"{where} signals {a.array}, not {ring.ready}"))
                continue
            if region.loop_var is None or a.idx is None:
                out.append(RingViolation("fill", ring.name, fn, a.line, f"{where}: the filled slot is not "
                                         f"`block % {s}` of the loop over the blocks"))
                continue
            idx = a.idx
            cex = pv.counterexample(z3.Or(a.slot != a.buffer_slot, idx != region.loop_var), rng)
            if cex:
                out.append(RingViolation("fill", ring.name, fn, a.line, f"{where} does not fill the slot of block "
                                         f"{region.loop_var} that it signals ({_where(cex, s)})"))
            if not (z3.eq(z3.simplify(region.lo), z3.IntVal(0)) and z3.eq(z3.simplify(region.hi), pv.n)):
                out.append(RingViolation("fill", ring.name, fn, a.line, "the loader's loop does not run over blocks "
                                         "0..n-1 once"))
            wait = next((w for w in reversed(region.accesses[:i]) if w.kind == "wait" and w.array == ring.empty),
                        None)
            if wait is None:
                out.append(RingViolation("fill", ring.name, fn, a.line, f"{where} does not wait on {ring.empty} "
                                         "first: it may overwrite a slot a consumer still reads"))
                continue
            bad = z3.Or(wait.slot != a.slot, wait.phase != ((idx / s) + 1) % 2)
            cex = pv.counterexample(bad, rng)
            if cex:
                out.append(RingViolation("fill", ring.name, fn, wait.line, f"the wait on {ring.empty} at line "
                                         f"{wait.line} is not the release of block idx - {s} of the slot it refills"
                                         f" ({_where(cex, s)})"))
    return out


_Flight = list[tuple[Any, _Access, list[tuple[str, Any, Any]]]]  # one wgmma in flight: (guard, issue, its reads)


def _shifted(entry: _Flight, var: Any, to: Any, guard: Any) -> _Flight:
    """An in-flight wgmma of a loop body's iteration `var`, seen at iteration `to` (its slots rewritten), under
    `guard`."""
    return [(z3.And(guard, z3.substitute(g, (var, to))), a,
             [(b, z3.substitute(sl, (var, to)), None if ix is None else z3.substitute(ix, (var, to)))
              for b, sl, ix in reads]) for g, a, reads in entry]


def _check_consumer(fn: str, regions: list[_Region], rings: Sequence[Ring], pv: _Prover) -> list[RingViolation]:
    """Follow one consumer's regions (straight code and loop bodies) in order. A wgmma may stay in flight from one
    loop iteration into the next (a GEMM keeps one running while it issues the next): the body is followed once
    to learn which of its wgmma are in flight at its end, then with those of iteration j - 1 (those before the
    loop for its first iteration) in flight at its start."""
    out: list[RingViolation] = []
    by_buffer = {r.buffers: r for r in rings}
    waited: dict[str, list[tuple[_Access, _Region]]] = {r.ready: [] for r in rings}
    releases: dict[str, list[tuple[_Access, _Region]]] = {r.name: [] for r in rings}
    in_flight: list[_Flight] = []        # issued, not retired wgmma, oldest first

    def follow(region: _Region, flight: list[_Flight], check: bool) -> list[_Flight]:
        rng = _in_range(region)
        for a in region.accesses:
            if a.kind == "wait" and a.array in waited and check:
                waited[a.array].append((a, region))
            elif a.kind == "mma":
                if check:
                    for buf, slot, idx in a.reads:
                        ring = by_buffer.get(buf)
                        if ring is not None:
                            out.extend(_read_after_fill(fn, ring, a, slot, idx, region, waited[ring.ready], pv))
                flight = flight + [[(z3.BoolVal(True), a, a.reads)]]
            elif a.kind == "mma_wait":
                flight = flight[len(flight) - a.keep:] if a.keep else []
            elif a.kind == "arrive" and check:
                for ring in (r for r in rings if r.empty == a.array):
                    releases[ring.name].append((a, region))
                    out.extend(_release_after_retire(fn, ring, a, flight, rng, pv))
        return flight

    for region in regions:
        if region.loop_var is None:
            in_flight = follow(region, in_flight, True)
            continue
        j, lo, hi = region.loop_var, region.lo, region.hi
        # the body alone, with placeholders for the wgmma in flight when an iteration starts
        end = follow(region, [[(z3.BoolVal(False), _Access("mma", 0), [])] for _ in in_flight], False)
        line = region.accesses[0].line if region.accesses else 0
        if any(alt[1].line == 0 and not alt[2] for e in end for alt in e):
            out.append(RingViolation("unsupported", "-", fn, line, "a wgmma stays in flight for two loop iterations"))
            in_flight = []
            continue
        if len(end) != len(in_flight):
            out.append(RingViolation("unsupported", "-", fn, line, f"{len(in_flight)} wgmma in flight when the loop "
                                     f"starts but {len(end)} at the end of an iteration: the reader follows a loop "
                                     "that keeps the same number in flight from one iteration to the next"))
            in_flight = []
            continue
        carried = [[(z3.And(g, j == lo), a, r) for g, a, r in pre] + _shifted(e, j, j - 1, j > lo)
                   for pre, e in zip(in_flight, end)]
        follow(region, carried, True)
        # after the loop: its last iteration's, or where it ran no iteration those from before it
        in_flight = [_shifted(e, j, hi - 1, hi > lo) + [(z3.And(g, hi <= lo), a, r) for g, a, r in pre]
                     for pre, e in zip(in_flight, end)]
    for ring in rings:
        out += _release_once(fn, ring, releases[ring.name], pv)
    return out


def _release_after_retire(fn: str, ring: Ring, release: _Access, flight: list[_Flight], rng: list[Any],
                          pv: _Prover) -> list[RingViolation]:
    for entry in flight:
        for guard, m, reads in entry:
            for buf, slot, _ in reads:
                if buf != ring.buffers:
                    continue
                cex = pv.counterexample(z3.And(guard, release.slot == slot), rng)
                if cex:
                    return [RingViolation(
                        "release-after-retire", ring.name, fn, release.line,
                        f"the release of {ring.empty} at line {release.line} may come while the wgmma issued at "
                        f"line {m.line} still reads {ring.buffers} in the same slot ({_where(cex, pv.stages)}): "
                        "the loader may overwrite a tile being read")]
    return []


def _read_after_fill(fn: str, ring: Ring, mma: _Access, slot: Any, idx: Any, region: _Region,
                     waits: list[tuple[_Access, _Region]], pv: _Prover) -> list[RingViolation]:
    s = pv.stages
    rng = _in_range(region)
    if idx is None:
        return [RingViolation("read-after-fill", ring.name, fn, mma.line, f"the wgmma reads {ring.buffers} at a slot"
                              f" that is not `block % {s}`: which block it holds cannot be followed")]
    # the latest wait on the ring's ready barrier at this slot, in this region or before it
    for w, wr in reversed(waits):
        if wr is not region and wr.loop_var is not None:
            continue  # a wait inside an earlier loop does not cover a read after it
        if pv.counterexample(w.slot != slot, rng) is None:
            cex = pv.counterexample(w.phase != (idx / s) % 2, rng)
            if cex:
                return [RingViolation("read-after-fill", ring.name, fn, w.line,
                                      f"the wait on {ring.ready} at line {w.line} expects the wrong phase for the "
                                      f"block its slot holds ({_where(cex, s)}): the wgmma at line {mma.line} may "
                                      "read a tile before it lands or hang")]
            return []
    return [RingViolation("read-after-fill", ring.name, fn, mma.line, f"the wgmma at line {mma.line} reads "
                          f"{ring.buffers} without waiting on {ring.ready} for that slot")]


def _release_once(fn: str, ring: Ring, releases: list[tuple[_Access, _Region]], pv: _Prover) -> list[RingViolation]:
    s = pv.stages
    x = z3.Int("block#0")
    count: Any = z3.IntVal(0)
    for a, region in releases:
        if a.idx is None:
            return [RingViolation("release-once", ring.name, fn, a.line, f"the release at line {a.line} names a "
                                  f"slot that is not `block % {s}`")]
        if region.loop_var is None:
            count = count + z3.If(a.idx == x, 1, 0)
        else:  # the loop releases block idx(j) for each j in [lo, hi): x is released iff some j maps to it
            j = region.loop_var
            hit = z3.Exists([j], z3.And(j >= region.lo, j < region.hi, a.idx == x))
            count = count + z3.If(hit, 1, 0)
    line = releases[0][0].line if releases else 0
    times = z3.Int("times#0")
    cex = pv.counterexample(times != 1, [x >= 0, x < pv.n, times == count])
    if cex:
        got = cex.pop("times", None)
        block = cex.pop("block", "?")
        how = "never" if got == 0 else f"{got} times"
        return [RingViolation("release-once", ring.name, fn, line, f"this consumer releases block {block} of ring "
                              f"{ring.name} {how}, not once ({_where(cex, s)})")]
    return []
