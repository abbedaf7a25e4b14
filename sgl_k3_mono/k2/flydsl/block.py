"""Workgroup-wide helpers of the FlyDSL K2's non-projection phases: sums, the top-k
argmax step, the owners' numbering scan, and the elementwise math (fp32, exp-based:
FlyDSL 0.5.0 drops llvm.tanh without an error, so tanh is written with sigmoid).

Every reduction runs in a fixed order (lane butterfly, then the waves in order), so a
result does not depend on timing; every thread ends with the same value."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k2.flydsl.geometry import TOTALS, WAVES
from sgl_k3_mono.runtime.flydsl_sync import _device

NEG_INF = float("-inf")
LOG2E = 1.4426950408889634


def exp(x):
    """e^x as 2^(x log2 e): one v_exp_f32 after a multiply (afn: results below 2^-126
    flush to 0, which no caller can tell from 0: 1 / (1 + e^-x) and softmax weights).
    Not llvm.exp's range-checked expansion, whose constants cost the persistent launch
    scalar registers it does not have."""
    return fx.math.exp2(x * LOG2E, fastmath="afn")


def sigmoid(x, a: float = 1.0):
    """sigmoid(a x) = 1 / (1 + 2^(-a log2(e) x)), the scale folded into one constant."""
    return 1.0 / (1.0 + fx.math.exp2(x * (-a * LOG2E), fastmath="afn"))


def situ(g, u, beta: float, lbeta: float):
    """beta*tanh(g/beta)*sigmoid(g) * lbeta*tanh(u/lbeta), as the Triton kernel's _situ
    (tanh(x) = 2 sigmoid(2x) - 1), on fp32 scalars or vectors. The scales are folded
    into the exponent's constant (one rounding fewer than 2 g / beta, then x log2 e):
    few constants, each costing a scalar register in the expert phases."""
    tg = 2.0 * sigmoid(g, 2.0 / beta) - 1.0
    tu = 2.0 * sigmoid(u, 2.0 / lbeta) - 1.0
    return beta * tg * sigmoid(g) * (lbeta * tu)


def fmax(a, b):
    return (a > b).select(a, b)


def _wave_sum(v):
    for off in (32, 16, 8, 4, 2, 1):
        v = v + fx.gpu.shuffle_xor(v, off, 64)
    return v


@_device
def block_sums(vals, aux):
    """The workgroup sums of up to 32 fp32 values (a list), returned to every thread."""
    tid = fx.thread_idx.x
    lane = tid % 64
    wave = tid // 64
    n = len(vals)
    sums = [_wave_sum(v) for v in vals]
    if lane == 0:
        for i in range_constexpr(n):
            fx.generic_store(aux.ptr + (wave * 32 + i), sums[i])
    fx.gpu.barrier()
    out = []
    for i in range_constexpr(n):
        t = fx.Float32(fx.ptr_load(aux.ptr + i))
        for w in range_constexpr(1, WAVES):
            t = t + fx.Float32(fx.ptr_load(aux.ptr + (w * 32 + i)))
        out.append(t)
    fx.gpu.barrier()  # aux is free for the next reduction
    return out


def _better(v, i, ov, oi):
    """(ov, oi) beats (v, i): a larger value, or an equal one with the lower index."""
    return (ov > v) | ((ov == v) & (oi < i))


@_device
def block_argmax(v, i, aux):
    """The workgroup's (largest value, its lowest index) from one candidate a thread."""
    tid = fx.thread_idx.x
    lane = tid % 64
    wave = tid // 64
    for off in (32, 16, 8, 4, 2, 1):
        ov = fx.gpu.shuffle_xor(v, off, 64)
        oi = fx.gpu.shuffle_xor(i, off, 64)
        take = _better(v, i, ov, oi)
        v = take.select(ov, v)
        i = take.select(oi, i)
    if lane == 0:
        fx.generic_store(aux.ptr + wave * 2, v)
        fx.generic_store(aux.ptr + (wave * 2 + 1), fx.Float32(i))  # expert ids < 2^24: exact
    fx.gpu.barrier()
    bv = fx.Float32(fx.ptr_load(aux.ptr))
    bi = fx.Int32(fx.Float32(fx.ptr_load(aux.ptr + 1)))
    for w in range_constexpr(1, WAVES):
        ov = fx.Float32(fx.ptr_load(aux.ptr + w * 2))
        oi = fx.Int32(fx.Float32(fx.ptr_load(aux.ptr + (w * 2 + 1))))
        take = _better(bv, bi, ov, oi)
        bv = take.select(ov, bv)
        bi = take.select(oi, bi)
    fx.gpu.barrier()
    return bi


@_device
def exclusive_count(flag, ints):
    """For a 0/1 flag a thread: how many threads before it hold 1, and the total."""
    tid = fx.thread_idx.x
    lane = tid % 64
    wave = tid // 64
    x = flag
    for off in (1, 2, 4, 8, 16, 32):
        y = fx.gpu.shuffle_up(x, off, 64)
        x = (lane >= off).select(x + y, x)
    if lane == 63:
        fx.generic_store(ints.ptr + (TOTALS + wave), x)
    fx.gpu.barrier()
    before = x - flag
    total = fx.Int32(0)
    for w in range_constexpr(WAVES):
        t = fx.Int32(fx.ptr_load(ints.ptr + (TOTALS + w)))
        before = before + (w < wave).select(t, 0)
        total = total + t
    return before, total
