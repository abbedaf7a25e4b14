"""MXFP4 expert projections on sm_90 with the weights decoded straight into mma.sync's
register operands (Triton, inline PTX): no decoded value goes through shared memory, about
2 PTX instructions a code against tl.dot_scaled's 7-9 (docs/evidence/k2-sm90.md). The
coded bytes reach the registers either by plain loads a k-block ahead (PD) or through a
per-thread cp.async ring in shared memory (RS), which keeps more k-blocks in flight
without holding registers for them.

Every tensor here has one element per thread ([NT] = 32 x num_warps, element t on thread
t), so a per-thread register in the PTX is an element in Triton, and the mma's cross-lane
operand layout is arranged by the addresses each thread loads. Thread (warp w, lane
4 g + c) owns output rows base + 16 w + g and + 8 of a 16-row tile, and columns (rows of x)
2 c and 2 c + 1. Along K, a k-block of 128 codes (64 bytes a row) gives thread c its
codes 32 c .. 32 c + 31: 16 contiguous bytes and one scale group. K is a reduction, so
an mma k-tile may take its 16 codes in any order as long as x takes them in the same
order: k-tile (word q, half h) gives thread c codes 8 q + {2h, 2h+4} (its low register)
and 8 q + {2h+1, 2h+5} (its high register) of each 8-code word, and reads the same x
elements. Each code pair then sits 16 bits apart in its word, which is where a bf16x2
register wants it, so a pair decodes with a mask, a multiply and a mask (_DECODE_PAIRS).

The decode is exact: an e2m1 code s|e1 e0|m placed at bf16 bits 15 and 8..6 reads as its
value times 2^-126 (the subnormal code too), and one multiply by 2^(S-1) (S the ue8m0
byte) applies the group scale. 2^(S-1) is a finite bf16 only while S <= 128 (weights up
to 12), which the plan checks (K2Plan.mma_experts) before choosing this path."""

from __future__ import annotations

import triton
import triton.language as tl

# B fragments of two k-tiles from x words X0..X3 (bf16 pairs 8q + 0/1, 2/3, 4/5, 6/7 of
# a thread's chunk): k-tile h takes elements {2h, 2h+4} (low) and {2h+1, 2h+5} (high).
_BFRAG = tl.constexpr("""prmt.b32 $0, $4, $6, 0x5410; prmt.b32 $1, $4, $6, 0x7632;
prmt.b32 $2, $5, $7, 0x5410; prmt.b32 $3, $5, $7, 0x7632;""")

# One 8-code word of rows g ($4) and g + 8 ($5) of a tile, scaled by bf16x2 2^(S-1)
# ($6, $7), into two m16n8k16 mmas with B fragments $8..$11 and accumulators $12..$15.
# Pair n (nibbles n and n + 4) lands at bits 15, 8..6 and 31, 24..22: mask the pair down to
# its two nibbles at bits 0..3 / 16..19 (n = 0; n = 2 from the word shifted down 8) or 4..7
# / 20..23 (n = 1, 3), then one multiply by 2^6 + 2^12 (2^2 + 2^8) adds the nibbles' two
# shifted copies, whose bits cannot overlap, and a mask keeps e1 e0 m of the first and s of
# the second: 3 instructions a pair where two shifts and a lop3 made 4 (13 a word, not 15;
# experts_up 74.2 against 79.1 us at 8 rows, twenty-first session).
_DECODE_PAIRS = """and.b32 t, {w}, 0x000F000F; mul.lo.u32 a, t, 0x1040; and.b32 {p}0, a, 0x81C081C0;
and.b32 t, {w}, 0x00F000F0; mul.lo.u32 a, t, 0x104; and.b32 {p}1, a, 0x81C081C0;
shr.b32 b, {w}, 8;
and.b32 t, b, 0x000F000F; mul.lo.u32 a, t, 0x1040; and.b32 {p}2, a, 0x81C081C0;
and.b32 t, b, 0x00F000F0; mul.lo.u32 a, t, 0x104; and.b32 {p}3, a, 0x81C081C0;
mul.rn.bf16x2 {p}0, {p}0, {s}; mul.rn.bf16x2 {p}1, {p}1, {s};
mul.rn.bf16x2 {p}2, {p}2, {s}; mul.rn.bf16x2 {p}3, {p}3, {s};
"""
_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
_WORD_MMA = tl.constexpr("{\n.reg .b32 t, a, b, p0, p1, p2, p3, q0, q1, q2, q3;\n.reg .f32 d0, d1, d2, d3;\n"
             + _DECODE_PAIRS.format(w="$4", p="p", s="$6") + _DECODE_PAIRS.format(w="$5", p="q", s="$7")
             + _MMA + " {d0, d1, d2, d3}, {p0, q0, p1, q1}, {$8, $9}, {$12, $13, $14, $15};\n"
             + _MMA + " {$0, $1, $2, $3}, {p2, q2, p3, q3}, {$10, $11}, {d0, d1, d2, d3};\n}")


