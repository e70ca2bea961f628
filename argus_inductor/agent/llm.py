"""The LLM client: OpenAI-compatible chat completions (POST <base>/chat/completions: `vllm serve`, hosted APIs,
anything that speaks the chat-completions shape), over the standard library's HTTP client.

Configuration (environment):
    ARGUS_LLM_BASE_URL     e.g. http://localhost:8000/v1 (vllm serve) or https://api.openai.com/v1; unset: no LLM,
                           the agent uses its offline policy
    ARGUS_LLM_MODEL        the model name the endpoint serves (required with a base URL)
    ARGUS_LLM_API_KEY      the key (optional: "EMPTY" is sent for local servers that take none)
    ARGUS_LLM_TIMEOUT      seconds a request may take in all, from connecting to the last byte of the reply
                           (default 120)
    ARGUS_LLM_MAX_RETRIES  retries after a time-out, a connection error, HTTP 429 or 5xx, or a malformed
                           response (default 3); waits back off exponentially (ARGUS_LLM_BACKOFF seconds,
                           default 2, doubled each time, at most 60), and a 429's Retry-After is honoured up to 60 s
    ARGUS_LLM_TEMPERATURE  default 0.2; ARGUS_LLM_MAX_TOKENS default 4096

The endpoint is not trusted:
- every request has a total deadline, ARGUS_LLM_TIMEOUT or the caller's (the agent's remaining synthesis budget),
  whichever comes first; a server that sends its headers and then a byte now and then is cut at the deadline (a
  watchdog shuts the socket down), so no reply can hold the agent past it;
- redirects are not followed: a 3xx is an error that names where it pointed (a redirect could lead the request, and
  the API key in it, off the configured endpoint; set ARGUS_LLM_BASE_URL to the address that answers);
- a reply is read up to MAX_REPLY_BYTES (8 MiB; max_tokens of text is far less) and parsed as JSON with any failure
  (a deeply nested document included) a malformed response, never an exception of another kind.
HTTP(S)_PROXY / NO_PROXY are honoured, except for loopback endpoints, which are always reached directly.

chat() returns the reply text ("" for an empty reply: the caller tells the model so), or raises LLMError
once the retries or the deadline are spent, or on an error retrying cannot fix (bad request, authentication,
a redirect).
"""
from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import random
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .. import config

MAX_REPLY_BYTES = 8 << 20
MIN_REQUEST_SECONDS = 0.05  # a request with less time left than this is not started


