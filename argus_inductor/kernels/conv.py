"""Convolutions (1-D, 2-D, 3-D; transposed or not; grouped, depthwise, dilated, strided) as implicit GEMM.

Every input is viewed with three spatial dimensions (size-1 ones for 1-D and 2-D), and one kernel per
direction computes, for each image n and group g, the GEMM

    Y[n, g, co, m] = sum over (tap, c) of  Wk[g, co, tap * CG + c] * X[n, g, c, in(m, tap)]

where m runs over the OD*OH*OW output positions of the image (flattened), co over the COG output
channels of the group and the reduction index kk = tap * CG + c over the KD*KH*KW taps times the CG
input channels of the group. The input tile is gathered from x with index arithmetic (out-of-image
taps masked, nothing padded or zero-inserted in memory); the weight is reordered once on the host so
that kk is contiguous. Tensor views the kernels see (all free views of contiguous NC... tensors):

    X  (N, G, CG, ID*IH*IW)      Wk (G, COG, KD*KH*KW*CG)      Y (N, G, COG, OD*OH*OW)

A transposed convolution walks its output phases (o mod stride, per dimension) one at a time: the outputs of a
phase meet only every (stride / gcd(stride, dilation))-th tap, so its weight is laid out per phase,
Wk (SD*SH*SW, G, COG, JD*JH*JW*CG) with J = cdiv(K, stride / gcd), and a phase walks J taps per dimension
instead of K (stride 2: a quarter of the taps in 2-D, an eighth in 3-D, with no masked work in between). Its
program takes one output row position and BM positions along W, and Y is indexed by output coordinates
(N, G, COG, OD, OH, OW), so each coordinate it stores is a mixed-radix number in program ids, lanes and phase
loop counters: the checker proves every output written once at full sizes in well under a second.

Spatial extents, strides, paddings and dilations are constexprs: they fix the index arithmetic the
invariant checker proves (each conv geometry compiles once, as Inductor does for static shapes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ..dsl import Policy
from ..dsl.lang import (
    Tensor,
    activation,
    arange,
    assert_tag,
    assume,
    cdiv,
    constexpr,
    float32,
    implies,
    load,
    mma,
    store,
    tag,
    tag_of,
    tile_grid,
    where,
    zero_terms,
    zeros,
)
from ..dsl.runtime import Kernel, kernel
from .gemm import ACTIVATIONS
from .launch import pow2_between

# Reduction and in-image masks, and the assertions, mention every constexpr below; their defaults
# describe a 1x1 convolution over a single position (the host always sets them).


@kernel
def conv_fwd(X: Tensor("N", "G", "CG", "S"), Wk: Tensor("G", "COG", "KK"), bias: Tensor("G", "COG"),
             Y: Tensor("N", "G", "COG", "OS"),
             ID: constexpr = 1, IH: constexpr = 1, IW: constexpr = 1,
             OD: constexpr = 1, OH: constexpr = 1, OW: constexpr = 1,
             KD: constexpr = 1, KH: constexpr = 1, KW: constexpr = 1,
             SD: constexpr = 1, SH: constexpr = 1, SW: constexpr = 1,
             PD: constexpr = 0, PH: constexpr = 0, PW: constexpr = 0,
             DD: constexpr = 1, DH: constexpr = 1, DW: constexpr = 1,
             BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32,
             HAS_BIAS: constexpr = 0, ACT: constexpr = 0):
    """Y = act(conv(X, W) + bias): output position o reads input o * stride - pad + tap * dilation."""
    ng, pm, pn = tile_grid(N * G, cdiv(OS, BM), cdiv(COG, BN))
    n = ng // G
    g = ng % G
    assume((S == ID * IH * IW) & (OS == OD * OH * OW) & (KK == KD * KH * KW * CG))
    rm = pm * BM + arange(BM)
    od = rm // (OH * OW)
    oh = (rm // OW) % OH
    ow = rm % OW
    rn = pn * BN + arange(BN)
    acc = zeros((BN, BM), float32)
    for t in range(0, KD * KH * KW):
        kd = t // (KH * KW)
        kh = (t // KW) % KH
        kw = t % KW
        id_ = od * SD - PD + kd * DD
        ih = oh * SH - PH + kh * DH
        iw = ow * SW - PW + kw * DW
        inside = (rm < OS) & (id_ >= 0) & (id_ < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        s = (id_ * IH + ih) * IW + iw
        for c0 in range(0, CG, BK):
            rc = c0 + arange(BK)
            a = load(X[n, g, rc, s], mask=(rc < CG)[:, None] & inside[None, :])
            tag(a, KK=t * CG + rc[:, None])
            assert_tag(tag_of(a, "G") == g, "the input channels read belong to the output channels' group")
            assert_tag((tag_of(a, "S") // (IH * IW) - (rm // (OH * OW))[None, :] * SD + PD
                        == tag_of(a, "KK") // (CG * KH * KW) * DD)
                       & ((tag_of(a, "S") // IW) % IH - ((rm // OW) % OH)[None, :] * SH + PH
                          == tag_of(a, "KK") // (CG * KW) % KH * DH)
                       & (tag_of(a, "S") % IW - (rm % OW)[None, :] * SW + PW == tag_of(a, "KK") // CG % KW * DW),
                       "the input tap gathered (input - output * stride + pad) is the weight tap times dilation")
            w = load(Wk[g, rn, t * CG + rc], mask=(rc < CG)[None, :])
            zero_terms(a, inside[None, :])  # a tap off the input reads zero padding: a zero term, not a dropped one
            acc = mma(w, a, acc)
    if HAS_BIAS == 1:
        acc = acc + load(bias[g, rn]).to(float32)[:, None]
    if ACT == 1:  # relu keeping NaN and -0.0, as torch (max(x, 0) drops NaN on a GPU)
        acc = where(acc < 0.0, 0.0, acc)
    else:
        acc = activation(acc, ACT)
    y = acc
    store(Y[n, g, rn, rm], y)


@kernel
def conv_transpose_fwd(X: Tensor("N", "G", "CG", "S"), Wk: Tensor("NP", "G", "COG", "KK"), bias: Tensor("G", "COG"),
                       Y: Tensor("N", "G", "COG", "YD", "YH", "YW"),
                       ID: constexpr = 1, IH: constexpr = 1, IW: constexpr = 1,
                       OD: constexpr = 1, OH: constexpr = 1, OW: constexpr = 1,
                       KD: constexpr = 1, KH: constexpr = 1, KW: constexpr = 1,
                       SD: constexpr = 1, SH: constexpr = 1, SW: constexpr = 1,
                       PD: constexpr = 0, PH: constexpr = 0, PW: constexpr = 0,
                       DD: constexpr = 1, DH: constexpr = 1, DW: constexpr = 1,
                       GD: constexpr = 1, GH: constexpr = 1, GW: constexpr = 1,
                       VD: constexpr = 0, VH: constexpr = 0, VW: constexpr = 0,
                       JD: constexpr = 1, JH: constexpr = 1, JW: constexpr = 1,
                       QD: constexpr = 1, QH: constexpr = 1, QW: constexpr = 1,
                       BM: constexpr = 64, BN: constexpr = 64, BK: constexpr = 32,
                       HAS_BIAS: constexpr = 0, ACT: constexpr = 0):
    """Y = act(conv_transpose(X, W) + bias), one output phase at a time: output o takes tap k from input
    i = (o + pad - k * dilation) / stride where that is a whole number inside the input, so the outputs of one
    phase (o mod stride, per dimension) take the taps k0 + j * (stride / G) only, with G = gcd(stride, dilation)
    and k0 = ((phase + pad) / G * V) mod (stride / G), V the inverse of dilation / G. Wk holds each phase's taps
    (j-major, zero past the kernel's edge), so no program walks the taps that never meet its outputs. A program
    takes one (image, group), one output row position q = (qd, qh) and BM positions qw along W, and walks the
    phases: output (qd * SD + rd, qh * SH + rh, qw * SW + rw) for phase (rd, rh, rw)."""
    ng, pq, pmn = tile_grid(N * G, QD * QH, cdiv(QW, BM) * cdiv(COG, BN))
    n = ng // G
    g = ng % G
    qd = pq // QH
    qh = pq % QH
    pm = pmn // cdiv(COG, BN)
    pn = pmn % cdiv(COG, BN)
    assume((S == ID * IH * IW) & (YD == OD) & (YH == OH) & (YW == OW) & (KK == JD * JH * JW * CG)
           & (NP == SD * SH * SW))
    qw = pm * BM + arange(BM)
    rn = pn * BN + arange(BN)
    for rd in range(0, SD):
        for rh in range(0, SH):
            for rw in range(0, SW):
                ph = (rd * SH + rh) * SW + rw
                od = qd * SD + rd
                oh = qh * SH + rh
                ow = qw * SW + rw
                valid = (qw < QW) & (ow < OW) & (od < OD) & (oh < OH)
                k0d = (rd + PD) // GD * VD % (SD // GD)
                k0h = (rh + PH) // GH * VH % (SH // GH)
                k0w = (rw + PW) // GW * VW % (SW // GW)
                # the walk is complete: a phase's first tap lands on a whole input index (where any tap can), the
                # taps that do repeat every stride / G, and J of them reach past the kernel's last tap
                assert_tag(implies((rd + PD) % GD == 0, (rd + PD - k0d * DD) % SD == 0)
                           & implies((rh + PH) % GH == 0, (rh + PH - k0h * DH) % SH == 0)
                           & implies((rw + PW) % GW == 0, (rw + PW - k0w * DW) % SW == 0)
                           & (k0d + JD * (SD // GD) >= KD) & (k0h + JH * (SH // GH) >= KH)
                           & (k0w + JW * (SW // GW) >= KW),
                           "each phase walks every tap that meets its outputs")
                acc = zeros((BN, BM), float32)
                for t in range(0, JD * JH * JW):
                    kd = k0d + t // (JH * JW) * (SD // GD)
                    kh = k0h + (t // JW) % JH * (SH // GH)
                    kw = k0w + t % JW * (SW // GW)
                    nd = od + PD - kd * DD
                    nh = oh + PH - kh * DH
                    nw = ow + PW - kw * DW
                    id_ = nd // SD
                    ih = nh // SH
                    iw = nw // SW
                    hit_d = (nd >= 0) & (nd % SD == 0) & (id_ < ID)
                    hit_h = (nh >= 0) & (nh % SH == 0) & (ih < IH)
                    hit_w = (nw >= 0) & (nw % SW == 0) & (iw < IW)
                    inside = valid & (kd < KD) & (kh < KH) & (kw < KW) & hit_d & hit_h & hit_w
                    s = (id_ * IH + ih) * IW + iw
                    for c0 in range(0, CG, BK):
                        rc = c0 + arange(BK)
                        a = load(X[n, g, rc, s], mask=(rc < CG)[:, None] & inside[None, :])
                        tag(a, KK=t * CG + rc[:, None])
                        assert_tag(tag_of(a, "G") == g, "the input channels read belong to the output channels' group")
                        assert_tag((tag_of(a, "S") // (IH * IW) * SD
                                    + (k0d + tag_of(a, "KK") // (CG * JH * JW) * (SD // GD)) * DD == od + PD)
                                   & ((tag_of(a, "S") // IW) % IH * SH
                                      + (k0h + tag_of(a, "KK") // (CG * JW) % JH * (SH // GH)) * DH == oh + PH)
                                   & (tag_of(a, "S") % IW * SW
                                      + (k0w + tag_of(a, "KK") // CG % JW * (SW // GW)) * DW == ow[None, :] + PW),
                                   "input * stride + weight tap * dilation is the output position plus pad")
                        w = load(Wk[ph, g, rn, t * CG + rc], mask=(rc < CG)[None, :])
                        assert_tag(tag_of(w, "NP") == ph, "each phase reads its own taps' weights")
                        # a tap past the kernel, or off the input or its stride (no input meets it): a zero term
                        zero_terms(a, inside[None, :])
                        acc = mma(w, a, acc)
                if HAS_BIAS == 1:
                    acc = acc + load(bias[g, rn]).to(float32)[:, None]
                if ACT == 1:  # relu keeping NaN and -0.0, as torch (max(x, 0) drops NaN on a GPU)
                    acc = where(acc < 0.0, 0.0, acc)
                else:
                    acc = activation(acc, ACT)
                y = acc
                store(Y[n, g, rn, od, oh, ow], y, mask=valid[None, :])


@kernel
def conv_depthwise(X: Tensor("N", "C", "S"), Wk: Tensor("C", "T"), bias: Tensor("C"), Y: Tensor("N", "C", "OS"),
                   ID: constexpr = 1, IH: constexpr = 1, IW: constexpr = 1,
                   OD: constexpr = 1, OH: constexpr = 1, OW: constexpr = 1,
                   KD: constexpr = 1, KH: constexpr = 1, KW: constexpr = 1,
                   SD: constexpr = 1, SH: constexpr = 1, SW: constexpr = 1,
                   PD: constexpr = 0, PH: constexpr = 0, PW: constexpr = 0,
                   DD: constexpr = 1, DH: constexpr = 1, DW: constexpr = 1,
                   BC: constexpr = 4, BM: constexpr = 128, HAS_BIAS: constexpr = 0, ACT: constexpr = 0):
    """Y = act(depthwise conv(X, W) + bias) for one output channel per input channel: each output is a sum of
    KD*KH*KW products, so the taps are walked directly (multiply-adds, no mma with a reduction of one)."""
    n, pc, pm = tile_grid(N, cdiv(C, BC), cdiv(OS, BM))
    assume((S == ID * IH * IW) & (OS == OD * OH * OW) & (T == KD * KH * KW))
    rc = pc * BC + arange(BC)
    rm = pm * BM + arange(BM)
    od = rm // (OH * OW)
    oh = (rm // OW) % OH
    ow = rm % OW
    acc = zeros((BC, BM), float32)
    for t in range(0, KD * KH * KW):
        kd = t // (KH * KW)
        kh = (t // KW) % KH
        kw = t % KW
        id_ = od * SD - PD + kd * DD
        ih = oh * SH - PH + kh * DH
        iw = ow * SW - PW + kw * DW
        inside = (rm < OS) & (id_ >= 0) & (id_ < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        s = (id_ * IH + ih) * IW + iw
        x = load(X[n, rc, s], mask=inside[None, :])
        w = load(Wk[rc, t])
        assert_tag(tag_of(x, "C") == tag_of(w[:, None], "C"), "each output channel reads its own input channel")
        assert_tag((tag_of(x, "S") // (IH * IW) - (rm // (OH * OW))[None, :] * SD + PD
                    == tag_of(w[:, None], "T") // (KH * KW) * DD)
                   & ((tag_of(x, "S") // IW) % IH - ((rm // OW) % OH)[None, :] * SH + PH
                      == tag_of(w[:, None], "T") // KW % KH * DH)
                   & (tag_of(x, "S") % IW - (rm % OW)[None, :] * SW + PW == tag_of(w[:, None], "T") % KW * DW),
                   "the input tap gathered (input - output * stride + pad) is the weight tap times dilation")
        zero_terms(x, inside[None, :])  # a tap off the input reads zero padding: a zero term, not a dropped one
        acc = acc + x.to(float32) * w.to(float32)[:, None]
    if HAS_BIAS == 1:
        acc = acc + load(bias[rc]).to(float32)[:, None]
    if ACT == 1:  # relu keeping NaN and -0.0, as torch (max(x, 0) drops NaN on a GPU)
        acc = where(acc < 0.0, 0.0, acc)
    else:
        acc = activation(acc, ACT)
    store(Y[n, rc, rm], acc)


KERNELS: tuple[Kernel, ...] = (conv_fwd, conv_transpose_fwd, conv_depthwise)

_GEOMETRY = ("ID", "IH", "IW", "OD", "OH", "OW", "KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW",
             "DD", "DH", "DW")


# ---- geometry ------------------------------------------------------------------------------------------------
class _Geometry:
    """A convolution's shapes, normalised to three spatial dimensions (leading size-1 ones padded in)."""

    def __init__(self, x_shape: Sequence[int], w_shape: Sequence[int], stride: Any, padding: Any, dilation: Any,
                 groups: int, transposed: bool, output_padding: Any) -> None:
        x_shape, w_shape = tuple(int(v) for v in x_shape), tuple(int(v) for v in w_shape)
        if len(w_shape) not in (3, 4, 5):
            raise ValueError(f"conv weight must have rank 3, 4 or 5 (1-D, 2-D or 3-D convolution), got shape "
                             f"{w_shape}")
        nsp = len(w_shape) - 2
        self.nsp = nsp
        self.batched = len(x_shape) == nsp + 2
        if len(x_shape) not in (nsp + 1, nsp + 2):
            raise ValueError(f"a {nsp}-D convolution (weight of rank {nsp + 2}) needs an input of rank {nsp + 2} "
                             f"(N, C, spatial...) or {nsp + 1} (unbatched), got shape {x_shape}")
        if not self.batched:
            x_shape = (1,) + x_shape
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ValueError(f"groups must be a positive integer, got {groups!r}")
        self.groups = groups
        self.transposed = bool(transposed)
        n, cin, *insp = x_shape
        self.n, self.cin = n, cin
        ksp = list(w_shape[2:])
        if transposed:
            if w_shape[0] != cin:
                raise ValueError(f"conv_transpose weight {w_shape} needs in_channels = weight.shape[0] = "
                                 f"{w_shape[0]}, but the input has {cin} channels (shape {tuple(x_shape)})")
            if cin % groups:
                raise ValueError(f"in_channels ({cin}) must be divisible by groups ({groups})")
            self.cout = w_shape[1] * groups
        else:
            if cin % groups:
                raise ValueError(f"in_channels ({cin}) must be divisible by groups ({groups})")
            if w_shape[1] * groups != cin:
                raise ValueError(f"conv weight {w_shape} expects {w_shape[1]} * groups({groups}) = "
                                 f"{w_shape[1] * groups} input channels, but the input has {cin} "
                                 f"(shape {tuple(x_shape)})")
            if w_shape[0] % groups:
                raise ValueError(f"out_channels ({w_shape[0]}) must be divisible by groups ({groups})")
            self.cout = w_shape[0]
        if cin < 1 or self.cout < 1 or any(k < 1 for k in ksp):
            raise ValueError(f"empty channels or kernel: input {tuple(x_shape)}, weight {w_shape}")
        if any(s < 1 for s in insp):
            raise ValueError(f"input spatial size must be positive, got {tuple(x_shape)}")
        st = _tuple(stride, nsp, "stride")
        dil = _tuple(dilation, nsp, "dilation")
        if any(v < 1 for v in st + dil):
            raise ValueError(f"stride and dilation must be >= 1, got stride={stride!r}, dilation={dilation!r}")
        if isinstance(padding, str):
            if transposed:
                raise ValueError(f"padding={padding!r} is only supported for non-transposed convolutions")
            if padding == "valid":
                pad_lo = pad_tot = (0,) * nsp
            elif padding == "same":
                if any(v != 1 for v in st):
                    raise ValueError("padding='same' is not supported for strided convolutions")
                pad_tot = tuple(d * (k - 1) for d, k in zip(dil, ksp))
                pad_lo = tuple(p // 2 for p in pad_tot)
            else:
                raise ValueError(f"padding must be 'same', 'valid', an int or a tuple of {nsp} ints, got {padding!r}")
        else:
            pad_lo = _tuple(padding, nsp, "padding")
            if any(p < 0 for p in pad_lo):
                raise ValueError(f"padding must be >= 0, got {padding!r}")
            pad_tot = tuple(2 * p for p in pad_lo)
        opad = _tuple(output_padding, nsp, "output_padding")
        if not transposed and any(opad):
            raise ValueError("output_padding is only meaningful for transposed convolutions")
        if any(o < 0 or (o >= s and o >= d) for o, s, d in zip(opad, st, dil)):
            raise ValueError(f"output_padding must be smaller than either stride or dilation, got "
                             f"output_padding={output_padding!r}, stride={stride!r}, dilation={dilation!r}")
        if transposed:
            out = [(i - 1) * s - pt + d * (k - 1) + o + 1
                   for i, s, pt, d, k, o in zip(insp, st, pad_tot, dil, ksp, opad)]
        else:
            out = [(i + pt - d * (k - 1) - 1) // s + 1 for i, s, pt, d, k in zip(insp, st, pad_tot, dil, ksp)]
        if any(o < 1 for o in out):
            raise ValueError(f"the output would be empty (spatial size {tuple(out)}) for input {tuple(x_shape)}, "
                             f"kernel {tuple(ksp)}, stride {st}, padding {padding!r}, dilation {dil}")
        self.in_spatial, self.out_spatial, self.k_spatial = tuple(insp), tuple(out), tuple(ksp)
        lead = 3 - nsp
        self.consts = dict(zip(_GEOMETRY, (
            (1,) * lead + tuple(insp) + (1,) * lead + tuple(out) + (1,) * lead + tuple(ksp)
            + (1,) * lead + st + (0,) * lead + pad_lo + (1,) * lead + dil)))
        if transposed:
            self.consts.update(_phase_consts(self.consts))

    @property
    def phases(self) -> int:
        """Output phases of a transposed convolution (the product of its strides; 1 otherwise)."""
        c = self.consts
        return c["SD"] * c["SH"] * c["SW"] if self.transposed else 1

    @property
    def taps_per_phase(self) -> int:
        """Taps each output phase of a transposed convolution walks (every tap otherwise)."""
        c = self.consts
        return c["JD"] * c["JH"] * c["JW"] if self.transposed else c["KD"] * c["KH"] * c["KW"]

    @property
    def kernel_name(self) -> str:
        """The implicit-GEMM kernel of this geometry (what a fused chain is spliced into)."""
        return "conv_transpose_fwd" if self.transposed else "conv_fwd"

    @property
    def depthwise(self) -> bool:
        """One output channel per input channel (groups = in = out channels): conv_depthwise's case."""
        return not self.transposed and self.cg == 1 and self.cog == 1

    def launch_name(self, direct: bool = True) -> str:
        """The kernel conv() launches: conv_depthwise for a depthwise geometry (when `direct`), else kernel_name."""
        return "conv_depthwise" if direct and self.depthwise else self.kernel_name

    @property
    def cg(self) -> int:
        return self.cin // self.groups

    @property
    def cog(self) -> int:
        return self.cout // self.groups

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.cout) + self.out_spatial


def _tuple(v: Any, n: int, what: str) -> tuple[int, ...]:
    if isinstance(v, bool):
        raise ValueError(f"{what} must be an int or a tuple of {n} ints, got {v!r}")
    if isinstance(v, int):
        return (v,) * n
    if isinstance(v, (tuple, list)) and len(v) == n and all(isinstance(e, int) and not isinstance(e, bool)
                                                            for e in v):
        return tuple(v)
    if isinstance(v, (tuple, list)) and len(v) == 1 and isinstance(v[0], int):
        return (int(v[0]),) * n
    raise ValueError(f"{what} must be an int or a tuple of {n} ints, got {v!r}")


ConvGeometry = _Geometry  # the public name of a convolution's resolved geometry


def _phase_consts(c: dict[str, int]) -> dict[str, int]:
    """conv_transpose_fwd's per-dimension phase constexprs: G = gcd(stride, dilation); V, the inverse of
    dilation / G modulo stride / G (0 where that is 1); J = cdiv(kernel, stride / G), the taps a phase takes; Q =
    cdiv(out, stride), the output positions of a phase."""
    out: dict[str, int] = {}
    for d in "DHW":
        st, dil, k, o = c["S" + d], c["D" + d], c["K" + d], c["O" + d]
        g = math.gcd(st, dil)
        step = st // g
        out["G" + d] = g
        out["V" + d] = pow(dil // g, -1, step) if step > 1 else 0
        out["J" + d] = -(-k // step)
        out["Q" + d] = -(-o // st)
    return out


def _phase_taps(c: dict[str, int], d: str, r: int) -> range:
    """The taps along dimension d that meet outputs of phase r (o mod stride = r): k0 + j * (stride / G)."""
    st, pad, g, v = c["S" + d], c["P" + d], c["G" + d], c["V" + d]
    step = st // g
    if (r + pad) % g:
        return range(0)  # no tap lands on a whole input index: these outputs are the bias alone
    return range((r + pad) // g * v % step, c["K" + d], step)


# ---- policies and host function --------------------------------------------------------------------------------
def conv_policies(x_shape: Sequence[int], w_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                  dilation: Any = 1, groups: int = 1, transposed: bool = False, output_padding: Any = 0,
                  target: str = "cuda", direct: bool = True) -> dict[str, Policy]:
    """Template launch policies (tile sizes) for the kernel a convolution of these shapes runs (direct=False:
    always the implicit-GEMM kernel, as a fused chain needs).

    The geometry constexprs (ID..DW) are not part of a policy: conv() sets them from the shapes.
    """
    if target not in ("cuda", "hip", "interpret"):
        raise ValueError(f"target must be 'cuda', 'hip' or 'interpret', got {target!r}")
    geo = _Geometry(x_shape, w_shape, stride, padding, dilation, groups, transposed, output_padding)
    m = 1
    for o in geo.out_spatial:
        m *= o
    if geo.transposed:  # a program's BM lanes are output positions of one row along W, one phase at a time
        m = geo.consts["QW"]
    if direct and geo.depthwise:
        bm = pow2_between(m, 16, 32 if target == "interpret" else 256)
        bc = pow2_between(geo.cin, 1, max(1, (128 if target == "interpret" else 1024) // bm))
        return {"conv_depthwise": Policy.make(BC=bc, BM=bm, num_warps=4) if target != "interpret"
                else Policy.make(BC=bc, BM=bm)}
    if target == "interpret":
        pol = Policy.make(BM=pow2_between(m, 16, 32), BN=16, BK=16)
    elif geo.transposed:
        pol = Policy.make(BM=pow2_between(m, 16, 128), BN=pow2_between(geo.cog, 16, 128),
                          BK=pow2_between(geo.cg, 16, 32), num_warps=4, num_stages=3)
    else:
        pol = Policy.make(BM=128 if m >= 4096 else 64, BN=pow2_between(geo.cog, 16, 128),
                          BK=pow2_between(geo.cg, 16, 32), num_warps=8 if m >= 4096 and geo.cog >= 64 else 4,
                          num_stages=3)
    return {geo.kernel_name: pol}


def conv_geometry(x_shape: Sequence[int], w_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                  dilation: Any = 1, groups: int = 1, transposed: bool = False, output_padding: Any = 0,
                  direct: bool = True) -> tuple[str, dict[str, int], dict[str, int]]:
    """What a convolution of these shapes launches: (kernel name, geometry constexprs, shape symbols); direct as
    in conv_policies.

    The constexprs and shapes are exactly what `verify(kernel, policy.with_consts(**consts), shapes)`
    needs to prove the launch (the shape symbols of the kernels' tensor views).
    """
    geo = _Geometry(x_shape, w_shape, stride, padding, dilation, groups, transposed, output_padding)
    taps = s_in = s_out = 1
    for k, i, o in zip(geo.k_spatial, geo.in_spatial, geo.out_spatial):
        taps, s_in, s_out = taps * k, s_in * i, s_out * o
    if direct and geo.depthwise:
        return "conv_depthwise", dict(geo.consts), dict(N=max(geo.n, 1), C=geo.cin, S=s_in, OS=s_out, T=taps)
    shapes = dict(N=max(geo.n, 1), G=geo.groups, CG=geo.cg, S=s_in, COG=geo.cog, KK=geo.taps_per_phase * geo.cg)
    if geo.transposed:  # Y (N, G, COG, OD, OH, OW): one output position per phase and program lane
        c = geo.consts
        shapes.update(NP=geo.phases, YD=c["OD"], YH=c["OH"], YW=c["OW"])
    else:
        shapes["OS"] = s_out
    return geo.kernel_name, dict(geo.consts), shapes


def conv_output_view(out: torch.Tensor, geo: ConvGeometry) -> torch.Tensor:
    """The output (or an extra read like it) as the kernel of `geo` indexes it: (N, G, COG, OD*OH*OW), or for a
    transposed convolution (N, G, COG, OD, OH, OW)."""
    if geo.transposed:  # a view, never a copy: the kernel writes through it
        c = geo.consts
        return out.view(geo.n, geo.groups, geo.cog, c["OD"], c["OH"], c["OW"])
    return out.view(geo.n, geo.groups, geo.cog, -1)


def conv_weight_view(weight: torch.Tensor, geo: ConvGeometry) -> torch.Tensor:
    """The (G, COG, taps * CG) weight the kernels read, reduction index tap * CG + c (a copy when reordering)."""
    g, cg, cog = geo.groups, geo.cg, geo.cog
    taps = 1
    for k in geo.k_spatial:
        taps *= k
    if geo.transposed:
        return _phase_weights(weight, geo)
    # (Cout, CG, k...) = (G, COG, CG, T) -> (G, COG, T, CG)
    wk = weight.reshape(g, cog, cg, taps).permute(0, 1, 3, 2)
    return wk.reshape(g, cog, taps * cg)


def _phase_weights(weight: torch.Tensor, geo: ConvGeometry) -> torch.Tensor:
    """A transposed convolution's weight (Cin, COG, k...) = (G, CG, COG, KD, KH, KW) as conv_transpose_fwd reads it:
    (phases, G, COG, JD * JH * JW * CG), phase p's taps k0 + j * step in j-major order, zero where a phase has
    fewer taps than J. Built from strided views copied into one zeroed buffer (what a replay repeats)."""
    c = geo.consts
    g, cg, cog = geo.groups, geo.cg, geo.cog
    w6 = weight.reshape(g, cg, cog, c["KD"], c["KH"], c["KW"])
    buf = weight.new_zeros(geo.phases, g, cog, c["JD"], c["JH"], c["JW"], cg)
    for p in range(geo.phases):
        rd, rh, rw = p // (c["SH"] * c["SW"]), (p // c["SW"]) % c["SH"], p % c["SW"]
        td, th, tw = _phase_taps(c, "D", rd), _phase_taps(c, "H", rh), _phase_taps(c, "W", rw)
        if not (len(td) and len(th) and len(tw)):
            continue
        src = w6[:, :, :, td.start::td.step, th.start::th.step, tw.start::tw.step]
        buf[p, :, :, :len(td), :len(th), :len(tw), :].copy_(src.permute(0, 2, 3, 4, 5, 1))
    return buf.view(geo.phases, g, cog, -1)


def conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
         padding: Any = 0, dilation: Any = 1, groups: int = 1, transposed: bool = False, output_padding: Any = 0,
         activation: str = "none", *, policies: dict[str, Policy] | None = None,
         kernels: dict[str, Kernel] | None = None, target: str | None = None) -> torch.Tensor:
    """act(conv(x, weight) + bias) with the semantics of torch.nn.functional.conv{1,2,3}d (or
    conv_transpose{1,2,3}d when `transposed`), computed in float32 and returned in x's dtype."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise ValueError("conv needs tensors for x and weight")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if not x.is_floating_point() or x.dtype != weight.dtype:
        raise ValueError(f"x and weight must share one floating-point dtype, got {x.dtype} and {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device} but weight is on {weight.device}")
    geo = _Geometry(x.shape, weight.shape, stride, padding, dilation, groups, transposed, output_padding)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (geo.cout,):
            got = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise ValueError(f"bias must have shape ({geo.cout},) (out_channels), got {got}")
        if bias.device != x.device:
            raise ValueError(f"bias is on {bias.device} but x is on {x.device}")
    name = geo.launch_name()
    kern = (kernels or {}).get(name) or {"conv_depthwise": conv_depthwise, "conv_transpose_fwd": conv_transpose_fwd,
                                         "conv_fwd": conv_fwd}[name]
    tgt = target or ("interpret" if x.device.type == "cpu" else ("hip" if torch.version.hip else "cuda"))
    pol = (policies or {}).get(name)
    if pol is None:
        pol = conv_policies(x.shape, weight.shape, stride, padding, dilation, groups, transposed, output_padding,
                            tgt)[name]
    pol = pol.with_consts(**geo.consts, HAS_BIAS=int(bias is not None), ACT=ACTIVATIONS[activation])

    xb = x if geo.batched else x.unsqueeze(0)
    out = torch.empty(geo.out_shape, dtype=x.dtype, device=x.device)
    if geo.n > 0 and geo.depthwise and name == "conv_depthwise":
        c = geo.cin
        bv = bias.to(x.dtype) if bias is not None else out.new_empty(c)
        kern(xb.reshape(geo.n, c, -1), weight.reshape(c, -1), bv, out.view(geo.n, c, -1), policy=pol, target=tgt)
    elif geo.n > 0:
        g, cg, cog = geo.groups, geo.cg, geo.cog
        xv = xb.reshape(geo.n, g, cg, -1)
        wk = conv_weight_view(weight, geo)
        bv = bias.to(x.dtype).reshape(g, cog) if bias is not None else out.new_empty(g, cog)
        kern(xv, wk, bv, conv_output_view(out, geo), policy=pol, target=tgt)
    return out if geo.batched else out.squeeze(0)


__all__ = ["conv", "conv_policies", "conv_geometry", "conv_output_view", "conv_fwd", "conv_transpose_fwd",
           "conv_depthwise", "KERNELS"]
