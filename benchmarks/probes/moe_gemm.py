"""The MoE expert GEMMs alone, on the same routed rows: our gate-up and down kernels (the Triton template and the
Gluon lowerings) against torch._grouped_mm (gate-up with its SiLU*up, and down).

    python benchmarks/probes/moe_gemm.py [--tokens 2048,4096] [--out benchmarks/results]

Mixtral dims (HD 4096, I 14336, 8 experts, top 2), bf16, random routing. Rows are routed once (moe_align) and
gathered once (moe_gather); each kernel reads them as it does in a MoE step. TFLOP/s count the routed pairs only
(the padding rows of each expert's last block are work ours does and the peer's does not). Every output is checked
against the peer's by relative error before it is timed. Needs a CUDA GPU."""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.kernels.moe import gather_policy, moe_align, moe_down, moe_gate_up, moe_gather  # noqa: E402
from argus_inductor.kernels.policies import moe_down_fallback, moe_gate_up_fallback, moe_policies  # noqa: E402
from benchmarks.ops import bench  # noqa: E402

HD, INTER, EXPERTS, TOPK = 4096, 14336, 8, 2


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def variants(tokens: int) -> tuple[dict[str, Policy], dict[str, Policy]]:
    """Gate-up and down policies by name: the templates, and the Gluon lowerings at other depths and bands."""
    up, down = moe_policies(tokens, TOPK, EXPERTS, "cuda", gluon=True)
    down = down.with_consts(BM=up.const("BM"), TOPK=TOPK)
    ups = {"triton template": moe_gate_up_fallback(up), "gluon template": up,
           "gluon 3 slots": replace(up, num_stages=3), "gluon bands of 16": replace(up, group_m=16),
           "gluon bands of 4": replace(up, group_m=4)}
    # 64-row blocks: half the padding of each expert's last block, one consumer warp group a program
    up64 = replace(up.with_consts(BM=64), num_warps=4)
    ups.update({"gluon BM 64": up64, "gluon BM 64, 5 slots": replace(up64, num_stages=5),
                "gluon BM 64, bands of 16": replace(up64, group_m=16),
                "gluon BM 64, BK 128, 2 slots": replace(up64.with_consts(BK=128), num_stages=2)})
    fb = moe_down_fallback(down)
    downs = {"triton template": fb, "gluon template": down, "triton template BM 64": fb.with_consts(BM=64)}
    return ups, downs


def balanced_ids(tokens: int) -> torch.Tensor:
    """Token t routed to experts t and t + 1 (mod E): every expert gets exactly tokens * TOPK / E rows, so blocks of
    any height dividing that have no padding rows (how much of a kernel's time padding costs)."""
    t = torch.arange(tokens, device="cuda")[:, None]
    return (t + torch.arange(TOPK, device="cuda")) % EXPERTS


TEMPLATES = ("triton template", "gluon template")  # what --templates keeps


