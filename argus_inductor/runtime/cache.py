"""The kernel cache on disk: one entry per shape signature, plus the signatures that missed.

Layout under the root (ARGUS_CACHE_DIR, default ~/.cache/argus):

    kernels/<key>.json      one CacheEntry, with a checksum over its contents
    kernels/<key>.json.bad-<time>-<pid>   an entry that could not be read, moved aside once reported
    misses.jsonl            one line per signature a process ran without a cached kernel (`argus warmup`
                            reads it)
    locks/                  lock files (fcntl locks; O_EXCL files where fcntl does not exist)

Writes go to a temporary file in the same folder and are moved into place with os.replace, so a
reader sees either the old entry or the new one, never half of one, however many processes write.
An entry that is unreadable, of another format, or whose checksum does not match its contents is
reported once (logging, logger "argus_inductor") and treated as missing, so it is rebuilt; the
cache never raises to the caller for a bad file and never runs a kernel from one.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .signature import Signature

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("argus_inductor")

FORMAT = 2  # 2: entries carry the measured swap-in's verdicts (`swapin`); format 1 entries still read
READABLE = (1, 2)
MAX_ENTRY_BYTES = 32 * 2**20  # an entry is a few hundred KB at most; anything larger is not one
ORIGINS = ("synthesized", "default", "warmup")
_REPORTED: set[str] = set()
_REPORTED_LOCK = threading.Lock()


def default_root() -> Path:
    return Path(os.environ.get("ARGUS_CACHE_DIR") or Path.home() / ".cache" / "argus")


@dataclass
class CacheEntry:
    """What the cache keeps for one signature."""

    signature: dict[str, Any]      # Signature.as_dict()
    dsl_source: str                # the DSL kernel(s), readable and re-readable with kernels_from_source
    triton_source: str             # the generated Triton, for a person to read
    policy: dict[str, Any]         # Policy.as_dict() (for several kernels: {kernel name: Policy.as_dict()})
    verification: dict[str, Any]   # the invariant checker's summary, or {"status": "not verified"}
    timings: dict[str, Any] = field(default_factory=dict)   # e.g. {"ms": 0.12, "baseline_ms": 0.15}
    versions: dict[str, Any] = field(default_factory=dict)  # torch, triton, argus_inductor, ...
    origin: str = "default"        # synthesized | default | warmup
    # the measured swap-in's verdict on this entry's plan, by device model (signature.device_model): winner
    # ("argus" | "fallback"), argus_ms, fallback_ms, fallback (what was timed), method, measured (a time)
    swapin: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"CacheEntry.origin must be one of {ORIGINS}, got {self.origin!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> CacheEntry:
        names = {f.name for f in fields(CacheEntry)}
        missing = names - set(d) - {"swapin"}  # format 1 entries have no verdicts
        if missing:
            raise ValueError(f"entry lacks {sorted(missing)}")
        e = CacheEntry(**{k: d[k] for k in names if k in d})
        for name, typ in (("signature", dict), ("policy", dict), ("verification", dict), ("timings", dict),
                          ("versions", dict), ("dsl_source", str), ("triton_source", str), ("swapin", dict)):
            if not isinstance(getattr(e, name), typ):
                raise ValueError(f"entry field {name} is not a {typ.__name__}")
        return e

    def sig(self) -> Signature:
        return Signature.from_dict(self.signature)


def contradiction(key: str, entry: CacheEntry) -> str:
    """Why `entry` cannot be the entry of `key` ("" when it can): its signature field hashes to another key (it names
    another op, shape or device), or its versions are not the ones its signature was made under."""
    sig = entry.sig()
    if sig.key() != key:
        return f"names another signature ({sig.short()})"
    for name, want in zip(("torch", "triton", "argus_inductor"), sig.versions):
        have = entry.versions.get(name)
        if have is not None and str(have).split("+")[0] != str(want).split("+")[0]:  # torch's local build aside
            return f"says it was made with {name} {have}, but its signature says {want}"
    return ""


def read_bounded(p: Path, limit: int = MAX_ENTRY_BYTES) -> bytes:
    """The bytes of regular file `p`, in bounded time: never blocks on a named pipe or a device, refuses more than
    `limit` bytes (ValueError), FileNotFoundError where there is none."""
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"it is {st.st_size} bytes, more than an entry's {limit}")
        chunks, total = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            total += len(b)
            if total > limit:
                raise ValueError(f"it is more than an entry's {limit} bytes")
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def checksum(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _report_once(what: str, msg: str) -> None:
    with _REPORTED_LOCK:
        if what in _REPORTED:
            return
        _REPORTED.add(what)
    log.warning(msg)


class KernelCache:
    """The disk cache. Safe to use from several threads and processes at once."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.kernels = self.root / "kernels"
        self.misses_file = self.root / "misses.jsonl"
        self._locks = self.root / "locks"
        self._seen_misses: set[str] = set()

    # -- locking ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self, name: str, timeout: float = 60.0) -> Iterator[None]:
        self._locks.mkdir(parents=True, exist_ok=True)
        path = self._locks / f"{name}.lock"
        if fcntl is not None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        deadline = time.monotonic() + timeout  # pragma: no cover - O_EXCL lock files without fcntl
        while True:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.close(fd)
                break
            except FileExistsError:
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > timeout:  # a holder that died
                        path.unlink()
                        continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"argus cache: could not take {path}") from None
                time.sleep(0.01)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                path.unlink()

    # -- entries ---------------------------------------------------------------------------------
    def path(self, key: str) -> Path:
        if not key or any(c not in "0123456789abcdefABCDEF-_" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.kernels / f"{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None when there is none or it cannot be trusted (reported once)."""
        p = self.path(key)
        try:
            data = read_bounded(p)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            return self._bad(p, key, f"cannot be read ({e})")
        try:
            doc = json.loads(data.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("format") not in READABLE:
                return self._bad(p, key, f"has format {doc.get('format') if isinstance(doc, dict) else '?'}, "
                                         f"expected {FORMAT}")
            payload = doc["entry"]
            if doc.get("key") != key:
                return self._bad(p, key, f"belongs to key {doc.get('key')!r}")
            if doc.get("checksum") != checksum(payload):
                return self._bad(p, key, "does not match its checksum (changed after it was written)")
            entry = CacheEntry.from_json(payload)
            why = contradiction(key, entry)
            if why:
                return self._bad(p, key, why)
            return entry
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            return self._bad(p, key, f"is not a valid entry ({type(e).__name__}: {str(e)[:200]})")

    def _bad(self, p: Path, key: str, why: str) -> CacheEntry | None:
        _report_once(f"{p}", f"argus: cache entry {p} {why}; ignoring it, and it will be rebuilt")
        with self._lock(key):
            # Move it aside (kept for a person to look at) unless another process already replaced it.
            try:
                doc = json.loads(read_bounded(p).decode("utf-8"))
                if isinstance(doc, dict) and doc.get("checksum") == checksum(doc.get("entry")) \
                        and doc.get("format") in READABLE and doc.get("key") == key:
                    entry = CacheEntry.from_json(doc["entry"])  # rewritten meanwhile by another process
                    if not contradiction(key, entry):
                        return entry
            except (OSError, ValueError, TypeError, AttributeError, KeyError, RecursionError):
                pass
            with contextlib.suppress(OSError):
                os.replace(p, p.with_name(f"{p.name}.bad-{int(time.time())}-{os.getpid()}"))
        return None

    def set_aside(self, key: str, why: str) -> None:
        """Move `key`'s entry aside (kept beside it for a person to look at), saying why once: a miss from now on,
        rebuilt by `argus warmup`."""
        p = self.path(key)
        _report_once(f"aside:{p}", f"argus: cache entry {p} {why}; set aside, and it will be rebuilt")
        with self._lock(key), contextlib.suppress(OSError):
            os.replace(p, p.with_name(f"{p.name}.bad-{int(time.time())}-{os.getpid()}"))

    def put(self, key: str, entry: CacheEntry) -> None:
        """Store `entry` under `key` atomically (the last of several writers wins, whole). ValueError where the
        entry's own signature or versions say it belongs under another key."""
        why = contradiction(key, entry)
        if why:
            raise ValueError(f"argus cache: not storing an entry under {key}: it {why}")
        p = self.path(key)
        payload = entry.to_json()
        doc = {"format": FORMAT, "key": key, "checksum": checksum(payload), "written": time.time(),
               "entry": payload}
        text = json.dumps(doc, indent=1, sort_keys=True)
        self.kernels.mkdir(parents=True, exist_ok=True)
        with self._lock(key):
            fd, tmp = tempfile.mkstemp(dir=self.kernels, prefix=f".{key}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, p)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def entries(self) -> list[CacheEntry]:
        """Every readable entry (bad ones are reported once and skipped)."""
        out = []
        if not self.kernels.is_dir():
            return out
        for p in sorted(self.kernels.glob("*.json")):
            e = self.get(p.stem)
            if e is not None:
                out.append(e)
        return out

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.kernels.glob("*.json")) if self.kernels.is_dir() else []

    def nearest(self, signature: Signature,
                accept: Callable[[Signature], bool] | None = None) -> tuple[CacheEntry, float] | None:
        """The solved entry closest to `signature` within its family (same op, epilogue, dtypes, layouts,
        device), with its distance; None when the family has no entry. `accept`: only entries whose signature it
        accepts. An entry the checker rejected is not a solution."""
        best: tuple[CacheEntry, float] | None = None
        for e in self.entries():
            try:
                other = e.sig()
            except (KeyError, TypeError, ValueError):
                continue
            if not signature.same_family(other) or (accept is not None and not accept(other)):
                continue
            if e.verification.get("status") == "violations" or e.origin == "default":
                continue  # a plan the checker rejects, or a miss's template plan (kept for its swap-in verdict)
            d = signature.distance(other)
            if best is None or d < best[1]:
                best = (e, d)
        return best

    # -- misses ----------------------------------------------------------------------------------
    def record_miss(self, signature: Signature) -> None:
        """Note that `signature` ran without a cached kernel (once per process and signature)."""
        key = signature.key()
        if key in self._seen_misses:
            return
        self._seen_misses.add(key)
        line = json.dumps({"key": key, "signature": signature.as_dict(), "time": time.time(),
                           "pid": os.getpid()}, sort_keys=True) + "\n"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with self._lock("misses"):
                fd = os.open(self.misses_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError as e:
            _report_once(f"misses:{self.root}", f"argus: cannot record cache misses in {self.misses_file} ({e})")

    def misses(self) -> list[dict[str, Any]]:
        """One dict per missed signature: key, signature (a dict, see Signature.from_dict), count,
        first_seen, last_seen and solved (whether the cache now has an entry for it that the checker did not
        reject); oldest first."""
        try:
            lines = read_bounded(self.misses_file, 256 * 2**20).decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            _report_once(f"misses-read:{self.root}", f"argus: cannot read {self.misses_file} ({e})")
            return []
        found: dict[str, dict[str, Any]] = {}
        bad = 0
        for ln in lines:
            try:
                d = json.loads(ln)
                key, sig, t = str(d["key"]), dict(d["signature"]), float(d["time"])
                Signature.from_dict(sig)
            except (ValueError, KeyError, TypeError, RecursionError):
                bad += 1
                continue
            m = found.setdefault(key, {"key": key, "signature": sig, "count": 0, "first_seen": t, "last_seen": t})
            m["count"] += 1
            m["first_seen"] = min(m["first_seen"], t)
            m["last_seen"] = max(m["last_seen"], t)
        if bad:
            _report_once(f"misses-bad:{self.misses_file}",
                         f"argus: {bad} unreadable line(s) in {self.misses_file} were skipped")
        solved = {k for k in self.keys()  # an entry the checker rejected, or a miss's template plan, solves nothing
                  if (e := self.get(k)) is not None and e.verification.get("status") != "violations"
                  and e.origin != "default"}
        out = sorted(found.values(), key=lambda m: m["first_seen"])
        for m in out:
            m["solved"] = m["key"] in solved
        return out
