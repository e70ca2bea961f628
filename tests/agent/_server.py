"""A real HTTP server on 127.0.0.1 speaking POST /v1/chat/completions (the OpenAI response shape), replaying
scripted replies and recording every request; it can also misbehave (trickle its reply, hang, redirect elsewhere,
send a huge body), serve HTTPS, and act as an HTTP proxy (it answers requests for absolute URLs as if it were their host)."""
from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Action:
    content: str | None = None      # the assistant message (None: a null content)
    status: int = 200               # HTTP status to answer with
    delay: float = 0.0              # seconds to wait before answering (time-out tests)
    raw: str | None = None          # a raw body instead of the OpenAI JSON
    headers: dict[str, str] = field(default_factory=dict)
    trickle: float = 0.0            # send the headers, then the body one byte every `trickle` seconds
    trickle_head: float = 0.0       # send the whole response (status line and headers too) a byte at a time
    hang: bool = False              # read the request, then answer nothing until the server stops
    length: bool = True             # send Content-Length (False: the body ends when the connection closes)


def reply(content: str | None) -> Action:
    return Action(content=content)


def completion(content: str | None) -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class ScriptedServer:
    """Replays `script` in order; once it runs out, repeats `then` (default: HTTP 500)."""

    def __init__(self, script: list[Action], then: Action | None = None,
                 tls: tuple[str, str] | None = None) -> None:
        self.script = list(script)
        self.then = then or Action(status=500, raw='{"error": {"message": "script exhausted"}}')
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    req = json.loads(body)
                except ValueError:
                    req = {"raw": body.decode(errors="replace")}
                with outer.lock:
                    outer.requests.append({"path": self.path, "body": req, "time": time.monotonic(),
                                           "headers": dict(self.headers)})
                    act = outer.script.pop(0) if outer.script else outer.then
                path = urllib.parse.urlsplit(self.path).path if "://" in self.path else self.path  # as a proxy
                if path.rstrip("/") != "/v1/chat/completions":
                    act = Action(status=404, raw='{"error": {"message": "not found"}}')
                if act.hang:
                    outer.stopping.wait()
                    return
                if act.delay and outer.stopping.wait(act.delay):
                    return
                data = (act.raw if act.raw is not None else json.dumps(completion(act.content))).encode()
                try:
                    if act.trickle_head:
                        head = [f"HTTP/1.1 {act.status} OK", "Content-Type: application/json",
                                f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in act.headers.items())]
                        self._trickle(("\r\n".join(head) + "\r\n\r\n").encode() + data, act.trickle_head)
                        return
                    self.send_response(act.status)
                    self.send_header("Content-Type", "application/json")
                    if act.length:
                        self.send_header("Content-Length", str(len(data)))
                    else:
                        self.send_header("Connection", "close")
                        self.close_connection = True
                    for k, v in act.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if act.trickle:
                        self._trickle(data, act.trickle)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (time-out)
                    pass

            def _trickle(self, data: bytes, every: float) -> None:
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    if outer.stopping.wait(every):
                        return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:  # (certificate file, key file): serve HTTPS
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/v1"

    def prompts(self) -> list[str]:
        """The user message of each request."""
        out = []
        for r in self.requests:
            msgs = r["body"].get("messages", [])
            out.append("\n".join(m.get("content", "") for m in msgs if m.get("role") == "user"))
        return out

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()  # ends the handlers that hang or trickle
        self.httpd.shutdown()
        self.httpd.server_close()
