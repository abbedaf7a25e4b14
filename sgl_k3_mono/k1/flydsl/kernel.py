"""K1's device code for gfx950 in FlyDSL: the three phases of k1/triton/kernel.py, same
numbering, roundings and work split, inside a persistent frame.

  0 seam     seam.py
  1 in_proj  h @ [qkvg | f_a | b]^T -> proj: the plan's BN_EFF-row tiles (as Triton's)
             of BN_EFF / 16 MFMA tiles (k2/flydsl/tile.py), Triton's round-robin walk
  2 kda      kda.py
PHASE_MASK: one bit = one phase as its own launch, all bits = the persistent launch."""

from __future__ import annotations

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k1.flydsl.geometry import (AUX_FLOATS, BIT, LAUNCH_ID, LDS_DECAY, MFMA_ROWS, OOB, PHASES,
                              PTR_WORDS, RED_FLOATS, THREADS, WAVES, barrier_plan, first_tile, proj_segments)
from sgl_k3_mono.k1.flydsl.kda import kda_phase
from sgl_k3_mono.k1.flydsl.seam import seam_phase
from sgl_k3_mono.k2.flydsl.geometry import out_col, out_row
from sgl_k3_mono.k2.flydsl.tile import bf16_rows, load16, tile_sum
from sgl_k3_mono.runtime.flydsl_sync import FRAME_WORDS, PhaseFrame, _device, depart


def _rsrc(t):
    return fx.rocdl.get_buffer_rsrc(fx.get_iter(fx.rocdl.make_buffer_tensor(t)))


def _p_home(write_bank, bank, resid, nvb, s_bj, s_bm, s_rm):
    if write_bank:
        return fx.get_iter(bank) + nvb * s_bj, s_bm
    return fx.get_iter(resid), s_rm


