"""K2's device code for gfx950 in FlyDSL: all nine phases of k2/triton/kernel.py, same
numbering, same roundings, same work split (items spread round-robin over the grid),
inside the persistent frame every phase shares.

  0 o_proj       a_r = bf16(o_r @ Wo^T) into this rank's partials; owner[] reset
  1 seam         seam.py: reduce over the ranks, prefix add, attn-res aggregation, norm
  2 front        [shared gate_up | router | latent down] @ h2; gate_up and router logits
                 rounded to bf16 when FRONT_BF16 (SGLang's HIP front GEMM emits bf16)
  3 route        route.py: biased sigmoid top-k, owner[e] by atomic min
  4 experts_up   experts.py (MXFP4, the plain layout)
  5 experts_down experts.py, with the shared experts' down
  6 combine      combine.py
  7 reduce       combine.py (TP > 1: pulls the peers' partials)
  8 latent_up    out = bf16(bf16(bf16(norm(latent) @ Wup^T) + shared) + p)

The frame: start time, the stall switch at each phase, a grid barrier after every phase
a later one reads (geometry.barrier_plan), `depart` at the end (runtime/flydsl_sync.py).
At TP > 1 o_proj and combine publish their partials after a barrier (system-scope
release of an epoch tag), and seam and reduce wait for every rank's tag (system-scope
acquire, bounded) before pulling. PHASE_MASK says which phases this compiled kernel
runs: one bit is one phase as its own launch (tests, benchmarks), all bits the
persistent launch. Projections are the MFMA tile of tile.py.
"""

from __future__ import annotations

import flydsl.compiler as flyc
import flydsl.expr as fx

from sgl_k3_mono.k2.flydsl.combine import combine_phase, reduce_phase
from sgl_k3_mono.k2.flydsl.experts import experts_down_phase, experts_up_phase
from sgl_k3_mono.k2.flydsl.geometry import (AUX_FLOATS, BIT, BN, LDS_FLOATS, LDS_INTS, PHASES, THREADS, WAVES,
                                            barrier_plan, first_tile, out_col, out_row)
from sgl_k3_mono.k2.flydsl.route import distinct, route_phase
from sgl_k3_mono.k2.flydsl.seam import seam_phase
from sgl_k3_mono.k2.flydsl.tile import bf16_rows, load16, tile_sum
from sgl_k3_mono.runtime.flydsl_sync import EPOCH, FRAME_WORDS, PhaseFrame, depart, publish, wait_peers

LAUNCH_ID = 1  # runtime.failure.LAUNCHES.index("k2")
OWNER_NONE = 0x7FFFFFFF
"""owner[e] before routing: larger than every (row, slot)."""


def _rsrc(t):
    return fx.rocdl.get_buffer_rsrc(fx.get_iter(fx.rocdl.make_buffer_tensor(t)))


class _Frame(PhaseFrame):
    """K2's frame: the shared one (runtime/flydsl_sync.PhaseFrame) plus the TP > 1 ready
    tags: after a phase the plan marks `publish`, this rank's tag of the parity slot."""

    def __init__(self, plan, sync_p, flags, epoch, words, deadline_ns, err_addr, rank, layer, stall):
        super().__init__(plan, sync_p, words, deadline_ns, err_addr, rank, layer, stall, launch_id=LAUNCH_ID,
                         phases=PHASES)
        self.flags, self.epoch = flags, epoch

    def wait(self, name, tp, slot, active):
        """Phase `name` waits (where `active`) for every rank's ready tag of `slot`."""
        wait_peers(active, self.flags, self.sync_p, tp, slot, self.epoch + 1, *self.wait_args(), LAUNCH_ID,
                   PHASES.index(name))

    def end(self, name):
        """After phase `name`: the grid barrier, then the ready tag, as the plan says."""
        super().end(name)
        if self.plan[name]["publish"]:
            slot = self.epoch % 2 if name == "o_proj" else 2 + self.epoch % 2
            publish(self.flags, self.sync_p, self.rank, slot, self.epoch + 1)


