"""K2 phases 4 and 5 (experts_up, experts_down with the shared down) for gfx950, as the
Triton kernel's, on the MXFP4 routed experts where SGLang leaves them: its plain layout
(w13 bytes [E, 2 I_pad, L/2], gate rows then up rows from I_UP, ue8m0 scales
[E, rows, L/32]; w2 bytes [E, L, I_pad/2], scales [E, L, I_pad/32]), or AITER's a16w4 or
generic preshuffle (XL; k2/expert_layout.py), read in place.

An expert routed by several rows is computed once for all the step's rows: the items
are (distinct expert n, tile), spread round-robin over the grid, n numbered by
route.distinct. The weights decode to bf16 in registers (gfx950's scaled fp4 convert)
and feed the bf16 MFMA with the bf16 activations, so the products are the Triton
kernel's (which decodes to bf16 for tl.dot, or multiplies exactly in fp32).

experts_up   act[n, r, i] = bf16(SiTU(W_gate,e x_r, W_up,e x_r)), items (n, 16 rows of I)
experts_down y[(r, slot), l] = bf16(W2_e act[n, r]) for the rows r that routed to e,
             items (n, 64 rows of L: one 16-row tile a wave over the whole I); then
             shared[r, h] = bf16(bf16(SiTU(gu)) @ Wsd^T), items of 16 rows of H, in the
             same walk after the routed ones."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k2.flydsl.block import situ
from sgl_k3_mono.k2.flydsl.geometry import (BN, EXPERT_BI, EXPERT_BL, IDS, KC, LIST, ROWS, expert_rows, out_col,
                                             out_row, up_row)
from sgl_k3_mono.k2.flydsl.tile import bf16_rows, load16, load_f32x8, mxfp4_rows, tile_sum, tile_sum2, wave_acc
from sgl_k3_mono.runtime.flydsl_sync import _device


def _b_row(rsrc, row_byte):
    """Operand B: 8 bf16 at column k of this lane's step row (rows past M repeat row 0)."""
    def load(k):
        return load16(rsrc, row_byte + k * 2).bitcast(fx.BFloat16)
    return load


@_device
def experts_up_phase(M, n_e, ints, xin_r, w13_r, sc13_r, act_p, s13_e, s13_n, ssc13_e, ssc13_n, red,
                     L: int, I: int, I_UP: int, BETA: float, LBETA: float, XL: int = 0):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    r16 = (tid % 64) % 16
    m_in = (r16 < M).select(r16, 0)
    n_loc = out_row(tid)
    m_out = out_col(tid)
    tiles = I // EXPERT_BI
    load_x = _b_row(xin_r, m_in * (L * 2))
    up0 = up_row(I_UP, XL)
    for item in range(bid, n_e * tiles, nblk):
        n = item // tiles
        i0 = (item % tiles) * EXPERT_BI
        e = fx.Int32(fx.ptr_load(ints.ptr + (LIST + n)))
        gate = i0 + r16
        up = up0 + i0 + r16
        gw, gs = expert_rows(e, gate, s13_e, s13_n, ssc13_e, ssc13_n, XL, True)
        uw, us = expert_rows(e, up, s13_e, s13_n, ssc13_e, ssc13_n, XL, True, up=XL == 1)
        g, u = tile_sum2(mxfp4_rows(w13_r, gw, sc13_r, gs, XL), mxfp4_rows(w13_r, uw, sc13_r, us, XL),
                         load_x, L, red)
        if m_out < M:
            (act_p + ((n * ROWS + m_out) * I + i0 + n_loc)).store(fx.BFloat16(situ(g, u, BETA, LBETA)))


@_device
def experts_down_phase(M, n_e, ints, act_r, w2_r, sc2_r, y_p, s2_e, s2_n, ssc2_e, ssc2_n,
                       gu_r, wsd_r, s_wsd, part2_p, red,
                       H: int, S2: int, L: int, I: int, TOPK: int, BETA: float, LBETA: float, XL: int = 0):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    lane = tid % 64
    wave = tid // 64
    r16 = lane % 16
    m_in = (r16 < M).select(r16, 0)
    n_loc = out_row(tid)
    m_out = out_col(tid)
    ltiles = L // EXPERT_BL
    n_routed = n_e * ltiles

    def load_situ(k):  # the shared experts' activation: bf16(SiTU(gate, up)) of this lane's row
        g = load_f32x8(gu_r, (m_in * S2 + k) * 4)
        u = load_f32x8(gu_r, (m_in * S2 + S2 // 2 + k) * 4)
        return situ(g, u, BETA, LBETA).to(fx.BFloat16)

    for item in range(bid, n_routed + H // BN, nblk):
        if item < n_routed:
            n = item // ltiles
            l0 = (item % ltiles) * EXPERT_BL + wave * BN
            e = fx.Int32(fx.ptr_load(ints.ptr + (LIST + n)))
            row = l0 + r16
            ww, ws = expert_rows(e, row, s2_e, s2_n, ssc2_e, ssc2_n, XL, False)
            acc = wave_acc(mxfp4_rows(w2_r, ww, sc2_r, ws, XL),
                           _b_row(act_r, ((n * ROWS + m_in) * I) * 2), 0, I // KC, 1)
            # this lane's column is step row r16: its slot naming e, if it routed to e
            slot = fx.Int32(0)
            has = r16 < 0
            for k in range_constexpr(TOPK):
                hit = fx.Int32(fx.ptr_load(ints.ptr + (IDS + r16 * TOPK + k))) == e
                slot = hit.select(k, slot)
                has = has | hit
            if has & (r16 < M):
                base = (r16 * TOPK + slot) * L + l0 + (lane // 16) * 4
                for v in range_constexpr(4):
                    (y_p + (base + v)).store(fx.BFloat16(acc[v]))
        else:
            n0 = (item - n_routed) * BN
            total = tile_sum(bf16_rows(wsd_r, (n0 + r16) * s_wsd * 2), load_situ, S2 // 2, red)
            if m_out < M:
                (part2_p + (m_out * (L + H) + L + n0 + n_loc)).store(fx.BFloat16(total))
