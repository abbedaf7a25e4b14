"""MXFP4 expert projections on sm_90 through int8 mma.sync, for 1 or 2 rows of x: the design
microbenchmark's loop (i8_mma_microbench.py). K2 ran it in experts_up as the XI8 option
(commit 4c9b786, reverted): its loop took 16.4 against 17.7 us at 1 row, and preparing x in
the front cost that phase 1.5 us, so the launch was no faster (docs/evidence/k2-sm90.md,
thirtieth session). It keeps the thread map and return layout of K2's
k2/triton/mma_fp4.mxfp4_mma_tiles.

mma_fp4 decodes each code into a bf16 lane and multiplies it by its group's scale: 4 PTX
instructions a code pair, about 270 of its loop's 350 SASS instructions a k-block at 1
row, where that loop is bound by issue as much as by its loads (docs/evidence/k2-sm90.md,
twenty-ninth session). Here twice a code's value is an integer (e2m1 times 2 is one of
0 1 2 3 4 6 8 12, signed), so a byte table in one prmt turns four codes into four int8
magnitudes, and int8 mma.sync (native on sm_90, where its FP8 form is emulated through
f16) sums them exactly. prmt's sign mode reads a negative code as 0, so a word is looked
up twice: as it is (its positive codes) against x, and with its sign bits flipped (its
negative codes) against -x: 7 instructions an 8-code word, no multiply.

The group scale then goes on the accumulator, which takes a layout trick. Thread c of a
quad holds one scale group of each of its rows (32 codes, as in mma_fp4), so in an
m16n8k32 step its k-slots (4 c .. 4 c + 3 and 16 + 4 c .. 16 + 4 c + 3) hold codes of
group c only. x enters B only in columns 2 c and 2 c + 1 of those k-slots (x's high and
low int8 limbs, below) and is zero elsewhere, so accumulator column 2 c / 2 c + 1 sums
group c's codes alone, and that column pair is exactly what thread c owns of the
accumulator. A k-block (4 steps, 128 codes) chains into a fresh int32 accumulator, and
each thread adds 256 hi + lo times its own group's scale into its row totals; a quad
sums its four threads' totals at the end. B is nonzero on 8 lanes of 32, which load x's
bytes (128 a k-block) where mma_fp4 had every lane load 64.

x (bf16 values) is prepared once a step by its producer (store_x8): each 32-element group
times 2^ex (ex putting the group's largest magnitude in [2^13, 2^14)) rounded to an
integer xi, split as xi = 256 hi + lo (hi in [-64, 64], lo in [-128, 127]), and the same
for -xi. Every element within 2^-6 of its group's largest is an integer there (a bf16
value has 8 significant bits), so exact; a smaller one is off by at most 2^-15 of the
largest. The sums are exact in int32 and in the fp32 they become (|256 hi + lo| < 2^24
a k-block); the accumulator's factor is 2^(S - 128 - ex) (S the ue8m0 byte), an fp32
built from S + (-1 - ex): with S in [I8_SCALE_MIN, I8_SCALE_MAX] (a plan's check, as
K2Plan.mma_experts checks mma_fp4's) and ex in [-EX_LIMIT, EX_LIMIT] it is a normal fp32. A group of
x with a non-finite element is marked in its q byte and makes its rows' outputs NaN."""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.k2.triton.mma_fp4 import _words as _w4  # the 16 bytes at a thread's pointer as four words
from sgl_k3_mono.k2.triton.mma_fp4 import row_words  # mma_fp4's thread map of weight and scale rows