# The shared-memory ring (RS > 0): each thread copies its own k-block bytes into its own
# slots (cp.async, which holds no register while the bytes are in flight) and reads back
# only what it copied, so no barrier orders one thread against another; the ring sits past
# every buffer of Triton's own (runtime/triton_smem.py), so nothing else touches it.
# A stage is the four weight rows' 16 bytes ([4][NT][16 B] planes, conflict-free v4 reads)
# then their four scale words ([4][NT][4 B]). $1 / $2: this thread's weight / scale slot
# of the stage, $3 / $4: the plane strides, $5..$8 the rows' weight words, $9..$12 their
# scale words, $13: 16 to copy, 0 to fill the slot with zeros and read nothing.
# A slot is refilled one iteration after it was read: its ld.shared was issued first, and it
# reads the slot long before the refill's global bytes can land there.
_RING_BASE = tl.constexpr("mov.u32 $0, global_smem;")
_LD16 = tl.constexpr("ld.global.v4.u32 {$0, $1, $2, $3}, [$4];")
# The weight and scale loads with a prefetch-size hint (L2B): a load that misses L2 has it
# fetch the whole aligned 128- or 256-byte segment around its bytes from HBM, so the next one
# or three k-blocks of the same row (64 bytes each) find theirs in L2. No instruction added,
# and the same bytes land in the same registers.
_LD16_128 = tl.constexpr("ld.global.L2::128B.v4.u32 {$0, $1, $2, $3}, [$4];")
_LD16_256 = tl.constexpr("ld.global.L2::256B.v4.u32 {$0, $1, $2, $3}, [$4];")
_LD4_128 = tl.constexpr("ld.global.L2::128B.u32 $0, [$1];")
_LD4_256 = tl.constexpr("ld.global.L2::256B.u32 $0, [$1];")
_RING_ISSUE = """{{
.reg .u32 d, e, n;
shr.u32 n, $13, 2;
cp.async.cg.shared.global{pf} [$1], [$5], 16, $13;
cp.async.ca.shared.global{pf} [$2], [$9], 4, n;
add.u32 d, $1, $3; add.u32 e, $2, $4;
cp.async.cg.shared.global{pf} [d], [$6], 16, $13;
cp.async.ca.shared.global{pf} [e], [$10], 4, n;
add.u32 d, d, $3; add.u32 e, e, $4;
cp.async.cg.shared.global{pf} [d], [$7], 16, $13;
cp.async.ca.shared.global{pf} [e], [$11], 4, n;
add.u32 d, d, $3; add.u32 e, e, $4;
cp.async.cg.shared.global{pf} [d], [$8], 16, $13;
cp.async.ca.shared.global{pf} [e], [$12], 4, n;
cp.async.commit_group;
mov.u32 $0, 0;
}}"""
_RING_ISSUE0 = tl.constexpr(_RING_ISSUE.format(pf=""))
_RING_ISSUE128 = tl.constexpr(_RING_ISSUE.format(pf=".L2::128B"))
_RING_ISSUE256 = tl.constexpr(_RING_ISSUE.format(pf=".L2::256B"))
_RING_ISSUE_IO = tl.constexpr("=r,r,r,r,r,l,l,l,l,l,l,l,l,r")
# wait until this k-block's group has landed (the RS - 1 newer ones may still fly), then
# read its 16 weight words and 4 scale words back ($20 / $21: slots, $22 / $23: strides)
_RING_READ = """{{
.reg .u32 d, e;
cp.async.wait_group {n};
ld.shared.v4.u32 {{$0, $1, $2, $3}}, [$20];
ld.shared.u32 $16, [$21];
add.u32 d, $20, $22; add.u32 e, $21, $23;
ld.shared.v4.u32 {{$4, $5, $6, $7}}, [d];
ld.shared.u32 $17, [e];
add.u32 d, d, $22; add.u32 e, e, $23;
ld.shared.v4.u32 {{$8, $9, $10, $11}}, [d];
ld.shared.u32 $18, [e];
add.u32 d, d, $22; add.u32 e, e, $23;
ld.shared.v4.u32 {{$12, $13, $14, $15}}, [d];
ld.shared.u32 $19, [e];
}}"""
_RING_READ2 = tl.constexpr(_RING_READ.format(n=1))
_RING_READ3 = tl.constexpr(_RING_READ.format(n=2))
_RING_READ4 = tl.constexpr(_RING_READ.format(n=3))
_RING_READ_IO = tl.constexpr("=r," * 20 + "r,r,r,r")
_RING_READ_T = tl.constexpr((tl.int32,) * 20)
RING_STAGE_BYTES_PER_THREAD = tl.constexpr(80)
"""Shared memory a ring stage takes per thread: four 16-byte weight chunks and four scale words."""
RING_STAGES = (2, 3, 4)
"""The ring depths _ring_read implements."""


