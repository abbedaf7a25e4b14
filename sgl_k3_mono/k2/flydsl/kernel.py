"""K2's device code for gfx950 in FlyDSL: the dense phases written so far, inside the
persistent frame every phase shares.

Written (numbering and numerics as k2/triton/kernel.py):
- o_proj     a_r = bf16(o_r @ Wo^T) into this rank's partials (the parity slot of this
             launch's epoch at TP > 1, then the ready tag, system scope);
- front      [shared gate_up | router | latent down] @ h2; gate_up and router logits
             rounded to bf16 (SGLang's HIP front GEMM emits bf16) and kept as fp32,
             routed input bf16;
- latent_up  out = bf16(bf16(bf16(norm(latent) @ Wup^T) + shared) + p).
Not written: seam, route, experts_up, experts_down, combine, reduce (Triton only); the
launcher refuses a persistent FlyDSL K2 until they exist (launch.py, FLY_PHASES).

The frame: start time, the stall switch at each phase, a grid barrier between phases
(numbered in launch order), `depart` at the end (runtime/flydsl_sync.py). PHASE_MASK
says which written phases this compiled kernel runs: one bit is one phase as its own
launch (how tests and benchmarks run phases), several bits run them back to back.
Every dense phase is the MFMA tile of tile.py walked round-robin by the 256 workgroups.
"""

from __future__ import annotations

import flydsl.compiler as flyc
import flydsl.expr as fx

from sgl_k3_mono.k2.flydsl.geometry import BN, LDS_FLOATS, THREADS, first_tile, out_col, out_row
from sgl_k3_mono.k2.flydsl.tile import load16, tile_sum
from sgl_k3_mono.runtime.flydsl_sync import EPOCH, SYSTEM, depart, grid_barrier, maybe_stall, now_ns

LAUNCH_ID = 1  # runtime.failure.LAUNCHES.index("k2")
O_PROJ, FRONT, LATENT_UP = 1, 2, 4
"""PHASE_MASK bits of the written phases."""


def _rsrc(t):
    return fx.rocdl.get_buffer_rsrc(fx.get_iter(fx.rocdl.make_buffer_tensor(t)))