I8_SCALE_MIN = 62
"""The smallest ue8m0 scale byte the int8 path takes (S - 1 - EX_LIMIT >= 1: a normal factor)."""
I8_SCALE_MAX = 128
"""The largest (mma_fp4's bound, whose bf16 2^(S - 1) must be finite; the int8 path alone would take 195)."""
EX_LIMIT = tl.constexpr(60)
"""|ex| at most this: groups of x below 2^-47 or above 2^73 at their largest lose precision, never range."""
Q_BIAS = tl.constexpr(64)
"""A group's q byte is -1 - ex + Q_BIAS (in [3, 123]); Q_NONFINITE marks a group with a non-finite element."""
Q_NONFINITE = tl.constexpr(255)
# twice the e2m1 magnitudes of codes 0..7, the prmt table (bytes 0..3, 4..7)
_T0 = tl.constexpr(0x03020100)
_T1 = tl.constexpr(0x0C080604)

_IMMA = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
# Codes 0..3 of a word from its low 16 bits, codes 4..7 from its high: A's k-slots 4c..4c+3
# and 16+4c..16+4c+3 (rows g: $4, g + 8: $5; table $6 $7). First the word as it is, then
# with its sign bits flipped.
_LOOK = """shr.b32 h, {w}, 16; prmt.b32 {lo}, $6, $7, {w}; prmt.b32 {hi}, $6, $7, h;
"""
_FLIP = """xor.b32 n, {w}, 0x88888888; shr.b32 h, n, 16; prmt.b32 {lo}, $6, $7, n; prmt.b32 {hi}, $6, $7, h;
"""
# one word-pair against x row 0 (B +x: $8 $9, -x: $10 $11), accumulators $12..$15 -> $0..$3
_WORD = tl.constexpr("{\n.reg .b32 h, n, a0, a1, a2, a3;\n"
                     + _LOOK.format(w="$4", lo="a0", hi="a2") + _LOOK.format(w="$5", lo="a1", hi="a3")
                     + _IMMA + " {$0, $1, $2, $3}, {a0, a1, a2, a3}, {$8, $9}, {$12, $13, $14, $15};\n"
                     + _FLIP.format(w="$4", lo="a0", hi="a2") + _FLIP.format(w="$5", lo="a1", hi="a3")
                     + _IMMA + " {$0, $1, $2, $3}, {a0, a1, a2, a3}, {$10, $11}, {$0, $1, $2, $3};\n}")
# the same against x rows 0 and 1: outputs $0..$7; rows g / g + 8 $8 $9, table $10 $11, row 0's
# B $12..$15, row 1's $16..$19, accumulators $20..$27
_LOOK2 = _LOOK.replace("$6", "$10").replace("$7", "$11")
_FLIP2 = _FLIP.replace("$6", "$10").replace("$7", "$11")
_WORD_R2 = tl.constexpr("{\n.reg .b32 h, n, a0, a1, a2, a3;\n"
                        + _LOOK2.format(w="$8", lo="a0", hi="a2") + _LOOK2.format(w="$9", lo="a1", hi="a3")
                        + _IMMA + " {$0, $1, $2, $3}, {a0, a1, a2, a3}, {$12, $13}, {$20, $21, $22, $23};\n"
                        + _IMMA + " {$4, $5, $6, $7}, {a0, a1, a2, a3}, {$16, $17}, {$24, $25, $26, $27};\n"
                        + _FLIP2.format(w="$8", lo="a0", hi="a2") + _FLIP2.format(w="$9", lo="a1", hi="a3")
                        + _IMMA + " {$0, $1, $2, $3}, {a0, a1, a2, a3}, {$14, $15}, {$0, $1, $2, $3};\n"
                        + _IMMA + " {$4, $5, $6, $7}, {a0, a1, a2, a3}, {$18, $19}, {$4, $5, $6, $7};\n}")
# a quad's sum (lanes 4 g .. 4 g + 3), in one fixed order on every lane
_QUAD_SUM = tl.constexpr("""{ .reg .f32 t;
shfl.sync.bfly.b32 t, $1, 1, 0x1f, -1; add.f32 $0, $1, t;
shfl.sync.bfly.b32 t, $0, 2, 0x1f, -1; add.f32 $0, $0, t; }""")