@triton.jit
def _bfrag(x0, x1, x2, x3):
    return tl.inline_asm_elementwise(_BFRAG, "=r,=r,=r,=r,r,r,r,r", [x0, x1, x2, x3],
                                     dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)


@triton.jit
def _word_mma(wa, wb, sa, sb, b0, b1, b2, b3, c0, c1, c2, c3):
    return tl.inline_asm_elementwise(_WORD_MMA, "=f,=f,=f,=f,r,r,r,r,r,r,r,r,f,f,f,f",
                                     [wa, wb, sa, sb, b0, b1, b2, b3, c0, c1, c2, c3],
                                     dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)


@triton.jit
def _word_both_tiles(x0, x1, x2, x3, wa0, wb0, wa1, wb1, sa0, sb0, sa1, sb1, c0, c1, c2, c3, c4, c5, c6, c7):
    """One 8-code word of each tile's rows g / g + 8 (wa / wb, scales sa / sb) against the
    x words x0..x3 of the same codes: tile 0 into c0..c3, tile 1 into c4..c7."""
    f0, f1, f2, f3 = _bfrag(x0, x1, x2, x3)
    c0, c1, c2, c3 = _word_mma(wa0, wb0, sa0, sb0, f0, f1, f2, f3, c0, c1, c2, c3)
    c4, c5, c6, c7 = _word_mma(wa1, wb1, sa1, sb1, f0, f1, f2, f3, c4, c5, c6, c7)
    return c0, c1, c2, c3, c4, c5, c6, c7


