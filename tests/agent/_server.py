"""A real HTTP server on 127.0.0.1 speaking POST /v1/chat/completions (the OpenAI response shape), replaying
scripted replies and recording every request."""
from __future__ import annotations

import json
import threading
import time
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


def reply(content: str | None) -> Action:
    return Action(content=content)


def completion(content: str | None) -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class ScriptedServer:
    """Replays `script` in order; once it runs out, repeats `then` (default: HTTP 500)."""

    def __init__(self, script: list[Action], then: Action | None = None) -> None:
        self.script = list(script)
        self.then = then or Action(status=500, raw='{"error": {"message": "script exhausted"}}')
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
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
                    outer.requests.append({"path": self.path, "body": req})
                    act = outer.script.pop(0) if outer.script else outer.then
                if self.path.rstrip("/") != "/v1/chat/completions":
                    act = Action(status=404, raw='{"error": {"message": "not found"}}')
                if act.delay:
                    time.sleep(act.delay)
                data = (act.raw if act.raw is not None else json.dumps(completion(act.content))).encode()
                try:
                    self.send_response(act.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in act.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (time-out)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

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
        self.httpd.shutdown()
        self.httpd.server_close()