@triton.jit
def _limbs(xi):
    """xi = 256 hi + lo, hi in [-64, 64] and lo in [-128, 127] for |xi| <= 2^14."""
    hi = (xi + 128) >> 8
    return hi, xi - hi * 256


@triton.jit
def store_x8(x8_ptr, xq_ptr, x, r, g0, G):
    """Prepare x [R, NG, 32] (fp32 holding bf16 values, a group a row of the last axis):
    rows r [R] of x8 ([rows, G, 4, 32] int8: xi's hi, lo, then -xi's) and xq ([rows, G]
    bytes), groups g0 .. g0 + NG - 1."""
    R: tl.constexpr = x.shape[0]
    NG: tl.constexpr = x.shape[1]
    amax = tl.max(tl.abs(x), axis=2)
    eb = (amax.to(tl.int32, bitcast=True) >> 23) & 255
    ex = tl.minimum(tl.maximum(140 - eb, -EX_LIMIT), EX_LIMIT)
    y = x * ((ex + 127) << 23).to(tl.float32, bitcast=True)[:, :, None]
    finite = eb < 255
    xi = tl.where(finite[:, :, None], tl.floor(y + 0.5), 0.0).to(tl.int32)
    hi, lo = _limbs(xi)
    nhi, nlo = _limbs(-xi)
    q = tl.where(finite, -1 - ex + Q_BIAS, Q_NONFINITE)
    rr = r[:, None, None].to(tl.int64)
    gg = (g0 + tl.arange(0, NG))[None, :, None]
    base = x8_ptr + (rr * G + gg) * 128 + tl.arange(0, 32)[None, None, :]
    tl.store(base, hi.to(tl.int8))
    tl.store(base + 32, lo.to(tl.int8))
    tl.store(base + 64, nhi.to(tl.int8))
    tl.store(base + 96, nlo.to(tl.int8))
    tl.store(xq_ptr + r[:, None].to(tl.int64) * G + (g0 + tl.arange(0, NG))[None, :], q.to(tl.uint8))


@triton.jit
def _word(wa, wb, t0, t1, p0, p1, n0, n1, c0, c1, c2, c3):
    return tl.inline_asm_elementwise(_WORD, "=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r,r,r",
                                     [wa, wb, t0, t1, p0, p1, n0, n1, c0, c1, c2, c3],
                                     dtype=(tl.int32,) * 4, is_pure=True, pack=1)


@triton.jit
def _word_r2(wa, wb, t0, t1, p0, p1, n0, n1, q0, q1, m0, m1, c0, c1, c2, c3, d0, d1, d2, d3):
    return tl.inline_asm_elementwise(_WORD_R2, "=r," * 8 + "r," * 19 + "r",
                                     [wa, wb, t0, t1, p0, p1, n0, n1, q0, q1, m0, m1, c0, c1, c2, c3, d0, d1, d2, d3],
                                     dtype=(tl.int32,) * 8, is_pure=True, pack=1)


