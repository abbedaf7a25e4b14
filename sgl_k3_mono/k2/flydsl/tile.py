"""The MFMA tile every projection of the FlyDSL K2 is built from: 16 weight rows against
the step's rows (M <= 8, padded to the MFMA's 16 columns), v_mfma_f32_16x16x32_bf16.

Per wave and chunk of 128 input columns: 4 MFMAs of 32. Operand A is 16 weight rows
(lane l feeds row l % 16), operand B the activations transposed (lane l feeds step row
l % 16; rows past M repeat a valid row and are never stored). Lane group g = l // 16
takes 32 contiguous input columns of the chunk, MFMA j the j-th 8 of them: the same
column permutation on both operands, so the dot product is unchanged and every bf16
load is 16 bytes wide. An MXFP4 row gives the same 32 columns as 16 bytes and one
ue8m0 scale (a 32-column group is exactly one lane group's share).

Two ways to split a tile's input columns: `tile_sum` spreads the chunks over the 4
waves round-robin and sums the wave partials through LDS (dense phases, experts_up,
the shared down); `wave_acc` is one wave over all chunks, no LDS (experts_down, where
each wave owns its own 16 rows). A 16 x 16 MFMA result leaves value v of lane l at
(row 4 (l // 16) + v, column l % 16); after tile_sum's LDS sum thread t holds (row
4 (t // 64) + t % 4, column (t // 4) % 16): geometry.out_row / out_col.
"""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr
from flydsl.expr.typing import T

from sgl_k3_mono.k2.flydsl.geometry import KC, THREADS, WAVES, mxfp4_offsets
from sgl_k3_mono.runtime.flydsl_sync import _device


def v4i32():
    return T.vec(4, T.i32)


def load16(rsrc, byte_off):
    """16 bytes (8 bf16) through a buffer descriptor: one buffer_load_dwordx4."""
    return fx.Vector(fx.rocdl.raw_ptr_buffer_load(v4i32(), rsrc, byte_off, 0, 0))


def load4(rsrc, byte_off):
    """4 bytes through a buffer descriptor (an offset past the buffer reads 0)."""
    return fx.Int32(fx.rocdl.raw_ptr_buffer_load(T.i32, rsrc, byte_off, 0, 0))


def load8(rsrc, byte_off):
    """8 bytes (4 bf16) through a buffer descriptor, as 4 fp32 (past the buffer: zeros)."""
    return fx.Vector(fx.rocdl.raw_ptr_buffer_load(T.vec(2, T.i32), rsrc, byte_off, 0, 0)).bitcast(
        fx.BFloat16).to(fx.Float32)


def load_f32x8(rsrc, byte_off):
    """8 fp32 through two 16-byte loads."""
    lo = load16(rsrc, byte_off).bitcast(fx.Float32)
    hi = load16(rsrc, byte_off + 16).bitcast(fx.Float32)
    return lo.shuffle(hi, [0, 1, 2, 3, 4, 5, 6, 7])


def bf16_rows(rsrc, row_byte):
    """Operand A of bf16 weight rows: the 4 MFMA operands at this lane's column k."""
    def load(k):
        return [load16(rsrc, row_byte + (k + 8 * j) * 2).bitcast(fx.BFloat16) for j in range_constexpr(4)]
    return load


