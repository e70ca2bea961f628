"""Markdown files with a YAML front matter block: `---`, YAML, `---`, then Markdown.

PyYAML reads the block when it is installed; otherwise a small reader of the YAML subset the
knowledge base is written in does (block maps and lists, one-line flow lists and maps, quoted and
plain scalars, `|` block text). tests/agent/test_kb.py checks both readers agree on every entry.
"""
from __future__ import annotations

import re
from typing import Any


class FrontMatterError(ValueError):
    pass


def split(text: str) -> tuple[str, str]:
    """(front matter YAML, Markdown body)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise FrontMatterError("the file does not start with a '---' front matter line")
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1:]).strip()
    raise FrontMatterError("the front matter has no closing '---' line")


def parse(text: str, *, use_yaml: bool = True) -> tuple[dict[str, Any], str]:
    head, body = split(text)
    data: Any = None
    if use_yaml:
        try:
            import yaml
        except ImportError:
            use_yaml = False
        else:
            data = yaml.safe_load(head)
    if not use_yaml:
        data = MiniYAML(head).parse()
    if not isinstance(data, dict):
        raise FrontMatterError("the front matter is not a mapping")
    return data, body


_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


def scalar(tok: str) -> Any:
    t = tok.strip()
    if not t:
        return None
    if t[0] in "\"'":
        if len(t) < 2 or t[-1] != t[0]:
            raise FrontMatterError(f"unterminated quoted string: {t}")
        inner = t[1:-1]
        if t[0] == "'":
            return inner.replace("''", "'")
        return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), inner)
    if t in ("true", "True"):
        return True
    if t in ("false", "False"):
        return False
    if t in ("null", "~", "Null"):
        return None
    if _INT.match(t):
        return int(t)
    if _FLOAT.match(t) and any(c in t for c in ".eE"):
        return float(t)
    return t


def _strip_comment(line: str) -> str:
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'" and (i == 0 or line[i - 1] in " [{:,"):
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line.rstrip()


def flow(text: str) -> Any:
    """A one-line flow value: [a, b], {k: v, ...}, nested, or a scalar."""
    pos = 0

    def skip() -> None:
        nonlocal pos
        while pos < len(text) and text[pos] == " ":
            pos += 1

    def value() -> Any:
        nonlocal pos
        skip()
        if pos < len(text) and text[pos] == "[":
            pos += 1
            out: list[Any] = []
            skip()
            if text[pos] == "]":
                pos += 1
                return out
            while True:
                out.append(value())
                skip()
                c = text[pos]
                pos += 1
                if c == "]":
                    return out
                if c != ",":
                    raise FrontMatterError(f"expected ',' or ']' in {text!r}")
        if pos < len(text) and text[pos] == "{":
            pos += 1
            d: dict[str, Any] = {}
            skip()
            if text[pos] == "}":
                pos += 1
                return d
            while True:
                skip()
                j = text.index(":", pos)
                key = scalar(text[pos:j])
                pos = j + 1
                d[key] = value()
                skip()
                c = text[pos]
                pos += 1
                if c == "}":
                    return d
                if c != ",":
                    raise FrontMatterError(f"expected ',' or '}}' in {text!r}")
        start = pos
        if pos < len(text) and text[pos] in "\"'":
            q = text[pos]
            pos = text.index(q, pos + 1) + 1
            return scalar(text[start:pos])
        while pos < len(text) and text[pos] not in ",]}":
            pos += 1
        return scalar(text[start:pos])

    v = value()
    skip()
    if pos != len(text):
        raise FrontMatterError(f"unexpected text after a flow value: {text[pos:]!r}")
    return v


class MiniYAML:
    """Reads the block-structured YAML subset described in the module docstring."""

    def __init__(self, text: str) -> None:
        self.lines: list[tuple[int, str]] = []
        for raw in text.splitlines():
            if not raw.strip() or raw.lstrip().startswith("#"):
                self.lines.append((-1, raw))
                continue
            self.lines.append((len(raw) - len(raw.lstrip(" ")), raw))
        self.i = 0

    def parse(self) -> Any:
        self._skip_blank()
        if self.i >= len(self.lines):
            return {}
        return self._block(self.lines[self.i][0])

    def _skip_blank(self) -> None:
        while self.i < len(self.lines) and self.lines[self.i][0] < 0:
            self.i += 1

    def _block(self, indent: int) -> Any:
        self._skip_blank()
        text = self.lines[self.i][1].strip()
        if text.startswith("- ") or text == "-":
            return self._list(indent)
        return self._map(indent)

    def _value_after(self, rest: str, indent: int) -> Any:
        rest = _strip_comment(rest).strip()
        if rest in ("|", "|-", ">", ">-"):
            return self._block_text(indent, folded=rest.startswith(">"), keep=not rest.endswith("-"))
        if rest:
            # a plain block scalar may hold commas and brackets; only [.., {.., and quotes start flow values
            return flow(rest) if rest[0] in "[{\"'" else scalar(rest)
        self._skip_blank()
        if self.i < len(self.lines) and self.lines[self.i][0] > indent:
            return self._block(self.lines[self.i][0])
        if self.i < len(self.lines) and self.lines[self.i][0] == indent and \
                self.lines[self.i][1].strip().startswith("- "):
            return self._list(indent)
        return None

    def _map(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while True:
            self._skip_blank()
            if self.i >= len(self.lines):
                return out
            ind, raw = self.lines[self.i]
            if ind < indent:
                return out
            if ind > indent:
                raise FrontMatterError(f"unexpected indentation: {raw!r}")
            text = _strip_comment(raw).strip()
            if text.startswith("- "):
                return out
            if ":" not in text:
                raise FrontMatterError(f"expected 'key: value': {raw!r}")
            key, rest = text.split(":", 1)
            self.i += 1
            out[str(scalar(key))] = self._value_after(rest, indent)

    def _list(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while True:
            self._skip_blank()
            if self.i >= len(self.lines):
                return out
            ind, raw = self.lines[self.i]
            text = raw.strip()
            if ind != indent or not (text.startswith("- ") or text == "-"):
                return out
            item = raw[ind + 2:]
            stripped = _strip_comment(item).strip()
            if re.match(r"^[^\[\]{}\"',]+:(\s|$)", stripped):
                # "- key: value" starts a map whose keys sit at indent + 2
                self.lines[self.i] = (ind + 2, " " * (ind + 2) + item.lstrip())
                out.append(self._map(ind + 2))
            else:
                self.i += 1
                out.append(self._value_after(item, indent))

    def _block_text(self, indent: int, folded: bool, keep: bool) -> str:
        body: list[str] = []
        block_indent = None
        while self.i < len(self.lines):
            ind, raw = self.lines[self.i]
            if ind >= 0 and ind <= indent:
                break
            if ind >= 0 and block_indent is None:
                block_indent = ind
            body.append(raw[block_indent:] if block_indent is not None and ind >= 0 else "")
            self.i += 1
        while body and not body[-1]:
            body.pop()
        if folded:
            text = " ".join(s for s in body if s)
        else:
            text = "\n".join(body)
        return text + ("\n" if keep and text else "")
