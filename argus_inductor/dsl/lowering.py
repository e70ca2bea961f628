"""IR plus policy -> readable Triton source. Ghost ops (tags, assertions) are never emitted."""
from __future__ import annotations

import keyword
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from .errors import DSLError, LaunchError
from .evaluate import eval_scalar
from .ir import Block, KernelIR, Op, ScalarParam, TensorParam, Value
from .lang import ACTIVATION_KINDS
from .limits import check_unrolling
from .policy import Policy
from .types import AnyDType, TensorDType, TileType, float32

TARGETS = ("cuda", "hip", "interpret")

_BIN = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "and": "&",
        "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "eq": "==", "ne": "!="}


# The combine function of a product reduction, defined once in any module that needs it.
_MUL_COMBINE = ("@triton.jit", "def _argus_mul(a, b):", "    return a * b")


@dataclass(frozen=True)
class LoweredSource:
    name: str            # the Triton function's name
    source: str          # the whole module text
    arg_names: list[str]  # runtime arguments, in order (tensors, scalars, symbols, strides, extras)
    const_names: list[str]
    # tensors loaded through tensor descriptors (policy.tma): (name, the narrowest box extent along each dim)
    descriptors: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # the stride-1 dimension this source assumes for each described tensor whose stride-1 dimension is not its last
    majors: tuple[tuple[str, int], ...] = ()


# The most elements a tensor descriptor's box may span along one dimension (the copy engine's limit).
TMA_MAX_BOX = 256
# "divisible by anything": the divisor recorded for zero
_ANY = 1 << 30


def resolve_consts(ir: KernelIR, policy: Policy) -> dict[str, Any]:
    """Constexpr values from the policy or the kernel's defaults; every one must be known, every tile extent a power of
    two, and the static loops within limits.MAX_UNROLL (the checker and the lowering both start here)."""
    given = dict(policy.consts)
    out: dict[str, Any] = {}
    names = {p.name for p in ir.constexprs}
    unknown = sorted(set(given) - names)
    if unknown:
        raise DSLError(f"policy sets {', '.join(unknown)}, which kernel '{ir.name}' does not declare",
                       fix=f"its constexpr parameters are: {', '.join(sorted(names)) or 'none'}",
                       filename=ir.filename, line=ir.first_line, kernel=ir.name)
    for p in ir.constexprs:
        if p.name in given:
            out[p.name] = given[p.name]
        elif p.default is not None:
            out[p.name] = p.default
        else:
            raise DSLError(f"constexpr '{p.name}' has no value", fix=f"set it in the policy: {p.name}=...",
                           filename=ir.filename, line=ir.first_line, kernel=ir.name)
    _check_extents(ir, out)
    check_unrolling(ir, out)
    return out


def _live_ops(block: Block, consts: dict[str, Any]) -> Iterator[Op]:
    """The block's ops and those nested in them, without the branch a static if never takes for these constexprs
    (an mma the policy switches off need not fit the tensor cores)."""
    for op in block.ops:
        yield op
        blocks = op.blocks
        if op.kind == "if" and op.attrs.get("static"):
            try:
                blocks = [op.blocks[0 if eval_scalar(op.args[0], consts) else 1]]
            except LaunchError:
                pass
        for b in blocks:
            yield from _live_ops(b, consts)


def _check_extents(ir: KernelIR, consts: dict[str, Any]) -> None:
    for op in _live_ops(ir.body, consts):
        if op.ghost:
            continue
        for r in op.results:
            if not isinstance(r.type, TileType):
                continue
            for d in r.type.shape:
                n = consts[d] if isinstance(d, str) else d
                if not isinstance(n, int) or n < 1 or n & (n - 1):
                    raise DSLError(f"tile extent {d}={n} is not a power of two", line=op.line,
                                   filename=ir.filename, kernel=ir.name,
                                   fix="choose power-of-two tile sizes; ragged edges are masked automatically")
        if op.kind == "mma":
            for v in op.args[:2]:
                for d in v.shape:
                    n = consts[d] if isinstance(d, str) else d
                    if n < 16:
                        raise DSLError(f"mma operand extent {d}={n} is below the tensor-core minimum of 16",
                                       fix="use tile sizes of at least 16 for mma operands", line=op.line,
                                       filename=ir.filename, kernel=ir.name)


