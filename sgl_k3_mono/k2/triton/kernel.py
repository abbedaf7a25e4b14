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

from sgl_k3_mono.k2.triton.matmul import dot_bf16, dot_mxfp4_scaled, gemv_bf16, gemv_mxfp4
from sgl_k3_mono.k2.triton.mma_fp4 import mxfp4_mma_tiles
from sgl_k3_mono.k2.triton.routing import (distinct_experts, nth_expert, route_row, table_expert, table_slot,
                                           user_count, user_rows, write_expert_table)
from sgl_k3_mono.runtime.triton_l2 import l2_prefetch_rows
from sgl_k3_mono.runtime.triton_seam import split_seam_persistent, split_seam_step
from sgl_k3_mono.runtime.triton_sync import EPOCH, depart, grid_barrier, maybe_stall, now_ns, wait_eq, wait_geq

PHASES = ("o_proj", "seam", "front", "route", "experts_up", "experts_down", "combine", "reduce", "latent_up")
TRACE_SLOTS = tl.constexpr(32)
"""int64 slots a program in the phase trace (TRACE): its entry time into each phase, by
number, then its exit time in slot TRACE_EXIT; from slot TRACE_ARRIVE, by phase number,
its arrival at the grid barrier that ends the phase (its own work done: the barrier's
wait is what lies between that and the next entry)."""
TRACE_EXIT = tl.constexpr(len(PHASES))
TRACE_ARRIVE = tl.constexpr(16)
TRACE_SEAM = tl.constexpr(10)
"""From this slot, five stamps inside the split seam (triton_seam.split_seam_persistent's
TRACE_AT): its start, step A done, A's row wait done, step C done, C's wait done."""
LAUNCH_ID = tl.constexpr(1)  # runtime.failure.LAUNCHES.index("k2")
# K2's words of its sync buffer past triton_sync's (host.K2_SYNC_WORDS in all): FR's counts
# of the router's and the shared gate/up's front tiles stored this launch
FRONT_ROUTER, FRONT_SHARED = tl.constexpr(4), tl.constexpr(5)
SITU_CHUNK = tl.constexpr(512)
"""Columns of the shared experts' SiTU a program writes at a time (M x ceil(S2 / 2 / 512) chunks)."""


# ---------------------------------------------------------------------------------------
# small pieces

@triton.jit
def _situ(g, u, BETA: tl.constexpr, LBETA: tl.constexpr):
    """beta*tanh(g/beta)*sigmoid(g) * lbeta*tanh(u/lbeta), fp32 (tanh via exp: no libdevice)."""
    tg = 2.0 * tl.sigmoid(2.0 * g / BETA) - 1.0
    tu = 2.0 * tl.sigmoid(2.0 * u / LBETA) - 1.0
    return BETA * tg * tl.sigmoid(g) * (LBETA * tu)


@triton.jit
def _h_tile(tile, H: tl.constexpr, BN: tl.constexpr, BNH: tl.constexpr):
    """Rows n0 .. nend - 1 of H that tile `tile` of o_proj / latent_up owns: BNH rows in a
    BN-row register tile (BNH < BN: 56 rows make 128 tiles of H 7168, one an SM, where 64
    make 112; the extra register rows are masked off, so never loaded)."""
    n0 = tile * BNH
    if BNH == BN:
        nend = H
    else:
        nend = tl.minimum(n0 + BNH, H)
    return n0, nend


@triton.jit
def _h_mask(rm, M, rn, nend, BN: tl.constexpr, BNH: tl.constexpr):
    if BNH == BN:
        return rm[:, None] < M
    else:
        return (rm[:, None] < M) & (rn[None, :] < nend)


