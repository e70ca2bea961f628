"""The LLM client: OpenAI-compatible chat completions through the `openai` package (works with `vllm serve`,
hosted APIs, anything that speaks POST /v1/chat/completions).

Configuration (environment):
    ARGUS_LLM_BASE_URL     e.g. http://localhost:8000/v1 (vllm serve) or https://api.openai.com/v1; unset: no LLM,
                           the agent uses its offline policy
    ARGUS_LLM_MODEL        the model name the endpoint serves (required with a base URL)
    ARGUS_LLM_API_KEY      the key (optional: "EMPTY" is sent for local servers that take none)
    ARGUS_LLM_TIMEOUT      seconds per request (default 120)
    ARGUS_LLM_MAX_RETRIES  retries after a time-out, a connection error, HTTP 429 or 5xx, or a malformed
                           response (default 3); waits back off exponentially (ARGUS_LLM_BACKOFF seconds,
                           default 2, doubled each time, at most 60), and a 429's Retry-After is honoured
    ARGUS_LLM_TEMPERATURE  default 0.2; ARGUS_LLM_MAX_TOKENS default 4096

chat() returns the reply text ("" for an empty reply: the caller tells the model so), or raises LLMError
once the retries are spent or on an error retrying cannot fix (bad request, authentication).
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any


class LLMError(Exception):
    """The endpoint could not give a reply (after retries)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind  # timeout | rate_limit | server | connection | malformed | client | config


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

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> LLMConfig | None:
        """The configuration the environment gives, or None when no endpoint is configured."""
        e = os.environ if env is None else env
        url = e.get("ARGUS_LLM_BASE_URL", "").strip()
        if not url:
            return None
        model = e.get("ARGUS_LLM_MODEL", "").strip()
        if not model:
            raise LLMError("ARGUS_LLM_BASE_URL is set but ARGUS_LLM_MODEL is not: name the served model", "config")
        try:
            return LLMConfig(url, model, e.get("ARGUS_LLM_API_KEY", "") or "EMPTY",
                             float(e.get("ARGUS_LLM_TIMEOUT", 120)), int(e.get("ARGUS_LLM_MAX_RETRIES", 3)),
                             float(e.get("ARGUS_LLM_BACKOFF", 2.0)), 60.0, float(e.get("ARGUS_LLM_TEMPERATURE", 0.2)),
                             int(e.get("ARGUS_LLM_MAX_TOKENS", 4096)))
        except ValueError as ex:
            raise LLMError(f"an ARGUS_LLM_* setting is not a number: {ex}", "config") from None


@dataclass
class Usage:
    requests: int = 0
    retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "retries": self.retries, "errors": dict(self.errors),
                "seconds": round(self.seconds, 3)}


def _retry_after(err: Any) -> float | None:
    resp = getattr(err, "response", None)
    headers = getattr(resp, "headers", None) or {}
    v = headers.get("retry-after") if hasattr(headers, "get") else None
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


class LLMClient:
    def __init__(self, config: LLMConfig, sleep: Any = time.sleep) -> None:
        self.config = config
        self.usage = Usage()
        self._sleep = sleep
        self._client: Any = None

    def _get(self) -> Any:
        if self._client is None:
            try:
                import openai
            except ImportError as e:
                raise LLMError("the openai package is not installed (pip install openai)", "config") from e
            # our own retry loop (below) decides what to retry; the SDK's is off
            self._client = openai.OpenAI(base_url=self.config.base_url, api_key=self.config.api_key,
                                         timeout=self.config.timeout, max_retries=0)
        return self._client

    def _wait(self, attempt: int, hint: float | None) -> None:
        c = self.config
        delay = hint if hint is not None else c.backoff * (2 ** attempt) * (0.75 + 0.5 * random.random())
        self._sleep(min(max(delay, 0.0), c.max_backoff))

    def chat(self, messages: list[dict[str, str]]) -> str:
        client = self._get()  # raises LLMError (not ImportError) without the openai package
        import openai

        last: LLMError | None = None
        t0 = time.perf_counter()
        try:
            for attempt in range(self.config.max_retries + 1):
                if attempt:
                    self.usage.retries += 1
                self.usage.requests += 1
                hint = None
                try:
                    resp = client.chat.completions.create(model=self.config.model, messages=messages,
                                                          temperature=self.config.temperature,
                                                          max_tokens=self.config.max_tokens)
                    return self._content(resp)
                except openai.APITimeoutError:
                    last = LLMError(f"no reply within {self.config.timeout:g} s", "timeout")
                except openai.RateLimitError as e:
                    last = LLMError(f"rate limited (HTTP 429): {e}", "rate_limit")
                    hint = _retry_after(e)
                except openai.APIStatusError as e:
                    if e.status_code >= 500 or e.status_code in (408, 409):
                        last = LLMError(f"server error (HTTP {e.status_code}): {str(e)[:200]}", "server")
                    else:
                        self._count("client")
                        raise LLMError(f"the endpoint refused the request (HTTP {e.status_code}): {str(e)[:300]}",
                                       "client") from None
                except openai.APIConnectionError as e:
                    last = LLMError(f"cannot reach {self.config.base_url}: {e}", "connection")
                except (openai.APIResponseValidationError, ValueError, KeyError, TypeError, AttributeError) as e:
                    last = LLMError(f"malformed response: {type(e).__name__}: {str(e)[:200]}", "malformed")
                self._count(last.kind)
                if attempt < self.config.max_retries:
                    self._wait(attempt, hint)
            assert last is not None
            raise last
        finally:
            self.usage.seconds += time.perf_counter() - t0

    def _count(self, kind: str) -> None:
        self.usage.errors[kind] = self.usage.errors.get(kind, 0) + 1

    @staticmethod
    def _content(resp: Any) -> str:
        choices = getattr(resp, "choices", None)
        if not choices:
            raise ValueError("the response has no choices")
        msg = getattr(choices[0], "message", None)
        content = getattr(msg, "content", None)
        if content is None:
            return ""
        if not isinstance(content, str):
            raise TypeError(f"message content is a {type(content).__name__}, not text")
        return content


def from_env() -> LLMClient | None:
    cfg = LLMConfig.from_env()
    return LLMClient(cfg) if cfg is not None else None
