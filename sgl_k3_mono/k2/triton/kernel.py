"""K2, the layer launch, as one persistent Triton kernel (sm_90).

One program per SM walks seven phases; a grid barrier separates them (PHASE = -1).
With PHASE = p the same code runs phase p alone, as its own launch: the interpreter
tests run K2 that way on the CPU, and the benchmark times the phases that way.

  0 o_proj       a_r = bf16(o_r @ Wo^T)                     tiles of H rows of Wo
  1 seam         a = bf16(sum_r a_r); p = bf16(p + a); h2 = norm(Agg(bank, p))   one program a row
  2 front        [shared gate_up | router | latent down] @ h2     tiles of the merged rows
  3 experts_up   routing (every program, identical); act = bf16(SiTU(W13_e x))  (expert, I tile)
  4 experts_down y[r,k] = bf16(W2_e act_e[r]) (expert, L tile); shared = bf16(SiTU(gu) @ Wd^T)
  5 combine      latent = bf16(sum_k w[r,k] y[r,k])  in top-k order  (L tiles)
  6 reduce       TP > 1: [latent | shared] = bf16(sum_r partial_r) over the peers (column tiles)
  7 latent_up    out = bf16(bf16(bf16(norm(latent) @ Wup^T) + shared) + p)   (H tiles)

Every weight is read once a step; activations stay in L2-resident scratch. An expert
routed by several rows is computed once for all of them (the first (row, slot) that
names it owns the work). Rows are padded to 16 for tl.dot; padded rows are masked.
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

from sgl_k3_mono.runtime.triton_sync import EPOCH, depart, grid_barrier, maybe_stall, now_ns, wait_eq

PHASES = ("o_proj", "seam", "front", "experts_up", "experts_down", "combine", "reduce", "latent_up")
LAUNCH_ID = tl.constexpr(1)  # runtime.failure.LAUNCHES.index("k2")


# ---------------------------------------------------------------------------------------
# small pieces

@triton.jit
def _situ(g, u, BETA: tl.constexpr, LBETA: tl.constexpr):
    """beta*tanh(g/beta)*sigmoid(g) * lbeta*tanh(u/lbeta), fp32 (tanh via exp: no libdevice)."""
    tg = 2.0 * tl.sigmoid(2.0 * g / BETA) - 1.0
    tu = 2.0 * tl.sigmoid(2.0 * u / LBETA) - 1.0
    return BETA * tg * tl.sigmoid(g) * (LBETA * tu)


@triton.jit
def _e2m1(nib):
    """An FP4 (e2m1) code 0..15 to fp32: sign | 2-bit exponent (bias 1) | 1-bit mantissa."""
    e = (nib >> 1) & 3
    m = (nib & 1).to(tl.float32)
    mag = tl.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * tl.exp2((e - 1).to(tl.float32)))
    return tl.where((nib & 8) != 0, -mag, mag)


@triton.jit
def _dot_bf16(x_ptr, sxm, M, w_ptr, swn, n0, N, K, acc,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """acc += x[:M, :K] @ W[n0:n0+BN, :K]^T, bf16 weights [N, K] with row stride swn."""
    rm = tl.arange(0, BM)
    rn = n0 + tl.arange(0, BN)
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        rk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[:, None] * swn + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
        acc = tl.dot(x.to(tl.bfloat16), tl.trans(w), acc)
    return acc


@triton.jit
def _dot_mxfp4(x_ptr, sxm, M, w_ptr, swn, s_ptr, ssn, n0, N, K, acc,
               BM: tl.constexpr, BN: tl.constexpr, BKH: tl.constexpr, STAGES: tl.constexpr):
    """acc += x[:M, :K] @ W^T for MXFP4 W: bytes [N, K/2] (low nibble = even element),
    ue8m0 scales [N, K/32]. Hopper has no FP4 unit: dequantize to bf16 (exact) in registers."""
    rm = tl.arange(0, BM)
    rn = n0 + tl.arange(0, BN)
    for kb in tl.range(0, K // 2, BKH, num_stages=STAGES):
        rb = kb + tl.arange(0, BKH)
        nmask = (rn[:, None] < N) & (rb[None, :] < K // 2)
        byte = tl.load(w_ptr + rn[:, None] * swn + rb[None, :], mask=nmask, other=0).to(tl.int32)
        sc = tl.load(s_ptr + rn[:, None] * ssn + (rb // 16)[None, :], mask=nmask, other=127).to(tl.float32)
        scale = tl.exp2(sc - 127.0)
        lo = (_e2m1(byte & 15) * scale).to(tl.bfloat16)
        hi = (_e2m1(byte >> 4) * scale).to(tl.bfloat16)
        xmask = (rm[:, None] < M) & (rb[None, :] < K // 2)
        xe = tl.load(x_ptr + rm[:, None] * sxm + 2 * rb[None, :], mask=xmask, other=0.0).to(tl.bfloat16)
        xo = tl.load(x_ptr + rm[:, None] * sxm + 2 * rb[None, :] + 1, mask=xmask, other=0.0).to(tl.bfloat16)
        acc = tl.dot(xe, tl.trans(lo), acc)
        acc = tl.dot(xo, tl.trans(hi), acc)
    return acc


@triton.jit
def _route(logits_ptr, bias_ptr, M, E, TOPK: tl.constexpr, BM: tl.constexpr, BE: tl.constexpr,
           KB: tl.constexpr):
    """Biased sigmoid top-k per row: ids [BM, KB] (descending biased score) and the
    renormalised unbiased weights [BM, KB]. Every program computes the same answer."""
    rm = tl.arange(0, BM)
    re = tl.arange(0, BE)
    valid = (rm[:, None] < M) & (re[None, :] < E)
    s = tl.sigmoid(tl.load(logits_ptr + rm[:, None] * E + re[None, :], mask=valid, other=0.0))
    choice = tl.where(valid, s + tl.load(bias_ptr + re, mask=re < E, other=0.0)[None, :], float("-inf"))
    kc = tl.arange(0, KB)
    ids = tl.zeros((BM, KB), tl.int32)
    wts = tl.zeros((BM, KB), tl.float32)
    for k in tl.static_range(TOPK):
        best = tl.max(choice, axis=1)
        idx = tl.min(tl.where(choice == best[:, None], re[None, :], BE), axis=1)
        hit = re[None, :] == idx[:, None]
        wk = tl.sum(tl.where(hit, s, 0.0), axis=1)
        ids = tl.where(kc[None, :] == k, idx[:, None], ids)
        wts = tl.where(kc[None, :] == k, wk[:, None], wts)
        choice = tl.where(hit, float("-inf"), choice)
    wts = wts / (tl.sum(wts, axis=1)[:, None] + 1e-20)
    return ids, wts


@triton.jit
def _expert_of(ids, t, M, TOPK: tl.constexpr, BM: tl.constexpr, KB: tl.constexpr):
    """Expert of flat pair t = row * TOPK + slot, and whether t is its first occurrence."""
    rm = tl.arange(0, BM)
    kc = tl.arange(0, KB)
    flat = rm[:, None] * TOPK + kc[None, :]
    live = (rm[:, None] < M) & (kc[None, :] < TOPK)
    e = tl.sum(tl.sum(tl.where(flat == t, ids, 0), axis=1), axis=0)
    earlier = tl.sum(tl.sum(tl.where(live & (flat < t) & (ids == e), 1, 0), axis=1), axis=0)
    return e, earlier == 0


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


# ---------------------------------------------------------------------------------------
# the launch

@triton.jit
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
    part1_ptr, p_ptr, h2_ptr, gu_ptr, logit_ptr, xin_ptr, ids_ptr, wts_ptr, act_ptr, y_ptr, part2_ptr,
    out_ptr,
    # TP > 1: peers' symmetric partial buffers and ready tags (int64 address tables), local reduce
    peer1_ptr, peer2_ptr, flag_ptr, red_ptr, SLOT1, SLOT2,
    # synchronisation and failure
    sync_ptr, err_addr, deadline_ns, rank, layer, stall_phase,
    # shapes and constants
    H: tl.constexpr, A: tl.constexpr, S2: tl.constexpr, E: tl.constexpr, L: tl.constexpr,
    I: tl.constexpr, I_UP: tl.constexpr, TOPK: tl.constexpr,
    EPS: tl.constexpr, BETA: tl.constexpr, LBETA: tl.constexpr,
    MXFP4: tl.constexpr, FRONT_BF16: tl.constexpr, MIX_BF16: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BKX: tl.constexpr, BKD: tl.constexpr,
    BI: tl.constexpr, BL: tl.constexpr,
    BH: tl.constexpr, BE: tl.constexpr, KB: tl.constexpr, NBB: tl.constexpr, STAGES: tl.constexpr,
    PHASE: tl.constexpr, TP: tl.constexpr = 1, HIP: tl.constexpr = False,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    PERSISTENT: tl.constexpr = PHASE < 0
    t0 = 0
    if PERSISTENT:
        t0 = now_ns(HIP)
    rm = tl.arange(0, BM)
    if TP > 1:
        # this launch's epoch: the parity slot of the partials and the ready tag
        epoch = tl.load(sync_ptr + EPOCH)
        tag = epoch + 1
        part1_ptr += (epoch % 2) * SLOT1
        part2_ptr += (epoch % 2) * SLOT2

    # -- 0: o_proj --------------------------------------------------------------------
    if PERSISTENT or PHASE == 0:
        if PERSISTENT:
            maybe_stall(stall_phase, 0, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        for tile in range(pid, H // BN, nprog):
            acc = _dot_bf16(attn_ptr, A, M, wo_ptr, s_wo, tile * BN, H, A, tl.zeros((BM, BN), tl.float32),
                            BM, BN, BK, STAGES)
            rn = tile * BN + tl.arange(0, BN)
            tl.store(part1_ptr + rm[:, None] * H + rn[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)
        if PERSISTENT:
            grid_barrier(sync_ptr, 0, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 0, HIP)
        if TP > 1:
            _publish(flag_ptr, rank, epoch % 2, tag, pid)

    # -- 1: reduce over the ranks present, prefix add, FFN attn-res seam --------------
    if PERSISTENT or PHASE == 1:
        if PERSISTENT:
            maybe_stall(stall_phase, 1, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        rh = tl.arange(0, BH)
        hm = rh < H
        cw = tl.load(rnorm_ptr + rh, mask=hm, other=0.0).to(tl.float32) * \
            tl.load(proj_ptr + rh, mask=hm, other=0.0).to(tl.float32)
        ow = tl.load(onorm_ptr + rh, mask=hm, other=0.0).to(tl.float32)
        jb = tl.arange(0, NBB)
        if TP > 1:
            if PERSISTENT:
                if pid < M:
                    _wait_peers(flag_ptr, epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 1, HIP)
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
            grid_barrier(sync_ptr, 1, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 1, HIP)

    # -- 2: the MoE front: [shared gate_up | router | latent down] ---------------------
    if PERSISTENT or PHASE == 2:
        if PERSISTENT:
            maybe_stall(stall_phase, 2, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        for tile in range(pid, (S2 + E + L) // BN, nprog):
            n0 = tile * BN
            acc = tl.zeros((BM, BN), tl.float32)
            rn = tl.arange(0, BN)
            if n0 < S2:
                acc = _dot_bf16(h2_ptr, H, M, wgu_ptr, s_wgu, n0, S2, H, acc, BM, BN, BK, STAGES)
                if FRONT_BF16:
                    acc = acc.to(tl.bfloat16).to(tl.float32)
                tl.store(gu_ptr + rm[:, None] * S2 + (n0 + rn)[None, :], acc, mask=rm[:, None] < M)
            elif n0 < S2 + E:
                acc = _dot_bf16(h2_ptr, H, M, wr_ptr, s_wr, n0 - S2, E, H, acc, BM, BN, BK, STAGES)
                if FRONT_BF16:
                    acc = acc.to(tl.bfloat16).to(tl.float32)
                tl.store(logit_ptr + rm[:, None] * E + (n0 - S2 + rn)[None, :], acc, mask=rm[:, None] < M)
            else:
                acc = _dot_bf16(h2_ptr, H, M, wdn_ptr, s_wdn, n0 - S2 - E, L, H, acc, BM, BN, BK, STAGES)
                tl.store(xin_ptr + rm[:, None] * L + (n0 - S2 - E + rn)[None, :], acc.to(tl.bfloat16),
                         mask=rm[:, None] < M)
        if PERSISTENT:
            grid_barrier(sync_ptr, 2, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 2, HIP)

    kc = tl.arange(0, KB)
    # -- 3: routing, then each routed expert's gate/up and SiTU ------------------------
    if PERSISTENT or PHASE == 3:
        if PERSISTENT:
            maybe_stall(stall_phase, 3, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        ids, wts = _route(logit_ptr, bias_ptr, M, E, TOPK, BM, BE, KB)
        if pid == 0:
            keep = (rm[:, None] < M) & (kc[None, :] < TOPK)
            tl.store(ids_ptr + rm[:, None] * TOPK + kc[None, :], ids, mask=keep)
            tl.store(wts_ptr + rm[:, None] * TOPK + kc[None, :], wts, mask=keep)
        for item in range(pid, M * TOPK * (I // BI), nprog):
            t = item // (I // BI)
            i0 = (item % (I // BI)) * BI
            e, first = _expert_of(ids, t, M, TOPK, BM, KB)
            e = e.to(tl.int64)
            if first:
                g = tl.zeros((BM, BI), tl.float32)
                u = tl.zeros((BM, BI), tl.float32)
                if MXFP4:
                    g = _dot_mxfp4(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e, ssc13_n,
                                   i0, I, L, g, BM, BI, BKX // 2, STAGES)
                    u = _dot_mxfp4(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                   sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L, u,
                                   BM, BI, BKX // 2, STAGES)
                else:
                    g = _dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, i0, I, L, g, BM, BI, BKX, STAGES)
                    u = _dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L, u,
                                  BM, BI, BKX, STAGES)
                act = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                ri = i0 + tl.arange(0, BI)
                tl.store(act_ptr + (t * BM + rm[:, None]) * I + ri[None, :], act)
        if PERSISTENT:
            grid_barrier(sync_ptr, 3, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 3, HIP)

    # -- 4: each routed expert's down projection; the shared experts ------------------
    if PERSISTENT or PHASE == 4:
        if PERSISTENT:
            maybe_stall(stall_phase, 4, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        keep = (rm[:, None] < M) & (kc[None, :] < TOPK)
        ids = tl.load(ids_ptr + rm[:, None] * TOPK + kc[None, :], mask=keep, other=-1)
        n_routed = M * TOPK * (L // BL)
        for item in range(pid, n_routed + H // BN, nprog):
            if item < n_routed:
                t = item // (L // BL)
                l0 = (item % (L // BL)) * BL
                e, first = _expert_of(ids, t, M, TOPK, BM, KB)
                if first:
                    y = tl.zeros((BM, BL), tl.float32)
                    e64 = e.to(tl.int64)
                    if MXFP4:
                        y = _dot_mxfp4(act_ptr + t * BM * I, I, M, w2_ptr + e64 * s2_e, s2_n,
                                       sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, y, BM, BL, BKD // 2, STAGES)
                    else:
                        y = _dot_bf16(act_ptr + t * BM * I, I, M, w2_ptr + e64 * s2_e, s2_n, l0, L, I, y,
                                      BM, BL, BKD, STAGES)
                    # every row that routed to e gets it, in its own (row, slot) place
                    match = (ids == e) & keep
                    slot = tl.sum(tl.where(match, kc[None, :], 0), axis=1)
                    has = tl.max(match.to(tl.int32), axis=1) > 0
                    rl = l0 + tl.arange(0, BL)
                    tl.store(y_ptr + (rm * TOPK + slot)[:, None] * L + rl[None, :], y.to(tl.bfloat16),
                             mask=has[:, None])
            else:
                n0 = (item - n_routed) * BN
                acc = tl.zeros((BM, BN), tl.float32)
                rn = n0 + tl.arange(0, BN)
                for k0 in tl.range(0, S2 // 2, BK, num_stages=STAGES):
                    rk = k0 + tl.arange(0, BK)
                    msk = (rm[:, None] < M) & (rk[None, :] < S2 // 2)
                    g = tl.load(gu_ptr + rm[:, None] * S2 + rk[None, :], mask=msk, other=0.0)
                    u = tl.load(gu_ptr + rm[:, None] * S2 + S2 // 2 + rk[None, :], mask=msk, other=0.0)
                    a = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                    w = tl.load(wsd_ptr + rn[:, None] * s_wsd + rk[None, :], mask=rk[None, :] < S2 // 2, other=0.0)
                    acc = tl.dot(a, tl.trans(w), acc)
                tl.store(part2_ptr + rm[:, None] * (L + H) + L + rn[None, :], acc.to(tl.bfloat16),
                         mask=rm[:, None] < M)
        if PERSISTENT:
            grid_barrier(sync_ptr, 4, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 4, HIP)

    # -- 5: latent = sum over the row's slots, in top-k order -------------------------
    if PERSISTENT or PHASE == 5:
        if PERSISTENT:
            maybe_stall(stall_phase, 5, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        keep = (rm[:, None] < M) & (kc[None, :] < TOPK)
        wts = tl.load(wts_ptr + rm[:, None] * TOPK + kc[None, :], mask=keep, other=0.0)
        for tile in range(pid, L // BL, nprog):
            rl = tile * BL + tl.arange(0, BL)
            acc = tl.zeros((BM, BL), tl.float32)
            for k in tl.static_range(TOPK):
                wk = tl.sum(tl.where(kc[None, :] == k, wts, 0.0), axis=1)
                yk = tl.load(y_ptr + (rm * TOPK + k)[:, None] * L + rl[None, :], mask=rm[:, None] < M, other=0.0)
                acc += wk[:, None] * yk.to(tl.float32)
            tl.store(part2_ptr + rm[:, None] * (L + H) + rl[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)
        if PERSISTENT:
            grid_barrier(sync_ptr, 5, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 5, HIP)
        if TP > 1:
            _publish(flag_ptr, rank, 2 + epoch % 2, tag, pid)

    # -- 6: TP > 1: [latent | shared] summed over the ranks, in rank order --------------
    red = part2_ptr
    if TP > 1:
        red = red_ptr
        if PERSISTENT or PHASE == 6:
            if PERSISTENT:
                maybe_stall(stall_phase, 6, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
                _wait_peers(flag_ptr, 2 + epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 6, HIP)
            for tile in range(pid, (L + H) // BN, nprog):
                rn = tile * BN + tl.arange(0, BN)
                msk = rm[:, None] < M
                acc = tl.zeros((BM, BN), tl.float32)
                for q in tl.static_range(TP):
                    peer = tl.load(peer2_ptr + q).to(tl.pointer_type(tl.bfloat16)) + (epoch % 2) * SLOT2
                    acc += tl.load(peer + rm[:, None] * (L + H) + rn[None, :], mask=msk, other=0.0).to(tl.float32)
                tl.store(red_ptr + rm[:, None] * (L + H) + rn[None, :], acc.to(tl.bfloat16), mask=msk)
            if PERSISTENT:
                grid_barrier(sync_ptr, 6, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 6, HIP)

    # -- 7: latent norm, up projection, the residual combine --------------------------
    if PERSISTENT or PHASE == 7:
        if PERSISTENT:
            maybe_stall(stall_phase, 7, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        ssq = tl.zeros((BM,), tl.float32)
        for k0 in range(0, L, BK):
            rk = k0 + tl.arange(0, BK)
            lat = tl.load(red + rm[:, None] * (L + H) + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < L),
                          other=0.0)
            lat = lat.to(tl.float32)
            ssq += tl.sum(lat * lat, axis=1)
        rstd = 1.0 / tl.sqrt(ssq / L + EPS)
        for tile in range(pid, H // BN, nprog):
            rn = tile * BN + tl.arange(0, BN)
            acc = tl.zeros((BM, BN), tl.float32)
            for k0 in tl.range(0, L, BK, num_stages=STAGES):
                rk = k0 + tl.arange(0, BK)
                km = rk < L
                lat = tl.load(red + rm[:, None] * (L + H) + rk[None, :], mask=(rm[:, None] < M) & km[None, :],
                              other=0.0)
                xn = lat.to(tl.float32) * rstd[:, None] * tl.load(lnorm_ptr + rk, mask=km, other=0.0).to(tl.float32)[None, :]
                w = tl.load(wup_ptr + rn[:, None] * s_wup + rk[None, :], mask=km[None, :], other=0.0)
                acc = tl.dot(xn.to(tl.bfloat16), tl.trans(w), acc)
            msk = rm[:, None] < M
            out = acc.to(tl.bfloat16).to(tl.float32)
            shared = tl.load(red + rm[:, None] * (L + H) + L + rn[None, :], mask=msk, other=0.0)
            x = (out + shared.to(tl.float32)).to(tl.bfloat16).to(tl.float32)
            p = tl.load(p_ptr + rm[:, None] * H + rn[None, :], mask=msk, other=0.0)
            x = (x + p.to(tl.float32)).to(tl.bfloat16)
            tl.store(out_ptr + rm[:, None] * H + rn[None, :], x, mask=msk)
        if PERSISTENT:
            depart(sync_ptr, nprog)