class _Emitter:
    def __init__(self, ir: KernelIR, policy: Policy, target: str, consts: dict[str, Any],
                 majors: tuple[tuple[str, int], ...] = ()) -> None:
        self.ir = ir
        self.majors = dict(majors)
        self.policy = policy
        self.target = target
        self.consts = consts
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.used: set[str] = {"tl", "triton", "math", "_argus_mul"}
        self.helpers: dict[str, tuple[str, ...]] = {}
        self.nonneg: set[int] = set()
        # 1-D index tiles known to be `offset + arange(n)`: value id -> (offset expression, n, a divisor of offset)
        self.boxes: dict[int, tuple[str, int, int]] = {}
        # a known divisor of integer scalars (program ids, loop counters, tile offsets): value id -> divisor
        self.divisor: dict[int, int] = {}
        # tensor descriptors, created once at the kernel's entry: (tensor, box shape) -> (name, creation line)
        self.descs: dict[tuple[str, tuple[int, ...]], tuple[str, str]] = {}
        self.loop_depth = 0
        self.box_shapes: set[tuple[str, tuple[int, ...]]] = set()  # (tensor, box in the tensor's dim order)
        self.used.update(p.name for p in ir.params)
        self.used.update(ir.symbols)

    # ---- naming ---------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = hint if hint.isidentifier() and not keyword.iskeyword(hint) else "v"
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def ref(self, v: Value) -> str:
        return self.names[v.id]

    def define(self, v: Value, expr: str, indent: str) -> None:
        name = self.fresh(v.hint or "v")
        self.names[v.id] = name
        self.lines.append(f"{indent}{name} = {expr}")

    # ---- types --------------------------------------------------------------------------------
    def tl_dtype(self, dt: AnyDType) -> str:
        if isinstance(dt, TensorDType):
            return f"{dt.tensor}.dtype.element_ty"
        return dt.triton

    # ---- entry ----------------------------------------------------------------------------------
    def run(self) -> LoweredSource:
        ir = self.ir
        args: list[str] = []
        for p in ir.params:
            if not hasattr(p, "default"):
                args.append(p.name)
        args += list(ir.symbols)
        for t in ir.tensors:
            args += [f"{t.name}_stride{d}" for d in range(len(t.dims))]
        if self.policy.persistent:
            args.append("NUM_PROGRAMS")
        consts = [p.name for p in ir.constexprs]
        if self.policy.grid_order == "grouped":
            consts.append("GROUP_M")
        self.used.update(args)
        self.used.update(consts)
        fname = f"{ir.name}_kernel"
        header = ["@triton.jit", f"def {fname}("]
        params = [f"    {a}," for a in args] + [f"    {c}: tl.constexpr," for c in consts]
        self.lines = []
        self.block(ir.body, "    ", top=True)
        self.lines[:0] = [line for _, line in self.descs.values()]
        # a float scalar is float32 in the kernel whoever launches it (Inductor's launcher passes a Python float
        # as float64, which would carry float64 through every product with it)
        self.lines[:0] = [f"    {p.name} = tl.cast({p.name}, tl.float32)" for p in ir.params
                          if isinstance(p, ScalarParam) and p.dtype == "float32"]
        policy_note = f"# policy: {self.policy.key()}"
        text = "\n".join([
            f"# Generated by argus_inductor from kernel '{ir.name}' ({ir.filename}:{ir.first_line}).",
            f"# target: {self.target}",
            policy_note,
            "import triton",
            "import triton.language as tl",
            "",
            "",
            *(ln for h in self.helpers.values() for ln in (*h, "", "")),
            *header, *params, "):", *self.lines, ""])
        narrowest: dict[str, tuple[int, ...]] = {}
        for tensor, box in self.box_shapes:
            old = narrowest.get(tensor, box)
            narrowest[tensor] = tuple(min(a, b) for a, b in zip(old, box))
        return LoweredSource(fname, text, args, consts, tuple(sorted(narrowest.items())),
                             tuple(sorted(self.majors.items())))

    def block(self, block: Block, indent: str, top: bool = False) -> None:
        for op in block.ops:
            if op.checker_only:
                continue
            self.op(op, indent)
            if top and op.kind == "tile_grid" and self.policy.persistent:
                indent = indent + "    "

    # ---- ops ------------------------------------------------------------------------------------
    def op(self, op: Op, ind: str) -> None:
        k = op.kind
        a = op.args
        if k == "const":
            v = op.attrs["value"]
            self.names[op.result.id] = _literal(v)
            if type(v) is int:
                self.divisor[op.result.id] = abs(v) or _ANY
            if isinstance(v, (int, float)) and v >= 0:
                self.nonneg.add(op.result.id)
        elif k in ("shape", "constexpr", "param"):
            self.names[op.result.id] = op.attrs["name"]
            v = self.consts.get(op.attrs["name"]) if k == "constexpr" else None
            if type(v) is int:
                self.divisor[op.result.id] = abs(v) or _ANY
            if k != "param":
                self.nonneg.add(op.result.id)
        elif k == "tile_grid":
            self.grid(op, ind)
        elif k == "arange":
            self.define(op.result, f"tl.arange(0, {op.attrs['n']})", ind)
            self.nonneg.add(op.result.id)
            n = op.attrs["n"]
            n = self.consts[n] if isinstance(n, str) else n
            if isinstance(n, int):
                self.boxes[op.result.id] = ("0", n, _ANY)
        elif k == "full":
            shape = _shape_text(op.attrs["shape"])
            self.define(op.result, f"tl.full({shape}, {_literal(op.attrs['value'])}, "
                                   f"{self.tl_dtype(op.attrs['dtype'])})", ind)
        elif k == "binary":
            x, y = self.ref(a[0]), self.ref(a[1])
            o = op.attrs["op"]
            if o in _BIN:
                expr = f"{x} {_BIN[o]} {y}"
            elif o == "cdiv":
                expr = f"tl.cdiv({x}, {y})"
            elif o in ("max", "min"):
                expr = f"tl.{o}imum({x}, {y})"
            else:
                raise AssertionError(o)
            self.define(op.result, expr, ind)
            self.box_offset(op)
            dx, dy = self.divisor.get(a[0].id, 1), self.divisor.get(a[1].id, 1)
            if o == "mul":
                self.divisor[op.result.id] = min(dx * dy, _ANY)
            elif o in ("add", "sub"):
                self.divisor[op.result.id] = math.gcd(dx, dy)
            if o in ("add", "mul", "floordiv", "mod", "cdiv", "max") and all(v.id in self.nonneg for v in a):
                self.nonneg.add(op.result.id)
            if o == "max" and any(v.id in self.nonneg for v in a):
                self.nonneg.add(op.result.id)
        elif k == "unary":
            self.unary(op, ind)
        elif k == "where":
            self.define(op.result, f"tl.where({self.ref(a[0])}, {self.ref(a[1])}, {self.ref(a[2])})", ind)
        elif k == "cast":
            bits = ", bitcast=True" if op.attrs.get("bitcast") else ""
            self.define(op.result, f"tl.cast({self.ref(a[0])}, {self.tl_dtype(op.attrs['dtype'])}{bits})", ind)
            if a[0].id in self.nonneg and not bits:
                self.nonneg.add(op.result.id)
        elif k == "expand":
            rank = len(op.result.shape)
            idx = [":"] * rank
            idx[op.attrs["axis"]] = "None"
            self.define(op.result, f"{self.ref(a[0])}[{', '.join(idx)}]", ind)
            if a[0].id in self.nonneg:
                self.nonneg.add(op.result.id)
        elif k == "broadcast_to":
            shape = _shape_text(op.attrs["shape"])
            src = a[0]
            if src.is_tile:
                self.define(op.result, f"tl.broadcast_to({self.ref(src)}, {shape})", ind)
            else:
                self.define(op.result, f"tl.zeros({shape}, {self.tl_dtype(op.result.dtype)}) + {self.ref(src)}",
                            ind)
        elif k == "reshape":
            self.define(op.result, f"tl.reshape({self.ref(a[0])}, {_shape_text(op.attrs['shape'])})", ind)
        elif k == "trans":
            self.define(op.result, f"tl.trans({self.ref(a[0])})", ind)
        elif k == "reduce":
            x = self.ref(a[0])
            o = op.attrs["op"]
            if o in ("sum", "prod") and a[0].dtype.is_float and a[0].dtype != float32:
                x = f"{x}.to(tl.float32)"
            if o == "prod":  # triton has no tl.prod: a reduction with the module's own multiply
                self.helpers["_argus_mul"] = _MUL_COMBINE
                self.define(op.result, f"tl.reduce({x}, {op.attrs['axis']}, _argus_mul)", ind)
            else:
                self.define(op.result, f"tl.{o}({x}, axis={op.attrs['axis']})", ind)
        elif k == "scan":
            x = self.ref(a[0])
            if a[0].dtype.is_float and a[0].dtype != float32:
                x = f"{x}.to(tl.float32)"
            self.define(op.result, f"tl.{op.attrs['op']}({x}, axis={op.attrs['axis']}, "
                                   f"reverse={bool(op.attrs['reverse'])})", ind)
        elif k == "mma":
            self.mma(op, ind)
        elif k == "load":
            self.load(op, ind)
        elif k in ("store", "atomic_add"):
            self.write(op, ind)
        elif k == "for":
            self.loop(op, ind)
        elif k == "if":
            self.branch(op, ind)
        else:
            raise AssertionError(f"no lowering for {k}")

    def unary(self, op: Op, ind: str) -> None:
        x = self.ref(op.args[0])
        o = op.attrs["op"]
        if o == "activation":
            kind = op.attrs["kind"]
            code = self.consts.get(kind) if isinstance(kind, str) else kind
            if type(code) is not int or not 0 <= code < len(ACTIVATION_KINDS):
                raise DSLError(f"activation kind {kind}={code!r} is not one of 0..{len(ACTIVATION_KINDS) - 1}",
                               line=op.line, fix=f"set {kind} to an activation code in the policy")
            o = ACTIVATION_KINDS[code]
            if o in ("none", "relu"):
                xf = x if op.args[0].dtype == float32 and op.args[0].is_tile else f"tl.cast({x}, tl.float32)"
                self.define(op.result, xf if o == "none" else f"tl.maximum({xf}, 0)", ind)
                return
        if o == "not":
            self.define(op.result, f"{x} == 0", ind)
            return
        if o == "invert":
            self.define(op.result, f"~{x}", ind)
            return
        if o == "relu":
            self.define(op.result, f"tl.maximum({x}, 0)", ind)
            return
        if o == "abs":
            self.define(op.result, f"tl.abs({x})", ind)
            return
        xf = x
        if op.args[0].dtype != float32 or not op.args[0].is_tile:
            xf = self.fresh("xf")
            self.lines.append(f"{ind}{xf} = tl.cast({x}, tl.float32)")
        exprs = {
            "exp": f"tl.exp({xf})", "exp2": f"tl.exp2({xf})", "log": f"tl.log({xf})", "log2": f"tl.log2({xf})",
            "sqrt": f"tl.sqrt({xf})", "rsqrt": f"tl.rsqrt({xf})", "sigmoid": f"tl.sigmoid({xf})",
            "tanh": f"2.0 * tl.sigmoid(2.0 * {xf}) - 1.0", "erf": f"tl.erf({xf})", "cos": f"tl.cos({xf})",
            "sin": f"tl.sin({xf})", "silu": f"{xf} * tl.sigmoid({xf})",
            "gelu": f"0.5 * {xf} * (1.0 + tl.erf({xf} * 0.7071067811865476))",
            "gelu_tanh": f"{xf} * tl.sigmoid(1.5957691216057308 * ({xf} + 0.044715 * {xf} * {xf} * {xf}))",
        }
        self.define(op.result, exprs[o], ind)

    def mma(self, op: Op, ind: str) -> None:
        a, b = self.ref(op.args[0]), self.ref(op.args[1])
        dt = op.args[0].dtype
        extra = ""
        if self.target == "interpret":
            if dt != float32:
                a, b = f"{a}.to(tl.float32)", f"{b}.to(tl.float32)"
            extra = ", input_precision=\"ieee\""
        elif dt == float32 or (isinstance(dt, TensorDType) and self.policy.input_precision != "tf32"):
            # a kernel generic in its input dtype states the precision the policy asks for (it only changes
            # anything for float32 operands); "tf32" is Triton's own default, so it is left implicit
            extra = f", input_precision=\"{self.policy.input_precision}\""
        acc = f", {self.ref(op.args[2])}" if len(op.args) > 2 else ""
        self.define(op.result, f"tl.dot({a}, {b}{acc}{extra})", ind)

    def box_offset(self, op: Op) -> None:
        """Track `offset + arange(n)` through additions and subtractions of scalars."""
        o, (x, y) = op.attrs["op"], op.args
        if o == "add" and y.id in self.boxes and not x.is_tile:
            x, y = y, x
        if o in ("add", "sub") and x.id in self.boxes and not y.is_tile:
            off, n, div = self.boxes[x.id]
            sign = "+" if o == "add" else "-"
            self.boxes[op.result.id] = (self.ref(y) if off == "0" and o == "add" else f"{off} {sign} ({self.ref(y)})",
                                        n, math.gcd(div, self.divisor.get(y.id, 1)))

    def descriptor_load(self, op: Op) -> str | None:
        """`tensor[...]` as one tensor-descriptor box load, or None where the load is no box (a gather, an explicit
        mask, a fill other than zero, a scalar innermost index, a box side over TMA_MAX_BOX), is not in a loop
        (a tile loaded once gains nothing from an asynchronous copy: on the H100 an attention query tile read
        through a descriptor made the kernel 5% slower), or the policy asks for pointer loads. Out of bounds the
        copy engine fills zeros, the DSL's masked-load semantics."""
        if not self.policy.tma or self.target == "hip" or self.loop_depth == 0 or op.attrs.get("has_mask") or \
                op.attrs.get("other", 0) != 0:
            return None
        t: TensorParam = self.ir.tensor(op.attrs["tensor"])
        idx = op.args
        if not any(i.is_tile for i in idx):
            return None
        box, offsets, divs = [], [], []
        for i in idx:
            divs.append(self.divisor.get(i.id, 1))
            if i.is_tile:
                if i.id not in self.boxes or len(i.shape) != 1:
                    return None
                off, n, divs[-1] = self.boxes[i.id]
                if n > TMA_MAX_BOX:
                    return None
                box.append(n)
                offsets.append(off)
            else:
                box.append(1)
                offsets.append(self.ref(i))
        # the descriptor's dims: the tensor's, with its stride-1 dim (the last unless `majors` says) moved last
        rank = len(t.dims)
        c = self.majors.get(t.name, rank - 1)
        self.box_shapes.add((t.name, tuple(box)))
        if not idx[c].is_tile or divs[c] % 16:
            # the copy engine starts a box on a 16-byte boundary along the stride-1 dim: an offset there must be a
            # known multiple of 16 elements (a loop counter stepping by a tile of 16 or more, a program id times one)
            return None
        perm = [d for d in range(rank) if d != c] + [c]
        key = (t.name, tuple(box[d] for d in perm))
        if key not in self.descs:
            name = self.fresh(f"{t.name}_desc")
            dims = ", ".join(t.dims[d] for d in perm)
            strides = ", ".join([f"{t.name}_stride{d}" for d in perm[:-1]] + ["1"])
            self.descs[key] = (name, f"    {name} = tl.make_tensor_descriptor({t.name}, shape=[{dims}], "
                                     f"strides=[{strides}], block_shape={list(key[1])})")
        loaded = f"{self.descs[key][0]}.load([{', '.join(offsets[d] for d in perm)}])"
        tiled = [d for d in perm if idx[d].is_tile]  # the loaded tile's axes, in descriptor order
        if len(tiled) != rank:
            loaded = f"tl.reshape({loaded}, {_shape_text(tuple(box[d] for d in tiled))})"
        order = [tiled.index(d) for d in sorted(tiled)]
        if order != sorted(order):
            loaded = f"tl.trans({loaded})" if len(order) == 2 else f"tl.permute({loaded}, {tuple(order)})"
        return loaded

    def access(self, op: Op, ind: str, nidx: int) -> tuple[str, str | None]:
        t: TensorParam = self.ir.tensor(op.attrs["tensor"])
        idx = op.args[:nidx]
        tiles = [i for i in idx if i.is_tile]
        q = len(tiles)
        terms: list[str] = []
        masks: list[str] = []
        pos = 0
        for d, i in enumerate(idx):
            stride = f"{t.name}_stride{d}"
            if i.is_tile:
                sl = ["None"] * q
                sl[pos] = ":"
                e = self.ref(i) if q == 1 else f"{self.ref(i)}[{', '.join(sl)}]"
                pos += 1
                terms.append(f"{e} * {stride}")
                masks.append(f"({e} < {t.dims[d]})")
                if i.id not in self.nonneg:
                    masks.append(f"({e} >= 0)")
            else:
                terms.append(f"tl.cast({self.ref(i)}, tl.int64) * {stride}")
        ptr = self.fresh(f"{t.name}_ptrs")
        self.lines.append(f"{ind}{ptr} = {t.name} + " + " + ".join(terms))
        if op.attrs.get("has_mask"):
            masks.append(f"({self.ref(op.args[-1])})")
        if not masks:
            return ptr, None
        m = self.fresh(f"{t.name}_mask")
        self.lines.append(f"{ind}{m} = " + " & ".join(masks))
        return ptr, m

    def load(self, op: Op, ind: str) -> None:
        boxed = self.descriptor_load(op)
        if boxed is not None:
            self.define(op.result, boxed, ind)
            return
        nidx = len(op.args) - (1 if op.attrs["has_mask"] else 0)
        ptr, mask = self.access(op, ind, nidx)
        if mask is None:
            self.define(op.result, f"tl.load({ptr})", ind)
        else:
            self.define(op.result, f"tl.load({ptr}, mask={mask}, other={_literal(op.attrs['other'])})", ind)

    def write(self, op: Op, ind: str) -> None:
        nidx = op.attrs["nidx"]
        ptr, mask = self.access(op, ind, nidx)
        t = op.attrs["tensor"]
        val = f"tl.cast({self.ref(op.args[nidx])}, {t}.dtype.element_ty)"
        m = f", mask={mask}" if mask else ""
        if op.kind == "store":
            self.lines.append(f"{ind}tl.store({ptr}, {val}{m})")
        else:
            self.lines.append(f"{ind}tl.atomic_add({ptr}, {val}{m}, sem=\"relaxed\")")

    def loop(self, op: Op, ind: str) -> None:
        body = op.blocks[0]
        # a static loop's bounds as numbers: Triton takes a constexpr expression assigned to a local (KSTEPS * BK)
        # for a tensor, which tl.static_range refuses
        start, stop, step = (str(eval_scalar(v, self.consts)) if op.attrs["static"] else self.ref(v)
                             for v in op.args[:3])
        inits = op.args[3:]
        carried = []
        for arg, init, res in zip(body.args[1:], inits, op.results):
            name = self.fresh(arg.hint or "c")
            self.lines.append(f"{ind}{name} = {self.ref(init)}")
            self.names[arg.id] = name
            self.names[res.id] = name
            carried.append(name)
        iv = body.args[0]
        ivn = self.fresh(iv.hint or "i")
        self.names[iv.id] = ivn
        if op.args[0].id in self.nonneg:
            self.nonneg.add(iv.id)
        self.divisor[iv.id] = math.gcd(self.divisor.get(op.args[0].id, 1), self.divisor.get(op.args[2].id, 1))
        rng = "tl.static_range" if op.attrs["static"] else "range"
        self.lines.append(f"{ind}for {ivn} in {rng}({start}, {stop}, {step}):")
        n0 = len(self.lines)
        self.loop_depth += 1
        self.block(body, ind + "    ")
        self.loop_depth -= 1
        live = [(c, y) for c, y in zip(carried, body.yields) if self.ref(y) != c]
        if live:
            self.lines.append(f"{ind}    {', '.join(c for c, _ in live)} = "
                              f"{', '.join(self.ref(y) for _, y in live)}")
        if len(self.lines) == n0:
            self.lines.append(f"{ind}    pass")

    def branch(self, op: Op, ind: str) -> None:
        if op.attrs.get("static"):
            taken = op.blocks[0] if eval_scalar(op.args[0], self.consts) else op.blocks[1]
            self.block(taken, ind)
            for r, y in zip(op.results, taken.yields):
                self.names[r.id] = self.ref(y)
                if y.id in self.nonneg:
                    self.nonneg.add(r.id)
            return
        names = [self.fresh(r.hint or "r") for r in op.results]
        self.lines.append(f"{ind}if {self.ref(op.args[0])}:")
        for i, blk in enumerate(op.blocks):
            if i == 1:
                self.lines.append(f"{ind}else:")
            n0 = len(self.lines)
            self.block(blk, ind + "    ")
            if names:
                self.lines.append(f"{ind}    {', '.join(names)} = {', '.join(self.ref(y) for y in blk.yields)}")
            if len(self.lines) == n0:
                self.lines.append(f"{ind}    pass")
        for r, n in zip(op.results, names):
            self.names[r.id] = n

    def grid(self, op: Op, ind: str) -> None:
        ext = [self.ref(v) for v in op.args]
        r = len(ext)
        ids = [self.fresh(v.hint or f"pid{i}") for i, v in enumerate(op.results)]
        for v, n in zip(op.results, ids):
            self.names[v.id] = n
            self.nonneg.add(v.id)
        total = " * ".join(f"({e})" for e in ext)
        if self.policy.persistent:
            nt, lin = self.fresh("num_tiles"), self.fresh("tile")
            self.lines.append(f"{ind}{nt} = {total}")
            self.lines.append(f"{ind}for {lin} in range(tl.program_id(0), {nt}, NUM_PROGRAMS):")
            ind = ind + "    "
        else:
            lin = self.fresh("pid")
            self.lines.append(f"{ind}{lin} = tl.program_id(0)")
        if r == 1:
            self.lines.append(f"{ind}{ids[0]} = {lin}")
            return
        if self.policy.grid_order == "grouped":
            em, en = ext[-2], ext[-1]
            rest = lin
            if r == 3:
                self.lines.append(f"{ind}{ids[0]} = {lin} // (({em}) * ({en}))")
                rest = self.fresh("t")
                self.lines.append(f"{ind}{rest} = {lin} % (({em}) * ({en}))")
            ig, fm, gr = self.fresh("in_group"), self.fresh("first_m"), self.fresh("group_rows")
            self.lines += [
                f"{ind}{ig} = GROUP_M * ({en})",
                f"{ind}{fm} = ({rest} // {ig}) * GROUP_M",
                f"{ind}{gr} = tl.minimum(({em}) - {fm}, GROUP_M)",
                f"{ind}{ids[-2]} = {fm} + ({rest} % {ig}) % {gr}",
                f"{ind}{ids[-1]} = ({rest} % {ig}) // {gr}",
            ]
            return
        rest = lin
        for i in range(r - 1, 0, -1):
            self.lines.append(f"{ind}{ids[i]} = {rest} % ({ext[i]})")
            nxt = self.fresh("t")
            self.lines.append(f"{ind}{nxt} = {rest} // ({ext[i]})")
            rest = nxt
        self.lines.append(f"{ind}{ids[0]} = {rest}")


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        if math.isnan(v):
            return 'float("nan")'
        return repr(v)
    return repr(v)


