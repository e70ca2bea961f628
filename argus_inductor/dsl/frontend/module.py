"""Reading kernel text as a whole module, and reading one decorated Python function.

Kernel text may come from outside the process (an LLM's reply, a cache file, a file given to `argus verify`): it is
parsed, never executed, and it is read only as the DSL. A module holds imports from argus_inductor.dsl (each DSL name
under its own name), a docstring, and kernels; a kernel is a top-level `def` under exactly one decorator, the DSL's
`kernel` by its own name (`@kernel`, or `@argus_inductor.dsl.kernel` / `@dsl.kernel` through an import of the DSL
module). Anything else is a DSLError that names the line and the fix; in particular a `def` without @kernel is not
read as a kernel, and not skipped either: kernels cannot call helper functions, so a plain function in kernel text
has no use, and text that would mean something else when imported as Python is not the DSL. The size, depth and
unrolling bounds of limits.py hold for every kernel read here, so no text makes reading it fail with anything but a
DSLError (a RecursionError from a long expression included) or take unbounded time.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from .. import lang
from ..errors import DSLError
from ..ir import KernelIR
from ..limits import MAX_SOURCE_CHARS, check_tree, check_unrolling
from .core import MISSING, Resolver
from .function import Frontend

DSL_MODULES = ("argus_inductor.dsl", "argus_inductor.dsl.lang")
# the Python builtins a kernel body may name (range(...) loops, min/max of scalars, float(...) of a literal)
BODY_BUILTINS = ("range", "min", "max", "float", "int")
READ_FIX = "split long or deeply nested expressions into named steps, one per line"


class KernelDecorator:
    """What the name `kernel` stands for in kernel text read by the frontend (the DSL's decorator, never called)."""

    def __repr__(self) -> str:
        return "<the DSL's @kernel>"


KERNEL = KernelDecorator()


class DSLPackage:
    """What `import argus_inductor.dsl` binds `argus_inductor` to: `.dsl` reaches the DSL's names."""

    def __getattr__(self, name: str) -> Any:
        return DSLModule() if name == "dsl" else MISSING


class DSLModule:
    """The DSL module as kernel text names it (`import argus_inductor.dsl as dsl`): its operations and `kernel`."""

    def __getattr__(self, name: str) -> Any:
        if name == "kernel":
            return KERNEL
        return getattr(lang, name, MISSING) if not name.startswith("_") else MISSING


def parse(source: str, filename: str) -> ast.Module:
    """ast.parse, with every way it can fail on untrusted text (syntax, depth, size) a DSLError."""
    if len(source) > MAX_SOURCE_CHARS:
        raise DSLError(f"the kernel source is larger than {MAX_SOURCE_CHARS:,} characters ({len(source):,})",
                       fix="keep a kernel module to its kernels; split very long expressions into named steps",
                       filename=filename)
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise DSLError(f"syntax error: {e.msg}", fix="fix the Python syntax", line=e.lineno, filename=filename,
                       source_line=e.text) from None
    except (RecursionError, MemoryError):
        raise DSLError("the kernel source nests too deeply or is too long to read (an expression of thousands of "
                       "terms or levels)", fix=READ_FIX, filename=filename) from None
    except ValueError as e:  # e.g. a NUL byte in the text
        raise DSLError(f"the kernel source cannot be read: {e}", fix="remove the offending characters",
                       filename=filename) from None


def read_kernel(tree: ast.FunctionDef, source: str, filename: str, first_line: int, resolve: Resolver) -> KernelIR:
    """One kernel function into its IR, within the bounds of limits.py."""
    check_tree(tree, filename=filename, first_line=first_line, src_lines=source.splitlines(), name=tree.name)
    fe = Frontend(tree, source=source, filename=filename, first_line=first_line, resolve=resolve)
    try:
        ir = fe.build()
    except DSLError:
        raise
    except RecursionError:
        raise fe.err("the kernel is nested too deeply to read", READ_FIX, None) from None
    except Exception as e:  # an internal fault must still point at the user's line
        raise fe.err(f"internal compiler error ({type(e).__name__}: {e})",
                     "please report this kernel; as a workaround rewrite the statement at this line",
                     None) from e
    check_unrolling(ir, {})  # the loops whose bounds are literals; constexpr bounds are checked with the policy
    return ir


def read_function(fn: Callable[..., Any]) -> KernelIR:
    """The IR of a Python function decorated with @kernel in an imported module (its body is never executed)."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise DSLError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}",
                       fix="define kernels in a .py file (not in an interactive prompt or exec)") from e
    source = textwrap.dedent("".join(lines))
    filename = inspect.getsourcefile(fn) or "<unknown>"
    tree = parse(source, filename)
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef):
        raise DSLError("@kernel decorates a plain `def` function", fix="write `@kernel` above `def name(...):`")
    g = fn.__globals__

    def resolve(name: str) -> Any:
        if name in g:
            return g[name]
        return getattr(builtins, name, MISSING)

    return read_kernel(fdef, source, filename, first, resolve)


class _ModuleReader:
    def __init__(self, source: str, filename: str) -> None:
        self.source = source
        self.filename = filename
        self.src_lines = source.splitlines()
        self.names: dict[str, Any] = {}

    def err(self, message: str, fix: str, node: ast.AST, kernel: str | None = None) -> DSLError:
        line = getattr(node, "lineno", None)
        src = self.src_lines[line - 1] if line and 0 < line <= len(self.src_lines) else None
        return DSLError(message, fix=fix, line=line, filename=self.filename, source_line=src, kernel=kernel)

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom) and node.module in DSL_MODULES and not node.level:
            for a in node.names:
                if a.asname is not None and a.asname != a.name:
                    raise self.err(f"kernel source imports the DSL name '{a.name}' as '{a.asname}'",
                                   f"import it under its own name: `from {node.module} import {a.name}`", node)
                if a.name == "*":
                    self.names.update({k: getattr(lang, k) for k in lang.__all__})
                    self.names["kernel"] = KERNEL
                elif a.name == "kernel":
                    self.names["kernel"] = KERNEL
                elif hasattr(lang, a.name) and not a.name.startswith("_"):
                    self.names[a.name] = getattr(lang, a.name)
                else:
                    raise self.err(f"argus_inductor.dsl has no name '{a.name}'", "import DSL names only", node)
            return
        if isinstance(node, ast.Import) and all(a.name in DSL_MODULES for a in node.names):
            for a in node.names:
                if a.asname is None:
                    self.names[a.name.split(".")[0]] = DSLPackage()
                elif hasattr(builtins, a.asname):
                    raise self.err(f"kernel source binds the DSL module to '{a.asname}', a Python builtin's name",
                                   f"import it as another name, e.g. `import {a.name} as dsl`", node)
                else:
                    self.names[a.asname] = DSLModule()
            return
        mod = "." * node.level + (node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name
        if mod == "__future__":
            return
        raise self.err(f"import of '{mod}' is not allowed in kernel source",
                       "kernel source may import only from argus_inductor.dsl", node)

    def static(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            return self.names.get(node.id, MISSING)
        if isinstance(node, ast.Attribute):
            base = self.static(node.value)
            return getattr(base, node.attr, MISSING) if isinstance(base, DSLPackage | DSLModule) else MISSING
        return MISSING

    def decorated(self, fn: ast.FunctionDef) -> None:
        """Raise unless `fn` is decorated with the DSL's @kernel and nothing else."""
        decs = fn.decorator_list
        fix = "decorate each kernel with exactly `@kernel`, imported with `from argus_inductor.dsl import *`"
        if not decs:
            raise self.err(f"function '{fn.name}' is not decorated with @kernel", fix + "; kernel source holds "
                           "kernels only (a kernel cannot call a helper function)", fn, fn.name)
        if len(decs) > 1:
            raise self.err(f"function '{fn.name}' has {len(decs)} decorators; a kernel has exactly one, @kernel",
                           fix, decs[0], fn.name)
        dec = decs[0]
        if self.static(dec) is KERNEL:
            return
        if isinstance(dec, ast.Name) and dec.id == "kernel":
            raise self.err("'kernel' is not imported from argus_inductor.dsl",
                           "add `from argus_inductor.dsl import *` (or import kernel by name)", dec, fn.name)
        raise self.err(f"function '{fn.name}' is decorated with `@{_text(dec)}`, not with the DSL's @kernel", fix,
                       dec, fn.name)

    def signature(self, fn: ast.FunctionDef) -> None:
        """What the function's parameters and return say besides what the frontend reads: nothing else is allowed
        (a default or an annotation the frontend would ignore is text that runs when imported as Python)."""
        if fn.returns is not None and not (isinstance(fn.returns, ast.Constant) and fn.returns.value is None):
            raise self.err(f"kernel '{fn.name}' has a return annotation", "remove it (or write `-> None`): a kernel "
                           "returns nothing and writes its outputs with store(...)", fn, fn.name)
        a = fn.args
        with_default = a.args[len(a.args) - len(a.defaults):]
        for arg in with_default:
            if arg.annotation is not None and self.annotation_kind(arg.annotation) != "constexpr":
                raise self.err(f"parameter '{arg.arg}' has a default, but only constexpr parameters take one",
                               f"remove the default of '{arg.arg}'; its value comes with each launch", fn, fn.name)
        if getattr(fn, "type_params", None):
            raise self.err(f"kernel '{fn.name}' has type parameters", "remove them", fn, fn.name)

    def annotation_kind(self, ann: ast.expr) -> str:
        obj = self.static(ann)
        if obj is lang.constexpr or (isinstance(ann, ast.Constant) and ann.value == "constexpr"):
            return "constexpr"
        return "other"

    def resolve(self, name: str) -> Any:
        if name in self.names:
            return self.names[name]
        if name in BODY_BUILTINS:
            return getattr(builtins, name)
        return MISSING

    def read(self) -> dict[str, KernelIR]:
        tree = parse(self.source, self.filename)
        kernels: list[ast.FunctionDef] = []
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                self.imports(node)
            elif isinstance(node, ast.FunctionDef):
                # bounded before anything walks it; the decorator is checked against the names bound so far, as
                # Python would evaluate it
                check_tree(node, filename=self.filename, first_line=1, src_lines=self.src_lines, name=node.name)
                self.decorated(node)
                self.signature(node)
                if any(k.name == node.name for k in kernels):
                    raise self.err(f"kernel '{node.name}' is defined twice", "give each kernel its own name", node,
                                   node.name)
                kernels.append(node)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue
            else:
                raise self.err(f"top-level '{type(node).__name__}' statement in kernel source",
                               "kernel source holds DSL imports and @kernel functions only", node)
        if not kernels:
            raise DSLError("no kernel function found", fix="define one `@kernel def name(...):`",
                           filename=self.filename)
        out: dict[str, KernelIR] = {}
        for node in kernels:  # bodies name what the whole module imports, as they would when a kernel runs
            first = node.decorator_list[0].lineno
            text = "\n".join(self.src_lines[first - 1: node.end_lineno])
            sub = parse(text, self.filename).body[0]
            assert isinstance(sub, ast.FunctionDef)
            out[node.name] = read_kernel(sub, text, self.filename, first, self.resolve)
        return out


def read_module(source: str, filename: str = "<generated>") -> dict[str, KernelIR]:
    """Every kernel of a module's text, by name (see the module docstring for what the text may hold)."""
    return _ModuleReader(source, filename).read()


def _text(node: ast.expr) -> str:
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):
        text = type(node).__name__
    return text if len(text) <= 80 else text[:77] + "..."