@_device
def _proj_segment(w_r, s_w, seg, b_h, proj_p, red, M, H: int, NPROJ: int, BN_EFF: int):
    start, ntiles, nrows, col0 = seg
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    r16 = (tid % 64) % 16
    n_loc = out_row(tid)
    m_out = out_col(tid)
    for tile in range(first_tile(bid, nblk, start), start + ntiles, nblk):
        r0 = (tile - start) * BN_EFF
        for sub in range_constexpr(BN_EFF // MFMA_ROWS):
            rb = r0 + sub * MFMA_ROWS
            if rb < nrows:
                row = rb + r16
                total = tile_sum(bf16_rows(w_r, (row < nrows).select(row * (s_w * 2), OOB)), b_h, H, red)
                if (m_out < M) & (rb + n_loc < nrows):
                    (proj_p + (m_out * NPROJ + col0 + rb + n_loc)).store(fx.BFloat16(total))


@flyc.kernel(known_block_size=[THREADS, 1, 1])
def k1_fly_kernel(prefix: fx.Tensor, contrib: fx.Tensor, bank: fx.Tensor, resid: fx.Tensor,
                  wproj: fx.Tensor, wsn: fx.Tensor, won: fx.Tensor,
                  wq: fx.Tensor, wf: fx.Tensor, wb: fx.Tensor,
                  fb: fx.Tensor, cw: fx.Tensor, alog: fx.Tensor, dtb: fx.Tensor, onw: fx.Tensor, slots: fx.Tensor,
                  conv: fx.Tensor, ssm: fx.Tensor, vconv: fx.Tensor, vssm: fx.Tensor, out: fx.Tensor,
                  h: fx.Tensor, mix: fx.Tensor, proj: fx.Tensor, opre: fx.Tensor, cnt: fx.Tensor, sync: fx.Tensor,
                  nvb: fx.Int32, pad_slot: fx.Int32, vindex: fx.Int32, M: fx.Int32,
                  err_addr: fx.Int64, deadline_ns: fx.Int64, rank: fx.Int32, layer: fx.Int32, stall: fx.Int32,
                  s_pm: fx.Constexpr[int], s_cm: fx.Constexpr[int], s_bm: fx.Constexpr[int], s_bj: fx.Constexpr[int],
                  s_rm: fx.Constexpr[int], s_wq: fx.Constexpr[int], s_wf: fx.Constexpr[int], s_wb: fx.Constexpr[int],
                  s_fb: fx.Constexpr[int], s_cw: fx.Constexpr[int], s_cs: fx.Constexpr[int], s_cr: fx.Constexpr[int],
                  s_ss: fx.Constexpr[int], s_sh: fx.Constexpr[int], s_sv: fx.Constexpr[int],
                  s_vcr: fx.Constexpr[int], s_vct: fx.Constexpr[int], s_vcw: fx.Constexpr[int],
                  s_vsr: fx.Constexpr[int], s_vst: fx.Constexpr[int], s_vsh: fx.Constexpr[int],
                  s_vsv: fx.Constexpr[int], s_om: fx.Constexpr[int],
                  H: fx.Constexpr[int], HL: fx.Constexpr[int], D: fx.Constexpr[int], KW: fx.Constexpr[int],
                  NB: fx.Constexpr[int], EPS: fx.Constexpr[float], BN_EFF: fx.Constexpr[int],
                  NV: fx.Constexpr[int], BV: fx.Constexpr[int], VERIFY: fx.Constexpr[bool],
                  HAS_LB: fx.Constexpr[bool], LB: fx.Constexpr[float], HAS_CONTRIB: fx.Constexpr[bool],
                  WRITE_BANK: fx.Constexpr[bool], WRITE_RESID: fx.Constexpr[bool], ROUND_MIX: fx.Constexpr[bool],
                  PHASE_MASK: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    nblk = fx.grid_dim.x
    P = HL * D
    NPROJ = 4 * P + D + HL
    sync_p = fx.get_iter(sync)
    lds = fx.SharedAllocator()
    red = lds.allocate(fx.Array[fx.Float32, RED_FLOATS, 16]).peek()
    aux = lds.allocate(fx.Array[fx.Float32, AUX_FLOATS, 16]).peek()
    dec = lds.allocate(fx.Array[fx.Float32, LDS_DECAY, 16]).peek()
    flag = lds.allocate(fx.Array[fx.Int32, 4, 16]).peek()
    words = lds.allocate(fx.Array[fx.Int64, WAVES * FRAME_WORDS, 16]).peek()
    ptr_words = lds.allocate(fx.Array[fx.Int64, WAVES * PTR_WORDS, 16]).peek()
    fr = PhaseFrame(barrier_plan(PHASE_MASK), sync_p, words, deadline_ns, err_addr, rank, layer, stall,
                    launch_id=LAUNCH_ID, phases=PHASES)

    if PHASE_MASK & BIT["seam"]:
        fr.start("seam")
        p_dst, s_dst = _p_home(WRITE_BANK, bank, resid, nvb, s_bj, s_bm, s_rm)
        seam_phase(M, nvb, _rsrc(prefix), _rsrc(contrib), _rsrc(bank), _rsrc(wproj), _rsrc(wsn), _rsrc(won),
                   p_dst, fx.get_iter(mix), fx.get_iter(h), aux, s_pm, s_cm, s_bm, s_bj, s_dst, H, NB, EPS,
                   HAS_CONTRIB, WRITE_BANK or WRITE_RESID, ROUND_MIX)
        fr.end("seam")

    if PHASE_MASK & BIT["in_proj"]:
        fr.start("in_proj")
        r16 = (tid % 64) % 16
        m_in = (r16 < M).select(r16, 0)
        h_r = _rsrc(h)

        def b_h(k):
            return load16(h_r, (m_in * H + k) * 2).bitcast(fx.BFloat16)

        proj_p = fx.get_iter(proj)
        segs = proj_segments(4 * P, D, HL, BN_EFF)
        _proj_segment(_rsrc(wq), s_wq, segs[0], b_h, proj_p, red, M, H, NPROJ, BN_EFF)
        _proj_segment(_rsrc(wf), s_wf, segs[1], b_h, proj_p, red, M, H, NPROJ, BN_EFF)
        _proj_segment(_rsrc(wb), s_wb, segs[2], b_h, proj_p, red, M, H, NPROJ, BN_EFF)
        fr.end("in_proj")

    if PHASE_MASK & BIT["kda"]:
        fr.start("kda")
        kda_phase(M, pad_slot, vindex, ptr_words,
                  dict(cw=fx.get_iter(cw), alog=fx.get_iter(alog), dtb=fx.get_iter(dtb), onw=fx.get_iter(onw),
                       vconv=fx.get_iter(vconv), vssm=fx.get_iter(vssm), opre=fx.get_iter(opre),
                       cnt=fx.get_iter(cnt), out=fx.get_iter(out)),
                  fx.get_iter(proj), _rsrc(fb), fx.get_iter(slots), fx.get_iter(conv),
                  fx.get_iter(ssm), dec, aux, flag, s_fb, s_cw, s_cs, s_cr, s_ss, s_sh, s_sv, s_vcr, s_vct, s_vcw,
                  s_vsr, s_vst, s_vsh, s_vsv, s_om, HL, D, KW, NV, BV, VERIFY, HAS_LB, LB)
        fr.end("kda")

    depart(sync_p, nblk)


@flyc.jit
def k1_fly_launch(prefix: fx.Tensor, contrib: fx.Tensor, bank: fx.Tensor, resid: fx.Tensor,
                  wproj: fx.Tensor, wsn: fx.Tensor, won: fx.Tensor,
                  wq: fx.Tensor, wf: fx.Tensor, wb: fx.Tensor,
                  fb: fx.Tensor, cw: fx.Tensor, alog: fx.Tensor, dtb: fx.Tensor, onw: fx.Tensor, slots: fx.Tensor,
                  conv: fx.Tensor, ssm: fx.Tensor, vconv: fx.Tensor, vssm: fx.Tensor, out: fx.Tensor,
                  h: fx.Tensor, mix: fx.Tensor, proj: fx.Tensor, opre: fx.Tensor, cnt: fx.Tensor, sync: fx.Tensor,
                  nvb: fx.Int32, pad_slot: fx.Int32, vindex: fx.Int32, M: fx.Int32,
                  err_addr: fx.Int64, deadline_ns: fx.Int64, rank: fx.Int32, layer: fx.Int32, stall: fx.Int32,
                  s_pm: fx.Constexpr[int], s_cm: fx.Constexpr[int], s_bm: fx.Constexpr[int], s_bj: fx.Constexpr[int],
                  s_rm: fx.Constexpr[int], s_wq: fx.Constexpr[int], s_wf: fx.Constexpr[int], s_wb: fx.Constexpr[int],
                  s_fb: fx.Constexpr[int], s_cw: fx.Constexpr[int], s_cs: fx.Constexpr[int], s_cr: fx.Constexpr[int],
                  s_ss: fx.Constexpr[int], s_sh: fx.Constexpr[int], s_sv: fx.Constexpr[int],
                  s_vcr: fx.Constexpr[int], s_vct: fx.Constexpr[int], s_vcw: fx.Constexpr[int],
                  s_vsr: fx.Constexpr[int], s_vst: fx.Constexpr[int], s_vsh: fx.Constexpr[int],
                  s_vsv: fx.Constexpr[int], s_om: fx.Constexpr[int],
                  H: fx.Constexpr[int], HL: fx.Constexpr[int], D: fx.Constexpr[int], KW: fx.Constexpr[int],
                  NB: fx.Constexpr[int], EPS: fx.Constexpr[float], BN_EFF: fx.Constexpr[int],
                  NV: fx.Constexpr[int], BV: fx.Constexpr[int], VERIFY: fx.Constexpr[bool],
                  HAS_LB: fx.Constexpr[bool], LB: fx.Constexpr[float], HAS_CONTRIB: fx.Constexpr[bool],
                  WRITE_BANK: fx.Constexpr[bool], WRITE_RESID: fx.Constexpr[bool], ROUND_MIX: fx.Constexpr[bool],
                  PHASE_MASK: fx.Constexpr[int], GRID: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
    k1_fly_kernel(prefix, contrib, bank, resid, wproj, wsn, won, wq, wf, wb, fb, cw, alog, dtb, onw, slots,
                  conv, ssm, vconv, vssm, out, h, mix, proj, opre, cnt, sync,
                  nvb, pad_slot, vindex, M, err_addr, deadline_ns, rank, layer, stall,
                  s_pm, s_cm, s_bm, s_bj, s_rm, s_wq, s_wf, s_wb, s_fb, s_cw, s_cs, s_cr, s_ss, s_sh, s_sv,
                  s_vcr, s_vct, s_vcw, s_vsr, s_vst, s_vsh, s_vsv, s_om,
                  H, HL, D, KW, NB, EPS, BN_EFF, NV, BV, VERIFY, HAS_LB, LB, HAS_CONTRIB, WRITE_BANK, WRITE_RESID,
                  ROUND_MIX, PHASE_MASK).launch(grid=(GRID, 1, 1), block=(THREADS, 1, 1), stream=stream)