@triton.jit
def quad_sum(v):
    """The sum of v over each quad's four lanes, on all four."""
    return tl.inline_asm_elementwise(_QUAD_SUM, "=f,f", [v], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _x4(ptr, live):
    """The 16 bytes at each thread's int32 pointer as four [NT] words on the lanes that carry x
    (live), zeros on the others."""
    v = tl.load(ptr[:, None] + tl.arange(0, 4)[None, :], mask=live[:, None], other=0)
    a, b = tl.split(tl.reshape(v, (v.shape[0], 2, 2)))
    w0, w2 = tl.split(a)
    w1, w3 = tl.split(b)
    return w0, w1, w2, w3


@triton.jit
def _xrow(xp, live, kb):
    """x's B words of k-block kb on this lane: its limb of xi (8) then of -xi (8)."""
    p = xp + kb * 128
    x0, x1, x2, x3 = _x4(p, live)
    x4, x5, x6, x7 = _x4(p + 4, live)
    n0, n1, n2, n3 = _x4(p + 16, live)
    n4, n5, n6, n7 = _x4(p + 20, live)
    return x0, x1, x2, x3, x4, x5, x6, x7, n0, n1, n2, n3, n4, n5, n6, n7


@triton.jit
def _xset(xp0, xp1, xq0, xq1, live, kb, XR: tl.constexpr):
    """x's registers of k-block kb: row 0's B words (16) and q word, row 1's (XR 2; else
    row 0's again)."""
    xa = _xrow(xp0, live, kb)
    qa = tl.load(xq0 + kb)
    if XR == 2:
        xb = _xrow(xp1, live, kb)
        qb = tl.load(xq1 + kb)
    else:
        xb, qb = xa, qa
    return xa, qa, xb, qb


@triton.jit
def _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, kb):
    """The weights' registers of k-block kb: the four rows' 4 words each, their 4 scale words."""
    return (_w4(pa0 + kb * 16), _w4(pb0 + kb * 16), _w4(pa1 + kb * 16), _w4(pb1 + kb * 16),
            (tl.load(sa0 + kb), tl.load(sb0 + kb), tl.load(sa1 + kb), tl.load(sb1 + kb)))


@triton.jit
def _factor(sw, qw, c, live):
    """fp32 2^(S - 128 - ex): S byte c of the scale word sw, -1 - ex + Q_BIAS byte c of qw
    (zero where not live: a k-block past the end adds nothing)."""
    s = (sw >> (8 * c)) & 255
    q = (qw >> (8 * c)) & 255
    return ((s + q - Q_BIAS) << 23).to(tl.float32, bitcast=True) * live


@triton.jit
def _tile(x, wa, wb, t0, t1):
    """A tile's k-block (rows g / g + 8: words wa / wb) against x row 0: each row's column
    pair (its thread's group) from a fresh chain, as 256 hi + lo in fp32 (t0 t1: the table)."""
    z = tl.zeros(wa[0].shape, tl.int32)
    c0, c1, c2, c3 = _word(wa[0], wb[0], t0, t1, x[0], x[1], x[8], x[9], z, z, z, z)
    c0, c1, c2, c3 = _word(wa[1], wb[1], t0, t1, x[2], x[3], x[10], x[11], c0, c1, c2, c3)
    c0, c1, c2, c3 = _word(wa[2], wb[2], t0, t1, x[4], x[5], x[12], x[13], c0, c1, c2, c3)
    c0, c1, c2, c3 = _word(wa[3], wb[3], t0, t1, x[6], x[7], x[14], x[15], c0, c1, c2, c3)
    return (c0 * 256 + c1).to(tl.float32), (c2 * 256 + c3).to(tl.float32)


@triton.jit
def _tile_r2(x, y, wa, wb, t0, t1):
    """_tile against x rows 0 (x) and 1 (y): row 0's two values, then row 1's."""
    z = tl.zeros(wa[0].shape, tl.int32)
    c0, c1, c2, c3, d0, d1, d2, d3 = _word_r2(wa[0], wb[0], t0, t1, x[0], x[1], x[8], x[9], y[0], y[1], y[8], y[9],
                                              z, z, z, z, z, z, z, z)
    c0, c1, c2, c3, d0, d1, d2, d3 = _word_r2(wa[1], wb[1], t0, t1, x[2], x[3], x[10], x[11], y[2], y[3], y[10],
                                              y[11], c0, c1, c2, c3, d0, d1, d2, d3)
    c0, c1, c2, c3, d0, d1, d2, d3 = _word_r2(wa[2], wb[2], t0, t1, x[4], x[5], x[12], x[13], y[4], y[5], y[12],
                                              y[13], c0, c1, c2, c3, d0, d1, d2, d3)
    c0, c1, c2, c3, d0, d1, d2, d3 = _word_r2(wa[3], wb[3], t0, t1, x[6], x[7], x[14], x[15], y[6], y[7], y[14],
                                              y[15], c0, c1, c2, c3, d0, d1, d2, d3)
    return ((c0 * 256 + c1).to(tl.float32), (c2 * 256 + c3).to(tl.float32),
            (d0 * 256 + d1).to(tl.float32), (d2 * 256 + d3).to(tl.float32))