def _shape_text(shape: tuple[Any, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def lower(ir: KernelIR, policy: Policy, target: str = "cuda",
          majors: tuple[tuple[str, int], ...] = ()) -> tuple[LoweredSource, dict[str, Any]]:
    """Lower a verified kernel to Triton source; returns the source and the constexpr values. `majors` names the
    stride-1 dimension of tensors that policy.tma reads through descriptors, where it is not their last."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    policy.validate()
    if policy.warp_specialize:
        from .lowerings import has_lowering
        if not has_lowering(ir.name):
            raise DSLError(f"warp_specialize: kernel '{ir.name}' has no warp-specialized (Gluon) lowering",
                           fix="drop warp_specialize; argus_inductor.hopper lists the kernels that have one (Triton "
                               "3.6's automatic warp specialization gave wrong results: kb/warp-specialization.md)",
                           filename=ir.filename, line=ir.first_line, kernel=ir.name)
        policy = replace(policy, warp_specialize=False)  # the Triton lowering of a launch the Gluon one cannot take
    consts = resolve_consts(ir, policy)
    if policy.grid_order == "grouped":
        consts = {**consts, "GROUP_M": policy.group_m}
    return _Emitter(ir, policy, target, consts, majors).run(), consts


__all__ = ["lower", "LoweredSource", "resolve_consts", "TARGETS", "TMA_MAX_BOX"]
