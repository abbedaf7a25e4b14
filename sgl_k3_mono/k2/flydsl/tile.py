"""The MFMA tile every dense K2 phase on gfx950 is built from: 16 weight rows against the
step's rows (M <= 8, padded to the MFMA's 16 columns), the input columns split over a
workgroup's 4 waves, the waves' partials summed through LDS.

Per wave and chunk of 128 input columns: 4 x v_mfma_f32_16x16x32_bf16. Operand A is 16
weight rows (lane l feeds row l % 16), operand B the activations transposed (lane l
feeds step row l % 16; rows past M repeat a valid row and are never stored). Lane group
g = l // 16 reads 64 contiguous bytes of its row per chunk as 4 buffer_load_dwordx4, and
MFMA j takes the j-th 16 bytes of every group: the same column permutation on both
operands, so the dot product is unchanged and every load is 16 bytes wide.

A 16 x 16 MFMA result leaves value v of lane l at (row 4 (l // 16) + v, column l % 16);
after the LDS sum thread t of the workgroup holds (row 4 (t // 64) + t % 4, column
(t // 4) % 16): geometry.out_row and geometry.out_col say which.
"""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr
from flydsl.expr.typing import T

from sgl_k3_mono.k2.flydsl.geometry import KC, THREADS, WAVES
from sgl_k3_mono.runtime.flydsl_sync import _device


def v4i32():
    return T.vec(4, T.i32)


def load16(rsrc, byte_off):
    """16 bytes (8 bf16) through a buffer descriptor: one buffer_load_dwordx4."""
    return fx.Vector(fx.rocdl.raw_ptr_buffer_load(v4i32(), rsrc, byte_off, 0, 0))


@_device
def tile_sum(w_rsrc, w_row_byte, load_b, K, red):
    """This thread's fp32 result of one 16-row tile after the cross-wave sum.
    `w_row_byte`: byte offset of this lane's weight row; `load_b(k)`: this lane's 8 bf16
    activations at input column k (a traced callable); K: the input width (a constant)."""
    tid = fx.thread_idx.x
    lane = tid % 64
    wave = tid // 64
    k_wave = K // WAVES
    k_lane = wave * k_wave + (lane // 16) * 32
    acc = fx.Vector.filled(4, 0.0, fx.Float32)
    for c in range(k_wave // KC):
        for j in range_constexpr(4):
            k = k_lane + c * KC + j * 8
            a = load16(w_rsrc, w_row_byte + k * 2).bitcast(fx.BFloat16)
            acc = fx.Vector(fx.rocdl.mfma_f32_16x16x32_bf16(T.vec(4, T.f32), [a, load_b(k), acc]))
    fx.generic_store(red.ptr + (wave * THREADS + lane * 4), acc)
    fx.gpu.barrier()
    total = fx.Float32(0.0)
    for w_i in range_constexpr(WAVES):
        total = total + fx.Float32(fx.ptr_load(red.ptr + (w_i * THREADS + tid)))
    fx.gpu.barrier()  # the partials' LDS is free for the next tile
    return total
