"""Runs one tiny checkpoint in a real vLLM engine and writes what came out as JSON (used by test_vllm_real.py,
which starts it in a fresh process per engine: vLLM's plugins load once a process, and each run has its own
ARGUS_VLLM_* settings).

    python tests/vllm/vllm_driver.py MODEL_DIR OUT.json [--steps 16] [--dtype bfloat16] [--compile]

Writes {"tokens": [[...] per prompt], "logprobs": [[{token: logprob} per step] per prompt],
"workers": [argus_inductor.vllm_plugin.process_report() of each process that ran the model],
"driver_pid": ..., "seconds": {...}}.
"""
from __future__ import annotations

import argparse
import json
import os
import time

# the prompts: token ids (the checkpoints have no tokenizer; vLLM runs with skip_tokenizer_init)
PROMPTS = ([1, 5, 9, 20, 33, 7, 81], [7, 7, 100], [3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64, 33])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--logprobs", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="let vLLM compile the model (default: enforce_eager)")
    a = ap.parse_args()

    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    from argus_inductor import vllm_plugin

    llm = LLM(model=a.model, skip_tokenizer_init=True, dtype=a.dtype, enforce_eager=not a.compile, max_model_len=128,
              max_num_seqs=len(PROMPTS), seed=0, enable_prefix_caching=False)
    t1 = time.perf_counter()
    sp = SamplingParams(temperature=0.0, max_tokens=a.steps, min_tokens=a.steps, ignore_eos=True,
                        logprobs=a.logprobs, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": list(p)} for p in PROMPTS], sp, use_tqdm=False)
    t2 = time.perf_counter()
    tokens, logprobs = [], []
    for o in outs:
        c = o.outputs[0]
        tokens.append(list(c.token_ids))
        logprobs.append([{str(t): float(lp.logprob) for t, lp in step.items()} for step in c.logprobs])
    workers = llm.collective_rpc(vllm_plugin.process_report, timeout=60)
    result = {"tokens": tokens, "logprobs": logprobs, "workers": workers, "driver_pid": os.getpid(),
              "driver_plugin": vllm_plugin.process_report(),
              "seconds": {"engine_start": round(t1 - t0, 2), "generate": round(t2 - t1, 2)}}
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":  # vLLM's engine processes are spawned: they import this module again
    main()