class _Pulled:
    """Every rank's partials of this parity, as bf16 pointers read from an int64 address
    table where they are used (not held in scalar registers across a phase)."""

    def __init__(self, table, base, epoch, slot_elems, tp):
        self.tab, self.ty, self.off, self.tp = fx.get_iter(table), base.type, (epoch % 2) * slot_elems, tp

    def __len__(self):
        return self.tp

    def __getitem__(self, q):
        return fx.inttoptr(self.ty, fx.Int64(fx.ptr_load(self.tab + q))) + self.off


@flyc.kernel(known_block_size=[THREADS, 1, 1])
def k2_fly_kernel(attn: fx.Tensor, bank: fx.Tensor, prefix: fx.Tensor,
                  wo: fx.Tensor, proj: fx.Tensor, rnorm: fx.Tensor, onorm: fx.Tensor,
                  wgu: fx.Tensor, wr: fx.Tensor, wdn: fx.Tensor, bias: fx.Tensor,
                  w13: fx.Tensor, sc13: fx.Tensor, w2: fx.Tensor, sc2: fx.Tensor,
                  wsd: fx.Tensor, lnorm: fx.Tensor, wup: fx.Tensor,
                  part1: fx.Tensor, p: fx.Tensor, h2: fx.Tensor, gu: fx.Tensor, logits: fx.Tensor, xin: fx.Tensor,
                  ids: fx.Tensor, wts: fx.Tensor, owner: fx.Tensor, act: fx.Tensor, y: fx.Tensor,
                  part2: fx.Tensor, out: fx.Tensor,
                  peer1: fx.Tensor, peer2: fx.Tensor, flags: fx.Tensor, red: fx.Tensor, sync: fx.Tensor,
                  M: fx.Int32, nvb: fx.Int32, has_prefix: fx.Int32,
                  err_addr: fx.Int64, deadline_ns: fx.Int64, rank: fx.Int32, layer: fx.Int32, stall: fx.Int32,
                  s_wo: fx.Constexpr[int], s_wgu: fx.Constexpr[int], s_wr: fx.Constexpr[int], s_wdn: fx.Constexpr[int],
                  s13_e: fx.Constexpr[int], s13_n: fx.Constexpr[int], ssc13_e: fx.Constexpr[int],
                  ssc13_n: fx.Constexpr[int], s2_e: fx.Constexpr[int], s2_n: fx.Constexpr[int],
                  ssc2_e: fx.Constexpr[int], ssc2_n: fx.Constexpr[int], s_wsd: fx.Constexpr[int],
                  s_wup: fx.Constexpr[int], slot1: fx.Constexpr[int], slot2: fx.Constexpr[int],
                  H: fx.Constexpr[int], A: fx.Constexpr[int], S2: fx.Constexpr[int], E: fx.Constexpr[int],
                  L: fx.Constexpr[int], I: fx.Constexpr[int], I_UP: fx.Constexpr[int], TOPK: fx.Constexpr[int],
                  NB: fx.Constexpr[int], TP: fx.Constexpr[int], EPS: fx.Constexpr[float],
                  BETA: fx.Constexpr[float], LBETA: fx.Constexpr[float],
                  FRONT_BF16: fx.Constexpr[bool], MIX_BF16: fx.Constexpr[bool], PHASE_MASK: fx.Constexpr[int],
                  XL: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    r16 = (tid % 64) % 16
    sync_p = fx.get_iter(sync)
    lds = fx.SharedAllocator()
    red_lds = lds.allocate(fx.Array[fx.Float32, LDS_FLOATS, 16]).peek()
    aux = lds.allocate(fx.Array[fx.Float32, AUX_FLOATS, 16]).peek()
    ints = lds.allocate(fx.Array[fx.Int32, LDS_INTS, 16]).peek()
    # B operand rows: step row r16, or a valid row for the padded MFMA columns
    m_in = (r16 < M).select(r16, 0)
    n_loc = out_row(tid)
    m_out = out_col(tid)
    epoch = fx.Int32(0)
    if TP > 1:
        epoch = fx.generic_load(sync_p + EPOCH)
    words = lds.allocate(fx.Array[fx.Int64, WAVES * FRAME_WORDS, 16]).peek()
    fr = _Frame(barrier_plan(PHASE_MASK, TP), sync_p, flags, epoch, words, deadline_ns, err_addr, rank, layer, stall)

    # ---- 0: o_proj ------------------------------------------------------------------
    if PHASE_MASK & BIT["o_proj"]:
        fr.start("o_proj")
        x_rsrc = _rsrc(attn)

        def b_attn(k):
            return load16(x_rsrc, (m_in * A + k) * 2).bitcast(fx.BFloat16)

        w_rsrc = _rsrc(wo)
        part1_p = fx.get_iter(part1) + (epoch % 2) * slot1  # this launch's parity slot (TP > 1)
        for tile in range(bid, H // BN, nblk):
            total = tile_sum(bf16_rows(w_rsrc, (tile * BN + r16) * s_wo * 2), b_attn, A, red_lds)
            if m_out < M:
                (part1_p + (m_out * H + tile * BN + n_loc)).store(fx.BFloat16(total))
        if bid == 0:  # routing takes the minimum (row, slot) per expert
            own_p = fx.get_iter(owner)
            for e in range(tid, E, THREADS):
                (own_p + e).store(fx.Int32(OWNER_NONE))
        fr.end("o_proj")

    # ---- 1: seam --------------------------------------------------------------------
    if PHASE_MASK & BIT["seam"]:
        fr.start("seam")
        if fr.plan["seam"]["wait"]:  # the workgroups with a row to reduce
            fr.wait("seam", TP, epoch % 2, bid < M)
        peers = _Pulled(peer1, fx.get_iter(part1), epoch, slot1, TP) if TP > 1 else None
        seam_phase(M, nvb, has_prefix, _rsrc(part1), peers, _rsrc(prefix), _rsrc(bank), _rsrc(proj), _rsrc(rnorm),
                   _rsrc(onorm), fx.get_iter(p), fx.get_iter(h2), aux, H, NB, EPS, MIX_BF16)
        fr.end("seam")

    # ---- 2: front: [shared gate_up | router | latent down] @ h2 -----------------------
    if PHASE_MASK & BIT["front"]:
        fr.start("front")
        h_rsrc = _rsrc(h2)

        def b_h2(k):
            return load16(h_rsrc, (m_in * H + k) * 2).bitcast(fx.BFloat16)

        # one round-robin walk over the merged rows, in three branch-free segments
        gu_rsrc, gu_p = _rsrc(wgu), fx.get_iter(gu)
        for tile in range(first_tile(bid, nblk, 0), S2 // BN, nblk):
            total = tile_sum(bf16_rows(gu_rsrc, (tile * BN + r16) * s_wgu * 2), b_h2, H, red_lds)
            if FRONT_BF16:
                total = fx.Float32(fx.BFloat16(total))
            if m_out < M:
                (gu_p + (m_out * S2 + tile * BN + n_loc)).store(total)
        r_rsrc, lg_p = _rsrc(wr), fx.get_iter(logits)
        for tile in range(first_tile(bid, nblk, S2 // BN), (S2 + E) // BN, nblk):
            row0 = tile * BN - S2
            total = tile_sum(bf16_rows(r_rsrc, (row0 + r16) * s_wr * 2), b_h2, H, red_lds)
            if FRONT_BF16:
                total = fx.Float32(fx.BFloat16(total))
            if m_out < M:
                (lg_p + (m_out * E + row0 + n_loc)).store(total)
        d_rsrc, xin_p = _rsrc(wdn), fx.get_iter(xin)
        for tile in range(first_tile(bid, nblk, (S2 + E) // BN), (S2 + E + L) // BN, nblk):
            row0 = tile * BN - S2 - E
            total = tile_sum(bf16_rows(d_rsrc, (row0 + r16) * s_wdn * 2), b_h2, H, red_lds)
            if m_out < M:
                (xin_p + (m_out * L + row0 + n_loc)).store(fx.BFloat16(total))
        fr.end("front")

    # ---- 3: route -------------------------------------------------------------------
    if PHASE_MASK & BIT["route"]:
        fr.start("route")
        route_phase(M, _rsrc(logits), _rsrc(bias), fx.get_iter(logits), fx.get_iter(ids), fx.get_iter(wts),
                    fx.get_iter(owner), red_lds, aux, E, TOPK)
        fr.end("route")

    # ---- 4: experts_up ----------------------------------------------------------------
    if PHASE_MASK & BIT["experts_up"]:
        fr.start("experts_up")
        n_e = distinct(M, fx.get_iter(ids), fx.get_iter(owner), ints, TOPK)
        experts_up_phase(M, n_e, ints, _rsrc(xin), _rsrc(w13), _rsrc(sc13), fx.get_iter(act),
                         s13_e, s13_n, ssc13_e, ssc13_n, red_lds, L, I, I_UP, BETA, LBETA, XL)
        fr.end("experts_up")

    # ---- 5: experts_down, and the shared experts' down ----------------------------------
    if PHASE_MASK & BIT["experts_down"]:
        fr.start("experts_down")
        n_e = distinct(M, fx.get_iter(ids), fx.get_iter(owner), ints, TOPK)
        experts_down_phase(M, n_e, ints, _rsrc(act), _rsrc(w2), _rsrc(sc2), fx.get_iter(y),
                           s2_e, s2_n, ssc2_e, ssc2_n, _rsrc(gu), _rsrc(wsd), s_wsd,
                           fx.get_iter(part2) + (epoch % 2) * slot2, red_lds,
                           H, S2, L, I, TOPK, BETA, LBETA, XL)
        fr.end("experts_down")

    # ---- 6: combine -------------------------------------------------------------------
    if PHASE_MASK & BIT["combine"]:
        fr.start("combine")
        combine_phase(M, fx.get_iter(wts), fx.get_iter(y), fx.get_iter(part2) + (epoch % 2) * slot2, L, H, TOPK)
        fr.end("combine")

    # ---- 7: reduce (TP > 1) -------------------------------------------------------------
    if PHASE_MASK & BIT["reduce"]:
        if TP > 1:
            fr.start("reduce")
            if fr.plan["reduce"]["wait"]:
                fr.wait("reduce", TP, 2 + epoch % 2, bid >= 0)
            reduce_phase(M, _Pulled(peer2, fx.get_iter(part2), epoch, slot2, TP), fx.get_iter(red), L, H)
        fr.end("reduce")

    # ---- 8: latent_up: norm(latent) @ Wup^T, + shared, + p --------------------------------
    if PHASE_MASK & BIT["latent_up"]:
        fr.start("latent_up")
        src = red if TP > 1 else part2  # [latent | shared], reduced over the ranks
        lat_rsrc, g_rsrc, u_rsrc = _rsrc(src), _rsrc(lnorm), _rsrc(wup)
        row_b = m_in * (L + H) * 2
        grp = (tid % 64) // 16
        # this lane's row's sum of squares: lane group g takes every 4th 8-column piece,
        # then the 4 groups meet through two lane swaps (every wave computes it alike)
        ssq = fx.Float32(0.0)
        for i in range(L // 32):
            v = load16(lat_rsrc, row_b + ((i * 4 + grp) * 8) * 2).bitcast(fx.BFloat16).to(fx.Float32)
            ssq = ssq + (v * v).reduce("add")
        ssq = ssq + fx.gpu.shuffle_xor(ssq, 16, 64)
        ssq = ssq + fx.gpu.shuffle_xor(ssq, 32, 64)
        rstd = fx.Float32(1.0) / fx.math.sqrt(ssq / float(L) + EPS)

        def b_norm(k):
            lat = load16(lat_rsrc, row_b + k * 2).bitcast(fx.BFloat16).to(fx.Float32)
            g = load16(g_rsrc, k * 2).bitcast(fx.BFloat16).to(fx.Float32)
            return (lat * rstd * g).to(fx.BFloat16)

        src_p, p_p, out_p = fx.get_iter(src), fx.get_iter(p), fx.get_iter(out)
        # this start is bid, written so the compiler cannot share another phase's
        # first-trip test (o_proj's, the front's) with this loop and hold it in scalar
        # registers across every phase between (the persistent launch had 2 SGPRs too few)
        for tile in range(first_tile(bid, nblk, H // BN) - H // BN, H // BN, nblk):
            total = tile_sum(bf16_rows(u_rsrc, (tile * BN + r16) * s_wup * 2), b_norm, L, red_lds)
            if m_out < M:
                n = tile * BN + n_loc
                yv = fx.Float32(fx.BFloat16(total))
                shared = fx.Float32(fx.ptr_load(src_p + (m_out * (L + H) + L + n)))
                x = fx.Float32(fx.BFloat16(yv + shared))
                x = x + fx.Float32(fx.ptr_load(p_p + (m_out * H + n)))
                (out_p + (m_out * H + n)).store(fx.BFloat16(x))

    depart(sync_p, nblk)


@flyc.jit
def k2_fly_launch(attn: fx.Tensor, bank: fx.Tensor, prefix: fx.Tensor,
                  wo: fx.Tensor, proj: fx.Tensor, rnorm: fx.Tensor, onorm: fx.Tensor,
                  wgu: fx.Tensor, wr: fx.Tensor, wdn: fx.Tensor, bias: fx.Tensor,
                  w13: fx.Tensor, sc13: fx.Tensor, w2: fx.Tensor, sc2: fx.Tensor,
                  wsd: fx.Tensor, lnorm: fx.Tensor, wup: fx.Tensor,
                  part1: fx.Tensor, p: fx.Tensor, h2: fx.Tensor, gu: fx.Tensor, logits: fx.Tensor, xin: fx.Tensor,
                  ids: fx.Tensor, wts: fx.Tensor, owner: fx.Tensor, act: fx.Tensor, y: fx.Tensor,
                  part2: fx.Tensor, out: fx.Tensor,
                  peer1: fx.Tensor, peer2: fx.Tensor, flags: fx.Tensor, red: fx.Tensor, sync: fx.Tensor,
                  M: fx.Int32, nvb: fx.Int32, has_prefix: fx.Int32,
                  err_addr: fx.Int64, deadline_ns: fx.Int64, rank: fx.Int32, layer: fx.Int32, stall: fx.Int32,
                  s_wo: fx.Constexpr[int], s_wgu: fx.Constexpr[int], s_wr: fx.Constexpr[int], s_wdn: fx.Constexpr[int],
                  s13_e: fx.Constexpr[int], s13_n: fx.Constexpr[int], ssc13_e: fx.Constexpr[int],
                  ssc13_n: fx.Constexpr[int], s2_e: fx.Constexpr[int], s2_n: fx.Constexpr[int],
                  ssc2_e: fx.Constexpr[int], ssc2_n: fx.Constexpr[int], s_wsd: fx.Constexpr[int],
                  s_wup: fx.Constexpr[int], slot1: fx.Constexpr[int], slot2: fx.Constexpr[int],
                  H: fx.Constexpr[int], A: fx.Constexpr[int], S2: fx.Constexpr[int], E: fx.Constexpr[int],
                  L: fx.Constexpr[int], I: fx.Constexpr[int], I_UP: fx.Constexpr[int], TOPK: fx.Constexpr[int],
                  NB: fx.Constexpr[int], TP: fx.Constexpr[int], EPS: fx.Constexpr[float],
                  BETA: fx.Constexpr[float], LBETA: fx.Constexpr[float],
                  FRONT_BF16: fx.Constexpr[bool], MIX_BF16: fx.Constexpr[bool], PHASE_MASK: fx.Constexpr[int],
                  XL: fx.Constexpr[int], GRID: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
    k2_fly_kernel(attn, bank, prefix, wo, proj, rnorm, onorm, wgu, wr, wdn, bias, w13, sc13, w2, sc2, wsd, lnorm,
                  wup, part1, p, h2, gu, logits, xin, ids, wts, owner, act, y, part2, out, peer1, peer2, flags, red,
                  sync, M, nvb, has_prefix, err_addr, deadline_ns, rank, layer, stall, s_wo, s_wgu, s_wr, s_wdn,
                  s13_e, s13_n, ssc13_e, ssc13_n, s2_e, s2_n, ssc2_e, ssc2_n, s_wsd, s_wup, slot1, slot2,
                  H, A, S2, E, L, I, I_UP, TOPK, NB, TP, EPS, BETA, LBETA, FRONT_BF16, MIX_BF16, PHASE_MASK, XL,
                  ).launch(grid=(GRID, 1, 1), block=(THREADS, 1, 1), stream=stream)