@triton.jit
def _ring_issue(wslot, sslot, wst, sst, p0, p1, p2, p3, q0, q1, q2, q3, nbytes, L2B: tl.constexpr = 0):
    """cp.async one k-block of the four weight rows (p0..p3, 16 bytes each) and their scale
    words (q0..q3) into this thread's slots of a ring stage, as one commit group (L2B: the
    copies' prefetch-size hint)."""
    args = [wslot, sslot, wst, sst, p0, p1, p2, p3, q0, q1, q2, q3, nbytes]
    if L2B == 256:
        return tl.inline_asm_elementwise(_RING_ISSUE256, _RING_ISSUE_IO, args, dtype=tl.int32, is_pure=False, pack=1)
    elif L2B == 128:
        return tl.inline_asm_elementwise(_RING_ISSUE128, _RING_ISSUE_IO, args, dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.inline_asm_elementwise(_RING_ISSUE0, _RING_ISSUE_IO, args, dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _ring_read(wslot, sslot, wst, sst, RS: tl.constexpr):
    """The 16 weight words and 4 scale words of the ring stage at wslot / sslot, once its
    group has landed (RS - 1 newer groups may still be in flight)."""
    if RS == 2:
        return tl.inline_asm_elementwise(_RING_READ2, _RING_READ_IO, [wslot, sslot, wst, sst], dtype=_RING_READ_T,
                                         is_pure=False, pack=1)
    elif RS == 3:
        return tl.inline_asm_elementwise(_RING_READ3, _RING_READ_IO, [wslot, sslot, wst, sst], dtype=_RING_READ_T,
                                         is_pure=False, pack=1)
    else:
        return tl.inline_asm_elementwise(_RING_READ4, _RING_READ_IO, [wslot, sslot, wst, sst], dtype=_RING_READ_T,
                                         is_pure=False, pack=1)


@triton.jit
def _xwords(xq, kb):
    """x's 16 words of k-block kb at each thread's chunk, as four 16-byte loads in PTX: the
    ring loop carries them one k-block ahead, and a tl.load carried across the loop would
    come out in Triton's coalesced layout and cross to the mma's through shared memory (a
    CTA barrier per k-block: sm_90 SASS, fifteenth session)."""
    xk = xq + kb * 64
    x0, x1, x2, x3 = tl.inline_asm_elementwise(_LD16, "=r,=r,=r,=r,l", [xk], dtype=(tl.int32,) * 4,
                                               is_pure=False, pack=1)
    x4, x5, x6, x7 = tl.inline_asm_elementwise(_LD16, "=r,=r,=r,=r,l", [xk + 4], dtype=(tl.int32,) * 4,
                                               is_pure=False, pack=1)
    x8, x9, x10, x11 = tl.inline_asm_elementwise(_LD16, "=r,=r,=r,=r,l", [xk + 8], dtype=(tl.int32,) * 4,
                                                 is_pure=False, pack=1)
    x12, x13, x14, x15 = tl.inline_asm_elementwise(_LD16, "=r,=r,=r,=r,l", [xk + 12], dtype=(tl.int32,) * 4,
                                                   is_pure=False, pack=1)
    return x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15


@triton.jit
def _words(ptr, L2B: tl.constexpr = 0):
    """The 16 bytes at each thread's int32 pointer as four [NT] words: one [NT, 4] load,
    which Triton lays out a row a thread (one 16-byte vector load), so the split costs
    nothing; with a prefetch-size hint (L2B) the same vector load in PTX."""
    if L2B == 256:
        return tl.inline_asm_elementwise(_LD16_256, "=r,=r,=r,=r,l", [ptr], dtype=(tl.int32,) * 4, is_pure=True,
                                         pack=1)
    if L2B == 128:
        return tl.inline_asm_elementwise(_LD16_128, "=r,=r,=r,=r,l", [ptr], dtype=(tl.int32,) * 4, is_pure=True,
                                         pack=1)
    v = tl.load(ptr[:, None] + tl.arange(0, 4)[None, :])
    a, b = tl.split(tl.reshape(v, (v.shape[0], 2, 2)))
    w0, w2 = tl.split(a)
    w1, w3 = tl.split(b)
    return w0, w1, w2, w3


@triton.jit
def _word(ptr, L2B: tl.constexpr = 0):
    """The int32 at each thread's pointer (a k-block's scale word), L2B as in _words."""
    if L2B == 256:
        return tl.inline_asm_elementwise(_LD4_256, "=r,l", [ptr], dtype=tl.int32, is_pure=True, pack=1)
    if L2B == 128:
        return tl.inline_asm_elementwise(_LD4_128, "=r,l", [ptr], dtype=tl.int32, is_pure=True, pack=1)
    return tl.load(ptr)


@triton.jit
def _scale_of(word, c):
    """bf16x2 2^(S-1) in both halves, S = byte c of a k-block's scale word (its four
    groups; S <= 128)."""
    s = (word >> (8 * c)) & 255
    return ((s + 126) << 7) * 65537


@triton.jit
def _scales(ptr, c, L2B: tl.constexpr = 0):
    """_scale_of the scale word at ptr."""
    return _scale_of(_word(ptr, L2B), c)


@triton.jit
def row_words(w_ptr, swn, s_ptr, ssn, r0, r1, c, kb0):
    """Each thread's int32 pointers at k-block kb0: its weight words (16 bytes from its
    quad slot c) of rows g and g + 8 of tile 0 (pa0 / pb0) and tile 1 (pa1 / pb1), then
    those rows' scale words (sa0 / sb0 / sa1 / sb1); r0 / r1 are its row g of each tile."""
    w_words = w_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    pa0 = w_words + r0.to(tl.int64) * (swn // 4) + c * 4 + kb0 * 16
    pb0 = pa0 + 8 * (swn // 4)
    pa1 = w_words + r1.to(tl.int64) * (swn // 4) + c * 4 + kb0 * 16
    pb1 = pa1 + 8 * (swn // 4)
    s_words = s_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    sa0 = s_words + r0.to(tl.int64) * (ssn // 4) + kb0
    sb0 = sa0 + 8 * (ssn // 4)
    sa1 = s_words + r1.to(tl.int64) * (ssn // 4) + kb0
    sb1 = sa1 + 8 * (ssn // 4)
    return pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1


@triton.jit
def mxfp4_mma_tiles(x_ptr, sxm, M, w_ptr, swn, s_ptr, ssn, r0, r1, K,
                    NT: tl.constexpr, KU: tl.constexpr, STAGES: tl.constexpr, kb0=0, PD: tl.constexpr = 0,
                    RS: tl.constexpr = 0, ring_off=0, L2B: tl.constexpr = 0):
    """Two 16-row tiles a warp of acc = W[rows] @ x[:M]^T for MXFP4 W as SGLang stores it
    (bytes [N, K/2], low nibble the even element; ue8m0 scales [N, K/32]). r0 / r1 [NT]:
    each thread's row g of tile 0 / tile 1 (its warp's tile rows are r - g .. r - g + 15);
    w_ptr / s_ptr may differ by thread too (a warp's own expert). Returns eight [NT] fp32:
    tile 0's (row g, x row 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1), then tile 1's.
    x rows past M repeat row M - 1 (their columns are the caller's to drop).
    K % (128 KU) == 0; swn a multiple of 16, ssn of 4, sxm of 8 (tiles.mma_fits). KU:
    k-blocks a loop step; STAGES: Triton's pipelining of the loads (1, plain loads into
    registers, measured fastest: tools/device/fp4_decode_microbench.py). kb0: each
    thread's first k-block (a [NT] tensor where warp groups split K; K is then the
    group's share). PD (1 or 2; 0: off, KU steps as above): a register prefetch, whose
    loads of a k-block are issued PD k-blocks' mmas before its own, so the weights stream
    while the previous k-blocks decode (KU is then unused). RS (RING_STAGES; 0: off): the
    weights and scales stream through a shared-memory ring of RS stages instead, RS - 1
    k-blocks in flight a thread with no register held for them (x is loaded one k-block
    ahead in registers); ring_off: the ring's byte offset in the launch's shared memory
    (runtime/triton_smem.py reserves RS x NT x RING_STAGE_BYTES_PER_THREAD past Triton's
    own). PD and KU are then unused. The register loops lean on L1 for x (every warp of
    the program reads it): the launch's carveout must leave L1 its room
    (runtime/triton_smem.fit_carveout; seventeenth session). L2B (128 or 256; 0: none,
    tiles.L2_PREFETCH_SIZES): the weight and scale loads (or the ring's copies) ask L2 for
    the aligned 128 or 256 bytes around them; the same bytes, so the same bits."""
    t = tl.arange(0, NT)
    g = (t % 32) // 4
    c = t % 4
    # k-block kb (128 codes, 64 bytes a row) gives thread c bytes 16 c .. 16 c + 15 of it:
    # a warp's load covers 64 contiguous bytes of each of its 8 rows, and a thread's chunk
    # is one scale group (byte c of the k-block's scale word)
    x_words = x_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    xq = x_words + tl.minimum(g, M - 1).to(tl.int64) * (sxm // 2) + c * 16 + kb0 * 64
    pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1 = row_words(w_ptr, swn, s_ptr, ssn, r0, r1, c, kb0)
    # two accumulator chains a tile (even and odd words): an mma waits for the one before
    # it on the same accumulator
    c0 = tl.zeros((NT,), tl.float32)
    c1, c2, c3, c4, c5, c6, c7 = c0, c0, c0, c0, c0, c0, c0
    d0, d1, d2, d3, d4, d5, d6, d7 = c0, c0, c0, c0, c0, c0, c0, c0
    if RS > 0:
        wst = NT * 16
        sst = NT * 4
        SB: tl.constexpr = NT * RING_STAGE_BYTES_PER_THREAD
        wslot = tl.inline_asm_elementwise(_RING_BASE, "=r,r", [t], dtype=tl.int32, is_pure=True, pack=1) \
            + ring_off + t * 16
        sslot = wslot + (4 * NT * 16 - t * 12)  # the scale planes follow the weight planes, 4 bytes a thread
        nkb = K // 128
        zero = t * 0
        for s in tl.static_range(RS - 1):
            kc = tl.minimum(s, nkb - 1)
            _ring_issue(wslot + s * SB, sslot + s * SB, wst, sst, pa0 + kc * 16, pb0 + kc * 16, pa1 + kc * 16,
                        pb1 + kc * 16, sa0 + kc, sb0 + kc, sa1 + kc, sb1 + kc, zero + tl.where(s < nkb, 16, 0), L2B)
        xw = _xwords(xq, 0)
        for kb in tl.range(0, nkb, num_stages=1):
            # refill the slot the previous k-block was read from, RS - 1 k-blocks ahead
            nx = kb + RS - 1
            kc = tl.minimum(nx, nkb - 1)
            at = (nx % RS) * SB
            _ring_issue(wslot + at, sslot + at, wst, sst, pa0 + kc * 16, pb0 + kc * 16, pa1 + kc * 16,
                        pb1 + kc * 16, sa0 + kc, sb0 + kc, sa1 + kc, sb1 + kc, zero + tl.where(nx < nkb, 16, 0), L2B)
            xn = _xwords(xq, tl.minimum(kb + 1, nkb - 1))
            at = (kb % RS) * SB
            w = _ring_read(wslot + at, sslot + at, wst, sst, RS)
            v = (xw[0], xw[1], xw[2], xw[3], xw[4], xw[5], xw[6], xw[7], xw[8], xw[9], xw[10], xw[11], xw[12],
                 xw[13], xw[14], xw[15], w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11],
                 w[12], w[13], w[14], w[15], _scale_of(w[16], c), _scale_of(w[17], c), _scale_of(w[18], c),
                 _scale_of(w[19], c))
            c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                v, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7)
            xw = xn
    elif PD > 0:
        # PD + 1 register sets of a k-block (36 a thread) rotate through an unrolled step of
        # PD + 1 k-blocks: each sub-step loads into the set the previous one consumed, then
        # runs the mmas of the set loaded PD sub-steps earlier. Nothing reads a loaded
        # register before its mmas: no copy (a set is rewritten only after its last use),
        # no scale decode (the sets hold the raw scale words), and no branch for the
        # compiler to sink the loads past: a k-block past the end is loaded again as the
        # last one and its scales are zeroed at the mmas, which then add exact zeros.
        last = K // 128 - 1
        s0 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, 0, True, L2B)
        s1 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, tl.minimum(1, last), True, L2B)
        for kb in tl.range(0, last + 1, PD + 1, num_stages=1):
            if PD > 1:
                s2 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, tl.minimum(kb + 2, last), True, L2B)
                c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                    s0, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c, True, RAW=True)
                s0 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, tl.minimum(kb + 3, last), True, L2B)
                c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                    s1, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c, kb + 1 <= last, RAW=True)
                s1 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, tl.minimum(kb + 4, last), True, L2B)
                c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                    s2, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c, kb + 2 <= last, RAW=True)
            else:
                c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                    s0, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c, True, RAW=True)
                s0 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, tl.minimum(kb + 2, last), True, L2B)
                c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                    s1, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c, kb + 1 <= last, RAW=True)
                s1 = _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, tl.minimum(kb + 3, last), True, L2B)
    else:
        for k0 in tl.range(0, K, 128 * KU, num_stages=STAGES):
            for u in tl.static_range(KU):
                c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                    _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, k0 // 128 + u, L2B=L2B),
                    c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7)
    return c0 + d0, c1 + d1, c2 + d2, c3 + d3, c4 + d4, c5 + d5, c6 + d6, c7 + d7


