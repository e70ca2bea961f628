"""The main job: compile a small Llama-style model with backend="argus" and say what Argus did.

    python -m argus_inductor.demo [--layers 2] [--tokens 24] [--device cpu|cuda]

On a machine without a GPU the Argus kernels run under the Triton interpreter (ARGUS_INTERPRET=1 is
set for you) at small sizes, so the times it prints are the interpreter's wall clock and say nothing
about speed; on an H100 they run natively and the demo also prints timings against Inductor. It ends
with what to do next: the signatures that ran without a cached kernel, recorded for `argus warmup`.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """A Llama decoder layer: GQA attention and a SiLU-gated MLP, pre-norm, residuals."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def _time(fn, device: str) -> float:
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, return_mode="median"))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _argus_command() -> str:
    """How to run `argus` from here: plain `argus` where it is this interpreter's on the PATH, else its path."""
    here = Path(sys.executable).parent / "argus"
    found = shutil.which("argus")
    if found and Path(found).resolve() == here.resolve():
        return "argus"
    if here.exists():
        try:
            return str(here.relative_to(Path.cwd()))
        except ValueError:
            return str(here)
    return f"{sys.executable} -m argus_inductor.cli"


def next_steps(on_cpu: bool) -> str:
    """What the demo says last: the misses it left for `argus warmup` (and the command), and on the CPU that its
    times mean nothing for speed."""
    from .runtime.cache import KernelCache

    cache = KernelCache()
    pending = [m for m in cache.misses() if not m["solved"]]
    lines = ["", "next:"]
    if pending:
        lines.append(f"  {len(pending)} signature(s) ran without a cached kernel (the template policy served\n"
                     f"  them, proved at their shapes first); they are recorded in {cache.misses_file}\n"
                     "  (`argus cache misses` lists them). Run\n"
                     f"      {_argus_command()} warmup\n"
                     "  to search a faster policy for each and store it with its proof (a minute or so on a\n"
                     "  CPU), then the demo again: each of them is then a verified cache hit.")
    else:
        lines.append(f"  every signature ran a cached kernel ({cache.root}); `argus cache` lists them.")
    if on_cpu:
        lines.append("  On this CPU the kernels ran under the Triton interpreter: the ms above are its wall clock\n"
                     "  and say nothing about speed; on an H100/H200 the demo times Argus against Inductor.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compile a small Llama-style model with backend='argus'.")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    ap.add_argument("--tokens", type=int, default=24, help="sequence length (default 24)")
    ap.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    if args.layers < 1 or args.tokens < 1 or args.batch < 1:
        ap.error("--layers, --tokens and --batch must be positive")
    if args.device == "cpu" and os.environ.get("ARGUS_INTERPRET") != "1":
        # Triton chooses interpreting or compiling when it is first imported, so start afresh with it set.
        os.environ["ARGUS_INTERPRET"] = "1"
        os.environ["TRITON_INTERPRET"] = "1"
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "argus_inductor.demo", *(argv or sys.argv[1:])])
    import argus_inductor

    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    big = args.device == "cuda"
    dims = dict(vocab=32000, dim=2048, heads=16, kv_heads=4, hidden=5632) if big else {}
    dtype = torch.bfloat16 if big else torch.float32
    model = TinyLlama(layers=args.layers, **dims).to(args.device, dtype).eval()
    tokens = torch.randint(0, model.embed.num_embeddings, (args.batch, args.tokens if not big else 512),
                           device=args.device)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {args.layers} layers, "
          f"{args.device}, {dtype}, input {tuple(tokens.shape)}")
    with torch.no_grad():
        ref = model(tokens)
        compiled = torch.compile(model, backend="argus")
        t0 = time.perf_counter()
        out = compiled(tokens)
        print(f"compiled and ran in {time.perf_counter() - t0:.1f} s"
              + (" (the Argus kernels under the Triton interpreter: slow, and no measure of speed)" if not big else ""))
        if big:  # the measured swap-in decides in the background (Inductor's code runs meanwhile): wait for it
            t0 = time.perf_counter()
            argus_inductor.settle()
            print(f"the swap-in measured in the background after the first call: {time.perf_counter() - t0:.1f} s")
            out = compiled(tokens)
        err = float((out.float() - ref.float()).norm() / ref.float().norm())
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        print(f"argus vs eager: relative error {err:.2e} ({'OK' if err < tol else 'MISMATCH'}, tolerance {tol:g})")
        argus_inductor.report()
        if big:
            ind = torch.compile(model, backend="inductor")
            ind(tokens)
            t_arg, t_ind = _time(lambda: compiled(tokens), "cuda"), _time(lambda: ind(tokens), "cuda")
            print(f"timing: argus {t_arg:.3f} ms, inductor {t_ind:.3f} ms, argus speed {t_ind / t_arg:.2f}x")
    print(next_steps(on_cpu=not big))
    return 0 if err < tol and math.isfinite(err) else 1


if __name__ == "__main__":
    sys.exit(main())