@triton.jit
def _kblock_mma(w, x, t, nf, c, live, t0, t1, XR: tl.constexpr):
    """A k-block (weights w: _wset's, x: _xset's) into the row totals t (tile 0 rows g,
    g + 8, tile 1 rows g, g + 8; then x row 1's four) and the non-finite marks nf (x row
    0's, row 1's q words or'ed)."""
    wa0, wb0, wa1, wb1, s = w
    xa, qa, xb, qb = x
    if XR == 2:
        p0, p1, p2, p3 = _tile_r2(xa, xb, wa0, wb0, t0, t1)
        r0, r1, r2, r3 = _tile_r2(xa, xb, wa1, wb1, t0, t1)
        t = (t[0] + p0 * _factor(s[0], qa, c, live), t[1] + p1 * _factor(s[1], qa, c, live),
             t[2] + r0 * _factor(s[2], qa, c, live), t[3] + r1 * _factor(s[3], qa, c, live),
             t[4] + p2 * _factor(s[0], qb, c, live), t[5] + p3 * _factor(s[1], qb, c, live),
             t[6] + r2 * _factor(s[2], qb, c, live), t[7] + r3 * _factor(s[3], qb, c, live))
        return t, (nf[0] | qa, nf[1] | qb)
    else:
        p0, p1 = _tile(xa, wa0, wb0, t0, t1)
        r0, r1 = _tile(xa, wa1, wb1, t0, t1)
        t = (t[0] + p0 * _factor(s[0], qa, c, live), t[1] + p1 * _factor(s[1], qa, c, live),
             t[2] + r0 * _factor(s[2], qa, c, live), t[3] + r1 * _factor(s[3], qa, c, live),
             t[4], t[5], t[6], t[7])
        return t, (nf[0] | qa, nf[1])


@triton.jit
def _finish(v, nf):
    """A quad's total, NaN where its x row had a non-finite element (q byte Q_NONFINITE:
    the only q with bit 7 set)."""
    return tl.where((nf & (0x80808080 - (1 << 32))) != 0, float("nan"), quad_sum(v))