class LLMError(Exception):
    """The endpoint could not give a reply (after retries)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind  # timeout | rate_limit | server | connection | malformed | client | redirect | config


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key: str = "EMPTY"
    timeout: float = 120.0
    max_retries: int = 3
    backoff: float = 2.0
    max_backoff: float = 60.0
    temperature: float = 0.2
    max_tokens: int = 4096
    max_reply_bytes: int = MAX_REPLY_BYTES

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> LLMConfig | None:
        """The configuration the environment gives, or None when no endpoint is configured."""
        e = os.environ if env is None else env
        url = config.env("ARGUS_LLM_BASE_URL", e)
        if not url:
            return None
        model = config.env("ARGUS_LLM_MODEL", e)
        if not model:
            raise LLMError("ARGUS_LLM_BASE_URL is set but ARGUS_LLM_MODEL is not: name the served model", "config")
        try:  # each setting's default and bounds are config.SETTINGS'
            cfg = LLMConfig(url, model, config.env("ARGUS_LLM_API_KEY", e) or "EMPTY",
                            config.env("ARGUS_LLM_TIMEOUT", e), config.env("ARGUS_LLM_MAX_RETRIES", e),
                            config.env("ARGUS_LLM_BACKOFF", e), 60.0, config.env("ARGUS_LLM_TEMPERATURE", e),
                            config.env("ARGUS_LLM_MAX_TOKENS", e))
        except ValueError as ex:
            raise LLMError(f"an ARGUS_LLM_* setting is malformed: {ex}", "config") from None
        _endpoint(cfg.base_url)
        return cfg


@dataclass
class Usage:
    requests: int = 0
    retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "retries": self.retries, "errors": dict(self.errors),
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class _Endpoint:
    scheme: str
    host: str
    port: int
    path: str      # the chat-completions path, with the base URL's query


def _endpoint(base_url: str) -> _Endpoint:
    u = urllib.parse.urlsplit(base_url.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise LLMError(f"ARGUS_LLM_BASE_URL must be an http:// or https:// URL, got {base_url[:200]!r}", "config")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise LLMError(f"ARGUS_LLM_BASE_URL has a bad port: {base_url[:200]!r}", "config") from None
    path = u.path.rstrip("/") + "/chat/completions" + (f"?{u.query}" if u.query else "")
    return _Endpoint(u.scheme, u.hostname, port, path)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _clip(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


class _Timeout(Exception):
    pass


class _TooLarge(Exception):
    pass


class LLMClient:
    def __init__(self, config: LLMConfig, sleep: Any = time.sleep) -> None:
        self.config = config
        self.usage = Usage()
        self._sleep = sleep
        self._endpoint = _endpoint(config.base_url)

    # ---- one HTTP request ---------------------------------------------------------------------------------
    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
        """A connection to the endpoint (through the environment's proxy where one applies), the request target to
        send, and the headers the proxy needs."""
        ep = self._endpoint
        proxy = None
        if not _loopback(ep.host) and not urllib.request.proxy_bypass(ep.host):
            proxy = urllib.request.getproxies().get(ep.scheme)
        if not proxy:
            if ep.scheme == "https":
                return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout,
                                                   context=ssl.create_default_context()), ep.path, {}
            return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout), ep.path, {}
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        auth: dict[str, str] = {}
        if p.username:
            cred = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
            auth = {"Proxy-Authorization": "Basic " + base64.b64encode(cred.encode()).decode()}
        host, port = p.hostname or "", p.port or 80
        if ep.scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
            conn.set_tunnel(ep.host, ep.port, headers=auth)
            return conn, ep.path, {}
        return http.client.HTTPConnection(host, port, timeout=timeout), f"http://{ep.host}:{ep.port}{ep.path}", auth

    def _post(self, payload: bytes, limit: float) -> tuple[int, dict[str, str], bytes]:
        """POST the payload; (status, headers, body) by `limit` (time.monotonic()), or _Timeout. A watchdog shuts
        the socket down at the limit, so neither a slow connect nor a trickle of bytes outlives it."""
        remaining = limit - time.monotonic()
        if remaining <= 0:
            raise _Timeout
        conn, target, extra = self._connection(remaining)
        aborted = threading.Event()
        opened: list[socket.socket] = []  # the connection's socket (http.client drops conn.sock once a response
        #                                   that closes the connection is read; the response still reads from it)

        def abort() -> None:
            aborted.set()
            for sock in list(opened):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        watchdog = threading.Timer(remaining, abort)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect()  # bounded by the socket time-out, `remaining`
            opened.append(conn.sock)
            if aborted.is_set():  # the limit came while connecting, before the watchdog had a socket to shut
                raise _Timeout
            headers = {"Content-Type": "application/json", "Accept": "application/json",
                       "Authorization": f"Bearer {self.config.api_key}", "User-Agent": "argus-inductor",
                       **extra}
            conn.request("POST", target, body=payload, headers=headers)
            resp = conn.getresponse()
            status = resp.status
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            if 300 <= status < 400:
                return status, hdrs, b""  # not followed (see the module docstring); its body is not needed
            cap = self.config.max_reply_bytes
            length = hdrs.get("content-length", "")
            if length.strip().isdigit() and int(length) > cap:
                raise _TooLarge
            chunks, total = [], 0
            while True:
                chunk = resp.read1(1 << 16)
                if not chunk:
                    break
                total += len(chunk)
                if total > cap:
                    raise _TooLarge
                chunks.append(chunk)
            watchdog.cancel()
            if aborted.is_set():  # the socket was shut down under the read: what came is not the whole reply
                raise _Timeout
            return status, hdrs, b"".join(chunks)
        except (OSError, http.client.HTTPException) as e:
            if aborted.is_set() or isinstance(e, TimeoutError):
                raise _Timeout from None
            raise
        finally:
            watchdog.cancel()
            conn.close()

    # ---- a chat call with retries -------------------------------------------------------------------------
    def _delay(self, attempt: int, hint: float | None) -> float:
        c = self.config
        delay = hint if hint is not None else c.backoff * (2 ** attempt) * (0.75 + 0.5 * random.random())
        return min(max(delay, 0.0), c.max_backoff)

    def chat(self, messages: list[dict[str, str]], deadline: float | None = None) -> str:
        """The reply to `messages`. deadline: a time.monotonic() value no request (nor wait between retries) may
        run past, besides each request's ARGUS_LLM_TIMEOUT (the agent passes the end of its synthesis budget)."""
        c = self.config
        payload = json.dumps({"model": c.model, "messages": messages, "temperature": c.temperature,
                              "max_tokens": c.max_tokens}).encode()
        last: LLMError | None = None
        t0 = time.perf_counter()
        try:
            for attempt in range(c.max_retries + 1):
                now = time.monotonic()
                limit, cut = now + c.timeout, False
                if deadline is not None and deadline < limit:
                    limit, cut = deadline, True
                if limit - now < MIN_REQUEST_SECONDS:
                    if last is not None:
                        raise last
                    raise LLMError("no time left in the synthesis budget for a request", "timeout")
                if attempt:
                    self.usage.retries += 1
                self.usage.requests += 1
                try:
                    return self._attempt(payload, limit, cut)
                except _Retry as r:
                    last = r.error
                    self._count(last.kind)
                    if attempt == c.max_retries:
                        break
                    wait = self._delay(attempt, r.hint)
                    if deadline is not None and time.monotonic() + wait + MIN_REQUEST_SECONDS >= deadline:
                        raise LLMError(f"{last} (no time left in the synthesis budget to retry)", last.kind) from None
                    self._sleep(wait)
                except LLMError as e:
                    self._count(e.kind)
                    raise
            assert last is not None
            raise last
        finally:
            self.usage.seconds += time.perf_counter() - t0

    def _attempt(self, payload: bytes, limit: float, cut: bool) -> str:
        """One request: the reply text, or _Retry (an error worth retrying), or LLMError (one that is not)."""
        c = self.config
        seconds = limit - time.monotonic()
        try:
            status, headers, body = self._post(payload, limit)
        except _Timeout:
            why = "the synthesis budget's remaining time" if cut else "ARGUS_LLM_TIMEOUT"
            raise _Retry(LLMError(f"no complete reply within {seconds:.3g} s ({why})", "timeout")) from None
        except _TooLarge:
            raise _Retry(LLMError(f"the reply is larger than {c.max_reply_bytes:,} bytes", "malformed")) from None
        except (OSError, http.client.HTTPException) as e:
            raise _Retry(LLMError(f"cannot reach {c.base_url}: {type(e).__name__}: {_clip(str(e))}",
                                  "connection")) from None
        text = body.decode("utf-8", errors="replace")
        if 300 <= status < 400:
            where = _clip(headers.get("location", "nowhere"))
            raise LLMError(f"the endpoint answered HTTP {status}, a redirect to {where}; Argus does not follow "
                           "redirects (they could lead off the configured endpoint): set ARGUS_LLM_BASE_URL to the "
                           "address that answers", "redirect")
        if status == 429:
            raise _Retry(LLMError(f"rate limited (HTTP 429): {_clip(text)}", "rate_limit"),
                         _retry_after(headers.get("retry-after")))
        if status >= 500 or status in (408, 409):
            raise _Retry(LLMError(f"server error (HTTP {status}): {_clip(text)}", "server"))
        if not 200 <= status < 300:
            raise LLMError(f"the endpoint refused the request (HTTP {status}): {_clip(text, 300)}", "client")
        try:
            return _content(json.loads(body))
        except (ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
            raise _Retry(LLMError(f"malformed response: {type(e).__name__}: {_clip(str(e))}", "malformed")) from None

    def _count(self, kind: str) -> None:
        self.usage.errors[kind] = self.usage.errors.get(kind, 0) + 1


class _Retry(Exception):
    def __init__(self, error: LLMError, hint: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.hint = hint


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _content(resp: Any) -> str:
    """The assistant message's text of a chat-completions response (a parsed JSON document)."""
    if not isinstance(resp, dict):
        raise TypeError(f"the response is a {type(resp).__name__}, not an object")
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("the response has no choices")
    first = choices[0]
    msg = first.get("message") if isinstance(first, dict) else None
    if not isinstance(msg, dict):
        raise TypeError("the first choice has no message object")
    content = msg.get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TypeError(f"message content is a {type(content).__name__}, not text")
    return content


def from_env() -> LLMClient | None:
    cfg = LLMConfig.from_env()
    return LLMClient(cfg) if cfg is not None else None
