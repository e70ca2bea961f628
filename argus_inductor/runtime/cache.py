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

FORMAT = 1
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

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"CacheEntry.origin must be one of {ORIGINS}, got {self.origin!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> CacheEntry:
        names = {f.name for f in fields(CacheEntry)}
        missing = names - set(d)
        if missing:
            raise ValueError(f"entry lacks {sorted(missing)}")
        e = CacheEntry(**{k: d[k] for k in names})
        for name, typ in (("signature", dict), ("policy", dict), ("verification", dict), ("timings", dict),
                          ("versions", dict), ("dsl_source", str), ("triton_source", str)):
            if not isinstance(getattr(e, name), typ):
                raise ValueError(f"entry field {name} is not a {typ.__name__}")
        return e

    def sig(self) -> Signature:
        return Signature.from_dict(self.signature)


def versions_contradiction(entry: CacheEntry) -> str | None:
    """Why `entry` cannot be stored under its signature's key: the versions it says it was made under (torch,
    Triton, Argus) are not the ones its signature, hence its key, records (a miss recorded under another Triton
    and solved under this one belongs under this one's key). None when they agree or the entry names none."""
    try:
        recorded = dict(zip(("torch", "triton", "argus_inductor"), Signature.from_dict(entry.signature).versions))
    except (KeyError, TypeError, ValueError):
        return None
    made = {k: str(v).split("+")[0] if k == "torch" else str(v) for k, v in entry.versions.items() if k in recorded}
    wrong = [f"{k} {made[k]} (key: {recorded[k]})" for k in made if made[k] != recorded[k]]
    return f"made under {', '.join(wrong)}" if wrong else None


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
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            return self._bad(p, key, f"cannot be read ({e})")
        try:
            doc = json.loads(data.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                return self._bad(p, key, f"has format {doc.get('format') if isinstance(doc, dict) else '?'}, "
                                         f"expected {FORMAT}")
            payload = doc["entry"]
            if doc.get("key") != key:
                return self._bad(p, key, f"belongs to key {doc.get('key')!r}")
            if doc.get("checksum") != checksum(payload):
                return self._bad(p, key, "does not match its checksum (changed after it was written)")
            return CacheEntry.from_json(payload)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return self._bad(p, key, f"is not a valid entry ({type(e).__name__}: {e})")

    def _bad(self, p: Path, key: str, why: str) -> CacheEntry | None:
        _report_once(f"{p}", f"argus: cache entry {p} {why}; ignoring it, and it will be rebuilt")
        with self._lock(key):
            # Move it aside (kept for a person to look at) unless another process already replaced it.
            try:
                doc = json.loads(p.read_text())
                if isinstance(doc, dict) and doc.get("checksum") == checksum(doc.get("entry")) \
                        and doc.get("format") == FORMAT and doc.get("key") == key:
                    return CacheEntry.from_json(doc["entry"])  # rewritten meanwhile by another process
            except (OSError, ValueError, TypeError, AttributeError, KeyError):
                pass
            with contextlib.suppress(OSError):
                os.replace(p, p.with_name(f"{p.name}.bad-{int(time.time())}-{os.getpid()}"))
        return None

    def put(self, key: str, entry: CacheEntry) -> None:
        """Store `entry` under `key` atomically (the last of several writers wins, whole). An entry whose versions
        contradict its signature's is refused (ValueError): a later lookup under those versions would trust it."""
        p = self.path(key)
        why = versions_contradiction(entry)
        if why is not None:
            raise ValueError(f"argus cache: not storing the entry for {entry.sig().short()} under {key}: {why}")
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
            if e.verification.get("status") == "violations":  # a plan the checker rejects is never lent
                continue
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
            lines = self.misses_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        except OSError as e:
            _report_once(f"misses-read:{self.root}", f"argus: cannot read {self.misses_file} ({e})")
            return []
        found: dict[str, dict[str, Any]] = {}
        bad = 0
        for ln in lines:
            try:
                d = json.loads(ln)
                key, sig, t = str(d["key"]), dict(d["signature"]), float(d["time"])
                Signature.from_dict(sig)
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            m = found.setdefault(key, {"key": key, "signature": sig, "count": 0, "first_seen": t, "last_seen": t})
            m["count"] += 1
            m["first_seen"] = min(m["first_seen"], t)
            m["last_seen"] = max(m["last_seen"], t)
        if bad:
            _report_once(f"misses-bad:{self.misses_file}",
                         f"argus: {bad} unreadable line(s) in {self.misses_file} were skipped")
        solved = {k for k in self.keys()  # an entry the checker rejected solves nothing
                  if (e := self.get(k)) is not None and e.verification.get("status") != "violations"}
        out = sorted(found.values(), key=lambda m: m["first_seen"])
        for m in out:
            m["solved"] = m["key"] in solved
        return out