@triton.jit
def _group_sum(v, G: tl.constexpr):
    """[NT] per-thread partials of G warp groups (group-major) summed: [NT / G]."""
    return tl.sum(tl.reshape(v, (G, v.shape[0] // G)), axis=0)


@triton.jit
def _enter(phase, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP: tl.constexpr,
           TRACE: tl.constexpr):
    """A persistent launch enters `phase`: the fault-injection hold, and (TRACE) this
    program's timestamp in its row of the trace ([grid, TRACE_SLOTS] int64 ns)."""
    maybe_stall(stall_phase, phase, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
    if TRACE:
        tl.store(trace_ptr + tl.program_id(0) * TRACE_SLOTS + phase, now_ns(HIP))


@triton.jit
def _barrier(phase, number, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr,
             HIP: tl.constexpr, TRACE: tl.constexpr):
    """The grid barrier that ends `phase`, the launch's `number`-th (the count every
    program has passed: one less than the phase from the experts on under FR, which has
    no routing barrier); (TRACE) this program's arrival stamped first."""
    if TRACE:
        tl.store(trace_ptr + tl.program_id(0) * TRACE_SLOTS + TRACE_ARRIVE + phase, now_ns(HIP))
    grid_barrier(sync_ptr, number, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, phase, HIP)


@triton.jit
def _publish(flag_ptr, rank, slot, tag, pid):
    """Program 0, after the grid barrier: this rank's partials of `slot` are ready. The
    system-scope release also publishes the writes the barrier made visible to it."""
    if pid == 0:
        mine = tl.load(flag_ptr + rank).to(tl.pointer_type(tl.int32))
        tl.atomic_xchg(mine + slot, tag, sem="release", scope="sys")


@triton.jit
def _wait_peers(flag_ptr, slot, tag, TP: tl.constexpr, t0, deadline_ns, err_addr, rank, layer, phase,
                HIP: tl.constexpr):
    """Every rank's partials of `slot` carry this launch's tag (bounded, system scope)."""
    for q in tl.static_range(TP):
        theirs = tl.load(flag_ptr + q).to(tl.pointer_type(tl.int32))
        wait_eq(theirs + slot, tag, t0, deadline_ns, err_addr, rank, layer, 1, phase, "sys", HIP)


@triton.jit
def _seam_split(pid, M, nvb, has_prefix, NB, part1_ptr, peer1_ptr, SLOT1, epoch, sa_ptr, prefix_ptr, bank_ptr,
                p_ptr, proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, smix_ptr, spart_ptr, scnt_ptr,
                t0, deadline_ns, err_addr, rank, layer,
                H: tl.constexpr, NBB: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr, SPP: tl.constexpr,
                EPS: tl.constexpr, MIX_BF16: tl.constexpr, TP: tl.constexpr, PERSISTENT: tl.constexpr,
                STEP: tl.constexpr, HIP: tl.constexpr, trace_ptr=None, TRACE: tl.constexpr = False,
                SPASS: tl.constexpr = 1):
    """The seam of phase 1 over SP programs a row (program pid < M * SP: row pid // SP,
    slice pid % SP), through the split seam K1 runs too: a (at TP > 1 this slice's
    rank-order sum of the peers' partials, bf16, into sa) is the contribution added to
    the prefix (has_prefix) or is p itself; p goes to p_ptr, h2 to h2_ptr. PERSISTENT:
    all three steps with the row waits; else step STEP alone (the phased launch)."""
    if pid < M * SP:
        contrib = part1_ptr
        if TP > 1:
            contrib = sa_ptr
            if PERSISTENT or STEP == 0:
                row = pid // SP
                cols = (pid % SP) * BS + tl.arange(0, BS)
                a = tl.zeros((BS,), tl.float32)
                for q in tl.static_range(TP):  # rank order: every rank sums alike
                    peer = tl.load(peer1_ptr + q).to(tl.pointer_type(tl.bfloat16)) + (epoch % 2) * SLOT1
                    a += tl.load(peer + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
                tl.store(sa_ptr + row * H + cols, a.to(tl.bfloat16), mask=cols < H)
                tl.debug_barrier()  # the seam's first step reads the slice back in its own layout
        if has_prefix != 0:
            _seam_steps(pid, M, nvb, prefix_ptr, contrib, bank_ptr, NB, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr,
                        h2_ptr, smix_ptr, spart_ptr, scnt_ptr, t0, deadline_ns, err_addr, rank, layer,
                        H, NBB, BS, SP, SPP, EPS, MIX_BF16, True, PERSISTENT, STEP, HIP, trace_ptr, TRACE, SPASS)
        else:  # a block write restarted the residual: p = a
            _seam_steps(pid, M, nvb, contrib, contrib, bank_ptr, NB, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr,
                        h2_ptr, smix_ptr, spart_ptr, scnt_ptr, t0, deadline_ns, err_addr, rank, layer,
                        H, NBB, BS, SP, SPP, EPS, MIX_BF16, False, PERSISTENT, STEP, HIP, trace_ptr, TRACE, SPASS)


@triton.jit
def _seam_steps(pid, M, nvb, prefix_ptr, contrib_ptr, bank_ptr, NB, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr,
                h2_ptr, smix_ptr, spart_ptr, scnt_ptr, t0, deadline_ns, err_addr, rank, layer,
                H: tl.constexpr, NBB: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr, SPP: tl.constexpr,
                EPS: tl.constexpr, MIX_BF16: tl.constexpr, HAS_CONTRIB: tl.constexpr, PERSISTENT: tl.constexpr,
                STEP: tl.constexpr, HIP: tl.constexpr, trace_ptr=None, TRACE: tl.constexpr = False,
                SPASS: tl.constexpr = 1):
    """_seam_split's steps on K2's tensors: p = bf16(prefix (+ contrib)) into p_ptr (the
    split seam's residual row), the bank rows [M, NB, H], h2 out. TRACE: the seam's
    links stamped from slot TRACE_SEAM of the program's trace row."""
    if PERSISTENT:
        split_seam_persistent(pid, M, nvb, EPS, prefix_ptr, H, contrib_ptr, H, bank_ptr, NB * H, H, p_ptr, H,
                              proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, smix_ptr, spart_ptr, scnt_ptr,
                              t0, deadline_ns, err_addr, rank, layer, H, NBB, BS, SP, SPP,
                              HAS_CONTRIB, False, True, MIX_BF16, HIP, LAUNCH_ID, 1,
                              trace_ptr + tl.program_id(0) * TRACE_SLOTS, TRACE_SEAM if TRACE else 0, SPASS)
    else:
        split_seam_step(pid, M, nvb, EPS, prefix_ptr, H, contrib_ptr, H, bank_ptr, NB * H, H, p_ptr, H,
                        proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, smix_ptr, spart_ptr,
                        STEP, H, NBB, BS, SP, SPP, HAS_CONTRIB, False, True, MIX_BF16)


@triton.jit
def _front_rows(h2_ptr, M, w_ptr, s_w, n0, N, out_ptr, rm, H: tl.constexpr, BM: tl.constexpr, BT: tl.constexpr,
                BK: tl.constexpr, STAGES: tl.constexpr, DENSE_GEMV: tl.constexpr, ROUND: tl.constexpr,
                OUT_BF16: tl.constexpr):
    """Rows n0 .. n0 + BT - 1 of one segment of the front (N rows of stride s_w) over h2
    into out [M, N]: fp32 (bf16-rounded first with ROUND), or bf16 (OUT_BF16)."""
    acc = dot_bf16(h2_ptr, H, M, w_ptr, s_w, n0, N, H, tl.zeros((BM, BT), tl.float32), BM, BT, BK, STAGES,
                   DENSE_GEMV)
    rn = n0 + tl.arange(0, BT)
    if OUT_BF16:
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)
    else:
        if ROUND:
            acc = acc.to(tl.bfloat16).to(tl.float32)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)


@triton.jit
def _count_tile(counter_ptr):
    """This program's front tile is stored (every thread's part: the CTA barrier); one more
    on the counter, with release, for the helpers that wait on it to read the tile."""
    tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _route_one(r, logit_ptr, bias_ptr, ids_ptr, wts_ptr, owner_ptr, E, TOPK: tl.constexpr, BE: tl.constexpr,
               KB: tl.constexpr):
    """Row r's top-k into ids / wts; each expert's owner is the least (row, slot) naming it."""
    kc = tl.arange(0, KB)
    ids, wts = route_row(logit_ptr, bias_ptr, r, E, TOPK, BE, KB)
    tl.store(ids_ptr + r * TOPK + kc, ids, mask=kc < TOPK)
    tl.store(wts_ptr + r * TOPK + kc, wts, mask=kc < TOPK)
    tl.atomic_min(owner_ptr + ids, r * TOPK + kc, mask=kc < TOPK, sem="relaxed", scope="gpu")


@triton.jit
def _situ_chunk(sq, gu_ptr, sact_ptr, S2: tl.constexpr, NSC: tl.constexpr, BETA: tl.constexpr,
                LBETA: tl.constexpr):
    """Chunk sq (row sq // NSC, SITU_CHUNK columns) of the shared experts' activation bf16(SiTU(gu))."""
    srow = sq // NSC
    scol = (sq % NSC) * SITU_CHUNK + tl.arange(0, SITU_CHUNK)
    sg = tl.load(gu_ptr + srow * S2 + scol, mask=scol < S2 // 2, other=0.0)
    su = tl.load(gu_ptr + srow * S2 + S2 // 2 + scol, mask=scol < S2 // 2, other=0.0)
    tl.store(sact_ptr + srow * (S2 // 2) + scol, _situ(sg, su, BETA, LBETA).to(tl.bfloat16), mask=scol < S2 // 2)


# ---------------------------------------------------------------------------------------
# the launch

@triton.jit
def _l2_expert_rows(w_ptr, s_n, r0, SECOND: tl.constexpr, R: tl.constexpr, BYTES: tl.constexpr, NT: tl.constexpr):
    """Ask L2 for R MXFP4 weight rows from row r0 (and as many from r0 + SECOND, the up
    rows, unless SECOND is 0), each row's BYTES whole: a prefetch, fire and forget. The
    scales (1/16 of the bytes, rows not 16-byte multiples) load as they did."""
    l2_prefetch_rows(w_ptr + r0.to(tl.int64) * s_n, s_n, R, R, BYTES, NT)
    if SECOND != 0:
        l2_prefetch_rows(w_ptr + (r0 + SECOND).to(tl.int64) * s_n, s_n, R, R, BYTES, NT)


@triton.jit
def _shared_down_tile(tile, sact_ptr, wsd_ptr, s_wsd, part2_ptr, M, rm, H: tl.constexpr, L: tl.constexpr,
                      S2: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
                      DENSE_GEMV: tl.constexpr):
    """Output rows tile*BN.. of the shared experts' down projection over sact (the routing
    phase's SiTU), into the shared half of this rank's second partial."""
    n0 = tile * BN
    rn = n0 + tl.arange(0, BN)
    acc = dot_bf16(sact_ptr, S2 // 2, M, wsd_ptr, s_wsd, n0, H, S2 // 2, tl.zeros((BM, BN), tl.float32),
                   BM, BN, BK, STAGES, DENSE_GEMV)
    tl.store(part2_ptr + rm[:, None] * (L + H) + L + rn[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)


@triton.jit
def _down_store(ya, e, lr, ids_ptr, y_ptr, M, qc, L: tl.constexpr, BL: tl.constexpr, TOPK: tl.constexpr,
                tab_ptr, n, P: tl.constexpr, XR: tl.constexpr, XET: tl.constexpr):
    """experts_down's mma tiles (mma_fp4's eight accumulators) into y at the (row, slot)
    of each x row that names expert e (the n-th distinct one; XET: read from the step's
    expert table, else found among the row's slots)."""
    for j in tl.static_range(2):  # x rows 2c, 2c + 1: the (row, slot) that names e
        tok = 2 * qc + j
        if XET:
            slot = table_slot(tab_ptr, n, tok, P, XR)
            has = (slot >= 0) & (tok < M)
        else:
            slot = tl.zeros(qc.shape, tl.int32)
            has = tok < 0
            for k in tl.static_range(TOPK):
                hit = tl.load(ids_ptr + tok * TOPK + k, mask=tok < M, other=-1) == e
                slot = tl.where(hit, k, slot)
                has = has | hit
        yrow = y_ptr + (tok * TOPK + slot) * L
        for half in tl.static_range(2):
            for h in tl.static_range(2):
                tl.store(yrow + lr + half * (BL // 2) + 8 * h, ya[4 * half + 2 * h + j].to(tl.bfloat16), mask=has)


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
    DENSE_GEMV: tl.constexpr = False, EXPERT_GEMV: tl.constexpr = False, XR: tl.constexpr = 16,
    MX4D: tl.constexpr = True, XU: tl.constexpr = 0, SCALE_ALIGN: tl.constexpr = 1,
    MMA: tl.constexpr = False, NT: tl.constexpr = 128, KUX: tl.constexpr = 2, KUD: tl.constexpr = 1,
    KSX: tl.constexpr = 1, TRACE: tl.constexpr = False, SPASS: tl.constexpr = 1, PF: tl.constexpr = 0,
    BNF: tl.constexpr = 64, BNH: tl.constexpr = 64, XPD: tl.constexpr = 0, XPDD: tl.constexpr = 0,
    XL2: tl.constexpr = 0,
    XDB: tl.constexpr = 0, SEAM_SPLIT: tl.constexpr = False, BS: tl.constexpr = 512, SP: tl.constexpr = 1,
    SPP: tl.constexpr = 1, SEAM_STEP: tl.constexpr = 0, SDU: tl.constexpr = 0, SDUT: tl.constexpr = 0,
    XRS: tl.constexpr = 0,
    XRSD: tl.constexpr = 0, BKN: tl.constexpr = 128, XL2B: tl.constexpr = 0, XL2BD: tl.constexpr = 0,
    XET: tl.constexpr = 0, FR: tl.constexpr = 0, BNR: tl.constexpr = 64, LSQ: tl.constexpr = 0,
    LSQP: tl.constexpr = 256, BNO: tl.constexpr = 0, BKO: tl.constexpr = 0,
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
            _enter(0, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        for tile in range(pid, NHO, nprog):  # OBNH rows a tile (OBN: the register tile)
            n0, nend = _h_tile(tile, H, OBN, OBNH)
            acc = dot_bf16(attn_ptr, A, M, wo_ptr, s_wo, n0, nend, A, tl.zeros((BM, OBN), tl.float32),
                           BM, OBN, OBK, STAGES, DENSE_GEMV)
            rn = n0 + tl.arange(0, OBN)
            tl.store(part1_ptr + rm[:, None] * H + rn[None, :], acc.to(tl.bfloat16),
                     mask=_h_mask(rm, M, rn, nend, OBN, OBNH))
        if pid == 0:  # routing (phase 3) takes the minimum (row, slot) per expert
            tl.store(owner_ptr + tl.arange(0, BE), 0x7FFFFFFF, mask=tl.arange(0, BE) < E)
        if PERSISTENT:
            _barrier(0, 0, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if TP > 1:
            _publish(flag_ptr, rank, epoch % 2, tag, pid)

    # -- 1: reduce over the ranks present, prefix add, FFN attn-res seam --------------
    if PERSISTENT or PHASE == 1:
        if PERSISTENT:
            _enter(1, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
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
                    _wait_peers(flag_ptr, epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 1, HIP)
        if SEAM_SPLIT:
            _seam_split(pid, M, nvb, has_prefix, NB, part1_ptr, peer1_ptr, SLOT1, epoch, sa_ptr,
                        prefix_ptr, bank_ptr, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, smix_ptr, spart_ptr,
                        scnt_ptr, t0, deadline_ns, err_addr, rank, layer, H, NBB, BS, SP, SPP, EPS, MIX_BF16, TP,
                        PERSISTENT, SEAM_STEP, HIP, trace_ptr, TRACE, SPASS)
        else:
            rh = tl.arange(0, BH)
            hm = rh < H
            cw = tl.load(rnorm_ptr + rh, mask=hm, other=0.0).to(tl.float32) * \
                tl.load(proj_ptr + rh, mask=hm, other=0.0).to(tl.float32)
            ow = tl.load(onorm_ptr + rh, mask=hm, other=0.0).to(tl.float32)
            jb = tl.arange(0, NBB)
            for r in range(pid, M, nprog):
                if TP > 1:
                    a = tl.zeros((BH,), tl.float32)
                    for q in tl.static_range(TP):  # rank order: every rank sums alike
                        peer = tl.load(peer1_ptr + q).to(tl.pointer_type(tl.bfloat16)) + (epoch % 2) * SLOT1
                        a += tl.load(peer + r * H + rh, mask=hm, other=0.0).to(tl.float32)
                    a = a.to(tl.bfloat16).to(tl.float32)
                else:
                    a = tl.load(part1_ptr + r * H + rh, mask=hm, other=0.0).to(tl.float32)
                    a = a.to(tl.bfloat16).to(tl.float32)
                p = a
                if has_prefix != 0:
                    p = (tl.load(prefix_ptr + r * H + rh, mask=hm, other=0.0).to(tl.float32) + a)
                    p = p.to(tl.bfloat16).to(tl.float32)
                tl.store(p_ptr + r * H + rh, p.to(tl.bfloat16), mask=hm)
                # scores of the nvb bank rows (slots 0..nvb-1) and the prefix (slot nvb)
                sp = tl.sum(p * cw, axis=0) / tl.sqrt(tl.sum(p * p, axis=0) / H + EPS)
                scores = tl.where(jb == nvb, sp, float("-inf"))
                for j in range(0, nvb):
                    v = tl.load(bank_ptr + (r * NB + j) * H + rh, mask=hm, other=0.0).to(tl.float32)
                    sj = tl.sum(v * cw, axis=0) / tl.sqrt(tl.sum(v * v, axis=0) / H + EPS)
                    scores = tl.where(jb == j, sj, scores)
                alpha = tl.exp(scores - tl.max(scores, axis=0))
                alpha = alpha / tl.sum(alpha, axis=0)
                mix = tl.sum(tl.where(jb == nvb, alpha, 0.0), axis=0) * p
                for j in range(0, nvb):
                    v = tl.load(bank_ptr + (r * NB + j) * H + rh, mask=hm, other=0.0).to(tl.float32)
                    mix += tl.sum(tl.where(jb == j, alpha, 0.0), axis=0) * v
                if MIX_BF16:
                    mix = mix.to(tl.bfloat16).to(tl.float32)
                h2 = mix / tl.sqrt(tl.sum(mix * mix, axis=0) / H + EPS) * ow
                tl.store(h2_ptr + r * H + rh, h2.to(tl.bfloat16), mask=hm)
        if PERSISTENT:
            _barrier(1, 1, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
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
            _enter(2, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if FR and PERSISTENT:
            # FR: [router | shared gate/up] in BNR-row tiles, [latent down] in BNF-row ones,
            # and phase 3's work done here by the helper programs (from frh, the ones whose
            # own tiles end first: tiles.front_helpers) once the tiles they read are counted
            # stored: the grid routes while the latent down streams, with no barrier of its own
            NRT: tl.constexpr = E // BNR
            NST: tl.constexpr = S2 // BNR
            for tile in range(pid, NRT + NST + L // BNF, nprog):
                if tile < NRT:
                    _front_rows(h2_ptr, M, wr_ptr, s_wr, tile * BNR, E, logit_ptr, rm, H, BM, BNR, BK, STAGES,
                                DENSE_GEMV, FRONT_BF16, False)
                    _count_tile(sync_ptr + FRONT_ROUTER)
                elif tile < NRT + NST:
                    _front_rows(h2_ptr, M, wgu_ptr, s_wgu, (tile - NRT) * BNR, S2, gu_ptr, rm, H, BM, BNR, BK,
                                STAGES, DENSE_GEMV, FRONT_BF16, False)
                    _count_tile(sync_ptr + FRONT_SHARED)
                else:
                    _front_rows(h2_ptr, M, wdn_ptr, s_wdn, (tile - NRT - NST) * BNF, L, xin_ptr, rm, H, BM, BNF,
                                BK, STAGES, DENSE_GEMV, False, True)
            for hi in range((pid - frh + nprog) % nprog, M + M * NSC, nprog):  # helper hi: row hi, or a chunk
                if hi < M:
                    wait_geq(sync_ptr + FRONT_ROUTER, NRT, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 2,
                             "gpu", HIP)
                    _route_one(hi, logit_ptr, bias_ptr, ids_ptr, wts_ptr, owner_ptr, E, TOPK, BE, KB)
                else:
                    wait_geq(sync_ptr + FRONT_SHARED, NST, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 2,
                             "gpu", HIP)
                    _situ_chunk(hi - M, gu_ptr, sact_ptr, S2, NSC, BETA, LBETA)
            maybe_stall(stall_phase, 3, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)  # (no phase 3)
        else:
            for tile in range(pid, (S2 + E + L) // BNF, nprog):
                n0 = tile * BNF
                if n0 < S2:
                    _front_rows(h2_ptr, M, wgu_ptr, s_wgu, n0, S2, gu_ptr, rm, H, BM, BNF, BK, STAGES, DENSE_GEMV,
                                FRONT_BF16, False)
                elif n0 < S2 + E:
                    _front_rows(h2_ptr, M, wr_ptr, s_wr, n0 - S2, E, logit_ptr, rm, H, BM, BNF, BK, STAGES,
                                DENSE_GEMV, FRONT_BF16, False)
                else:
                    _front_rows(h2_ptr, M, wdn_ptr, s_wdn, n0 - S2 - E, L, xin_ptr, rm, H, BM, BNF, BK, STAGES,
                                DENSE_GEMV, False, True)
        if PERSISTENT:
            _barrier(2, 2, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
            if FR:  # every helper's wait is over (barrier 2): the counts start again at 0
                if pid == 0:
                    tl.store(sync_ptr + FRONT_ROUTER + tl.arange(0, 2), 0)

    # -- 3: routing, one row a program; the shared experts' SiTU (FR: done in the front) --
    if (PERSISTENT and not FR) or PHASE == 3:
        if PERSISTENT:
            _enter(3, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        for r in range(pid, M, nprog):
            _route_one(r, logit_ptr, bias_ptr, ids_ptr, wts_ptr, owner_ptr, E, TOPK, BE, KB)
        for sq in range(pid, M * NSC, nprog):
            _situ_chunk(sq, gu_ptr, sact_ptr, S2, NSC, BETA, LBETA)
        if PERSISTENT:
            _barrier(3, 3, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 4: each distinct routed expert's gate/up and SiTU ----------------------------
    if PERSISTENT or PHASE == 4:
        if PERSISTENT:
            _enter(4, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
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
        for item in range(pid, up_stop, up_step):
            if item < n_up:
                n = item // (I // BI)
                i0 = (item % (I // BI)) * BI
                e = nth_expert(ids, first, number, n).to(tl.int64)
                ri = i0 + tl.arange(0, BI)
                if MMA:  # BI = 16 x warps / KSX: a warp's 16 gate rows and the same 16 up rows
                    if XL2 > 0:  # the whole item asked of HBM at once, not KU k-blocks at a time
                        _l2_expert_rows(w13_ptr + e * s13_e, s13_n, i0, I_UP, BI, L // 2, NT)
                    if XL2 > 1:  # and this program's next item, to land while this one runs
                        if item + nprog < n_up:
                            _l2_expert_rows(w13_ptr + nth_expert(ids, first, number, (item + nprog) // (I // BI))
                                            .to(tl.int64) * s13_e, s13_n, ((item + nprog) % (I // BI)) * BI, I_UP, BI,
                                            L // 2, NT)
                    gr = i0 + qup
                    gu = mxfp4_mma_tiles(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e, ssc13_n,
                                          gr, gr + I_UP, L // KSX, NT, KUX, 1, qkb, XPD, XRS, ring_off, XL2B)
                    if KSX > 1:
                        gu = (_group_sum(gu[0], KSX), _group_sum(gu[1], KSX), _group_sum(gu[2], KSX),
                              _group_sum(gu[3], KSX), _group_sum(gu[4], KSX), _group_sum(gu[5], KSX),
                              _group_sum(gu[6], KSX), _group_sum(gu[7], KSX))
                    for h in tl.static_range(2):  # rows g, g + 8
                        for j in tl.static_range(2):  # x rows 2c, 2c + 1
                            act = _situ(gu[2 * h + j], gu[4 + 2 * h + j], BETA, LBETA).to(tl.bfloat16)
                            tok = 2 * qc_r + j
                            tl.store(act_ptr + (n * XR + tok) * I + (i0 + qrow_r) + 8 * h, act, mask=tok < M)
                elif XU > 0:  # only the rows that route e, XU at a time (most experts have one at M 8)
                    for u0 in range(0, user_count(ids, keep, e), XU):
                        urow, uok = user_rows(ids, keep, e, u0, XU, BM)
                        if MXFP4:
                            g = gemv_mxfp4(xin_ptr, L, urow, uok, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                           ssc13_n, i0, I, L, XU, BI, BKX // 2, STAGES, MX4D)
                            u = gemv_mxfp4(xin_ptr, L, urow, uok, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                           sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L,
                                           XU, BI, BKX // 2, STAGES, MX4D)
                        else:
                            g = gemv_bf16(xin_ptr, L, urow, uok, w13_ptr + e * s13_e, s13_n, i0, I, L, XU, BI, BKX,
                                          STAGES)
                            u = gemv_bf16(xin_ptr, L, urow, uok, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L,
                                          XU, BI, BKX, STAGES)
                        act = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                        tl.store(act_ptr + (n * XR + urow[:, None]) * I + ri[None, :], act, mask=uok[:, None])
                else:  # every row (masked past M)
                    g = tl.zeros((XR, BI), tl.float32)
                    u = tl.zeros((XR, BI), tl.float32)
                    if SCALED:
                        g = dot_mxfp4_scaled(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                             ssc13_n, i0, I, L, g, XR, BI, BKX, STAGES, SCALE_ALIGN)
                        u = dot_mxfp4_scaled(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                             sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L, u,
                                             XR, BI, BKX, STAGES, SCALE_ALIGN)
                    elif MXFP4:
                        g += gemv_mxfp4(xin_ptr, L, rx, rx < M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                        ssc13_n, i0, I, L, XR, BI, BKX // 2, STAGES, MX4D)
                        u += gemv_mxfp4(xin_ptr, L, rx, rx < M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                        sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L,
                                        XR, BI, BKX // 2, STAGES, MX4D)
                    else:
                        g = dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, i0, I, L, g, XR, BI, BKX, STAGES,
                                     EXPERT_GEMV)
                        u = dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L, u,
                                     XR, BI, BKX, STAGES, EXPERT_GEMV)
                    act = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                    tl.store(act_ptr + (n * XR + rx[:, None]) * I + ri[None, :], act)
            else:
                _shared_down_tile(item - n_up, sact_ptr, wsd_ptr, s_wsd, part2_ptr, M, rm, H, L, S2, BM, BN,
                                  BK if DENSE_GEMV else BKD, STAGES, DENSE_GEMV)
        if XET:  # the last program, which the items reach last (fewest of them), after its own
            if pid == nprog - 1:
                write_expert_table(etab_ptr, ids, keep, first, number, n_e, owner_ptr, TOPK, BM, KB, XR)
        if PERSISTENT:
            _barrier(4, 4 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 5: each distinct routed expert's down projection; the shared experts ----------
    if PERSISTENT or PHASE == 5:
        if PERSISTENT:
            _enter(5, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
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
                        _l2_expert_rows(w2_ptr + e64 * s2_e, s2_n, l0, 0, BL, I // 2, NT)
                    if XL2 > 1:
                        if (item + d_step < n_routed) & (item + d_step < d_stop):
                            _l2_expert_rows(w2_ptr + nth_expert(ids, first, number, (item + d_step) // (L // BL))
                                            .to(tl.int64) * s2_e, s2_n, ((item + d_step) % (L // BL)) * BL, 0, BL,
                                            I // 2, NT)
                    lr = l0 + qrow
                    ya = mxfp4_mma_tiles(act_ptr + n * XR * I, I, M, w2_ptr + e64 * s2_e, s2_n,
                                          sc2_ptr + e64 * ssc2_e, ssc2_n, lr, lr + BL // 2, I, NT, KUD, 1, 0, XPDD,
                                          XRSD, ring_off, XL2BD)
                    _down_store(ya, e, lr, ids_ptr, y_ptr, M, qc, L, BL, TOPK, etab_ptr, n, BM * KB, XR, XET)
                elif XU > 0:  # only the rows that route e, XU at a time
                    for u0 in range(0, user_count(ids, keep, e), XU):
                        urow, uok = user_rows(ids, keep, e, u0, XU, BM)
                        if MXFP4:
                            y = gemv_mxfp4(act_ptr + n * XR * I, I, urow, uok, w2_ptr + e64 * s2_e, s2_n,
                                           sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, XU, BL, BKD // 2, STAGES, MX4D)
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
                                             SCALE_ALIGN)
                    elif MXFP4:
                        y += gemv_mxfp4(act_ptr + n * XR * I, I, rx, rx < M, w2_ptr + e64 * s2_e, s2_n,
                                        sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, XR, BL, BKD // 2, STAGES, MX4D)
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
                _shared_down_tile(item - n_routed + SDUT, sact_ptr, wsd_ptr, s_wsd, part2_ptr, M, rm, H, L, S2, BM, BN,
                                  BK if DENSE_GEMV else BKD, STAGES, DENSE_GEMV)
        if PERSISTENT:
            _barrier(5, 5 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 6: latent = sum over the row's slots, in top-k order -------------------------
    if PERSISTENT or PHASE == 6:
        if PERSISTENT:
            _enter(6, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
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
            _barrier(6, 6 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
        if TP > 1:
            _publish(flag_ptr, rank, 2 + epoch % 2, tag, pid)

    # -- 7: TP > 1: [latent | shared] summed over the ranks, in rank order --------------
    red = part2_ptr
    if TP > 1:
        red = red_ptr
        if PERSISTENT or PHASE == 7:
            if PERSISTENT:
                _enter(7, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
                _wait_peers(flag_ptr, 2 + epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 7, HIP)
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
                _barrier(7, 7 - SKIP, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)

    # -- 8: latent norm, up projection, the residual combine --------------------------
    if PERSISTENT or PHASE == 8:
        if PERSISTENT:
            _enter(8, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP, TRACE)
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
        for tile in range(pid, NHT, nprog):
            n0, nend = _h_tile(tile, H, BN, BNH)
            rn = n0 + tl.arange(0, BN)
            acc = dot_bf16(xn_ptr, L, M, wup_ptr, s_wup, n0, nend, L, tl.zeros((BM, BN), tl.float32),
                           BM, BN, BK, STAGES, DENSE_GEMV)
            msk = _h_mask(rm, M, rn, nend, BN, BNH)
            out = acc.to(tl.bfloat16).to(tl.float32)
            shared = tl.load(red + rm[:, None] * (L + H) + L + rn[None, :], mask=msk, other=0.0)
            x = (out + shared.to(tl.float32)).to(tl.bfloat16).to(tl.float32)
            p = tl.load(p_ptr + rm[:, None] * H + rn[None, :], mask=msk, other=0.0)
            x = (x + p.to(tl.float32)).to(tl.bfloat16)
            tl.store(out_ptr + rm[:, None] * H + rn[None, :], x, mask=msk)
        if PERSISTENT:
            if TRACE:
                tl.store(trace_ptr + pid * TRACE_SLOTS + TRACE_EXIT, now_ns(HIP))
            depart(sync_ptr, nprog)