@triton.jit
def mxfp4_i8_tiles(x8_ptr, xq_ptr, G, M, w_ptr, swn, s_ptr, ssn, r0, r1, K,
                   NT: tl.constexpr, XR: tl.constexpr, kb0=0, PD: tl.constexpr = 1, XL: tl.constexpr = 0):
    """mma_fp4.mxfp4_mma_tiles for M <= XR (1 or 2) rows of x prepared by store_x8 (x8 /
    xq with G groups a row): the same weights, the same thread map, the same eight [NT]
    fp32 it returns (tile 0's (row g, x row 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1),
    then tile 1's), here every lane of a quad holding its rows' x rows 0 and 1 (the caller
    keeps x row 2c + j < M, as before). kb0: each thread's first k-block (KSX); K: its
    share. PD (1..3): each k-block's loads issued PD k-blocks ahead of its mmas (mma_fp4's
    register prefetch); 0: a plain loop. XL 1: x's loads (L1 hits) at their k-block's mmas,
    only the weights' PD ahead (fewer registers a set)."""
    t = tl.arange(0, NT)
    g = (t % 32) // 4
    c = t % 4
    live = (g // 2) == c  # the lanes that carry B: column g of group c's k-slots
    xw = x8_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    # x row r, k-block kb, group c, limb g % 2: 32 words a group, 128 a k-block
    xp0 = xw + (kb0 * 4 + c) * 32 + (g % 2) * 8
    xp1 = xp0 + tl.minimum(M - 1, 1) * (G * 32)
    qw = xq_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    xq0 = qw + kb0 + t * 0
    xq1 = xq0 + tl.minimum(M - 1, 1) * (G // 4)
    pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1 = row_words(w_ptr, swn, s_ptr, ssn, r0, r1, c, kb0)
    z = tl.zeros((NT,), tl.float32)
    tot = (z, z, z, z, z, z, z, z)
    nf = (t * 0, t * 0)
    # the prmt table in registers: from a value the compiler cannot fold (r0 >> 31 is 0), so
    # it is not rematerialised from a uniform register before every prmt
    t0 = _T0 + (r0 >> 31)
    t1 = _T1 + (r0 >> 31)
    last = K // 128 - 1
    if PD == 0:
        for kb in tl.range(0, last + 1, num_stages=1):
            tot, nf = _kblock_mma(_wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, kb),
                                  _xset(xp0, xp1, xq0, xq1, live, kb, XR), tot, nf, c, True, t0, t1, XR)
    else:
        # PD + 1 register sets of the weights (and, XL 0, of x) rotate through an unrolled
        # step of PD + 1 k-blocks: each k-block's mmas, then its set reloaded PD + 1 k-blocks
        # on. A k-block past the end is loaded again as the last one and adds nothing.
        # XL 1: x (L1-resident: every warp reads it) is loaded at its k-block's mmas instead
        w0 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, 0)
        w1 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(1, last))
        x0 = _xset(xp0, xp1, xq0, xq1, live, 0, XR)
        x1 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(1, last), XR)
        w2, x2, w3, x3 = w1, x1, w1, x1
        if PD >= 2:
            w2 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(2, last))
            x2 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(2, last), XR)
        if PD >= 3:
            w3 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(3, last))
            x3 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(3, last), XR)
        for kb in tl.range(0, last + 1, PD + 1, num_stages=1):
            if XL:
                x0 = _xset(xp0, xp1, xq0, xq1, live, kb, XR)
            tot, nf = _kblock_mma(w0, x0, tot, nf, c, True, t0, t1, XR)
            w0 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(kb + PD + 1, last))
            if not XL:
                x0 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + PD + 1, last), XR)
            if XL:
                x1 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + 1, last), XR)
            tot, nf = _kblock_mma(w1, x1, tot, nf, c, kb + 1 <= last, t0, t1, XR)
            w1 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(kb + PD + 2, last))
            if not XL:
                x1 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + PD + 2, last), XR)
            if PD >= 2:
                if XL:
                    x2 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + 2, last), XR)
                tot, nf = _kblock_mma(w2, x2, tot, nf, c, kb + 2 <= last, t0, t1, XR)
                w2 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(kb + PD + 3, last))
                if not XL:
                    x2 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + PD + 3, last), XR)
            if PD >= 3:
                if XL:
                    x3 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + 3, last), XR)
                tot, nf = _kblock_mma(w3, x3, tot, nf, c, kb + 3 <= last, t0, t1, XR)
                w3 = _wset(pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, tl.minimum(kb + 7, last))
                if not XL:
                    x3 = _xset(xp0, xp1, xq0, xq1, live, tl.minimum(kb + 7, last), XR)
    a0, b0 = _finish(tot[0], nf[0]), _finish(tot[1], nf[0])
    a1, b1 = _finish(tot[2], nf[0]), _finish(tot[3], nf[0])
    if XR == 2:
        e0, f0 = _finish(tot[4], nf[1]), _finish(tot[5], nf[1])
        e1, f1 = _finish(tot[6], nf[1]), _finish(tot[7], nf[1])
    else:
        e0, f0, e1, f1 = a0, b0, a1, b1
    return a0, e0, b0, f0, a1, e1, b1, f1