@flyc.kernel(known_block_size=[THREADS, 1, 1])
def k2_fly_kernel(attn: fx.Tensor, wo: fx.Tensor, part1: fx.Tensor,
                  h2: fx.Tensor, wgu: fx.Tensor, wr: fx.Tensor, wdn: fx.Tensor,
                  gu: fx.Tensor, logits: fx.Tensor, xin: fx.Tensor,
                  red2: fx.Tensor, lnorm: fx.Tensor, wup: fx.Tensor, p: fx.Tensor, out: fx.Tensor,
                  flags: fx.Tensor, sync: fx.Tensor,
                  M: fx.Int32, s_wo: fx.Int32, s_wgu: fx.Int32, s_wr: fx.Int32, s_wdn: fx.Int32,
                  s_wup: fx.Int32, slot1: fx.Int32, err_addr: fx.Int64, deadline_ns: fx.Int64,
                  rank: fx.Int32, layer: fx.Int32, stall: fx.Int32,
                  H: fx.Constexpr[int], A: fx.Constexpr[int], S2: fx.Constexpr[int], E: fx.Constexpr[int],
                  L: fx.Constexpr[int], TP: fx.Constexpr[int], EPS: fx.Constexpr[float],
                  FRONT_BF16: fx.Constexpr[bool], PHASE_MASK: fx.Constexpr[int],
                  ID_O_PROJ: fx.Constexpr[int], ID_FRONT: fx.Constexpr[int], ID_LATENT_UP: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    r16 = (tid % 64) % 16
    sync_p = fx.get_iter(sync)
    rec = fx.inttoptr(sync_p.type, err_addr)
    t0 = now_ns()
    red = fx.SharedAllocator().allocate(fx.Array[fx.Float32, LDS_FLOATS, 16]).peek()
    # B operand rows: step row r16, or a valid row for the padded MFMA columns
    m_in = r16
    if m_in >= M:
        m_in = fx.Int32(0)
    n_loc = out_row(tid)
    m_out = out_col(tid)
    barriers = 0  # grid barriers so far (trace time): each phase after the first waits on one

    # ---- o_proj ---------------------------------------------------------------------
    if PHASE_MASK & O_PROJ:
        epoch = fx.Int32(0)
        if TP > 1:
            epoch = fx.generic_load(sync_p + EPOCH)
        maybe_stall(stall, ID_O_PROJ, t0, deadline_ns, rec, rank, layer, LAUNCH_ID)
        w_rsrc, x_rsrc = _rsrc(wo), _rsrc(attn)
        out_p = fx.get_iter(part1) + (epoch % 2) * slot1

        def b_attn(k):
            return load16(x_rsrc, (m_in * A + k) * 2).bitcast(fx.BFloat16)

        for tile in range(bid, H // BN, nblk):
            total = tile_sum(w_rsrc, (tile * BN + r16) * s_wo * 2, b_attn, A, red)
            if m_out < M:
                (out_p + (m_out * H + tile * BN + n_loc)).store(fx.BFloat16(total))
        if PHASE_MASK != O_PROJ:
            grid_barrier(sync_p, barriers, nblk, t0, deadline_ns, rec, rank, layer, LAUNCH_ID, ID_O_PROJ)
            barriers += 1
        if TP > 1:
            if PHASE_MASK == O_PROJ:  # the partials are complete grid-wide only past a barrier
                grid_barrier(sync_p, barriers, nblk, t0, deadline_ns, rec, rank, layer, LAUNCH_ID, ID_O_PROJ)
                barriers += 1
            # the peers read this rank's partials of this parity once the tag carries
            # this launch's epoch: system-scope release, workgroup 0 alone
            if bid == 0:
                if tid == 0:
                    mine = fx.inttoptr(sync_p.type, fx.Int64(fx.ptr_load(fx.get_iter(flags) + rank)))
                    fx.atomic_xchg(mine + epoch % 2, epoch + 1, syncscope=SYSTEM,
                                   ordering=fx.AtomicOrdering.Release)

    # ---- front: [shared gate_up | router | latent down] @ h2 --------------------------
    if PHASE_MASK & FRONT:
        maybe_stall(stall, ID_FRONT, t0, deadline_ns, rec, rank, layer, LAUNCH_ID)
        h_rsrc = _rsrc(h2)

        def b_h2(k):
            return load16(h_rsrc, (m_in * H + k) * 2).bitcast(fx.BFloat16)

        # one round-robin walk over the merged rows, in three branch-free segments
        gu_rsrc, gu_p = _rsrc(wgu), fx.get_iter(gu)
        for tile in range(first_tile(bid, nblk, 0), S2 // BN, nblk):
            total = tile_sum(gu_rsrc, (tile * BN + r16) * s_wgu * 2, b_h2, H, red)
            if FRONT_BF16:
                total = fx.Float32(fx.BFloat16(total))
            if m_out < M:
                (gu_p + (m_out * S2 + tile * BN + n_loc)).store(total)
        r_rsrc, lg_p = _rsrc(wr), fx.get_iter(logits)
        for tile in range(first_tile(bid, nblk, S2 // BN), (S2 + E) // BN, nblk):
            row0 = tile * BN - S2
            total = tile_sum(r_rsrc, (row0 + r16) * s_wr * 2, b_h2, H, red)
            if FRONT_BF16:
                total = fx.Float32(fx.BFloat16(total))
            if m_out < M:
                (lg_p + (m_out * E + row0 + n_loc)).store(total)
        d_rsrc, xin_p = _rsrc(wdn), fx.get_iter(xin)
        for tile in range(first_tile(bid, nblk, (S2 + E) // BN), (S2 + E + L) // BN, nblk):
            row0 = tile * BN - S2 - E
            total = tile_sum(d_rsrc, (row0 + r16) * s_wdn * 2, b_h2, H, red)
            if m_out < M:
                (xin_p + (m_out * L + row0 + n_loc)).store(fx.BFloat16(total))
        if PHASE_MASK & LATENT_UP:
            grid_barrier(sync_p, barriers, nblk, t0, deadline_ns, rec, rank, layer, LAUNCH_ID, ID_FRONT)
            barriers += 1

    # ---- latent_up: norm(latent) @ Wup^T, + shared, + p --------------------------------
    if PHASE_MASK & LATENT_UP:
        maybe_stall(stall, ID_LATENT_UP, t0, deadline_ns, rec, rank, layer, LAUNCH_ID)
        lat_rsrc, g_rsrc, u_rsrc = _rsrc(red2), _rsrc(lnorm), _rsrc(wup)
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

        red2_p, p_p, out_p = fx.get_iter(red2), fx.get_iter(p), fx.get_iter(out)
        for tile in range(bid, H // BN, nblk):
            total = tile_sum(u_rsrc, (tile * BN + r16) * s_wup * 2, b_norm, L, red)
            if m_out < M:
                n = tile * BN + n_loc
                y = fx.Float32(fx.BFloat16(total))
                shared = fx.Float32(fx.ptr_load(red2_p + (m_out * (L + H) + L + n)))
                x = fx.Float32(fx.BFloat16(y + shared))
                x = x + fx.Float32(fx.ptr_load(p_p + (m_out * H + n)))
                (out_p + (m_out * H + n)).store(fx.BFloat16(x))

    depart(sync_p, nblk)


@flyc.jit
def k2_fly_launch(attn: fx.Tensor, wo: fx.Tensor, part1: fx.Tensor,
                  h2: fx.Tensor, wgu: fx.Tensor, wr: fx.Tensor, wdn: fx.Tensor,
                  gu: fx.Tensor, logits: fx.Tensor, xin: fx.Tensor,
                  red2: fx.Tensor, lnorm: fx.Tensor, wup: fx.Tensor, p: fx.Tensor, out: fx.Tensor,
                  flags: fx.Tensor, sync: fx.Tensor,
                  M: fx.Int32, s_wo: fx.Int32, s_wgu: fx.Int32, s_wr: fx.Int32, s_wdn: fx.Int32,
                  s_wup: fx.Int32, slot1: fx.Int32, err_addr: fx.Int64, deadline_ns: fx.Int64,
                  rank: fx.Int32, layer: fx.Int32, stall: fx.Int32,
                  H: fx.Constexpr[int], A: fx.Constexpr[int], S2: fx.Constexpr[int], E: fx.Constexpr[int],
                  L: fx.Constexpr[int], TP: fx.Constexpr[int], EPS: fx.Constexpr[float],
                  FRONT_BF16: fx.Constexpr[bool], PHASE_MASK: fx.Constexpr[int],
                  ID_O_PROJ: fx.Constexpr[int], ID_FRONT: fx.Constexpr[int], ID_LATENT_UP: fx.Constexpr[int],
                  GRID: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
    k2_fly_kernel(attn, wo, part1, h2, wgu, wr, wdn, gu, logits, xin, red2, lnorm, wup, p, out, flags, sync,
                  M, s_wo, s_wgu, s_wr, s_wdn, s_wup, slot1, err_addr, deadline_ns, rank, layer, stall,
                  H, A, S2, E, L, TP, EPS, FRONT_BF16, PHASE_MASK, ID_O_PROJ, ID_FRONT, ID_LATENT_UP,
                  ).launch(grid=(GRID, 1, 1), block=(THREADS, 1, 1), stream=stream)