def run(tokens: int, rows: list[dict], kernels: set[str], balanced: bool = False, templates: bool = False) -> None:
    x = torch.randn(tokens, HD, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(EXPERTS, 2 * INTER, HD, device="cuda", dtype=torch.bfloat16) * HD ** -0.5
    w2 = torch.randn(EXPERTS, HD, INTER, device="cuda", dtype=torch.bfloat16) * INTER ** -0.5
    tw, ti = torch.topk(torch.softmax(torch.randn(tokens, EXPERTS, device="cuda"), -1), TOPK)
    if balanced:
        ti = balanced_ids(tokens)
    tw = tw.to(torch.bfloat16).reshape(-1).contiguous()
    ups, downs = variants(tokens)
    if templates:
        ups = {k: v for k, v in ups.items() if k in TEMPLATES}
        downs = {k: v for k, v in downs.items() if k in TEMPLATES}
    pairs = tokens * TOPK
    # the peer's rows: the same pairs sorted by expert, no padding
    flat = ti.reshape(-1)
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=EXPERTS), 0).to(torch.int32)
    xp = x[order // TOPK]

    @functools.cache
    def routed(bm: int) -> tuple[torch.Tensor, ...]:
        """The routing at bm-row blocks: sorted ids, block experts, gathered rows, and the padded slot of each of
        the peer's rows."""
        ids, be = moe_align(ti, EXPERTS, bm)
        real_blocks = int((be < EXPERTS).sum())
        print(f"T={tokens} routing at BM {bm}: {real_blocks} blocks with a real expert, {pairs / bm:.1f} without "
              f"padding ({1 - pairs / (real_blocks * bm):.1%} of the rows padding)", flush=True)
        xs = torch.empty(ids.numel(), HD, device="cuda", dtype=torch.bfloat16)
        moe_gather(x, ids, xs, policy=gather_policy("cuda", TOPK))
        real = ids < pairs
        slot_of_pair = torch.empty(pairs, dtype=torch.long, device="cuda")
        slot_of_pair[ids[real].long()] = real.nonzero().squeeze(1)
        return ids, be, xs, slot_of_pair[order]

    def peer_up() -> torch.Tensor:
        gu = torch._grouped_mm(xp, w1.transpose(1, 2), offs=offs)
        return F.silu(gu[:, :INTER]) * gu[:, INTER:]

    hp = peer_up()
    up_flop = 2 * pairs * HD * 2 * INTER
    peer_ms = bench(peer_up)
    rows.append(dict(kernel="gate-up", tokens=tokens, name="torch._grouped_mm + silu*up", ms=peer_ms,
                     tflops=up_flop / peer_ms / 1e9))
    print(f"T={tokens} gate-up  grouped_mm + silu*up  {peer_ms:.4f} ms  {up_flop / peer_ms / 1e9:.0f} TFLOP/s",
          flush=True)
    if "gate-up" not in kernels:  # the down GEMM reads the template's gate-up output
        ups = {"gluon template": ups["gluon template"]}
    hs: dict[int, torch.Tensor] = {}  # each block height's gate-up output, for the downs of that height
    for name, pol in ups.items():
        ids, be, xs, slots = routed(pol.const("BM"))
        h = hs.setdefault(pol.const("BM"), torch.empty(ids.numel(), INTER, device="cuda", dtype=torch.bfloat16))
        h.fill_(float("nan"))
        moe_gate_up(xs, w1, ids, be, h, policy=pol)
        err = rel(h[slots], hp)
        ms = bench(lambda pol=pol: moe_gate_up(xs, w1, ids, be, h, policy=pol))
        rows.append(dict(kernel="gate-up", tokens=tokens, balanced=balanced, name=name, policy=pol.key(), ms=ms,
                         tflops=up_flop / ms / 1e9, rel_err=err, vs_peer=peer_ms / ms))
        print(f"T={tokens} gate-up  {name:28s} {ms:.4f} ms  {up_flop / ms / 1e9:.0f} TFLOP/s  {peer_ms / ms:.2f}x "
              f"the peer  rel err {err:.1e}", flush=True)

    if "down" not in kernels:
        return
    down_flop = 2 * pairs * INTER * HD
    hp_sorted = hs[ups["gluon template"].const("BM")][routed(ups["gluon template"].const("BM"))[3]]

    def peer_down() -> torch.Tensor:
        return torch._grouped_mm(hp_sorted, w2.transpose(1, 2), offs=offs)

    yp = torch.zeros(tokens, HD, device="cuda")
    yp.index_add_(0, order // TOPK, peer_down().float() * tw[order, None].float())
    peer_ms = bench(peer_down)
    rows.append(dict(kernel="down", tokens=tokens, name="torch._grouped_mm", ms=peer_ms,
                     tflops=down_flop / peer_ms / 1e9))
    print(f"T={tokens} down     grouped_mm (no scatter)      {peer_ms:.4f} ms  {down_flop / peer_ms / 1e9:.0f} "
          "TFLOP/s", flush=True)
    y = torch.zeros(tokens, HD, device="cuda")
    for name, pol in downs.items():
        ids, be, _, _ = routed(pol.const("BM"))
        if pol.const("BM") not in hs:
            continue
        h = hs[pol.const("BM")]
        y.zero_()
        moe_down(h, w2, ids, be, tw, y, policy=pol)
        err = rel(y, yp)
        ms = bench(lambda pol=pol: moe_down(h, w2, ids, be, tw, y, policy=pol))  # accumulates: timing only
        rows.append(dict(kernel="down", tokens=tokens, balanced=balanced, name=name, policy=pol.key(), ms=ms,
                         tflops=down_flop / ms / 1e9, rel_err=err, vs_peer=peer_ms / ms))
        print(f"T={tokens} down     {name:28s} {ms:.4f} ms  {down_flop / ms / 1e9:.0f} TFLOP/s  {peer_ms / ms:.2f}x "
              f"the peer  rel err {err:.1e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="2048,4096", help="comma-separated token counts")
    ap.add_argument("--kernels", default="gate-up,down", help="which GEMMs: gate-up, down or both")
    ap.add_argument("--balanced", action="store_true",
                    help="route every expert the same number of rows (no padding rows at the template's blocks)")
    ap.add_argument("--templates", action="store_true",
                    help="only the templates (Triton and Gluon), not the other depths, bands and heights")
    ap.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parents[1] / "results")))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/probes/moe_gemm.py needs a CUDA GPU")
    rows: list[dict] = []
    for t in args.tokens.split(","):
        run(int(t), rows, set(args.kernels.split(",")), args.balanced, args.templates)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                date=datetime.datetime.now().isoformat(timespec="seconds"), timing="CUDA-graph replay median")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"moe-gemm{'-balanced' if args.balanced else ''}-{datetime.date.today()}.json"
    (out / name).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
