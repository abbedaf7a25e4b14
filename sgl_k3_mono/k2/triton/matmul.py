"""K2's projections on sm_90 (Triton): a few rows against SGLang's weight tensors as they
are stored, bf16 or MXFP4, as FMA GEMVs (rows padded to a power of two, products in the
weights' load layout) or on the tensor cores (rows padded to 16). kernel.py picks one per
phase from the launch's tiles (tiles.k2_tiles)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gemv_bf16_step(part, x_ptr, sxm, r3, v3, w_ptr, swn, n3, N, k0, K, BK: tl.constexpr):
    """One K step of gemv_bf16: part [R, BN, BK] + x[r3, k0:k0+BK] * W[n3, k0:k0+BK], fp32
    FMAs (summed over the last axis once the K walk ends); r3 / v3 [R, 1, 1] the x rows and
    which exist, n3 [1, BN, 1] the weight rows (< N). Also the step of the flat loops
    (bf16_step), so a tile's bits are gemv_bf16's."""
    k3 = k0 + tl.arange(0, BK)[None, None, :]
    w = tl.load(w_ptr + n3 * swn + k3, mask=(n3 < N) & (k3 < K), other=0.0).to(tl.float32)
    x = tl.load(x_ptr + r3 * sxm + k3, mask=v3 & (k3 < K), other=0.0).to(tl.bfloat16)
    return part + x.to(tl.float32) * w


@triton.jit
def gemv_bf16(x_ptr, sxm, rows, rvalid, w_ptr, swn, n0, N, K,
              R: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """[R, BN] fp32 = x[rows] @ W[n0:n0+BN]^T with FMAs, bf16 W [N, K]; x rows picked by
    `rows` [R] (masked by `rvalid`): consecutive rows, or the rows that route one expert."""
    r3 = rows[:, None, None]
    v3 = rvalid[:, None, None]
    n3 = (n0 + tl.arange(0, BN))[None, :, None]
    part = tl.zeros((R, BN, BK), tl.float32)
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        part = gemv_bf16_step(part, x_ptr, sxm, r3, v3, w_ptr, swn, n3, N, k0, K, BK)
    return tl.sum(part, axis=2)


@triton.jit
def dot_bf16(x_ptr, sxm, M, w_ptr, swn, n0, N, K, acc,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
             GEMV: tl.constexpr = False):
    """acc += x[:M, :K] @ W[n0:n0+BN, :K]^T, bf16 weights [N, K] with row stride swn.
    GEMV: BM is the row count rounded up to a power of two (<= 8), and the products are
    FMAs in the weights' load layout: no padding to 16 rows, no trip through shared
    memory into a tensor-core operand layout."""
    if GEMV:
        rows = tl.arange(0, BM)
        acc += gemv_bf16(x_ptr, sxm, rows, rows < M, w_ptr, swn, n0, N, K, BM, BN, BK, STAGES)
    else:
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            acc = dot_bf16_step(acc, x_ptr, sxm, M, w_ptr, swn, n0, N, k0, K, BM, BN, BK)
    return acc


@triton.jit
def dot_bf16_step(acc, x_ptr, sxm, M, w_ptr, swn, n0, N, k0, K,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One K step of dot_bf16 on the tensor cores: acc [BM, BN] + x[:M, k0:k0+BK] @
    W[n0:n0+BN, k0:k0+BK]^T. Also the step of the flat loops (bf16_step), so a tile's bits
    are dot_bf16's."""
    rm = tl.arange(0, BM)
    rn = n0 + tl.arange(0, BN)
    rk = k0 + tl.arange(0, BK)
    x = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    w = tl.load(w_ptr + rn[:, None] * swn + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
    return tl.dot(x.to(tl.bfloat16), tl.trans(w), acc)


@triton.jit
def bf16_step(part, x_ptr, sxm, M, w_ptr, swn, n0, N, k0, K,
              R: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GEMV: tl.constexpr):
    """One K step of a flat loop's tile (kernel.py's FLATD and FLATX: a program's tiles or
    items and their K steps as one loop) over x rows 0..R-1 (< M) and W rows n0..n0+BN-1
    (< N): gemv_bf16_step's products [R, BN, BK] (GEMV) or dot_bf16_step's sums [R, BN], so
    a tile's bits are gemv_bf16's or dot_bf16's."""
    if GEMV:
        r = tl.arange(0, R)
        return gemv_bf16_step(part, x_ptr, sxm, r[:, None, None], (r < M)[:, None, None], w_ptr, swn,
                              (n0 + tl.arange(0, BN))[None, :, None], N, k0, K, BK)
    else:
        return dot_bf16_step(part, x_ptr, sxm, M, w_ptr, swn, n0, N, k0, K, R, BN, BK)


@triton.jit
def e2m1_pair_f32(byte):
    """Both FP4 (e2m1) codes of MXFP4 bytes (int32, 0..255) as fp32 times 2^-14, exactly.
    Each code's exponent and mantissa bits land in an fp16's (exponent bias 15, so the
    value is the code's times 2^-14; e2m1's subnormal codes become fp16 subnormals,
    which the fp16 -> fp32 conversion keeps). Five integer ops and a conversion a code;
    the caller's scale carries the 2^14 back."""
    lo = (((byte & 7) << 9) | ((byte & 8) << 12)).to(tl.int16).to(tl.float16, bitcast=True)
    hi = (((byte & 0x70) << 5) | ((byte & 0x80) << 8)).to(tl.int16).to(tl.float16, bitcast=True)
    return lo.to(tl.float32), hi.to(tl.float32)


@triton.jit
def scale_f32(sc, SHIFT: tl.constexpr):
    """ue8m0 scale codes (int32) as fp32 2^(sc - 127 + SHIFT); exact while sc + SHIFT is
    in 1..254 (sc <= 240 for SHIFT 14: larger scales mean weights above 2^113)."""
    return ((sc + SHIFT) << 23).to(tl.float32, bitcast=True)


@triton.jit
def mx_w_ptr(w_ptr, r, b, swn, XL: tl.constexpr, GU: tl.constexpr):
    """Pointer to code byte b of weight row r in expert layout XL (k2/expert_layout.py,
    whose weight_offset this is: 0 SGLang's plain rows, 1 AITER's a16w4, 2 its generic;
    GU: w13, whose a16w4 blocks alternate gate and up). XL 0 is the expression the callers
    always had, so their code is unchanged."""
    if XL == 0:
        return w_ptr + r * swn + b
    else:
        return w_ptr + ((r // 16) * ((32 if (XL == 1 and GU) else 16) * swn) + (r % 16) * 16 + (b // 16) * 256
                        + b % 16)


@triton.jit
def mx_s_ptr(s_ptr, r, g, ssn, XL: tl.constexpr, GU: tl.constexpr):
    """Pointer to the scale of group g (codes 32 g ..) of row r: expert_layout.scale_offset."""
    if XL == 0:
        return s_ptr + r * ssn + g
    else:
        col = (g // 8) * 256 + (g % 4) * 64 + ((g // 4) % 2) * 2
        if XL == 1 and GU:
            return s_ptr + ((r // 16) * (32 * ssn) + (r % 16) * 4 + col)
        else:
            return s_ptr + ((r // 32) * (32 * ssn) + (r // 16) % 2 + (r % 16) * 4 + col)


@triton.jit
def mx_up(row_stride, I_UP: tl.constexpr, XL: tl.constexpr, SCALE: tl.constexpr):
    """Offset of w13's up half (SCALE: of its scales) from an expert's first byte: row I_UP
    in the row-ordered layouts; a16w4 puts up block n0 right after gate block n0, its
    scales a byte after the gate's (expert_layout.up_offsets)."""
    if XL == 1:
        if SCALE:
            return 1
        else:
            return 16 * row_stride
    else:
        return I_UP * row_stride


@triton.jit
def gemv_mxfp4(x_ptr, sxm, rows, rvalid, w_ptr, swn, s_ptr, ssn, n0, N, K,
               R: tl.constexpr, BN: tl.constexpr, BKH: tl.constexpr, STAGES: tl.constexpr,
               MX4D: tl.constexpr, XL: tl.constexpr = 0, GU: tl.constexpr = False):
    """[R, BN] fp32 = x[rows] @ W^T with FMAs for MXFP4 W (bytes [N, K/2], low nibble = even element;
    ue8m0 scales [N, K/32]), decoded in registers (Hopper has no FP4 unit); x rows picked
    by `rows` [R] (masked by `rvalid`). XL / GU: where W's bytes and scales sit (mx_w_ptr)."""
    if not MX4D:
        # [rows, N tile, bytes]: a scale load and two strided x loads per byte; measured
        # faster than the 4-D tiles below at 4 and 8 rows (docs/evidence/k2-sm90.md)
        r3 = rows[:, None, None]
        v3 = rvalid[:, None, None]
        n3 = (n0 + tl.arange(0, BN))[None, :, None]
        part3 = tl.zeros((R, BN, BKH), tl.float32)
        for kb in tl.range(0, K // 2, BKH, num_stages=STAGES):
            b3 = kb + tl.arange(0, BKH)[None, None, :]
            nmask = (n3 < N) & (b3 < K // 2)
            byte = tl.load(mx_w_ptr(w_ptr, n3, b3, swn, XL, GU), mask=nmask, other=0).to(tl.int32)
            sc = tl.load(mx_s_ptr(s_ptr, n3, b3 // 16, ssn, XL, GU), mask=nmask, other=0).to(tl.int32)
            xm = v3 & (b3 < K // 2)
            xe = tl.load(x_ptr + r3 * sxm + 2 * b3, mask=xm, other=0.0).to(tl.bfloat16).to(tl.float32)
            xo = tl.load(x_ptr + r3 * sxm + 2 * b3 + 1, mask=xm, other=0.0).to(tl.bfloat16).to(tl.float32)
            lo, hi = e2m1_pair_f32(byte)
            scale = scale_f32(sc, 14)  # scaled once, then two FMAs a row (exact: a power of two)
            part3 += xe * (lo * scale) + xo * (hi * scale)
        res = tl.sum(part3, axis=2)
    else:
        # [rows, N tile, groups of 32 elements, 16 bytes]: a group's scale is one load and
        # broadcasts; x is read as bf16 pairs (one int32 = the even and the odd element),
        # so every load is a wide vector load.
        G: tl.constexpr = BKH // 16
        r4 = rows[:, None, None, None]
        v4 = rvalid[:, None, None, None]
        n4 = (n0 + tl.arange(0, BN))[None, :, None, None]
        g4 = tl.arange(0, G)[None, None, :, None]
        j4 = tl.arange(0, 16)[None, None, None, :]
        x_pairs = x_ptr.to(tl.pointer_type(tl.int32))
        part = tl.zeros((R, BN, G, 16), tl.float32)
        for kb in tl.range(0, K // 2, BKH, num_stages=STAGES):
            b4 = kb + g4 * 16 + j4
            kmask = b4 < K // 2
            byte = tl.load(mx_w_ptr(w_ptr, n4, b4, swn, XL, GU), mask=(n4 < N) & kmask, other=0).to(tl.int32)
            smask = (n4 < N) & (kb // 16 + g4 < K // 32)
            if XL == 0:  # (the pointer summed as it always was: the same code)
                sc = tl.load(s_ptr + n4 * ssn + kb // 16 + g4, mask=smask, other=0)
            else:
                sc = tl.load(mx_s_ptr(s_ptr, n4, kb // 16 + g4, ssn, XL, GU), mask=smask, other=0)
            pair = tl.load(x_pairs + r4 * (sxm // 2) + b4, mask=v4 & kmask, other=0)
            xe = (pair << 16).to(tl.float32, bitcast=True)
            xo = (pair & -65536).to(tl.float32, bitcast=True)
            lo, hi = e2m1_pair_f32(byte)
            scale = scale_f32(sc.to(tl.int32), 14)  # scaled once, then two FMAs a row (exact)
            part += xe * (lo * scale) + xo * (hi * scale)
        res = tl.sum(tl.sum(part, axis=3), axis=2)
    return res


@triton.jit
def dot_mxfp4_scaled(x_ptr, sxm, M, w_ptr, swn, s_ptr, ssn, n0, N, K, acc,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
                     SA: tl.constexpr, XL: tl.constexpr = 0, GU: tl.constexpr = False):
    """acc[BM, BN] += x[:M, :K] @ W[n0:n0+BN]^T on the tensor cores, for MXFP4 W as SGLang
    stores it (bytes [N, K/2], low nibble = even element; ue8m0 scales [N, K/32]), through
    tl.dot_scaled with the weights as the scaled rhs: Triton decodes the codes to bf16
    (exact: two significant bits times a power of two) in registers and feeds the tensor
    cores from there. Measured 2.3x the planar code-plane dots at 8 rows and 3x the FMA
    GEMV at 2 (docs/evidence/k2-sm90.md). SA: a power of two the scale row stride is a
    multiple of (tiles._pow2_divisor of the strides): a scale row's bytes then go as one
    cp.async, where an unknown stride (12 at a TP-8 rank's down projection) leaves byte
    loads outside the pipeline. fast_math drops the NaN-scale select (E8M0 255 -> NaN):
    13-23 % less time (tools/device/fp4_decode_microbench.py); the build refuses experts
    holding that code (model_reasons). XL / GU: where W's bytes and scales sit (mx_w_ptr;
    SA then 1: the AITER layouts' scales are gathered byte by byte anyway)."""
    ssn = (ssn // SA) * SA
    rn = n0 + tl.arange(0, BN)
    rm = tl.arange(0, BM)
    nm = rn[:, None] < N
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        rb = k0 // 2 + tl.arange(0, BK // 2)
        w = tl.load(mx_w_ptr(w_ptr, rn[:, None], rb[None, :], swn, XL, GU), mask=nm & (rb[None, :] < K // 2),
                    other=0)
        rg = k0 // 32 + tl.arange(0, BK // 32)
        sc = tl.load(mx_s_ptr(s_ptr, rn[:, None], rg[None, :], ssn, XL, GU), mask=nm & (rg[None, :] < K // 32),
                     other=0)
        rk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        acc = tl.dot_scaled(x.to(tl.bfloat16), None, "bf16", tl.trans(w), sc, "e2m1", acc, fast_math=True)
    return acc
