"""The agent against a misbehaving OpenAI-compatible endpoint (a real server on 127.0.0.1, tests/agent/_server.py):
every request has a total deadline, the synthesis budget holds while a request is in flight, redirects are not
followed, huge or malformed replies are errors, and a reply that is not the DSL (or asks for an absurd unrolling)
ends in a rejection or a clean fallback, never in the cache. Wall-clock bounds are loose (the budget plus seconds)."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from argus_inductor.agent import Budget, synthesize
from argus_inductor.agent.llm import LLMClient, LLMConfig, LLMError
from argus_inductor.runtime.cache import KernelCache

from ._server import Action, ScriptedServer, reply
from .test_llm_loop import GOOD, PROBLEM, answer

HELLO = [{"role": "user", "content": "hi"}]


def client(url: str, timeout: float = 30.0, retries: int = 0) -> LLMClient:
    return LLMClient(LLMConfig(url, "test-model", "sk-test", timeout=timeout, max_retries=retries, backoff=0.0))


def timed_error(c: LLMClient, **kw: float) -> tuple[LLMError, float]:
    t0 = time.perf_counter()
    with pytest.raises(LLMError) as info:
        c.chat(HELLO, **kw)
    return info.value, time.perf_counter() - t0


# ---- one request ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("act", [
    Action(content="x" * 400, trickle=2.0),        # headers at once, then a byte every 2 s (over 13 minutes)
    Action(content="x" * 400, trickle_head=1.0),   # even the status line and headers a byte at a time
    Action(hang=True),                             # the request read, nothing ever answered
], ids=["trickled body", "trickled headers", "hang"])
def test_a_request_ends_at_its_total_deadline(act: Action) -> None:
    with ScriptedServer([], then=act) as srv:
        err, elapsed = timed_error(client(srv.base_url, timeout=3.0))
    assert err.kind == "timeout" and "ARGUS_LLM_TIMEOUT" in str(err)
    assert elapsed < 3.0 + 5.0
    assert len(srv.requests) == 1


def test_the_callers_deadline_cuts_a_request_in_flight() -> None:
    with ScriptedServer([], then=Action(content="x" * 400, trickle=1.0)) as srv:
        err, elapsed = timed_error(client(srv.base_url, timeout=600.0, retries=3),
                                   deadline=time.monotonic() + 2.0)
    assert err.kind == "timeout" and "synthesis budget" in str(err)
    assert elapsed < 2.0 + 5.0
    assert len(srv.requests) == 1  # no retry is started without time left for it


def test_no_request_starts_past_the_deadline() -> None:
    with ScriptedServer([reply("never asked")]) as srv:
        err, _ = timed_error(client(srv.base_url), deadline=time.monotonic() - 1.0)
    assert "no time left" in str(err) and not srv.requests


def test_a_redirect_to_another_host_is_not_followed() -> None:
    with ScriptedServer([reply("the other endpoint answered")]) as other:
        target = f"http://127.0.0.1:{other.port}/v1/chat/completions"
        with ScriptedServer([], then=Action(status=307, raw="", headers={"Location": target})) as srv:
            c = client(srv.base_url, retries=3)
            err, _ = timed_error(c)
    assert err.kind == "redirect" and target in str(err) and "ARGUS_LLM_BASE_URL" in str(err)
    assert not other.requests, "the request (and its API key) left the configured endpoint"
    assert len(srv.requests) == 1  # a redirect is not retried either


@pytest.mark.parametrize("length", [True, False], ids=["with Content-Length", "until the connection closes"])
def test_a_huge_reply_is_refused_without_reading_it_all(length: bool) -> None:
    with ScriptedServer([], then=Action(content="x" * (20 << 20), length=length)) as srv:
        err, elapsed = timed_error(client(srv.base_url))
    assert err.kind == "malformed" and "larger than 8,388,608 bytes" in str(err)
    assert elapsed < 30


@pytest.mark.parametrize("raw,why", [
    ("[" * 200_000 + "]" * 200_000, "RecursionError"),
    ('{"choices": [{"message": {"content": ["a", "list"]}}]}', "not text"),
    ('{"choices": "none"}', "no choices"),
    ('"just a string"', "not an object"),
    ("\xff\xfe not json", "JSONDecodeError"),
], ids=["deeply nested JSON", "a list as content", "wrong schema", "a string", "garbage"])
def test_a_malformed_reply_is_an_llm_error(raw: str, why: str) -> None:
    with ScriptedServer([], then=Action(raw=raw)) as srv:
        err, _ = timed_error(client(srv.base_url))
    assert err.kind == "malformed" and why in str(err)


def test_a_huge_retry_after_is_capped_by_the_deadline() -> None:
    act = Action(status=429, raw='{"error": {"message": "slow down"}}', headers={"Retry-After": "86400"})
    with ScriptedServer([], then=act) as srv:
        c = LLMClient(LLMConfig(srv.base_url, "m", timeout=5.0, max_retries=3, backoff=0.0))
        err, elapsed = timed_error(c, deadline=time.monotonic() + 3.0)
    assert err.kind == "rate_limit" and "no time left" in str(err) and elapsed < 3.0 + 5.0


def test_the_environments_proxy_is_used_but_not_for_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer([reply("through the proxy")]) as proxy:
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        assert client("http://llm.invalid/v1").chat(HELLO) == "through the proxy"
        assert proxy.requests[0]["path"] == "http://llm.invalid:80/v1/chat/completions"
        with ScriptedServer([reply("direct")]) as direct:
            assert client(direct.base_url).chat(HELLO) == "direct"
        assert len(proxy.requests) == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_verifies_the_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A self-signed endpoint is refused; trusted (SSL_CERT_FILE), the same endpoint answers over TLS."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with ScriptedServer([], then=reply("over TLS"), tls=(str(cert), str(key))) as srv:
        assert srv.base_url.startswith("https://")
        err, _ = timed_error(client(srv.base_url))
        assert err.kind == "connection" and "CERTIFICATE_VERIFY_FAILED" in str(err)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert client(srv.base_url).chat(HELLO) == "over TLS"


# ---- the agent --------------------------------------------------------------------------------------------------
def agent_run(srv: ScriptedServer, tmp_path: Path, budget: Budget, timeout: float = 30.0):
    t0 = time.perf_counter()
    res = synthesize(PROBLEM, policy="llm", llm=client(srv.base_url, timeout=timeout, retries=2), budget=budget,
                     cache_root=tmp_path, seed=3)
    return res, time.perf_counter() - t0


def cached_source(tmp_path: Path, res) -> str:
    entry = KernelCache(tmp_path).get(res.signature.key())
    assert entry is not None
    return entry.dsl_source


def test_the_synthesis_budget_holds_while_a_request_trickles(tmp_path: Path) -> None:
    """ARGUS_LLM_TIMEOUT far past the budget: the request is cut at the budget's end, the run falls back to the
    template and ends within the budget plus the winner's confirmation."""
    budget = Budget(trials=4, seconds=10.0, repair_rounds=1, test_trials=1, patience=0)
    with ScriptedServer([], then=Action(content=answer(GOOD), trickle=2.0)) as srv:
        res, elapsed = agent_run(srv, tmp_path, budget, timeout=600.0)
    assert elapsed < budget.seconds + 30
    assert any("synthesis budget" in n for n in res.notes), res.notes
    assert res.verification["ok"] and res.origin == "template"


