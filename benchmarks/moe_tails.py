"""Probe: what the padding rows of each expert's last block cost, and what running the last blocks of at most 64
real rows at 64-row tiles would save, before any kernel is changed for it.

    python benchmarks/moe_tails.py [--tokens 2048,4096] [--out benchmarks/results]

Mixtral dims (HD 4096, I 14336, 8 experts, top 2), bf16, random routing (seeded). The routed rows are laid out as
the MoE op lays them out (moe_align at 128-row blocks, moe_gather). The Gluon gate-up and down run three ways:
- "one launch": the template, every real block at 128 rows (what a MoE step runs now);
- "split": the blocks with more than 64 real rows at 128 rows, then the blocks with at most 64 (an expert's last
  block) as 64-row blocks of their first rows, each launch on its own copy of those rows (two launches);
Each way's outputs are compared with the one-launch outputs on the real rows before timing. Needs a CUDA GPU."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from argus_inductor.kernels.moe import gather_policy, moe_align, moe_down, moe_gate_up, moe_gather  # noqa: E402
from argus_inductor.kernels.policies import moe_policies  # noqa: E402
from benchmarks.ops import bench  # noqa: E402

HD, INTER, EXPERTS, TOPK = 4096, 14336, 8, 2


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def run(tokens: int, rows: list[dict]) -> None:
    x = torch.randn(tokens, HD, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(EXPERTS, 2 * INTER, HD, device="cuda", dtype=torch.bfloat16) * HD ** -0.5
    w2 = torch.randn(EXPERTS, HD, INTER, device="cuda", dtype=torch.bfloat16) * INTER ** -0.5
    tw, ti = torch.topk(torch.softmax(torch.randn(tokens, EXPERTS, device="cuda"), -1), TOPK)
    tw = tw.to(torch.bfloat16).reshape(-1).contiguous()
    pairs = tokens * TOPK
    up, down = moe_policies(tokens, TOPK, EXPERTS, "cuda", gluon=True)
    down = down.with_consts(BM=128, TOPK=TOPK)
    up64 = replace(up.with_consts(BM=64), num_warps=4)
    down64 = replace(down.with_consts(BM=64), num_warps=4)

    ids, be = moe_align(ti, EXPERTS, 128)
    xs = torch.empty(ids.numel(), HD, device="cuda", dtype=torch.bfloat16)
    moe_gather(x, ids, xs, policy=gather_policy("cuda", TOPK))
    nb = be.numel()
    count = (ids.view(nb, 128) < pairs).sum(1)
    real = be < EXPERTS
    big, small = real & (count > 64), real & (count <= 64)
    nsmall = int(small.sum())
    print(f"T={tokens}: {int(real.sum())} real blocks of 128 ({1 - pairs / (int(real.sum()) * 128):.1%} padding), "
          f"{nsmall} of them with at most 64 real rows", flush=True)

    def part(mask: torch.Tensor, height: int) -> tuple[torch.Tensor, ...]:
        """The blocks of `mask` as their own routing: their first `height` rows, a padding block after them."""
        n = int(mask.sum())
        xp = torch.zeros((n + 1) * height, HD, device="cuda", dtype=torch.bfloat16)
        xp[:n * height] = xs.view(nb, 128, HD)[mask][:, :height].reshape(-1, HD)
        idp = torch.full(((n + 1) * height,), pairs, device="cuda", dtype=torch.int32)
        idp[:n * height] = ids.view(nb, 128)[mask][:, :height].reshape(-1)
        bep = torch.cat([be[mask], torch.tensor([EXPERTS], device="cuda", dtype=torch.int32)])
        return xp, idp, bep

    h = torch.empty(ids.numel(), INTER, device="cuda", dtype=torch.bfloat16)
    moe_gate_up(xs, w1, ids, be, h, policy=up)
    y = torch.zeros(tokens, HD, device="cuda")
    moe_down(h, w2, ids, be, tw, y, policy=down)
    xb, idb, beb = part(big, 128)
    xsm, ids_sm, be_sm = part(small, 64)
    hb = torch.empty(xb.shape[0], INTER, device="cuda", dtype=torch.bfloat16)
    hs = torch.empty(xsm.shape[0], INTER, device="cuda", dtype=torch.bfloat16)

    def split_up() -> None:
        moe_gate_up(xb, w1, idb, beb, hb, policy=up)
        moe_gate_up(xsm, w1, ids_sm, be_sm, hs, policy=up64)

    split_up()
    ys = torch.zeros(tokens, HD, device="cuda")
    moe_down(hb, w2, idb, beb, tw, ys, policy=down)
    moe_down(hs, w2, ids_sm, be_sm, tw, ys, policy=down64)
    rb = idb < pairs
    want = {int(p): i for i, p in enumerate(ids.tolist()) if p < pairs}
    got_rows = [want[int(p)] for p in idb[rb].tolist()]
    err_up = rel(hb[rb], h[got_rows])
    rs = ids_sm < pairs
    err_up = max(err_up, rel(hs[rs], h[[want[int(p)] for p in ids_sm[rs].tolist()]]))
    err_down = rel(ys, y)
    up_one = bench(lambda: moe_gate_up(xs, w1, ids, be, h, policy=up))
    up_big = bench(lambda: moe_gate_up(xb, w1, idb, beb, hb, policy=up))
    up_small = bench(lambda: moe_gate_up(xsm, w1, ids_sm, be_sm, hs, policy=up64))
    up_split = bench(split_up)
    dn_one = bench(lambda: moe_down(h, w2, ids, be, tw, y, policy=down))
    dn_big = bench(lambda: moe_down(hb, w2, idb, beb, tw, ys, policy=down))
    dn_small = bench(lambda: moe_down(hs, w2, ids_sm, be_sm, tw, ys, policy=down64))

    def split_down() -> None:
        moe_down(hb, w2, idb, beb, tw, ys, policy=down)
        moe_down(hs, w2, ids_sm, be_sm, tw, ys, policy=down64)

    dn_split = bench(split_down)
    row = dict(tokens=tokens, real_blocks=int(real.sum()), small_blocks=nsmall, gate_up_one_ms=up_one,
               gate_up_big_ms=up_big, gate_up_small_ms=up_small, gate_up_split_ms=up_split, down_one_ms=dn_one,
               down_big_ms=dn_big, down_small_ms=dn_small, down_split_ms=dn_split, rel_err_gate_up=err_up,
               rel_err_down=err_down)
    rows.append(row)
    print(f"T={tokens} gate-up: one launch {up_one:.4f} ms; split {up_split:.4f} ms (128-row part {up_big:.4f}, "
          f"64-row part {up_small:.4f}) = {up_one / up_split:.3f}x; rel err {err_up:.1e}", flush=True)
    print(f"T={tokens} down:    one launch {dn_one:.4f} ms; split {dn_split:.4f} ms (128-row part {dn_big:.4f}, "
          f"64-row part {dn_small:.4f}) = {dn_one / dn_split:.3f}x; rel err {err_down:.1e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="2048,4096")
    ap.add_argument("--seeds", type=int, default=2, help="routings to try a token count (seeds 0..n-1)")
    ap.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/moe_tails.py needs a CUDA GPU")
    rows: list[dict] = []
    for t in args.tokens.split(","):
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            run(int(t), rows)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                date=datetime.datetime.now().isoformat(timespec="seconds"), timing="CUDA-graph replay median")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"moe-tails-{datetime.date.today()}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
