"""K1 for sm_90 in Triton: the KDA front of one layer on one TP rank as ONE persistent launch.

One @triton.jit kernel, `k1_kernel`, with a constexpr PHASE:
- PHASE = -1: every phase in one persistent launch (grid = SM count, all programs
  co-resident), grid barriers between phases (runtime/triton_sync.py), every wait
  bounded by the deadline, fault injection at each phase start, `depart` at the end.
- PHASE = p >= 0: phase p alone, no barrier and no timer. The host runs the phases as
  consecutive launches; Triton's CPU interpreter runs the kernel this way (the global
  timer does not exist there), and the benchmark times each phase like this.

The phases (names in PHASES, used by failure messages and SGL_K3_MONO_STALL):
 0 "seam"    p = bf16(prefix + contribution); scores of the bank rows and p; softmax;
             mix (bf16 on sm_90); input RMSNorm -> h [M, H] bf16. On a block-write
             layer p goes into bank row nvb (the residual restarts), otherwise into the
             caller's residual tensor. SEAM_SPLIT: each row over SP programs, one H-slice
             each, with row-local waits (see the split seam below); else one program a row.
 1 "in_proj" h @ [qkvg | f_a | b]^T -> proj [M, 4P + D + h] bf16. This phase reads
             ~90 MB at TP 8 and sets the speed: the rows of the three weights are cut
             into row tiles of BN_EFF rows (chosen so the tiles cover the grid in as few
             rounds as possible; 132 tiles of 48 rows at TP 8), each tile streams its rows
             over the full K with a pipelined loop and tl.dot (tokens padded to 16 as the
             MMA's N; the weight tile is the MMA's M). No split-K: every output is one
             program's fp32 sum, so no partial buffers and no second pass.
 2 "kda"     items (row, head, V-slice) in decode, (head, V-slice) in verify: f_b,
             gate/decay, causal conv + SiLU, q/k L2 norms, beta and the delta rule on the
             item's rows of the fp32 state (V rows are independent; splitting V gives a
             head's 64 KB of state to several SMs). The last item of a (row, head) to
             finish (an atomic counter, no barrier) writes the q/k conv windows and the
             gated output RMSNorm, which needs all 128 outputs of the head.
             GL (K1Plan.g_last; on sm_90 the default in verify from 2 rows): the gate's
             rows (a quarter of the in-projection's bytes; only the gated norm reads them)
             leave phase 1; as phase 2 starts, programs NKP.. stream them (they arrive at
             barrier 1 without waiting there) while programs 0..NKP-1 run the items, and
             the gated norm waits for the gate tiles' count. HBM keeps streaming through
             the recurrence.
             With NXB > 0 (K1Plan.l2_next, off by default), as the phase starts each
             program asks L2 for its share of the rows the next launch reads first
             (K1IO.l2_next: the layer's o_proj), so K2's first phase can find them
             there while the recurrence leaves HBM idle.

Roundings are the reference's (sgl_k3_mono/k1/reference.py): bf16 where SGLang stores
bf16 (prefix, mix on sm_90, h, proj, f, conv output, o, output); fp32 elsewhere.
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.runtime.triton_l2 import l2_prefetch_rows
from sgl_k3_mono.runtime.triton_seam import seam_p_row, split_seam_persistent, split_seam_step
from sgl_k3_mono.runtime.triton_sync import TALLY, arrive, depart, grid_barrier, maybe_stall, now_ns, wait_geq

PHASES = ("seam", "in_proj", "kda")
"""Phase names, in order (index = the PHASE constexpr)."""
LAUNCH_ID = 0
"""K1's index in runtime.failure.LAUNCHES."""
MP = tl.constexpr(16)
"""Token rows padded to 16: the smallest N (in-projection) / M (f_b) tl.dot takes."""


# ---- phase 0: the attention-side attn-res seam, one program per row ---------------------