EVIL_DECORATOR = "@__import__('os').system('touch {sentinel}')"


def test_a_reply_whose_decorator_is_not_kernel_is_rejected_and_never_cached(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    evil = GOOD.replace("@kernel", EVIL_DECORATOR.format(sentinel=sentinel))
    assert evil != GOOD
    with ScriptedServer([reply(answer(evil))]) as srv:  # then HTTP 500: the LLM policy gives up, offline goes on
        res, _ = agent_run(srv, tmp_path, Budget(trials=3, seconds=120, repair_rounds=1, test_trials=1, patience=0))
    step = res.trail[1]
    assert step["policy"] == "llm" and step["outcome"]["status"] == "rejected"
    assert "not with the DSL's @kernel" in step["feedback"]
    assert res.origin == "template" and res.verification["ok"]
    assert "__import__" not in cached_source(tmp_path, res)
    assert not sentinel.exists()


@pytest.mark.parametrize("loop", [
    ("for _i in static_range(100000000):", ""),
    ("for _i in static_range(STEPS):", ", STEPS: constexpr = 100000000"),
], ids=["literal", "constexpr default"])
def test_a_reply_with_an_absurd_unrolling_ends_in_a_clean_fallback(tmp_path: Path, loop: tuple[str, str]) -> None:
    header, param = loop
    huge = GOOD.replace("ACT: constexpr = 0):", f"ACT: constexpr = 0{param}):").replace(
        "    acc = zeros((BM, BN), float32)\n",
        f"    acc = zeros((BM, BN), float32)\n    {header}\n        acc = acc + 1.0\n")
    assert huge.count("static_range") == 1 and (not param or "STEPS: constexpr" in huge)
    budget = Budget(trials=2, seconds=60, repair_rounds=1, test_trials=1, patience=0)
    with ScriptedServer([reply(answer(huge))]) as srv:
        res, elapsed = agent_run(srv, tmp_path, budget)
    step = res.trail[1]
    assert step["policy"] == "llm" and step["outcome"]["status"] in ("rejected", "verify_failed", "dsl_error")
    assert "4,096" in step["feedback"], step["feedback"]
    assert res.origin == "template" and res.verification["ok"]
    assert "100000000" not in cached_source(tmp_path, res)
    assert elapsed < budget.seconds + 30
