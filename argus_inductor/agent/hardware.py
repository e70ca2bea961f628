"""The hardware model the planner and the prompts use, keyed by architecture."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    family: str            # the knowledge base's name: hopper | cdna3 (the interpreter borrows hopper's)
    arch: str              # sm_90, gfx942, cpu
    warp_size: int
    smem_bytes: int        # shared memory / LDS one program may use
    units: int             # SMs / CUs
    mma: str               # matrix instruction shapes
    bandwidth_tbs: float   # HBM bandwidth
    measured: bool         # timings on it mean something (False: the interpreter, or not yet measured)

    def describe(self) -> str:
        return (f"{self.family} ({self.arch}): warp/wavefront {self.warp_size} lanes, {self.units} compute units, "
                f"{self.smem_bytes // 1024} KiB shared memory per program, matrix instructions {self.mma}, "
                f"{self.bandwidth_tbs} TB/s HBM")


HOPPER = Hardware("hopper", "sm_90", 32, 227 * 1024, 132, "wgmma m64nNk16 (bf16/fp16), mma.sync m16n8k16", 3.35,
                  True)
CDNA3 = Hardware("cdna3", "gfx942", 64, 64 * 1024, 304, "MFMA 32x32x8 / 16x16x16 (bf16/fp16)", 5.3, False)
INTERPRETER = Hardware("hopper", "cpu", 32, 227 * 1024, 3, "emulated by the Triton interpreter", 0.0, False)

TABLE = {"sm_90": HOPPER, "gfx942": CDNA3, "cpu": INTERPRETER}


def for_arch(arch: str) -> Hardware:
    """The model of an architecture; unknown ones raise (Argus kernels run on sm_90, gfx942 and the CPU)."""
    if arch in TABLE:
        return TABLE[arch]
    raise ValueError(f"no hardware model for {arch!r}; known: {', '.join(TABLE)}")
