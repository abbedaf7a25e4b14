"""K2 phase 1 (seam) for gfx950: one workgroup a row, as the Triton kernel's seam.

  a  = bf16(sum_r a_r)   (the ranks' o_proj partials in rank order at TP > 1)
  p  = bf16(prefix + a)  (with a prefix; else a)
  h2 = rmsnorm(Agg(bank rows, p)) * o_norm, the attn-res aggregation: scores
       s_j = <v_j, rnorm * proj> / rms(v_j) over the bank rows j < nvb and p (slot nvb),
       softmax, mix = alpha_p p + sum_j alpha_j v_j (bf16-rounded when MIX_BF16).

A thread holds 4 columns of every 1024 (H / 1024 steps, 8-byte loads). The bank is
read through the buffer range check: rows past nvb are given an offset past the
buffer, so they read as zeros without touching memory, and their score is -inf."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k2.flydsl.block import NEG_INF, block_sums, exp, fmax
from sgl_k3_mono.k2.flydsl.geometry import OOB, SEAM_VEC, THREADS
from sgl_k3_mono.k2.flydsl.tile import load8
from sgl_k3_mono.runtime.flydsl_sync import _device


def _dot(xs, ys):
    """sum_i <xs[i], ys[i]> of this thread's fp32 vectors, in order."""
    t = (xs[0] * ys[0]).reduce("add")
    for i in range(1, len(xs)):
        t = t + (xs[i] * ys[i]).reduce("add")
    return t


def _attn_sum(peers, part1_r, off):
    """a = bf16(sum_r a_r) at element `off`: this rank's partials at TP 1, else every
    rank's in rank order (fp32 sum, so every rank rounds the same value)."""
    if peers is None:
        return load8(part1_r, off * 2)
    a = fx.generic_load(peers[0] + off, dtype=fx.BFloat16, count=4).to(fx.Float32)
    for q in range(1, len(peers)):
        a = a + fx.generic_load(peers[q] + off, dtype=fx.BFloat16, count=4).to(fx.Float32)
    return a.to(fx.BFloat16).to(fx.Float32)


def _norm_score(dot, ssq, H: int, eps: float):
    return dot / fx.math.sqrt(ssq / float(H) + eps)


@_device
def seam_phase(M, nvb, has_prefix, part1_r, peers, prefix_r, bank_r, proj_r, rnorm_r, onorm_r, p_p, h2_p, aux,
               H: int, NB: int, EPS: float, MIX_BF16: bool):
    """`peers`: at TP > 1 the ranks' o_proj partials (bf16 pointers, this parity's slot),
    rank order; None at TP 1 (this rank's partials through part1_r)."""
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    steps = H // (SEAM_VEC * THREADS)
    cols = [(i * THREADS + tid) * SEAM_VEC for i in range_constexpr(steps)]
    cw = [load8(rnorm_r, c * 2) * load8(proj_r, c * 2) for c in cols]
    for r in range(bid, M, nblk):
        p = []
        for i in range_constexpr(steps):
            c = cols[i]
            a = _attn_sum(peers, part1_r, r * H + c)
            pre_off = (has_prefix != 0).select((r * H + c) * 2, OOB)
            pre = (load8(prefix_r, pre_off) + a).to(fx.BFloat16).to(fx.Float32)
            pv = (has_prefix != 0).select(pre, a)
            fx.generic_store(p_p + (r * H + c), pv.to(fx.BFloat16))
            p.append(pv)
        # every score's dot and sum of squares, one workgroup reduction for all of them
        part = [_dot(p, cw), _dot(p, p)]
        for j in range_constexpr(NB):
            v = [load8(bank_r, (j < nvb).select(((r * NB + j) * H + cols[i]) * 2, OOB)) for i in range(steps)]
            part += [_dot(v, cw), _dot(v, v)]
        tot = block_sums(part, aux)
        s_p = _norm_score(tot[0], tot[1], H, EPS)
        s_j = [(j < nvb).select(_norm_score(tot[2 + 2 * j], tot[3 + 2 * j], H, EPS), NEG_INF)
               for j in range_constexpr(NB)]
        mx = s_p
        for j in range_constexpr(NB):
            mx = fmax(mx, s_j[j])
        e_p = exp(s_p - mx)
        e_j = [exp(s_j[j] - mx) for j in range_constexpr(NB)]
        z = e_p
        for j in range_constexpr(NB):
            z = z + e_j[j]
        mix = [pv * (e_p / z) for pv in p]
        for j in range_constexpr(NB):
            alpha = e_j[j] / z
            for i in range_constexpr(steps):
                v = load8(bank_r, (j < nvb).select(((r * NB + j) * H + cols[i]) * 2, OOB))
                mix[i] = mix[i] + alpha * v
        mix = [m.to(fx.BFloat16).to(fx.Float32) for m in mix] if MIX_BF16 else mix
        ssq = block_sums([_dot(mix, mix)], aux)[0]
        rms = fx.math.sqrt(ssq / float(H) + EPS)
        for i in range_constexpr(steps):
            h2 = mix[i] / rms * load8(onorm_r, cols[i] * 2)
            fx.generic_store(h2_p + (r * H + cols[i]), h2.to(fx.BFloat16))