@triton.jit
def _kblock(xq, pa0, pb0, pa1, pb1, sa0, sb0, sa1, sb1, c, kb, RAW: tl.constexpr = False, L2B: tl.constexpr = 0):
    """Every register k-block kb feeds the mmas: x's 16 words, the 4 words of each of the
    four weight rows (tiles 0 and 1, rows g and g + 8), and their 4 scales (RAW: the 4
    scale words as loaded, for _kblock_mma to decode; L2B: the weights' and scales'
    prefetch-size hint)."""
    xk = xq + kb * 64
    x0, x1, x2, x3 = _words(xk)
    x4, x5, x6, x7 = _words(xk + 4)
    x8, x9, x10, x11 = _words(xk + 8)
    x12, x13, x14, x15 = _words(xk + 12)
    a00, a01, a02, a03 = _words(pa0 + kb * 16, L2B)
    b00, b01, b02, b03 = _words(pb0 + kb * 16, L2B)
    a10, a11, a12, a13 = _words(pa1 + kb * 16, L2B)
    b10, b11, b12, b13 = _words(pb1 + kb * 16, L2B)
    if RAW:
        s0, s1 = _word(sa0 + kb, L2B), _word(sb0 + kb, L2B)
        s2, s3 = _word(sa1 + kb, L2B), _word(sb1 + kb, L2B)
    else:
        s0, s1 = _scales(sa0 + kb, c, L2B), _scales(sb0 + kb, c, L2B)
        s2, s3 = _scales(sa1 + kb, c, L2B), _scales(sb1 + kb, c, L2B)
    return (x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15,
            a00, a01, a02, a03, b00, b01, b02, b03, a10, a11, a12, a13, b10, b11, b12, b13, s0, s1, s2, s3)


