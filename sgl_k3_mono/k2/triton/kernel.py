"""K2, the layer launch, as one persistent Triton kernel (sm_90).

One program per SM walks eight phases (nine at TP > 1); a grid barrier separates them (PHASE = -1).
With PHASE = p the same code runs phase p alone, as its own launch: the interpreter
tests run K2 that way on the CPU, and the benchmark times the phases that way.

  0 o_proj       a_r = bf16(o_r @ Wo^T)                     tiles of H rows of Wo
  1 seam         a = bf16(sum_r a_r); p = bf16(p + a); h2 = norm(Agg(bank, p))   each row over SP programs
                 (SEAM_SPLIT, runtime/triton_seam.py: one H-slice each, row-local waits) or one program a row
  2 front        [shared gate_up | router | latent down] @ h2     tiles of the merged rows
  3 route        top-k of one row a program; owner[e] = first (row, slot) naming e;
                 the shared experts' activation sact = bf16(SiTU(gu))   (512-wide chunks)
                 (FR, the default on sm_90: done inside phase 2 by helper programs once the
                 router's / shared gate-up's tiles are counted stored; no barrier of its own)
  4 experts_up   act_n = bf16(SiTU(W13_e x))   (distinct expert n, I tile); SDU > 0: the shared down here
  5 experts_down y[r,k] = bf16(W2_e act_n[r]) (distinct expert n, L tile); shared = bf16(sact @ Wd^T)
  6 combine      latent = bf16(sum_k w[r,k] y[r,k])  in top-k order  (L tiles)
  7 reduce       TP > 1: [latent | shared] = bf16(sum_r partial_r) over the peers (column tiles)
  8 latent_up    out = bf16(bf16(bf16(norm(latent) @ Wup^T) + shared) + p)   (H tiles)

Every weight is read once a step; activations stay in L2-resident scratch. An expert
routed by several rows is computed once for all of them: routing leaves, per expert,
the first (row, slot) that names it (an atomic min, so the owner does not depend on
timing); the expert phases number the owned pairs in (row, slot) order and spread
(distinct expert x tile) items over the grid, so the work is balanced whatever the
overlap between rows. Rows are padded to 16 for tl.dot; padded rows are masked.
Where a program owns several short K loops (the front's and latent_up's tiles: FLATD, GEMVs at
1 row and an option on the tensor cores; the bf16 experts' items: FLATX), its tiles or items
and their K steps are one software-pipelined loop, so the cp.async pipeline does not drain
and refill between them.
TP > 1: both reduces pull. Each rank writes its partials into its own symmetric buffer,
in the slot of this launch's epoch parity, and publishes an epoch tag (system-scope
release); a reader waits (bounded) for every rank's tag, then sums the ranks' partials
in rank order, so every rank holds bit-identical rows and routing. Two parity slots: a
rank can only reuse a slot after every peer has published the next epoch, i.e. after
every peer has finished reading it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.k2.triton.frame import (FRONT_ROUTER, FRONT_SHARED, LAUNCH_ID, TRACE_EXIT, TRACE_SLOTS, barrier,
                                         enter, publish, wait_peers)
from sgl_k3_mono.k2.triton.matmul import (bf16_step, dot_bf16, dot_bf16_step, dot_mxfp4_scaled, gemv_bf16, gemv_bf16_step,
                                          gemv_mxfp4, mx_up)
from sgl_k3_mono.k2.triton.mma_fp4 import mxfp4_mma_tiles
from sgl_k3_mono.k2.triton.parts import (SITU_CHUNK, count_tile, down_store, front_rows, front_store,
                                         group_sum, h_mask, h_tile, l2_expert_rows, latent_up_store, route_one,
                                         shared_down_tile, situ, situ_chunk, items_of, tiles_of)
from sgl_k3_mono.k2.triton.routing import (distinct_experts, nth_expert, table_expert, user_count, user_rows,
                                           write_expert_table)
from sgl_k3_mono.k2.triton.seam import seam_rows, seam_split
from sgl_k3_mono.runtime.triton_l2 import l2_prefetch_rows
from sgl_k3_mono.runtime.triton_sync import EPOCH, depart, maybe_stall, now_ns, wait_geq


# The scalars that change from layer to layer (or rank to rank, or with the fault switch)
# are never specialised: Triton would compile one variant for each value class they take
# (1, a multiple of 16, other), so a 92-layer step warmed six K2s a width (rank 0 and rank
# 1 each their own six), and a stall set for one layer compiled there. (err_addr: each
# process's own failure record.) Their sm_90 SASS is the same, instruction for
# instruction, as when they were specialised. has_prefix stays specialised (two variants a
# width: block-write layers and the rest): unspecialised, both of its seam branches are
# compiled in, 8.5 % more code at 2 rows.
K2_RUNTIME_SCALARS = ("nvb", "rank", "layer", "stall_phase", "err_addr", "frh", "ring_off")


@triton.jit(do_not_specialize=K2_RUNTIME_SCALARS)
def k2_kernel(
    # inputs
    attn_ptr, bank_ptr, prefix_ptr, M, nvb, has_prefix, NB,
    # weights (SGLang's tensors, row strides given)
    wo_ptr, s_wo, proj_ptr, rnorm_ptr, onorm_ptr,
    wgu_ptr, s_wgu, wr_ptr, s_wr, wdn_ptr, s_wdn, bias_ptr,
    w13_ptr, s13_e, s13_n, sc13_ptr, ssc13_e, ssc13_n,
    w2_ptr, s2_e, s2_n, sc2_ptr, ssc2_e, ssc2_n,
    wsd_ptr, s_wsd, lnorm_ptr, wup_ptr, s_wup,
    # scratch
    part1_ptr, p_ptr, h2_ptr, gu_ptr, logit_ptr, xin_ptr, ids_ptr, wts_ptr, owner_ptr, act_ptr, y_ptr,
    sact_ptr, xnorm_ptr, part2_ptr, sa_ptr, smix_ptr, spart_ptr, scnt_ptr, etab_ptr, lsq_ptr,
    out_ptr,
    # TP > 1: peers' symmetric partial buffers and ready tags (int64 address tables), local reduce
    peer1_ptr, peer2_ptr, flag_ptr, red_ptr, SLOT1, SLOT2,
    # synchronisation and failure
    sync_ptr, err_addr, deadline_ns, rank, layer, stall_phase, trace_ptr,
    # FR: the first helper program (tiles.front_helpers; it moves with the rows, so not a
    # constexpr: every row count of a tile class shares one build); where mma_fp4's
    # shared-memory ring starts (XRS / XRSD > 0; runtime/triton_smem.py)
    frh, ring_off,
    # shapes and constants
    H: tl.constexpr, A: tl.constexpr, S2: tl.constexpr, E: tl.constexpr, L: tl.constexpr,
    I: tl.constexpr, I_UP: tl.constexpr, TOPK: tl.constexpr,
    EPS: tl.constexpr, BETA: tl.constexpr, LBETA: tl.constexpr,
    MXFP4: tl.constexpr, FRONT_BF16: tl.constexpr, MIX_BF16: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BKX: tl.constexpr, BKD: tl.constexpr,
    BI: tl.constexpr, BL: tl.constexpr,
    BH: tl.constexpr, BE: tl.constexpr, KB: tl.constexpr, NBB: tl.constexpr, STAGES: tl.constexpr,
    PHASE: tl.constexpr, TP: tl.constexpr = 1, HIP: tl.constexpr = False,
    STX: tl.constexpr = 0, STXD: tl.constexpr = 0, BKS: tl.constexpr = 0, BKU: tl.constexpr = 0, STU: tl.constexpr = 0,
    DENSE_GEMV: tl.constexpr = False, EXPERT_GEMV: tl.constexpr = False, XR: tl.constexpr = 16,
    MX4D: tl.constexpr = True, XU: tl.constexpr = 0, SCALE_ALIGN: tl.constexpr = 1,
    MMA: tl.constexpr = False, NT: tl.constexpr = 128, KUX: tl.constexpr = 2, KUD: tl.constexpr = 1,
    KSX: tl.constexpr = 1, TRACE: tl.constexpr = False, SPASS: tl.constexpr = 1, PF: tl.constexpr = 0,
    BNF: tl.constexpr = 64, BNH: tl.constexpr = 64, XPD: tl.constexpr = 0, XPDD: tl.constexpr = 0,
    XL2: tl.constexpr = 0, FLATD: tl.constexpr = 0, FLATX: tl.constexpr = 0, PTX: tl.constexpr = False,
    XDB: tl.constexpr = 0, SEAM_SPLIT: tl.constexpr = False, BS: tl.constexpr = 512, SP: tl.constexpr = 1,
    SPP: tl.constexpr = 1, SEAM_STEP: tl.constexpr = 0, SDU: tl.constexpr = 0, SDUT: tl.constexpr = 0,
    XRS: tl.constexpr = 0,
    XRSD: tl.constexpr = 0, BKN: tl.constexpr = 128, XL2B: tl.constexpr = 0, XL2BD: tl.constexpr = 0,
    XET: tl.constexpr = 0, FR: tl.constexpr = 0, BNR: tl.constexpr = 64, LSQ: tl.constexpr = 0,
    LSQP: tl.constexpr = 256, BNO: tl.constexpr = 0, BKO: tl.constexpr = 0,
    # where the MXFP4 experts' bytes sit (k2/expert_layout.py: 0 SGLang's plain rows, 1 and 2
    # AITER's a16w4 and generic preshuffles, read in place; mma_fp4 takes 0 only)
    XL: tl.constexpr = 0,
    # host side only (K2Launch._run_triton fits the compiled function's L1 / shared carveout):
    # a constexpr so that each choice is its own compiled function, which holds the carveout
    CARVE: tl.constexpr = False,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    PERSISTENT: tl.constexpr = PHASE < 0
    BC: tl.constexpr = 64 if BL > 64 else BL  # combine's latent tile
    SKIP: tl.constexpr = 1 if FR and PHASE < 0 else 0  # FR: no routing barrier, so one barrier fewer from there
    NHT: tl.constexpr = (H + BNH - 1) // BNH  # latent_up's tiles over H (and o_proj's, unless BNO)
    # o_proj's own tile (BNO rows, K steps of BKO; 0: latent_up's): its K (the attention width,
    # 1536 at a TP-8 rank) is 3 steps of a 16-row GEMV tile, so each of a program's 3-4 tiles
    # restarts the load pipeline; 64 rows a tile is one tile a program, one long K loop
    OBN: tl.constexpr = BN if BNO == 0 else BNO
    OBNH: tl.constexpr = BNH if BNO == 0 else BNO
    OBK: tl.constexpr = BK if BNO == 0 else BKO
    NHO: tl.constexpr = (H + OBNH - 1) // OBNH
    # MXFP4 experts on the tensor cores go through tl.dot_scaled; the FMA paths decode by hand
    SCALED: tl.constexpr = MXFP4 and not EXPERT_GEMV
    t0 = 0
    if PERSISTENT:
        t0 = now_ns(HIP)
    rm = tl.arange(0, BM)  # rows of the dense phases
    rx = tl.arange(0, XR)  # rows of the expert phases
    if MMA:  # MXFP4 experts through mma_fp4: one element a thread (warp w, lane 4 g + c)
        tq = tl.arange(0, NT)
        qg = (tq % 32) // 4
        qc = tq % 4
        qrow = (tq // 32) * 16 + qg  # row g of the warp's first 16-row tile
        # experts_up may split K over KSX warp groups (more, smaller items where few
        # experts are routed): a warp's rows within its group, the group's first k-block,
        # and (tr) the thread map of the group-summed [NT / KSX] results
        if KSX == 1:
            qup, qkb, qrow_r, qc_r = qrow, 0, qrow, qc
        else:
            qup = ((tq // 32) % (NT // 32 // KSX)) * 16 + qg
            qkb = (tq // 32 // (NT // 32 // KSX)) * (L // 128 // KSX)
            tr = tl.arange(0, NT // KSX)
            qrow_r = (tr // 32) * 16 + (tr % 32) // 4
            qc_r = tr % 4
    epoch = 0
    if TP > 1:
        # this launch's epoch: the parity slot of the partials and the ready tag
        epoch = tl.load(sync_ptr + EPOCH)
        tag = epoch + 1
        part1_ptr += (epoch % 2) * SLOT1
        part2_ptr += (epoch % 2) * SLOT2

    # -- 0: o_proj --------------------------------------------------------------------
    if PERSISTENT or PHASE == 0:
        if PERSISTENT:
            enter(0, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        for tile in range(pid, NHO, nprog):  # OBNH rows a tile (OBN: the register tile)
            n0, nend = h_tile(tile, H, OBN, OBNH)
            acc = dot_bf16(attn_ptr, A, M, wo_ptr, s_wo, n0, nend, A, tl.zeros((BM, OBN), tl.float32),
                           BM, OBN, OBK, STAGES, DENSE_GEMV)
            rn = n0 + tl.arange(0, OBN)
            tl.store(part1_ptr + rm[:, None] * H + rn[None, :], acc.to(tl.bfloat16),
                     mask=h_mask(rm, M, rn, nend, OBN, OBNH))
        if pid == 0:  # routing (phase 3) takes the minimum (row, slot) per expert
            tl.store(owner_ptr + tl.arange(0, BE), 0x7FFFFFFF, mask=tl.arange(0, BE) < E)
        if PERSISTENT:
            barrier(0, 0, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if TP > 1:
            publish(flag_ptr, rank, epoch % 2, tag, pid)

    # -- 1: reduce over the ranks present, prefix add, FFN attn-res seam --------------
    if PERSISTENT or PHASE == 1:
        if PERSISTENT:
            enter(1, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
            if PF > 0:  # HBM is idle through the seam: the head of this program's first front tile into L2
                if pid < (S2 + E + L) // BNF:
                    n0 = pid * BNF
                    if n0 < S2:
                        l2_prefetch_rows(wgu_ptr + n0 * s_wgu, s_wgu * 2, BNF, BNF, PF, NT)
                    elif n0 < S2 + E:
                        l2_prefetch_rows(wr_ptr + (n0 - S2) * s_wr, s_wr * 2, BNF, BNF, PF, NT)
                    else:
                        l2_prefetch_rows(wdn_ptr + (n0 - S2 - E) * s_wdn, s_wdn * 2, BNF, BNF, PF, NT)
        if TP > 1:
            if PERSISTENT:
                if pid < (M * SP if SEAM_SPLIT else M):
                    wait_peers(flag_ptr, epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 1, HIP)
        if SEAM_SPLIT:
            seam_split(pid, M, nvb, has_prefix, NB, part1_ptr, peer1_ptr, SLOT1, epoch, sa_ptr,
                       prefix_ptr, bank_ptr, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, smix_ptr, spart_ptr,
                       scnt_ptr, t0, deadline_ns, err_addr, rank, layer, H, NBB, BS, SP, SPP, EPS, MIX_BF16, TP,
                       PERSISTENT, SEAM_STEP, HIP, trace_ptr, TRACE, SPASS)
        else:
            seam_rows(pid, nprog, M, nvb, has_prefix, NB, part1_ptr, peer1_ptr, SLOT1, epoch, prefix_ptr, bank_ptr,
                      p_ptr, proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, H, BH, NBB, EPS, MIX_BF16, TP)
        if PERSISTENT:
            barrier(1, 1, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
            if SEAM_SPLIT:  # every row wait is over (barrier 1): the row counters start again at 0
                if pid == 0:
                    tl.store(scnt_ptr + tl.arange(0, 16), 0, mask=tl.arange(0, 16) < M)

    # -- 2: the MoE front: [shared gate_up | router | latent down] ---------------------
    # (the shared experts' SiTU in 512-wide chunks, over the grid, not in every shared-down
    # item: there the operand layout repeats it in every warp, 10 M FP32 instructions a
    # launch at M 8)
    NSC: tl.constexpr = (S2 // 2 + SITU_CHUNK.value - 1) // SITU_CHUNK.value
    kc = tl.arange(0, KB)
    if PERSISTENT or PHASE == 2:
        if PERSISTENT:
            enter(2, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if FR and PERSISTENT:
            # FR: [router | shared gate/up] in BNR-row tiles, [latent down] in BNF-row ones,
            # and phase 3's work done here by the helper programs (from frh, the ones whose
            # own tiles end first: tiles.front_helpers) once the tiles they read are counted
            # stored: the grid routes while the latent down streams, with no barrier of its own
            NRT: tl.constexpr = E // BNR
            NST: tl.constexpr = S2 // BNR
            if FLATD:  # the program's tiles and their K steps as one pipelined loop (BNR = BNF: one tile width)
                tl.static_assert(BNR == BNF)
                NKF: tl.constexpr = (H + BK - 1) // BK
                # GEMV products [rows, BNF, K chunk] summed at the tile's end, or tensor-core sums
                part = tl.zeros((BM, BNF, BK) if DENSE_GEMV else (BM, BNF), tl.float32)
                for it in tl.range(0, tiles_of(pid, nprog, NRT + NST + L // BNF) * NKF, num_stages=STAGES):
                    tile = pid + (it // NKF) * nprog
                    router = tile < NRT
                    shared = (tile >= NRT) & (tile < NRT + NST)
                    n0 = tl.where(router, tile, tl.where(shared, tile - NRT, tile - NRT - NST)) * BNF
                    w_ptr = tl.where(router, wr_ptr, tl.where(shared, wgu_ptr, wdn_ptr))  # the tile's segment
                    s_w = tl.where(router, s_wr, tl.where(shared, s_wgu, s_wdn))
                    n_seg = tl.where(router, E, tl.where(shared, S2, L))
                    part = bf16_step(part, h2_ptr, H, M, w_ptr, s_w, n0, n_seg, (it % NKF) * BK, H, BM, BNF, BK,
                                     DENSE_GEMV)
                    if it % NKF == NKF - 1:
                        acc = tl.sum(part, axis=2) if DENSE_GEMV else part
                        if router:
                            front_store(acc, logit_ptr, n0, E, M, rm, BNF, FRONT_BF16, False)
                            count_tile(sync_ptr + FRONT_ROUTER, PTX)
                        elif shared:
                            front_store(acc, gu_ptr, n0, S2, M, rm, BNF, FRONT_BF16, False)
                            count_tile(sync_ptr + FRONT_SHARED, PTX)
                        else:
                            front_store(acc, xin_ptr, n0, L, M, rm, BNF, False, True)
                        part = tl.zeros((BM, BNF, BK) if DENSE_GEMV else (BM, BNF), tl.float32)
            else:
                for tile in range(pid, NRT + NST + L // BNF, nprog):
                    if tile < NRT:
                        front_rows(h2_ptr, M, wr_ptr, s_wr, tile * BNR, E, logit_ptr, rm, H, BM, BNR, BK, STAGES,
                                   DENSE_GEMV, FRONT_BF16, False)
                        count_tile(sync_ptr + FRONT_ROUTER)
                    elif tile < NRT + NST:
                        front_rows(h2_ptr, M, wgu_ptr, s_wgu, (tile - NRT) * BNR, S2, gu_ptr, rm, H, BM, BNR, BK,
                                   STAGES, DENSE_GEMV, FRONT_BF16, False)
                        count_tile(sync_ptr + FRONT_SHARED)
                    else:
                        front_rows(h2_ptr, M, wdn_ptr, s_wdn, (tile - NRT - NST) * BNF, L, xin_ptr, rm, H, BM, BNF,
                                   BK, STAGES, DENSE_GEMV, False, True)
            for hi in range((pid - frh + nprog) % nprog, M + M * NSC, nprog):  # helper hi: row hi, or a chunk
                if hi < M:
                    wait_geq(sync_ptr + FRONT_ROUTER, NRT, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 2,
                             "gpu", HIP)
                    route_one(hi, logit_ptr, bias_ptr, ids_ptr, wts_ptr, owner_ptr, E, TOPK, BE, KB)
                else:
                    wait_geq(sync_ptr + FRONT_SHARED, NST, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 2,
                             "gpu", HIP)
                    situ_chunk(hi - M, gu_ptr, sact_ptr, S2, NSC, BETA, LBETA)
            maybe_stall(stall_phase, 3, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)  # (no phase 3)
        else:
            for tile in range(pid, (S2 + E + L) // BNF, nprog):
                n0 = tile * BNF
                if n0 < S2:
                    front_rows(h2_ptr, M, wgu_ptr, s_wgu, n0, S2, gu_ptr, rm, H, BM, BNF, BK, STAGES, DENSE_GEMV,
                               FRONT_BF16, False)
                elif n0 < S2 + E:
                    front_rows(h2_ptr, M, wr_ptr, s_wr, n0 - S2, E, logit_ptr, rm, H, BM, BNF, BK, STAGES,
                               DENSE_GEMV, FRONT_BF16, False)
                else:
                    front_rows(h2_ptr, M, wdn_ptr, s_wdn, n0 - S2 - E, L, xin_ptr, rm, H, BM, BNF, BK, STAGES,
                               DENSE_GEMV, False, True)
        if PERSISTENT:
            barrier(2, 2, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
            if FR:  # every helper's wait is over (barrier 2): the counts start again at 0
                if pid == 0:
                    tl.store(sync_ptr + FRONT_ROUTER + tl.arange(0, 2), 0)

    # -- 3: routing, one row a program; the shared experts' SiTU (FR: done in the front) --
    if (PERSISTENT and not FR) or PHASE == 3:
        if PERSISTENT:
            enter(3, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        for r in range(pid, M, nprog):
            route_one(r, logit_ptr, bias_ptr, ids_ptr, wts_ptr, owner_ptr, E, TOPK, BE, KB)
        for sq in range(pid, M * NSC, nprog):
            situ_chunk(sq, gu_ptr, sact_ptr, S2, NSC, BETA, LBETA)
        if PERSISTENT:
            barrier(3, 3, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 4: each distinct routed expert's gate/up and SiTU ----------------------------
    if PERSISTENT or PHASE == 4:
        if PERSISTENT:
            enter(4, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        ids, keep, first, number, n_e = distinct_experts(ids_ptr, owner_ptr, M, TOPK, BM, KB)
        n_up = n_e * (I // BI)
        # SDU: the shared experts' down tiles ride here (item n_up + t is tile t), on programs
        # the routed items leave idle (48 items for 132 programs at M 1). SDU 1: they follow
        # the routed items round the grid, so once they outnumber the idle programs a program
        # that ran a routed item (a chain of 28 k-blocks at a TP-8 rank) runs tiles after it.
        # SDU 2: they are dealt over the idle programs only (a routed program stops at n_up,
        # an idle one steps by the idle count), and round the whole grid only where none is
        # idle. One loop either way: a second copy of the tile's code cost the TP-8 build at
        # 2 rows its registers (128 and an 80-byte stack, against 255 and none; CPU compile)
        # (SDUT of the H // BN tiles here; the rest stay in experts_down: at 1 row the idle
        # programs' share of all of them had been the phase's pole)
        up_stop = n_up + SDUT
        up_step = nprog
        if SDU == 2:
            spare = n_up < nprog
            up_stop = tl.where(spare & (pid < n_up), n_up, up_stop)
            up_step = tl.where(spare & (pid >= n_up), nprog - n_up, nprog)
        item0 = pid
        if FLATX:  # the program's routed items and their K steps as one pipelined loop (bf16 experts)
            NKX: tl.constexpr = (L + BKX - 1) // BKX
            n_mine = items_of(pid, n_up, up_step)
            # gate and up: GEMV products [rows, BI, K chunk] summed at the item's end, or tensor-core sums
            pg = tl.zeros((XR, BI, BKX) if EXPERT_GEMV else (XR, BI), tl.float32)
            pu = tl.zeros((XR, BI, BKX) if EXPERT_GEMV else (XR, BI), tl.float32)
            for it in tl.range(0, n_mine * NKX, num_stages=STX if STX > 0 else STAGES):
                item = pid + (it // NKX) * up_step
                n = item // (I // BI)
                i0 = (item % (I // BI)) * BI
                e = nth_expert(ids, first, number, n).to(tl.int64)
                k0 = (it % NKX) * BKX
                pg = bf16_step(pg, xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, i0, I, k0, L, XR, BI, BKX, EXPERT_GEMV)
                pu = bf16_step(pu, xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, k0, L, XR, BI, BKX,
                               EXPERT_GEMV)
                if it % NKX == NKX - 1:
                    if EXPERT_GEMV:  # (zeros + the sum: dot_bf16's accumulate, so the same bits)
                        g = tl.zeros((XR, BI), tl.float32) + tl.sum(pg, axis=2)
                        u = tl.zeros((XR, BI), tl.float32) + tl.sum(pu, axis=2)
                    else:
                        g, u = pg, pu
                    act = situ(g, u, BETA, LBETA).to(tl.bfloat16)
                    tl.store(act_ptr + (n * XR + rx[:, None]) * I + (i0 + tl.arange(0, BI))[None, :], act)
                    pg = tl.zeros((XR, BI, BKX) if EXPERT_GEMV else (XR, BI), tl.float32)
                    pu = tl.zeros((XR, BI, BKX) if EXPERT_GEMV else (XR, BI), tl.float32)
            item0 = pid + n_mine * up_step  # the shared down's tiles (SDU) after them, as without FLATX
        for item in range(item0, up_stop, up_step):
            if not FLATX and item < n_up:  # (FLATX's loop ran them all: their code not built a second time)
                n = item // (I // BI)
                i0 = (item % (I // BI)) * BI
                e = nth_expert(ids, first, number, n).to(tl.int64)
                ri = i0 + tl.arange(0, BI)
                if MMA:  # BI = 16 x warps / KSX: a warp's 16 gate rows and the same 16 up rows
                    if XL2 > 0:  # the whole item asked of HBM at once, not KU k-blocks at a time
                        l2_expert_rows(w13_ptr + e * s13_e, s13_n, i0, I_UP, BI, L // 2, NT)
                    if XL2 > 1:  # and this program's next item, to land while this one runs
                        if item + nprog < n_up:
                            l2_expert_rows(w13_ptr + nth_expert(ids, first, number, (item + nprog) // (I // BI))
                                           .to(tl.int64) * s13_e, s13_n, ((item + nprog) % (I // BI)) * BI, I_UP, BI,
                                           L // 2, NT)
                    gr = i0 + qup
                    gu = mxfp4_mma_tiles(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e, ssc13_n,
                                         gr, gr + I_UP, L // KSX, NT, KUX, 1, qkb, XPD, XRS, ring_off, XL2B)
                    if KSX > 1:
                        gu = (group_sum(gu[0], KSX), group_sum(gu[1], KSX), group_sum(gu[2], KSX),
                              group_sum(gu[3], KSX), group_sum(gu[4], KSX), group_sum(gu[5], KSX),
                              group_sum(gu[6], KSX), group_sum(gu[7], KSX))
                    for h in tl.static_range(2):  # rows g, g + 8
                        for j in tl.static_range(2):  # x rows 2c, 2c + 1
                            act = situ(gu[2 * h + j], gu[4 + 2 * h + j], BETA, LBETA).to(tl.bfloat16)
                            tok = 2 * qc_r + j
                            tl.store(act_ptr + (n * XR + tok) * I + (i0 + qrow_r) + 8 * h, act, mask=tok < M)
                elif XU > 0:  # only the rows that route e, XU at a time (most experts have one at M 8)
                    for u0 in range(0, user_count(ids, keep, e), XU):
                        urow, uok = user_rows(ids, keep, e, u0, XU, BM)
                        if MXFP4:
                            g = gemv_mxfp4(xin_ptr, L, urow, uok, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                           ssc13_n, i0, I, L, XU, BI, BKX // 2, STAGES, MX4D, XL, True)
                            u = gemv_mxfp4(xin_ptr, L, urow, uok, w13_ptr + e * s13_e + mx_up(s13_n, I_UP, XL, False),
                                           s13_n, sc13_ptr + e * ssc13_e + mx_up(ssc13_n, I_UP, XL, True), ssc13_n,
                                           i0, I, L, XU, BI, BKX // 2, STAGES, MX4D, XL, True)
                        else:
                            g = gemv_bf16(xin_ptr, L, urow, uok, w13_ptr + e * s13_e, s13_n, i0, I, L, XU, BI, BKX,
                                          STAGES)
                            u = gemv_bf16(xin_ptr, L, urow, uok, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L,
                                          XU, BI, BKX, STAGES)
                        act = situ(g, u, BETA, LBETA).to(tl.bfloat16)
                        tl.store(act_ptr + (n * XR + urow[:, None]) * I + ri[None, :], act, mask=uok[:, None])
                else:  # every row (masked past M)
                    g = tl.zeros((XR, BI), tl.float32)
                    u = tl.zeros((XR, BI), tl.float32)
                    if SCALED:
                        g = dot_mxfp4_scaled(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                             ssc13_n, i0, I, L, g, XR, BI, BKX, STAGES, SCALE_ALIGN, XL, True)
                        u = dot_mxfp4_scaled(xin_ptr, L, M, w13_ptr + e * s13_e + mx_up(s13_n, I_UP, XL, False),
                                             s13_n, sc13_ptr + e * ssc13_e + mx_up(ssc13_n, I_UP, XL, True), ssc13_n,
                                             i0, I, L, u, XR, BI, BKX, STAGES, SCALE_ALIGN, XL, True)
                    elif MXFP4:
                        g += gemv_mxfp4(xin_ptr, L, rx, rx < M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                        ssc13_n, i0, I, L, XR, BI, BKX // 2, STAGES, MX4D, XL, True)
                        u += gemv_mxfp4(xin_ptr, L, rx, rx < M, w13_ptr + e * s13_e + mx_up(s13_n, I_UP, XL, False),
                                        s13_n, sc13_ptr + e * ssc13_e + mx_up(ssc13_n, I_UP, XL, True), ssc13_n,
                                        i0, I, L, XR, BI, BKX // 2, STAGES, MX4D, XL, True)
                    else:
                        g = dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, i0, I, L, g, XR, BI, BKX, STAGES,
                                     EXPERT_GEMV)
                        u = dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L, u,
                                     XR, BI, BKX, STAGES, EXPERT_GEMV)
                    act = situ(g, u, BETA, LBETA).to(tl.bfloat16)
                    tl.store(act_ptr + (n * XR + rx[:, None]) * I + ri[None, :], act)
            elif SDUT > 0:  # (without SDU no item reaches here: the tile's code not built)
                shared_down_tile(item - n_up, sact_ptr, wsd_ptr, s_wsd, part2_ptr, M, rm, H, L, S2, BM, BN,
                                 BK if DENSE_GEMV else BKD, STAGES, DENSE_GEMV)
        if XET:  # the last program, which the items reach last (fewest of them), after its own
            if pid == nprog - 1:
                write_expert_table(etab_ptr, ids, keep, first, number, n_e, owner_ptr, TOPK, BM, KB, XR)
        if PERSISTENT:
            barrier(4, 4 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 5: each distinct routed expert's down projection; the shared experts ----------
    if PERSISTENT or PHASE == 5:
        if PERSISTENT:
            enter(5, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if XET:  # phase 4's expert table (mma_fp4 only: tiles.fit_tiles)
            n_e = tl.load(etab_ptr)
        else:
            ids, keep, first, number, n_e = distinct_experts(ids_ptr, owner_ptr, M, TOPK, BM, KB)
        keep_x = (rx[:, None] < M) & (kc[None, :] < TOPK)  # the same tile with the experts' XR rows
        ids_x = tl.load(ids_ptr + rx[:, None] * TOPK + kc[None, :], mask=keep_x, other=-1)
        n_routed = n_e * (L // BL)
        n_down = n_routed + H // BN - SDUT  # the shared down's tiles experts_up left
        # XDB: a program's items one run of consecutive ones (an expert's L tiles are 14
        # consecutive items at a TP-8 rank, all over the same x rows), not every nprog-th
        # (each of them another expert's x, from L2); the same items, so the same bits
        if XDB:
            d_first, d_stop, d_step = pid * n_down // nprog, (pid + 1) * n_down // nprog, 1
        else:
            d_first, d_stop, d_step = pid, n_down, nprog
        if XET == 2:  # the program's next item's expert, loaded while this item runs
            e_next = table_expert(etab_ptr, tl.minimum(d_first, n_routed - 1) // (L // BL))
        if FLATX:  # the program's routed items and their K steps as one pipelined loop (bf16 experts)
            NKD: tl.constexpr = (I + BKD - 1) // BKD
            d_end = tl.minimum(d_stop, n_routed)
            n_mine = items_of(d_first, d_end, d_step)
            py = tl.zeros((XR, BL, BKD) if EXPERT_GEMV else (XR, BL), tl.float32)
            for it in tl.range(0, n_mine * NKD, num_stages=STXD if STXD > 0 else STAGES):
                item = d_first + (it // NKD) * d_step
                n = item // (L // BL)
                l0 = (item % (L // BL)) * BL
                e = nth_expert(ids, first, number, n)
                py = bf16_step(py, act_ptr + n * XR * I, I, M, w2_ptr + e.to(tl.int64) * s2_e, s2_n, l0, L,
                               (it % NKD) * BKD, I, XR, BL, BKD, EXPERT_GEMV)
                if it % NKD == NKD - 1:
                    y = tl.zeros((XR, BL), tl.float32) + tl.sum(py, axis=2) if EXPERT_GEMV else py
                    match = (ids_x == e) & keep_x
                    slot = tl.sum(tl.where(match, kc[None, :], 0), axis=1)
                    has = tl.max(match.to(tl.int32), axis=1) > 0
                    tl.store(y_ptr + (rx * TOPK + slot)[:, None] * L + (l0 + tl.arange(0, BL))[None, :],
                             y.to(tl.bfloat16), mask=has[:, None])
                    py = tl.zeros((XR, BL, BKD) if EXPERT_GEMV else (XR, BL), tl.float32)
            d_first += n_mine * d_step  # the shared down's tiles after them, as without FLATX,
            # their K steps one loop too (a TP-8 rank's: 3-4 tiles a program of 2 K steps at 1 row; 0-1 of 6 from 2)
            SK: tl.constexpr = BKS if BKS > 0 else BK if DENSE_GEMV else BKD
            NKS: tl.constexpr = (S2 // 2 + SK - 1) // SK
            n_mine = items_of(d_first, d_stop, d_step)
            ps = tl.zeros((BM, BN, SK) if DENSE_GEMV else (BM, BN), tl.float32)
            for it in tl.range(0, n_mine * NKS, num_stages=STXD if STXD > 0 else STAGES):
                n0 = (d_first + (it // NKS) * d_step - n_routed + SDUT) * BN
                # (the steps written out: through bf16_step this loop compiles the 1-row build to other SASS,
                # the same arithmetic, where the GPU runs so far are this form's)
                if DENSE_GEMV:
                    ps = gemv_bf16_step(ps, sact_ptr, S2 // 2, rm[:, None, None], (rm < M)[:, None, None], wsd_ptr,
                                        s_wsd, (n0 + tl.arange(0, BN))[None, :, None], H, (it % NKS) * SK, S2 // 2,
                                        SK)
                else:
                    ps = dot_bf16_step(ps, sact_ptr, S2 // 2, M, wsd_ptr, s_wsd, n0, H, (it % NKS) * SK, S2 // 2,
                                       BM, BN, SK)
                if it % NKS == NKS - 1:
                    acc = tl.zeros((BM, BN), tl.float32) + tl.sum(ps, axis=2) if DENSE_GEMV else ps
                    tl.store(part2_ptr + rm[:, None] * (L + H) + L + (n0 + tl.arange(0, BN))[None, :],
                             acc.to(tl.bfloat16), mask=rm[:, None] < M)
                    ps = tl.zeros((BM, BN, SK) if DENSE_GEMV else (BM, BN), tl.float32)
            d_first = d_stop
        for item in range(d_first, d_stop, d_step):
            if item < n_routed:
                n = item // (L // BL)
                l0 = (item % (L // BL)) * BL
                if XET == 2:
                    e = e_next
                    e_next = table_expert(etab_ptr, tl.minimum(item + d_step, n_routed - 1) // (L // BL))
                elif XET:
                    e = table_expert(etab_ptr, n)
                else:
                    e = nth_expert(ids, first, number, n)
                e64 = e.to(tl.int64)
                rl = l0 + tl.arange(0, BL)
                if MMA:  # BL = 32 x warps: two 16-row tiles a warp, BL / 2 apart
                    if XL2 > 0:
                        l2_expert_rows(w2_ptr + e64 * s2_e, s2_n, l0, 0, BL, I // 2, NT)
                    if XL2 > 1:
                        if (item + d_step < n_routed) & (item + d_step < d_stop):
                            l2_expert_rows(w2_ptr + nth_expert(ids, first, number, (item + d_step) // (L // BL))
                                           .to(tl.int64) * s2_e, s2_n, ((item + d_step) % (L // BL)) * BL, 0, BL,
                                           I // 2, NT)
                    lr = l0 + qrow
                    ya = mxfp4_mma_tiles(act_ptr + n * XR * I, I, M, w2_ptr + e64 * s2_e, s2_n,
                                         sc2_ptr + e64 * ssc2_e, ssc2_n, lr, lr + BL // 2, I, NT, KUD, 1, 0, XPDD,
                                         XRSD, ring_off, XL2BD)
                    down_store(ya, e, lr, ids_ptr, y_ptr, M, qc, L, BL, TOPK, etab_ptr, n, BM * KB, XR, XET)
                elif XU > 0:  # only the rows that route e, XU at a time
                    for u0 in range(0, user_count(ids, keep, e), XU):
                        urow, uok = user_rows(ids, keep, e, u0, XU, BM)
                        if MXFP4:
                            y = gemv_mxfp4(act_ptr + n * XR * I, I, urow, uok, w2_ptr + e64 * s2_e, s2_n,
                                           sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, XU, BL, BKD // 2, STAGES, MX4D,
                                           XL, False)
                        else:
                            y = gemv_bf16(act_ptr + n * XR * I, I, urow, uok, w2_ptr + e64 * s2_e, s2_n, l0, L, I,
                                          XU, BL, BKD, STAGES)
                        ids_u = tl.load(ids_ptr + urow[:, None] * TOPK + kc[None, :],
                                        mask=uok[:, None] & (kc[None, :] < TOPK), other=-1)
                        slot = tl.sum(tl.where(ids_u == e, kc[None, :], 0), axis=1)
                        tl.store(y_ptr + (urow * TOPK + slot)[:, None] * L + rl[None, :], y.to(tl.bfloat16),
                                 mask=uok[:, None])
                else:
                    y = tl.zeros((XR, BL), tl.float32)
                    if SCALED:
                        y = dot_mxfp4_scaled(act_ptr + n * XR * I, I, M, w2_ptr + e64 * s2_e, s2_n,
                                             sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, y, XR, BL, BKD, STAGES,
                                             SCALE_ALIGN, XL, False)
                    elif MXFP4:
                        y += gemv_mxfp4(act_ptr + n * XR * I, I, rx, rx < M, w2_ptr + e64 * s2_e, s2_n,
                                        sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, XR, BL, BKD // 2, STAGES, MX4D,
                                        XL, False)
                    else:
                        y = dot_bf16(act_ptr + n * XR * I, I, M, w2_ptr + e64 * s2_e, s2_n, l0, L, I, y,
                                     XR, BL, BKD, STAGES, EXPERT_GEMV)
                    # every row that routed to e gets it, in its own (row, slot) place
                    match = (ids_x == e) & keep_x
                    slot = tl.sum(tl.where(match, kc[None, :], 0), axis=1)
                    has = tl.max(match.to(tl.int32), axis=1) > 0
                    tl.store(y_ptr + (rx * TOPK + slot)[:, None] * L + rl[None, :], y.to(tl.bfloat16),
                             mask=has[:, None])
            else:  # tensor-core K chunks of BKD, the tile measured when the SiTU still ran here
                shared_down_tile(item - n_routed + SDUT, sact_ptr, wsd_ptr, s_wsd, part2_ptr, M, rm, H, L, S2, BM, BN,
                                 BK if DENSE_GEMV else BKD, STAGES, DENSE_GEMV)
        if PERSISTENT:
            barrier(5, 5 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 6: latent = sum over the row's slots, in top-k order -------------------------
    if PERSISTENT or PHASE == 6:
        if PERSISTENT:
            enter(6, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        keep = (rm[:, None] < M) & (kc[None, :] < TOPK)
        wts = tl.load(wts_ptr + rm[:, None] * TOPK + kc[None, :], mask=keep, other=0.0)
        # (its own tile width, BC: the experts' BL, 256 with mma_fp4, left 14 programs at work)
        for tile in range(pid, L // BC, nprog):
            rl = tile * BC + tl.arange(0, BC)
            acc = tl.zeros((BM, BC), tl.float32)
            for k in tl.static_range(TOPK):
                wk = tl.sum(tl.where(kc[None, :] == k, wts, 0.0), axis=1)
                yk = tl.load(y_ptr + (rm * TOPK + k)[:, None] * L + rl[None, :], mask=rm[:, None] < M, other=0.0)
                acc += wk[:, None] * yk.to(tl.float32)
            tl.store(part2_ptr + rm[:, None] * (L + H) + rl[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)
            if LSQ and TP == 1:  # the latent norm's sum of squares, this tile's share a row
                lb = acc.to(tl.bfloat16).to(tl.float32)
                tl.store(lsq_ptr + tile * BM + rm, tl.sum(lb * lb, axis=1), mask=rm < M)
        if PERSISTENT:
            barrier(6, 6 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if TP > 1:
            publish(flag_ptr, rank, 2 + epoch % 2, tag, pid)

    # -- 7: TP > 1: [latent | shared] summed over the ranks, in rank order --------------
    red = part2_ptr
    if TP > 1:
        red = red_ptr
        if PERSISTENT or PHASE == 7:
            if PERSISTENT:
                enter(7, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
                wait_peers(flag_ptr, 2 + epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 7, HIP)
            for tile in range(pid, (L + H) // BN, nprog):
                rn = tile * BN + tl.arange(0, BN)
                msk = rm[:, None] < M
                acc = tl.zeros((BM, BN), tl.float32)
                for q in tl.static_range(TP):
                    peer = tl.load(peer2_ptr + q).to(tl.pointer_type(tl.bfloat16)) + (epoch % 2) * SLOT2
                    acc += tl.load(peer + rm[:, None] * (L + H) + rn[None, :], mask=msk, other=0.0).to(tl.float32)
                tl.store(red_ptr + rm[:, None] * (L + H) + rn[None, :], acc.to(tl.bfloat16), mask=msk)
                if LSQ:
                    if tile < L // BN:  # a latent tile: the norm's sum of squares, its share a row
                        lb = acc.to(tl.bfloat16).to(tl.float32)
                        tl.store(lsq_ptr + tile * BM + rm, tl.sum(lb * lb, axis=1), mask=rm < M)
            if PERSISTENT:
                barrier(7, 7 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 8: latent norm, up projection, the residual combine --------------------------
    if PERSISTENT or PHASE == 8:
        if PERSISTENT:
            enter(8, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        # the normalised latent bf16(lat rstd w), once, into this program's own rows: the
        # projection then loads it like any bf16 operand (computed in registers inside the
        # K loop, it crossed shared memory into the tensor-core layout every K step)
        # (BKN-wide chunks: each pass is a chain of L2 round trips, one a chunk; at BK 128
        # the two passes took 56 of them)
        xn_ptr = xnorm_ptr + pid * M * L
        if pid < NHT:
            if LSQ:  # the tiles' shares combine (TP 1) or reduce (TP > 1) wrote, summed in one fixed order
                NLT: tl.constexpr = L // BC if TP == 1 else L // BN
                tl.static_assert(NLT <= LSQP, "the latent's tiles outnumber the sum-of-squares slots")
                qt = tl.arange(0, LSQP)
                ssq = tl.sum(tl.load(lsq_ptr + qt[:, None] * BM + rm[None, :],
                                     mask=(qt[:, None] < NLT) & (rm[None, :] < M), other=0.0, cache_modifier=".cg"),
                             axis=0)
            else:
                ssq = tl.zeros((BM,), tl.float32)
                for k0 in range(0, L, BKN):
                    rk = k0 + tl.arange(0, BKN)
                    lat = tl.load(red + rm[:, None] * (L + H) + rk[None, :],
                                  mask=(rm[:, None] < M) & (rk[None, :] < L), other=0.0)
                    lat = lat.to(tl.float32)
                    ssq += tl.sum(lat * lat, axis=1)
            rstd = 1.0 / tl.sqrt(ssq / L + EPS)
            for k0 in range(0, L, BKN):
                rk = k0 + tl.arange(0, BKN)
                km = (rm[:, None] < M) & (rk[None, :] < L)
                lat = tl.load(red + rm[:, None] * (L + H) + rk[None, :], mask=km, other=0.0).to(tl.float32)
                lw = tl.load(lnorm_ptr + rk, mask=rk < L, other=0.0).to(tl.float32)
                tl.store(xn_ptr + rm[:, None] * L + rk[None, :], (lat * rstd[:, None] * lw[None, :]).to(tl.bfloat16),
                         mask=km)
            tl.debug_barrier()  # the CTA's stores are seen by all its threads' loads below
        UK: tl.constexpr = BKU if BKU > 0 else BK  # (latent_up's own K step and stages: BKU / STU)
        UST: tl.constexpr = STU if STU > 0 else STAGES
        if FLATD:  # the program's tiles and their K steps as one pipelined loop (tiles.k2_tiles: FLATD)
            NKU: tl.constexpr = (L + UK - 1) // UK
            part = tl.zeros((BM, BN, UK) if DENSE_GEMV else (BM, BN), tl.float32)
            for it in tl.range(0, tiles_of(pid, nprog, NHT) * NKU, num_stages=UST):
                n0, nend = h_tile(pid + (it // NKU) * nprog, H, BN, BNH)
                part = bf16_step(part, xn_ptr, L, M, wup_ptr, s_wup, n0, nend, (it % NKU) * UK, L, BM, BN, UK,
                                 DENSE_GEMV)
                if it % NKU == NKU - 1:
                    latent_up_store(tl.sum(part, axis=2) if DENSE_GEMV else part, n0, nend, red, p_ptr, out_ptr, M,
                                    rm, H, L, BN, BNH)
                    part = tl.zeros((BM, BN, UK) if DENSE_GEMV else (BM, BN), tl.float32)
        else:
            for tile in range(pid, NHT, nprog):
                n0, nend = h_tile(tile, H, BN, BNH)
                acc = dot_bf16(xn_ptr, L, M, wup_ptr, s_wup, n0, nend, L, tl.zeros((BM, BN), tl.float32),
                               BM, BN, UK, UST, DENSE_GEMV)
                latent_up_store(acc, n0, nend, red, p_ptr, out_ptr, M, rm, H, L, BN, BNH)
        if PERSISTENT:
            if TRACE:
                tl.store(trace_ptr + pid * TRACE_SLOTS + TRACE_EXIT, now_ns(HIP))
            depart(sync_ptr, nprog)