def mxfp4_rows(rsrc, row_byte, s_rsrc, s_row_byte, XL: int = 0):
    """Operand A of MXFP4 weight rows (bytes [N, K/2], low nibble = even column; ue8m0
    scales [N, K/32]): this lane's 32 columns are 16 bytes and one scale. gfx950's
    v_cvt_scalef32_pk_bf16_fp4 decodes 2 fp4 times 2^(scale - 127) into bf16, exactly
    (every e2m1 value times a power of two is a bf16), as the Triton kernel's integer
    decode does; the 4 lane groups' scales are one aligned dword (s_row_byte % 4 == 0).
    XL (k2/expert_layout.py): the layout row_byte / s_row_byte address (geometry.expert_rows);
    geometry.mxfp4_offsets places each load."""
    def load(k):
        w_off, s_off, shift = mxfp4_offsets(row_byte, s_row_byte, k, XL)
        words = load16(rsrc, w_off)
        sc = (load4(s_rsrc, s_off) >> shift) & 255
        scale = fx.Vector.from_elements([sc << 23], fx.Int32).bitcast(fx.Float32)[0]
        out = []
        for j in range_constexpr(4):
            pairs = [fx.Vector(fx.rocdl.cvt_scalef32_pk_bf16_fp4(T.vec(2, T.bf16), words[j], scale, s))
                     .bitcast(fx.Int32)[0] for s in range_constexpr(4)]
            out.append(fx.Vector.from_elements(pairs, fx.Int32).bitcast(fx.BFloat16))
        return out
    return load


def _mfma(a, b, acc):
    return fx.Vector(fx.rocdl.mfma_f32_16x16x32_bf16(T.vec(4, T.f32), [a, b, acc]))


@_device
def wave_acc(load_a, load_b, c_start, c_stop, c_step):
    """This wave's 16 x 16 fp32 accumulator over chunks c_start, c_start + c_step, ...
    `load_a(k)`: the 4 A operands at column k; `load_b(k)`: this lane's 8 bf16 B values."""
    lane = fx.thread_idx.x % 64
    acc = fx.Vector.filled(4, 0.0, fx.Float32)
    for c in range(c_start, c_stop, c_step):
        k = c * KC + (lane // 16) * 32
        a4 = load_a(k)
        for j in range_constexpr(4):
            acc = _mfma(a4[j], load_b(k + j * 8), acc)
    return acc


@_device
def wave_acc2(load_a, load_a2, load_b, c_start, c_stop, c_step):
    """wave_acc of two weight tiles against the same B operand (gate and up)."""
    lane = fx.thread_idx.x % 64
    acc = fx.Vector.filled(4, 0.0, fx.Float32)
    acc2 = fx.Vector.filled(4, 0.0, fx.Float32)
    for c in range(c_start, c_stop, c_step):
        k = c * KC + (lane // 16) * 32
        a4 = load_a(k)
        a24 = load_a2(k)
        for j in range_constexpr(4):
            b = load_b(k + j * 8)
            acc = _mfma(a4[j], b, acc)
            acc2 = _mfma(a24[j], b, acc2)
    return acc, acc2


@_device
def lds_sum(acc, red):
    """The 4 waves' accumulators summed (wave order): this thread's fp32 result."""
    tid = fx.thread_idx.x
    lane = tid % 64
    wave = tid // 64
    fx.generic_store(red.ptr + (wave * THREADS + lane * 4), acc)
    fx.gpu.barrier()
    total = fx.Float32(0.0)
    for w_i in range_constexpr(WAVES):
        total = total + fx.Float32(fx.ptr_load(red.ptr + (w_i * THREADS + tid)))
    fx.gpu.barrier()  # the partials' LDS is free for the next tile
    return total


def _chunks(K):
    """This wave's chunks of an input width K (a multiple of KC): a contiguous run when
    the waves share them evenly (a constant trip count the compiler unrolls), else
    round-robin (K = 384, 768: some waves take one chunk fewer)."""
    wave = fx.thread_idx.x // 64
    n = K // KC
    if n % WAVES == 0:
        return wave * (n // WAVES), wave * (n // WAVES) + n // WAVES, 1
    return wave, n, WAVES


def tile_sum(load_a, load_b, K, red):
    """One 16-row tile over input width K, the chunks split over the waves, summed
    through LDS."""
    return lds_sum(wave_acc(load_a, load_b, *_chunks(K)), red)


def tile_sum2(load_a, load_a2, load_b, K, red):
    """tile_sum of two weight tiles sharing the B operand."""
    acc, acc2 = wave_acc2(load_a, load_a2, load_b, *_chunks(K))
    return lds_sum(acc, red), lds_sum(acc2, red)
