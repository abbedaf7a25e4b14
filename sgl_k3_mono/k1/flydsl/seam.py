"""K1 phase 0 (seam) for gfx950: one workgroup a row, the Triton K1's _phase_seam.

  p   = bf16(prefix + contribution) (HAS_CONTRIB), else the prefix; banked into row
        nvb (WRITE_BANK) or the caller's residual (WRITE_RESID)
  s_j = <v_j, score_norm * proj> / rms(v_j) over bank rows j < nvb, then p
  mix = sum_j alpha_j v_j + alpha_p p (bank rows first, p last: the Triton order),
        bf16-rounded when ROUND_MIX, stored fp32 into the mix scratch
  h   = bf16(mix * rstd * input_norm)

A thread holds 4 columns of every 1024 (8-byte buffer loads), p and the mix in
registers; the bank rows are read in runtime loops over nvb (each row's score partials
through LDS, one barrier for them all), as the Triton kernel loops over them."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k1.flydsl.geometry import SEAM_VEC, THREADS, WAVES
from sgl_k3_mono.k2.flydsl.block import block_sums, exp, fmax
from sgl_k3_mono.k2.flydsl.tile import load8
from sgl_k3_mono.runtime.flydsl_sync import _device


def _dot(xs, ys):
    t = (xs[0] * ys[0]).reduce("add")
    for i in range(1, len(xs)):
        t = t + (xs[i] * ys[i]).reduce("add")
    return t


def _score(dot, ssq, H: int, eps: float):
    return dot / fx.math.sqrt(ssq / float(H) + eps)


def _wave_sum(v):
    for off in (32, 16, 8, 4, 2, 1):
        v = v + fx.gpu.shuffle_xor(v, off, 64)
    return v


@_device
def _wave_partials(vals, aux, slot0):
    """Each wave's sums of `vals` into aux[wave * 32 + slot0 + i] (slot0 may be traced)."""
    tid = fx.thread_idx.x
    sums = [_wave_sum(v) for v in vals]
    if tid % 64 == 0:
        for i in range_constexpr(len(vals)):
            fx.generic_store(aux.ptr + ((tid // 64) * 32 + slot0 + i), sums[i])


def _gathered(aux, slot):
    """The workgroup total of one slot, the waves added in order (every thread alike)."""
    t = fx.Float32(fx.ptr_load(aux.ptr + slot))
    for w in range_constexpr(1, WAVES):
        t = t + fx.Float32(fx.ptr_load(aux.ptr + (w * 32 + slot)))
    return t


def _bank_score(aux, j, H: int, EPS: float):
    return _score(_gathered(aux, 2 + 2 * j), _gathered(aux, 3 + 2 * j), H, EPS)


@_device
def seam_phase(M, nvb, prefix_r, contrib_r, bank_r, wproj_r, wsn_r, won_r, p_dst, mix_p, h_p, aux,
               s_pm: int, s_cm: int, s_bm: int, s_bj: int, s_dst: int, H: int, NB: int, EPS: float,
               HAS_CONTRIB: bool, STORE_P: bool, ROUND_MIX: bool):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    steps = H // (SEAM_VEC * THREADS)
    cols = [(i * THREADS + tid) * SEAM_VEC for i in range_constexpr(steps)]
    cw = [load8(wsn_r, c * 2) * load8(wproj_r, c * 2) for c in cols]
    for r in range(bid, M, nblk):
        p = []
        for i in range_constexpr(steps):
            c = cols[i]
            pv = load8(prefix_r, (r * s_pm + c) * 2)
            if HAS_CONTRIB:
                pv = (pv + load8(contrib_r, (r * s_cm + c) * 2)).to(fx.BFloat16).to(fx.Float32)
            if STORE_P:
                fx.generic_store(p_dst + (r * s_dst + c), pv.to(fx.BFloat16))
            p.append(pv)
        _wave_partials([_dot(p, cw), _dot(p, p)], aux, 0)
        for j in range(nvb):
            v = [load8(bank_r, (r * s_bm + j * s_bj + cols[i]) * 2) for i in range_constexpr(steps)]
            _wave_partials([_dot(v, cw), _dot(v, v)], aux, 2 + 2 * j)
        fx.gpu.barrier()
        s_p = _score(_gathered(aux, 0), _gathered(aux, 1), H, EPS)
        mx = s_p
        for j in range(nvb):
            mx = fmax(mx, _bank_score(aux, j, H, EPS))
        z = fx.Float32(0.0)
        for j in range(nvb):
            z = z + exp(_bank_score(aux, j, H, EPS) - mx)
        e_p = exp(s_p - mx)
        z = z + e_p
        m0 = fx.Vector.filled(SEAM_VEC, 0.0, fx.Float32)
        mix = [m0 for _ in range_constexpr(steps)]
        for j in range(nvb):
            alpha = exp(_bank_score(aux, j, H, EPS) - mx) / z
            for i in range_constexpr(steps):
                mix[i] = mix[i] + alpha * load8(bank_r, (r * s_bm + j * s_bj + cols[i]) * 2)
        a_p = e_p / z
        mix = [mix[i] + a_p * p[i] for i in range_constexpr(steps)]
        if ROUND_MIX:
            mix = [m.to(fx.BFloat16).to(fx.Float32) for m in mix]
        for i in range_constexpr(steps):
            fx.generic_store(mix_p + (r * H + cols[i]), mix[i])
        fx.gpu.barrier()  # every thread has read the score partials before aux is reused
        ssq = block_sums([_dot(mix, mix)], aux)[0]
        rstd = 1.0 / fx.math.sqrt(ssq / float(H) + EPS)
        for i in range_constexpr(steps):
            h = mix[i] * rstd * load8(won_r, cols[i] * 2)
            fx.generic_store(h_p + (r * H + cols[i]), h.to(fx.BFloat16))