@triton.jit
def _row_score(row_ptr, wproj_ptr, wsn_ptr, eps, H: tl.constexpr, BLOCK_H: tl.constexpr):
    """s = (v . cw) / sqrt(mean(v^2) + eps) for one bf16 row v, cw = fp32(norm.w) * fp32(proj.w)."""
    offs = tl.arange(0, BLOCK_H)
    dot = tl.zeros([BLOCK_H], dtype=tl.float32)
    ss = tl.zeros([BLOCK_H], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        m = h0 + offs < H
        v = tl.load(row_ptr + h0 + offs, mask=m, other=0.0).to(tl.float32)
        cw = tl.load(wsn_ptr + h0 + offs, mask=m, other=0.0).to(tl.float32) * \
            tl.load(wproj_ptr + h0 + offs, mask=m, other=0.0).to(tl.float32)
        dot += v * cw
        ss += v * v
    return tl.sum(dot, axis=0) / tl.sqrt(tl.sum(ss, axis=0) / H + eps)


@triton.jit
def _seam_store_p(prefix_row, contrib_row, p_row, H: tl.constexpr, BLOCK_H: tl.constexpr,
                  HAS_CONTRIB: tl.constexpr):
    """p = bf16(prefix + contribution) into p_row (the bank row or the caller's residual)."""
    offs = tl.arange(0, BLOCK_H)
    for h0 in range(0, H, BLOCK_H):
        m = h0 + offs < H
        p = tl.load(prefix_row + h0 + offs, mask=m, other=0.0).to(tl.float32)
        if HAS_CONTRIB:
            p += tl.load(contrib_row + h0 + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(p_row + h0 + offs, p.to(tl.bfloat16), mask=m)
    tl.debug_barrier()  # the passes after this read p back with another thread mapping


@triton.jit
def _seam_store_h(mix_row, won_ptr, h_row, rstd, H: tl.constexpr, BLOCK_H: tl.constexpr):
    """h = bf16(mix * rstd * w): the input RMSNorm's output."""
    offs = tl.arange(0, BLOCK_H)
    for h0 in range(0, H, BLOCK_H):
        m = h0 + offs < H
        x = tl.load(mix_row + h0 + offs, mask=m, other=0.0)
        w = tl.load(won_ptr + h0 + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(h_row + h0 + offs, (x * rstd * w).to(tl.bfloat16), mask=m)


@triton.jit
def _phase_seam(pid, nprog, M, nvb, eps,
                prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr,
                H: tl.constexpr, BLOCK_H: tl.constexpr, NBP: tl.constexpr,
                HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr, WRITE_RESID: tl.constexpr,
                ROUND_MIX: tl.constexpr):
    offs = tl.arange(0, BLOCK_H)
    jj = tl.arange(0, NBP)
    for row in range(pid, M, nprog):
        p_row = seam_p_row(row, nvb, prefix_ptr, s_pm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                           WRITE_BANK, WRITE_RESID)
        if WRITE_BANK or WRITE_RESID:
            _seam_store_p(prefix_ptr + row * s_pm, contrib_ptr + row * s_cm, p_row, H, BLOCK_H, HAS_CONTRIB)

        # scores of the rows bank[0..nvb-1] ++ p, softmax over them (max subtracted first)
        alpha = tl.where(jj == 0, 1.0, 0.0)  # nvb == 0: the mix is p itself
        if nvb > 0:
            scores = tl.full([NBP], float("-inf"), dtype=tl.float32)
            for j in range(0, nvb):
                s = _row_score(bank_ptr + row * s_bm + j * s_bj, wproj_ptr, wsn_ptr, eps, H, BLOCK_H)
                scores = tl.where(jj == j, s, scores)
            s = _row_score(p_row, wproj_ptr, wsn_ptr, eps, H, BLOCK_H)
            scores = tl.where(jj == nvb, s, scores)
            e = tl.where(jj <= nvb, tl.exp(scores - tl.max(scores, axis=0)), 0.0)
            alpha = e / tl.sum(e, axis=0)

        # mix = sum_j alpha_j v_j (p last), stored fp32 (bf16 values on sm_90); sum of squares
        a_p = tl.sum(tl.where(jj == nvb, alpha, 0.0), axis=0)
        ss = tl.zeros([BLOCK_H], dtype=tl.float32)
        for h0 in range(0, H, BLOCK_H):
            m = h0 + offs < H
            acc = tl.zeros([BLOCK_H], dtype=tl.float32)
            for j in range(0, nvb):
                a_j = tl.sum(tl.where(jj == j, alpha, 0.0), axis=0)
                v = tl.load(bank_ptr + row * s_bm + j * s_bj + h0 + offs, mask=m, other=0.0).to(tl.float32)
                acc += a_j * v
            acc += a_p * tl.load(p_row + h0 + offs, mask=m, other=0.0).to(tl.float32)
            if ROUND_MIX:
                acc = acc.to(tl.bfloat16).to(tl.float32)
            tl.store(mix_ptr + row * H + h0 + offs, acc, mask=m)
            ss += acc * acc
        rstd = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / H + eps)
        tl.debug_barrier()
        _seam_store_h(mix_ptr + row * H, won_ptr, h_ptr + row * H, rstd, H, BLOCK_H)


# ---- phase 1: the in-projection GEMV -----------------------------------------------------

@triton.jit
def _gemv_tile(M, h_ptr, w_ptr, s_w, r0, n_rows, proj_ptr, col0,
               H: tl.constexpr, NPROJ: tl.constexpr, BN: tl.constexpr, BN_EFF: tl.constexpr,
               BK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """proj[:, col0 + r0 + i] = bf16(h @ w[r0 + i]^T) for the tile's rows i < BN_EFF.

    The weight tile is the MMA's M side (BN rows, BN_EFF of them real) and the tokens its
    N side (16): "swap AB", so a small M still fills the MMA. K runs over all of H in a
    software-pipelined loop: NUM_STAGES tiles of weights in flight per SM.
    """
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    rm = tl.arange(0, MP)
    rows = r0 + rn
    row_ok = (rn < BN_EFF) & (rows < n_rows)
    w_ptrs = w_ptr + rows[:, None] * s_w + rk[None, :]
    x_ptrs = h_ptr + rm[:, None] * H + rk[None, :]
    acc = tl.zeros([BN, MP], dtype=tl.float32)
    for k0 in tl.range(0, H, BK, num_stages=NUM_STAGES):
        w = tl.load(w_ptrs + k0, mask=row_ok[:, None], other=0.0)
        x = tl.load(x_ptrs + k0, mask=(rm < M)[:, None], other=0.0, cache_modifier=".cg")
        acc = tl.dot(w, tl.trans(x), acc)
    out = proj_ptr + rm[None, :] * NPROJ + (col0 + rows)[:, None]
    tl.store(out, acc.to(tl.bfloat16), mask=row_ok[:, None] & (rm < M)[None, :])


@triton.jit
def _phase_in_proj(pid, nprog, M, h_ptr, wq_ptr, s_wq, wf_ptr, s_wf, wb_ptr, s_wb, proj_ptr,
                   H: tl.constexpr, NQ: tl.constexpr, QC: tl.constexpr, NF: tl.constexpr, NB: tl.constexpr,
                   NPROJ: tl.constexpr, BN: tl.constexpr, BN_EFF: tl.constexpr, BK: tl.constexpr,
                   NUM_STAGES: tl.constexpr):
    # tiles: the first NQ qkvg rows, then f_a rows, then b rows (three views; SGLang's _bfa_w
    # pad rows skipped); f_a's columns start at QC (4P), b's after them
    TQ: tl.constexpr = (NQ + BN_EFF - 1) // BN_EFF
    TF: tl.constexpr = (NF + BN_EFF - 1) // BN_EFF
    TB: tl.constexpr = (NB + BN_EFF - 1) // BN_EFF
    for tile in range(pid, TQ + TF + TB, nprog):
        # one call per weight (not a pointer select) keeps each base pointer's 16-byte
        # alignment visible to the compiler, so the weight loads stay 16 bytes wide
        if tile < TQ:
            _gemv_tile(M, h_ptr, wq_ptr, s_wq, tile * BN_EFF, NQ, proj_ptr, 0,
                       H, NPROJ, BN, BN_EFF, BK, NUM_STAGES)
        elif tile < TQ + TF:
            _gemv_tile(M, h_ptr, wf_ptr, s_wf, (tile - TQ) * BN_EFF, NF, proj_ptr, QC,
                       H, NPROJ, BN, BN_EFF, BK, NUM_STAGES)
        else:
            _gemv_tile(M, h_ptr, wb_ptr, s_wb, (tile - TQ - TF) * BN_EFF, NB, proj_ptr, QC + NF,
                       H, NPROJ, BN, BN_EFF, BK, NUM_STAGES)


@triton.jit
def _gate_tiles(first, step, M, h_ptr, wq_ptr, s_wq, proj_ptr, gcnt_ptr,
                H: tl.constexpr, P: tl.constexpr, NPROJ: tl.constexpr, BNG: tl.constexpr, BNG_EFF: tl.constexpr,
                BKG: tl.constexpr, NUM_STAGES: tl.constexpr, COUNT: tl.constexpr):
    """GL: the output gate's rows (qkvg rows 3P..4P-1, read only by the gated norm at the
    end) as tiles first, first + step, ...; each tile stored is counted on gcnt (COUNT)."""
    TG: tl.constexpr = (P + BNG_EFF - 1) // BNG_EFF
    for tile in range(first, TG, step):
        _gemv_tile(M, h_ptr, wq_ptr + 3 * P * s_wq, s_wq, tile * BNG_EFF, P, proj_ptr, 3 * P,
                   H, NPROJ, BNG, BNG_EFF, BKG, NUM_STAGES)
        if COUNT:
            tl.debug_barrier()  # every thread's part of the tile is stored
            tl.atomic_add(gcnt_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _prefetch_first_tile(pid, wq_ptr, s_wq, wf_ptr, s_wf, wb_ptr, s_wb, NQ: tl.constexpr, NF: tl.constexpr,
                         NB: tl.constexpr, BN: tl.constexpr, BN_EFF: tl.constexpr, PF: tl.constexpr,
                         NT: tl.constexpr):
    """The first PF bytes of each row of the in-projection tile `pid` (the first one this
    program takes; _phase_in_proj's tile order) into L2."""
    TQ: tl.constexpr = (NQ + BN_EFF - 1) // BN_EFF
    TF: tl.constexpr = (NF + BN_EFF - 1) // BN_EFF
    TB: tl.constexpr = (NB + BN_EFF - 1) // BN_EFF
    if pid < TQ:
        l2_prefetch_rows(wq_ptr + pid * BN_EFF * s_wq, s_wq * 2, tl.minimum(BN_EFF, NQ - pid * BN_EFF), BN, PF, NT)
    elif pid < TQ + TF:
        r0 = (pid - TQ) * BN_EFF
        l2_prefetch_rows(wf_ptr + r0 * s_wf, s_wf * 2, tl.minimum(BN_EFF, NF - r0), BN, PF, NT)
    elif pid < TQ + TF + TB:
        r0 = (pid - TQ - TF) * BN_EFF
        l2_prefetch_rows(wb_ptr + r0 * s_wb, s_wb * 2, tl.minimum(BN_EFF, NB - r0), BN, PF, NT)


# ---- phase 2: f_b, conv, gate, norms, delta rule, gated output norm -----------------------

@triton.jit
def _conv_silu(win_ptr, s_win, proj_ptr, t0, u, ch, cw_ptr, s_cw,
               NPROJ: tl.constexpr, KW: tl.constexpr):
    """Causal depthwise conv + SiLU of token u for channels ch -> bf16 values (fp32).

    Token u's taps are positions u .. u+KW-1 of [window rows 0..KW-2 (oldest first),
    x_0, x_1, ...] with x_t = proj[t0 + t]; taps summed oldest first, as the reference.
    """
    acc = tl.zeros(ch.shape, dtype=tl.float32)
    for i in tl.static_range(KW):
        s = u + i
        from_win = s < KW - 1
        tap = tl.load(win_ptr + s * s_win + ch, mask=(ch >= 0) & from_win, other=0.0).to(tl.float32) + \
            tl.load(proj_ptr + (t0 + s - (KW - 1)) * NPROJ + ch, mask=(ch >= 0) & (s >= KW - 1),
                    other=0.0, cache_modifier=".cg").to(tl.float32)
        w = tl.load(cw_ptr + ch * s_cw + i)
        if i == 0:
            acc = tap * w
        else:
            acc = acc + tap * w
    return (acc / (1.0 + tl.exp(-acc))).to(tl.bfloat16).to(tl.float32)


@triton.jit
def _write_window(dst_ptr, s_dst, win_ptr, s_win, proj_ptr, t0, u, ch,
                  NPROJ: tl.constexpr, KW: tl.constexpr):
    """The conv window after token u: rows r = taps r+1 (the oldest tap drops out)."""
    for r in tl.static_range(KW - 1):
        s = u + r + 1
        tap = tl.load(win_ptr + s * s_win + ch, mask=(ch >= 0) & (s < KW - 1), other=0.0).to(tl.float32) + \
            tl.load(proj_ptr + (t0 + s - (KW - 1)) * NPROJ + ch, mask=(ch >= 0) & (s >= KW - 1),
                    other=0.0, cache_modifier=".cg").to(tl.float32)
        tl.store(dst_ptr + r * s_dst + ch, tap.to(tl.bfloat16))


@triton.jit
def _l2norm(x, eps):
    return x / tl.sqrt(tl.sum(x * x, axis=0) + eps)


@triton.jit
def _qk_beta(win_ptr, s_cr, proj_ptr, t0, u, head, cw_ptr, s_cw,
             P: tl.constexpr, D: tl.constexpr, NPROJ: tl.constexpr, KW: tl.constexpr, B_COL: tl.constexpr):
    """Token u's normed q (times D^-1/2) and k of one head [D], and its beta."""
    d = tl.arange(0, D)
    q = _conv_silu(win_ptr, s_cr, proj_ptr, t0, u, head * D + d, cw_ptr, s_cw, NPROJ, KW)
    k = _conv_silu(win_ptr, s_cr, proj_ptr, t0, u, P + head * D + d, cw_ptr, s_cw, NPROJ, KW)
    braw = tl.load(proj_ptr + (t0 + u) * NPROJ + B_COL + head, cache_modifier=".cg").to(tl.float32)
    return _l2norm(q, 1e-6) * (D ** -0.5), _l2norm(k, 1e-6), 1.0 / (1.0 + tl.exp(-braw))


@triton.jit
def _delta_rule(S, q, k, v, decay, beta):
    """One token on state rows S [BV, D] (rows v, K contiguous): decay, the delta update,
    and the output rows o = S q."""
    S = S * decay[None, :]
    hk = tl.sum(S * k[None, :], axis=1)
    S = S + (beta * (v - hk))[:, None] * k[None, :]
    return S, tl.sum(S * q[None, :], axis=1)


@triton.jit
def _phase_kda(pid, nprog, M, pad_slot, vindex,
               proj_ptr, fb_ptr, s_fb, cw_ptr, s_cw, alog_ptr, dtb_ptr, onw_ptr, slots_ptr,
               conv_ptr, s_cs, s_cr, ssm_ptr, s_ss, s_sh, s_sv,
               vconv_ptr, s_vcr, s_vct, s_vcw, vssm_ptr, s_vsr, s_vst, s_vsh, s_vsv,
               opre_ptr, cnt_ptr, out_ptr, s_om,
               gcnt_ptr, t_start, deadline_ns, err_addr, rank, layer,
               HL: tl.constexpr, D: tl.constexpr, KW: tl.constexpr, NPROJ: tl.constexpr,
               NV: tl.constexpr, BV: tl.constexpr, VERIFY: tl.constexpr,
               HAS_LB: tl.constexpr, LB: tl.constexpr, WAIT_G: tl.constexpr, TG: tl.constexpr, HIP: tl.constexpr):
    P: tl.constexpr = HL * D
    VS: tl.constexpr = D // NV  # V rows per item
    FA_COL: tl.constexpr = 4 * P
    B_COL: tl.constexpr = 4 * P + D
    d = tl.arange(0, D)
    tt = tl.arange(0, MP)
    if VERIFY:
        n_items = HL * NV
    else:
        n_items = M * HL * NV
    for item in range(pid, n_items, nprog):
        vs = item % NV
        head = (item // NV) % HL
        if VERIFY:  # one request: M tokens in order on the committed state
            row = 0
            t0 = 0
            T = M
        else:  # row `row` is one request's one token
            row = item // (HL * NV)
            t0 = row
            T = 1
        slot = tl.load(slots_ptr + row).to(tl.int64)
        if (slot < 0) | (slot == pad_slot):
            # a padded row: zero output, no state touched
            if vs == 0:
                for u in range(0, T):
                    tl.store(out_ptr + (t0 + u) * s_om + head * D + d, tl.zeros([D], dtype=tl.bfloat16))
        else:
            win_ptr = conv_ptr + slot * s_cs
            # f = bf16(f_a @ f_b[head]^T) for all the item's tokens at once, then the decay
            fa = tl.load(proj_ptr + (t0 + tt)[:, None] * NPROJ + FA_COL + d[None, :],
                         mask=(tt < T)[:, None], other=0.0, cache_modifier=".cg")
            fb = tl.load(fb_ptr + (head * D + d)[:, None] * s_fb + d[None, :])
            f = tl.dot(fa, tl.trans(fb)).to(tl.bfloat16).to(tl.float32)  # [MP, D]
            x = f + tl.load(dtb_ptr + head * D + d)[None, :]
            a = tl.exp(tl.load(alog_ptr + head))
            if HAS_LB:  # K3's safe gate: the decay never goes below exp(LB)
                g = LB * (1.0 / (1.0 + tl.exp(-(a * x))))
            else:
                g = -a * tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)
            decay_all = tl.exp(g)  # [MP, D]

            if VERIFY:  # one request's T tokens in order: every token's state kept
                for c in range(0, VS // BV):
                    vr = vs * VS + c * BV + tl.arange(0, BV)
                    S = tl.load(ssm_ptr + slot * s_ss + head * s_sh + vr[:, None] * s_sv + d[None, :])
                    chv = 2 * P + head * D + vr
                    for u in range(0, T):
                        q, k, beta = _qk_beta(win_ptr, s_cr, proj_ptr, t0, u, head, cw_ptr, s_cw,
                                              P, D, NPROJ, KW, B_COL)
                        v = _conv_silu(win_ptr, s_cr, proj_ptr, t0, u, chv, cw_ptr, s_cw, NPROJ, KW)
                        decay = tl.sum(tl.where(tt[:, None] == u, decay_all, 0.0), axis=0)
                        S, o = _delta_rule(S, q, k, v, decay, beta)
                        tl.store(opre_ptr + (t0 + u) * P + head * D + vr, o.to(tl.bfloat16))
                        vs_ptrs = vssm_ptr + vindex * s_vsr + u * s_vst + head * s_vsh + vr[:, None] * s_vsv
                        tl.store(vs_ptrs + d[None, :], S)
                        _write_window(vconv_ptr + vindex * s_vcr + u * s_vct, s_vcw, win_ptr, s_cr,
                                      proj_ptr, t0, u, chv, NPROJ, KW)
            else:  # one token: q, k, the decay and beta once for all of the item's V chunks
                q, k, beta = _qk_beta(win_ptr, s_cr, proj_ptr, t0, 0, head, cw_ptr, s_cw, P, D, NPROJ, KW, B_COL)
                decay = tl.sum(tl.where(tt[:, None] == 0, decay_all, 0.0), axis=0)
                for c in range(0, VS // BV):
                    vr = vs * VS + c * BV + tl.arange(0, BV)
                    s_ptrs = ssm_ptr + slot * s_ss + head * s_sh + vr[:, None] * s_sv + d[None, :]
                    chv = 2 * P + head * D + vr
                    v = _conv_silu(win_ptr, s_cr, proj_ptr, t0, 0, chv, cw_ptr, s_cw, NPROJ, KW)
                    S, o = _delta_rule(tl.load(s_ptrs), q, k, v, decay, beta)  # [BV, D] fp32: rows v, K contiguous
                    tl.store(opre_ptr + t0 * P + head * D + vr, o.to(tl.bfloat16))
                    tl.store(s_ptrs, S)
                    tl.debug_barrier()  # every thread has read the old v window before it moves
                    _write_window(win_ptr, s_cr, win_ptr, s_cr, proj_ptr, t0, 0, chv, NPROJ, KW)

            # The last item of this (row, head) to get here finishes it: all V outputs exist
            # and every item has read the q/k windows, which may now move.
            last = True
            if NV > 1:
                tl.debug_barrier()
                done = tl.atomic_add(cnt_ptr + row * HL + head, 1, sem="acq_rel", scope="gpu")
                last = done == NV - 1
            if last:
                if NV > 1:  # reset for the next launch (nobody else touches it any more)
                    tl.atomic_xchg(cnt_ptr + row * HL + head, 0, sem="relaxed", scope="gpu")
                if WAIT_G:  # GL: the gate's rows stream on other programs; all TG tiles stored
                    wait_geq(gcnt_ptr, TG, t_start, deadline_ns, err_addr, rank, layer, 0, 2, "gpu", HIP)
                w_on = tl.load(onw_ptr + d).to(tl.float32)
                for u in range(0, T):
                    o = tl.load(opre_ptr + (t0 + u) * P + head * D + d, cache_modifier=".cg").to(tl.float32)
                    gate = tl.load(proj_ptr + (t0 + u) * NPROJ + 3 * P + head * D + d,
                                   cache_modifier=".cg").to(tl.float32)
                    y = o / tl.sqrt(tl.sum(o * o, axis=0) / D + 1e-5) * w_on * (1.0 / (1.0 + tl.exp(-gate)))
                    tl.store(out_ptr + (t0 + u) * s_om + head * D + d, y.to(tl.bfloat16))
                    if VERIFY:
                        dst = vconv_ptr + vindex * s_vcr + u * s_vct
                        _write_window(dst, s_vcw, win_ptr, s_cr, proj_ptr, t0, u, head * D + d, NPROJ, KW)
                        _write_window(dst, s_vcw, win_ptr, s_cr, proj_ptr, t0, u, P + head * D + d, NPROJ, KW)
                if not VERIFY:
                    tl.debug_barrier()
                    _write_window(win_ptr, s_cr, win_ptr, s_cr, proj_ptr, t0, 0, head * D + d, NPROJ, KW)
                    _write_window(win_ptr, s_cr, win_ptr, s_cr, proj_ptr, t0, 0, P + head * D + d, NPROJ, KW)


# ---- the launch ---------------------------------------------------------------------------

# The scalars that change from layer to layer, step to step (the verify index) or rank to
# rank are never specialised (see k2/triton/kernel.py's K2_RUNTIME_SCALARS).
K1_RUNTIME_SCALARS = ("nvb", "pad_slot", "vindex", "stall_phase", "rank", "layer", "nx_rows", "nx_per", "err_addr")


@triton.jit(do_not_specialize=K1_RUNTIME_SCALARS)
def k1_kernel(
    # seam
    prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
    wproj_ptr, wsn_ptr, won_ptr, nvb, eps,
    # in-projection
    wq_ptr, s_wq, wf_ptr, s_wf, wb_ptr, s_wb,
    # kda
    fb_ptr, s_fb, cw_ptr, s_cw, alog_ptr, dtb_ptr, onw_ptr, slots_ptr, pad_slot,
    conv_ptr, s_cs, s_cr, ssm_ptr, s_ss, s_sh, s_sv,
    vconv_ptr, s_vcr, s_vct, s_vcw, vssm_ptr, s_vsr, s_vst, s_vsh, s_vsv, vindex,
    out_ptr, s_om,
    # scratch (contiguous, allocated once per plan)
    h_ptr, mix_ptr, proj_ptr, opre_ptr, cnt_ptr, spart_ptr, scnt_ptr,
    # synchronisation and failure
    sync_ptr, err_addr, deadline_ns, stall_phase, rank, layer,
    M,
    # the next launch's first weights, asked into L2 during the KDA phase (NXB > 0)
    nx_ptr, nx_stride, nx_rows, nx_per,
    H: tl.constexpr, HL: tl.constexpr, D: tl.constexpr, KW: tl.constexpr,
    BLOCK_H: tl.constexpr, NBP: tl.constexpr,
    HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr, WRITE_RESID: tl.constexpr, ROUND_MIX: tl.constexpr,
    BN: tl.constexpr, BN_EFF: tl.constexpr, BK: tl.constexpr, NUM_STAGES: tl.constexpr,
    NV: tl.constexpr, BV: tl.constexpr, VERIFY: tl.constexpr, HAS_LB: tl.constexpr, LB: tl.constexpr,
    PHASE: tl.constexpr, HIP: tl.constexpr = False,
    SEAM_SPLIT: tl.constexpr = False, BS: tl.constexpr = 512, SP: tl.constexpr = 1, SPP: tl.constexpr = 1,
    SEAM_STEP: tl.constexpr = 0, PF: tl.constexpr = 0, NT: tl.constexpr = 128,
    NXR: tl.constexpr = 1, NXB: tl.constexpr = 0,
    # GL (K1Plan.g_last): the gate's rows streamed during the recurrence by programs NKP..,
    # in tiles of BNG_EFF rows (BNG in registers) and BKG columns a pipeline stage
    GL: tl.constexpr = False, NKP: tl.constexpr = 0, BNG: tl.constexpr = 16, BNG_EFF: tl.constexpr = 16,
    BKG: tl.constexpr = 128,
    # host side only (the launch fits the compiled function's carveout): a constexpr so that
    # each choice is its own compiled function
    CARVE: tl.constexpr = False,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    P: tl.constexpr = HL * D
    NPROJ: tl.constexpr = 4 * P + D + HL

    if PHASE == -1:
        t0 = now_ns(HIP)
        maybe_stall(stall_phase, 0, t0, deadline_ns, err_addr, rank, layer, 0, HIP)
        if PF > 0:  # HBM idles through the seam: the head of this program's first in-projection tile into L2
            _prefetch_first_tile(pid, wq_ptr, s_wq, wf_ptr, s_wf, wb_ptr, s_wb, 3 * P if GL else 4 * P, D, HL, BN,
                                 BN_EFF, PF, NT)
    if (PHASE == -1) and SEAM_SPLIT:
        split_seam_persistent(pid, M, nvb, eps,
                              prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                              wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr, scnt_ptr,
                              t0, deadline_ns, err_addr, rank, layer,
                              H, NBP, BS, SP, SPP, HAS_CONTRIB, WRITE_BANK, WRITE_RESID, ROUND_MIX, HIP,
                              0, 0)  # launch K1 (LAUNCH_ID), phase seam
    elif (PHASE == 0) and SEAM_SPLIT:  # one step a launch (SEAM_STEP), no waits
        if pid < M * SP:
            split_seam_step(pid, M, nvb, eps,
                            prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                            wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr,
                            SEAM_STEP, H, NBP, BS, SP, SPP, HAS_CONTRIB, WRITE_BANK, WRITE_RESID, ROUND_MIX)
    elif (PHASE == -1) or (PHASE == 0):
        _phase_seam(pid, nprog, M, nvb, eps,
                    prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                    wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr,
                    H, BLOCK_H, NBP, HAS_CONTRIB, WRITE_BANK, WRITE_RESID, ROUND_MIX)
    if PHASE == -1:
        grid_barrier(sync_ptr, 0, nprog, t0, deadline_ns, err_addr, rank, layer, 0, 0, HIP)
        maybe_stall(stall_phase, 1, t0, deadline_ns, err_addr, rank, layer, 0, HIP)
        if SEAM_SPLIT:  # every row wait is over (barrier 0): the row counters start again at 0
            if pid == 0:
                tl.store(scnt_ptr + tl.arange(0, MP), 0, mask=tl.arange(0, MP) < M)
    if (PHASE == -1) or (PHASE == 1):
        _phase_in_proj(pid, nprog, M, h_ptr, wq_ptr, s_wq, wf_ptr, s_wf, wb_ptr, s_wb, proj_ptr,
                       H, 3 * P if GL else 4 * P, 4 * P, D, HL, NPROJ, BN, BN_EFF, BK, NUM_STAGES)
    if (PHASE == 1) and GL:  # phase by phase: the gate's tiles after the rest, over the whole grid
        _gate_tiles(pid, nprog, M, h_ptr, wq_ptr, s_wq, proj_ptr, sync_ptr + TALLY,
                    H, P, NPROJ, BNG, BNG_EFF, BKG, NUM_STAGES, False)
    gate_program = False
    if (PHASE == -1) and GL:
        gate_program = pid >= NKP
    if gate_program:
        # GL: the gate's programs. The recurrence runs on programs 0..NKP-1 while these
        # stream the gate's rows, which only the gated norm at its end reads (it waits
        # for their count); they need nothing the next barrier guards, so they arrive there
        # without waiting.
        arrive(sync_ptr)
        _gate_tiles(pid - NKP, nprog - NKP, M, h_ptr, wq_ptr, s_wq, proj_ptr, sync_ptr + TALLY,
                    H, P, NPROJ, BNG, BNG_EFF, BKG, NUM_STAGES, True)
    elif (PHASE == -1) or (PHASE == 2):
        if PHASE == -1:
            grid_barrier(sync_ptr, 1, nprog, t0, deadline_ns, err_addr, rank, layer, 0, 1, HIP)
            maybe_stall(stall_phase, 2, t0, deadline_ns, err_addr, rank, layer, 0, HIP)
            if NXB > 0:  # the recurrence leaves HBM idle: the next launch's first weights into L2
                r0 = pid * nx_per
                l2_prefetch_rows(nx_ptr + r0.to(tl.int64) * nx_stride, nx_stride * 2,
                                 tl.minimum(nx_per, nx_rows - r0), NXR, NXB, NT)
        else:
            t0 = 0  # (phase by phase nothing in the phase waits)
        _phase_kda(pid, NKP if (GL and PHASE == -1) else nprog, M, pad_slot, vindex,
                   proj_ptr, fb_ptr, s_fb, cw_ptr, s_cw, alog_ptr, dtb_ptr, onw_ptr, slots_ptr,
                   conv_ptr, s_cs, s_cr, ssm_ptr, s_ss, s_sh, s_sv,
                   vconv_ptr, s_vcr, s_vct, s_vcw, vssm_ptr, s_vsr, s_vst, s_vsh, s_vsv,
                   opre_ptr, cnt_ptr, out_ptr, s_om,
                   sync_ptr + TALLY, t0, deadline_ns, err_addr, rank, layer,
                   HL, D, KW, NPROJ, NV, BV, VERIFY, HAS_LB, LB, GL and (PHASE == -1),
                   (P + BNG_EFF - 1) // BNG_EFF, HIP)
    if PHASE == -1:
        depart(sync_ptr, nprog, GL)
