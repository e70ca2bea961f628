"""Probe: split-KV decode attention (kernels.attention: attention_decode_part over chunks of the cache, then
attention_decode_merge) over its chunk count, key block and launch, at one query token of a Llama-3-8B layer (32
query heads, 8 key/value heads, head dim 128) against a static cache with a bool mask, as e2e.py's decode step
runs it. Every configuration is checked against float32 SDPA first, then timed as a CUDA-graph median of
part + merge over copies of the cache in turn (each call reads its keys from memory); the host's own call
(kernels.attention.attention with the decode template, converting the bool mask as it goes) is the first row.

    python benchmarks/probes/decode_attention.py [--keys 1040,4096] [--top 8]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels.attention import attention, attention_decode_split, mask_operand  # noqa: E402

Z, H, HK, D = 1, 32, 8, 128
HOST = "host (attention(), with the mask's conversion)"


def probe(t: int, top: int) -> dict[str, float]:
    g = torch.Generator(device="cuda").manual_seed(t)
    q = torch.randn(Z, H, 1, D, device="cuda", generator=g).bfloat16()
    k = torch.randn(Z, HK, t, D, device="cuda", generator=g).bfloat16()
    v = torch.randn(Z, HK, t, D, device="cuda", generator=g).bfloat16()
    keep = torch.arange(t, device="cuda")[None, None, None, :] < t - 9  # a static cache filled to t - 9 keys
    ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(H // HK, 1),
                                         v.float().repeat_interleave(H // HK, 1), attn_mask=keep)
    m = mask_operand(keep, q, k)
    out = torch.empty_like(q)
    # copies of the cache, run in turn, so that each call reads its keys and values from memory (not L2)
    copies = [(k.clone(), v.clone()) for _ in range(max(1, -(-120 * 2**20 // (2 * k.numel() * 2))))]

    def err() -> float:
        return float((out.float() - ref).norm() / ref.norm())

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()

        def all_copies() -> None:
            for kk, vv in copies:
                fn(kk, vv)
        return float(triton.testing.do_bench_cudagraph(all_copies, rep=30, return_mode="median")) * 1e3 / len(copies)

    res: dict[str, float] = {}
    host = Policy.make(BN=128, num_warps=8, num_stages=3)  # the decode template at S = 1 (policies.attention_policy)
    attention(q, k, v, mask=keep, out=out, policy=host)
    assert err() < 1e-2, f"host path wrong: {err():.2e}"
    fn = lambda kk=k, vv=v: attention(q, kk, vv, mask=keep, out=out, policy=host)  # noqa: E731
    res[HOST] = timed(fn)
    divisors = [c for c in range(4, 129) if t % c == 0 and t // c >= 16]
    for c, bn, nw, ns in itertools.product(divisors, (32, 64, 128), (4, 8), (1, 2, 3)):
        ts = t // c
        if bn > 2 * ts and bn > 32:  # a block mostly past the chunk
            continue
        if -(-ts // bn) > 16:  # too many serial blocks to matter
            continue
        part = Policy.make(BG=16, BN=bn, BD=D, HAS_MASK=1, num_warps=nw, num_stages=ns)
        merge = Policy.make(BC=max(16, triton.next_power_of_2(c)), BD=D, num_warps=4)
        fn = lambda kk=k, vv=v, c=c, part=part, merge=merge: attention_decode_split(  # noqa: E731
            q, kk, vv, m, out, D ** -0.5, part, merge, chunks=c)
        try:
            out.fill_(float("nan"))
            fn()
            if not err() < 1e-2:
                print(f"  chunks={c} BN={bn} w={nw} s={ns}: wrong ({err():.2e})", flush=True)
                continue
            res[f"chunks={c} ({ts} keys) BN={bn} w={nw} s={ns}"] = timed(fn)
        except Exception as e:  # a configuration over the shared-memory limit
            print(f"  chunks={c} BN={bn} w={nw} s={ns}: {type(e).__name__}", flush=True)
    best = sorted(res.items(), key=lambda kv: kv[1])
    print(f"T={t}: host {res[HOST]:.2f} us", flush=True)
    for name, us in best[:top]:
        print(f"   {us:7.2f} us  {name}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="1040,4096")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/probes/decode_attention.py needs a CUDA GPU")
    rows = {int(t): probe(int(t), args.top) for t in args.keys.split(",")}
    out = Path(os.environ.get("OUT", "."))
    (out / "decode-attention-probe.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
        shape=dict(Z=Z, H=H, HK=HK, D=D), us=rows), indent=1))


if __name__ == "__main__":
    main()