@triton.jit
def _kblock_mma(v, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c=0, live=True,
                RAW: tl.constexpr = False):
    """One k-block (_kblock's registers v) into both tiles' two accumulator chains. RAW:
    v holds the scale words, decoded here (thread byte c) and zeroed unless `live`."""
    s0, s1, s2, s3 = v[32], v[33], v[34], v[35]
    if RAW:
        s0, s1 = _scale_of(s0, c) * live, _scale_of(s1, c) * live
        s2, s3 = _scale_of(s2, c) * live, _scale_of(s3, c) * live
    c0, c1, c2, c3, c4, c5, c6, c7 = _word_both_tiles(v[0], v[1], v[2], v[3], v[16], v[20], v[24], v[28],
                                                      s0, s1, s2, s3, c0, c1, c2, c3, c4, c5, c6, c7)
    d0, d1, d2, d3, d4, d5, d6, d7 = _word_both_tiles(v[4], v[5], v[6], v[7], v[17], v[21], v[25], v[29],
                                                      s0, s1, s2, s3, d0, d1, d2, d3, d4, d5, d6, d7)
    c0, c1, c2, c3, c4, c5, c6, c7 = _word_both_tiles(v[8], v[9], v[10], v[11], v[18], v[22], v[26], v[30],
                                                      s0, s1, s2, s3, c0, c1, c2, c3, c4, c5, c6, c7)
    d0, d1, d2, d3, d4, d5, d6, d7 = _word_both_tiles(v[12], v[13], v[14], v[15], v[19], v[23], v[27], v[31],
                                                      s0, s1, s2, s3, d0, d1, d2, d3, d4, d5, d6, d7)
    return c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7
