"""The LLM policy end to end against a real HTTP server on 127.0.0.1 replaying scripted chat completions: the
loop ends with a verified, tested kernel or a clean fallback, and the counterexample reaches the next prompt."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from argus_inductor.agent import Budget, Problem, synthesize
from argus_inductor.agent.llm import LLMClient, LLMConfig, LLMError

from ._server import Action, ScriptedServer, reply

PROBLEM = Problem("gemm", "", {"N": 24, "K": 40, "M": 20}, "float32")
BUDGET = Budget(trials=2, seconds=120, repair_rounds=2, test_trials=1, patience=0)

KERNEL = '''from argus_inductor.dsl import *


@kernel
def gemm_epilogue(A: Tensor("M", "K"), B: Tensor("K", "N"), bias: Tensor("NB"), C: Tensor("M", "N"),
                  BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32,
                  HAS_BIAS: constexpr = 0, ACT: constexpr = 0):
    pm, pn = tile_grid(cdiv(M, BM), cdiv(N, BN))
    rm = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(START, K, BK):
        rk = k + arange(BK)
        acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    if HAS_BIAS == 1:
        acc = acc + load(bias[rn]).to(float32)[None, :]
    store(C[rm, rn], acc)
'''
PLAN = json.dumps({"techniques": ["tile-shape"], "knobs": {"BM": 32, "BN": 32, "BK": 32}})
GOOD = KERNEL.replace("START", "0")
BUGGY = KERNEL.replace("START", "BK")  # planted bug: the K loop skips the first block


def answer(source: str, text: str = "Here is the kernel.") -> str:
    return f"{text}\n\n```python\n{source}```\n\n```json\n{PLAN}\n```\n"


def client(server: ScriptedServer, **kw: float) -> LLMClient:
    cfg = LLMConfig(server.base_url, "test-model", "sk-test", timeout=kw.get("timeout", 30.0),
                    max_retries=int(kw.get("max_retries", 2)), backoff=0.0)
    return LLMClient(cfg)


def run(server: ScriptedServer, tmp_path: Path, **kw: float):
    return synthesize(PROBLEM, policy="llm", llm=client(server, **kw), budget=BUDGET, cache_root=tmp_path, seed=3)


def trials(res) -> list[dict]:
    return res.trail


def test_counterexample_reaches_the_second_prompt_and_the_fix_passes(tmp_path: Path) -> None:
    with ScriptedServer([reply(answer(BUGGY)), reply(answer(GOOD, "Fixed: the K loop starts at 0."))]) as srv:
        res = run(srv, tmp_path)
    prompts = srv.prompts()
    assert len(prompts) == 2
    # the checker's counterexample for the planted bug, with the program, element and source line
    assert "violated at <llm reply>" not in prompts[0]
    assert "reduction-complete violated at <llm reply>" in prompts[1]
    assert "never included K index 0" in prompts[1]
    assert "program (pm=" in prompts[1] and "for k in range(BK, K, BK)" in prompts[1]
    steps = trials(res)
    assert steps[1]["policy"] == "llm" and steps[1]["outcome"]["status"] == "verify_failed"
    assert steps[2]["policy"] == "llm" and steps[2]["outcome"]["status"] == "ok"
    assert steps[2]["outcome"]["verified"] and steps[2]["repair_of"] == 1
    assert res.verification["ok"]
    # the trail on disk holds every trial, next to the cache entry
    lines = [json.loads(x) for x in res.trail_path.read_text().splitlines()]
    assert [x["trial"] for x in lines if x["kind"] == "trial"] == [0, 1, 2]
    assert (tmp_path / "kernels" / f"{res.signature.key()}.json").is_file()


def test_reply_without_code_and_empty_reply_get_feedback(tmp_path: Path) -> None:
    script = [reply("You should use bigger tiles and more warps."), reply(None), reply(answer(GOOD))]
    with ScriptedServer(script) as srv:
        res = synthesize(PROBLEM, policy="llm", llm=client(srv), budget=Budget(trials=3, seconds=120, test_trials=1,
                                                                               patience=0),
                         cache_root=tmp_path, seed=3)
    prompts = srv.prompts()
    assert "holds no DSL kernel" in prompts[1]
    assert "the reply was empty" in prompts[2]
    steps = trials(res)
    assert [s["outcome"]["status"] for s in steps[1:]] == ["rejected", "rejected", "ok"]
    assert res.verification["ok"]


def test_reply_that_imports_os_is_rejected_never_run(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    evil = f"import os\nos.system('touch {sentinel}')\n\n" + GOOD.split("\n", 1)[1]
    with ScriptedServer([reply(answer(evil)), reply(answer(GOOD))]) as srv:
        res = run(srv, tmp_path)
    assert not sentinel.exists()
    prompts = srv.prompts()
    assert "import of 'os' is not allowed" in prompts[1]
    steps = trials(res)
    assert steps[1]["outcome"]["status"] == "rejected" and steps[2]["outcome"]["status"] == "ok"


def test_timeout_falls_back_to_the_offline_policy(tmp_path: Path) -> None:
    slow = Action(content=answer(GOOD), delay=3.0)
    with ScriptedServer([slow, slow], then=slow) as srv:
        t0 = time.perf_counter()
        res = run(srv, tmp_path, timeout=0.5, max_retries=1)
        elapsed = time.perf_counter() - t0
    assert len(srv.requests) == 2  # one try and one retry, then the LLM policy is given up
    assert any("llm policy unavailable" in n and "reply within" in n for n in res.notes)
    assert all(s["policy"] in ("baseline", "offline") for s in trials(res))
    assert res.verification["ok"] and res.origin == "template"
    assert elapsed < 60


def test_http_500_retries_then_falls_back(tmp_path: Path) -> None:
    with ScriptedServer([]) as srv:  # every request answers HTTP 500
        res = run(srv, tmp_path, max_retries=2)
    assert len(srv.requests) == 3
    assert any("server error (HTTP 500)" in n for n in res.notes)
    assert res.verification["ok"]


def test_rate_limit_and_500_are_retried_then_the_reply_is_used(tmp_path: Path) -> None:
    script = [Action(status=429, raw='{"error": {"message": "slow down"}}', headers={"Retry-After": "0"}),
              Action(status=500, raw='{"error": {"message": "boom"}}'), reply(answer(GOOD))]
    with ScriptedServer(script) as srv:
        c = client(srv, max_retries=3)
        res = synthesize(PROBLEM, policy="llm", llm=c, budget=Budget(trials=1, seconds=120, test_trials=1, patience=0),
                         cache_root=tmp_path, seed=3)
    assert c.usage.retries == 2 and c.usage.errors == {"rate_limit": 1, "server": 1}
    assert trials(res)[1]["policy"] == "llm" and trials(res)[1]["outcome"]["status"] == "ok"


def test_malformed_response_is_an_error_not_a_crash() -> None:
    with ScriptedServer([], then=Action(raw="this is not json")) as srv:
        c = client(srv, max_retries=1)
        with pytest.raises(LLMError) as e:
            c.chat([{"role": "user", "content": "hi"}])
    assert e.value.kind in ("malformed", "server")
    assert len(srv.requests) == 2


def test_config_from_environment() -> None:
    assert LLMConfig.from_env({}) is None
    cfg = LLMConfig.from_env({"ARGUS_LLM_BASE_URL": "http://localhost:8000/v1", "ARGUS_LLM_MODEL": "m",
                              "ARGUS_LLM_TIMEOUT": "7"})
    assert cfg is not None and cfg.api_key == "EMPTY" and cfg.timeout == 7.0
    with pytest.raises(LLMError):
        LLMConfig.from_env({"ARGUS_LLM_BASE_URL": "http://x/v1"})
