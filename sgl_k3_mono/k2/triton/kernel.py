"""K2, the layer launch, as one persistent Triton kernel (sm_90).

One program per SM walks eight phases (nine at TP > 1); a grid barrier separates them (PHASE = -1).
With PHASE = p the same code runs phase p alone, as its own launch: the interpreter
tests run K2 that way on the CPU, and the benchmark times the phases that way.

  0 o_proj       a_r = bf16(o_r @ Wo^T)                     tiles of H rows of Wo
  1 seam         a = bf16(sum_r a_r); p = bf16(p + a); h2 = norm(Agg(bank, p))   one program a row
  2 front        [shared gate_up | router | latent down] @ h2     tiles of the merged rows
  3 route        top-k of one row a program; owner[e] = first (row, slot) naming e
  4 experts_up   act_n = bf16(SiTU(W13_e x))   (distinct expert n, I tile)
  5 experts_down y[r,k] = bf16(W2_e act_n[r]) (distinct expert n, L tile); shared = bf16(SiTU(gu) @ Wd^T)
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

from sgl_k3_mono.runtime.triton_sync import EPOCH, depart, grid_barrier, maybe_stall, now_ns, wait_eq

PHASES = ("o_proj", "seam", "front", "route", "experts_up", "experts_down", "combine", "reduce", "latent_up")
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
def _gemv_bf16(x_ptr, sxm, rows, rvalid, w_ptr, swn, n0, N, K,
               R: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """[R, BN] fp32 = x[rows] @ W[n0:n0+BN]^T with FMAs, bf16 W [N, K]; x rows picked by
    `rows` [R] (masked by `rvalid`): consecutive rows, or the rows that route one expert."""
    r3 = rows[:, None, None]
    v3 = rvalid[:, None, None]
    n3 = (n0 + tl.arange(0, BN))[None, :, None]
    part = tl.zeros((R, BN, BK), tl.float32)
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        k3 = k0 + tl.arange(0, BK)[None, None, :]
        w = tl.load(w_ptr + n3 * swn + k3, mask=(n3 < N) & (k3 < K), other=0.0).to(tl.float32)
        x = tl.load(x_ptr + r3 * sxm + k3, mask=v3 & (k3 < K), other=0.0).to(tl.bfloat16)
        part += x.to(tl.float32) * w
    return tl.sum(part, axis=2)


@triton.jit
def _dot_bf16(x_ptr, sxm, M, w_ptr, swn, n0, N, K, acc,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
              GEMV: tl.constexpr = False):
    """acc += x[:M, :K] @ W[n0:n0+BN, :K]^T, bf16 weights [N, K] with row stride swn.
    GEMV: BM is the row count rounded up to a power of two (<= 8), and the products are
    FMAs in the weights' load layout: no padding to 16 rows, no trip through shared
    memory into a tensor-core operand layout."""
    if GEMV:
        rows = tl.arange(0, BM)
        acc += _gemv_bf16(x_ptr, sxm, rows, rows < M, w_ptr, swn, n0, N, K, BM, BN, BK, STAGES)
    else:
        rm = tl.arange(0, BM)
        rn = n0 + tl.arange(0, BN)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            rk = k0 + tl.arange(0, BK)
            x = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            w = tl.load(w_ptr + rn[:, None] * swn + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
            acc = tl.dot(x.to(tl.bfloat16), tl.trans(w), acc)
    return acc


@triton.jit
def _e2m1_pair_f32(byte):
    """Both FP4 (e2m1) codes of MXFP4 bytes (int32, 0..255) as fp32 times 2^-14, exactly.
    Each code's exponent and mantissa bits land in an fp16's (exponent bias 15, so the
    value is the code's times 2^-14; e2m1's subnormal codes become fp16 subnormals,
    which the fp16 -> fp32 conversion keeps). Five integer ops and a conversion a code;
    the caller's scale carries the 2^14 back."""
    lo = (((byte & 7) << 9) | ((byte & 8) << 12)).to(tl.int16).to(tl.float16, bitcast=True)
    hi = (((byte & 0x70) << 5) | ((byte & 0x80) << 8)).to(tl.int16).to(tl.float16, bitcast=True)
    return lo.to(tl.float32), hi.to(tl.float32)


@triton.jit
def _scale_f32(sc, SHIFT: tl.constexpr):
    """ue8m0 scale codes (int32) as fp32 2^(sc - 127 + SHIFT); exact while sc + SHIFT is
    in 1..254 (sc <= 240 for SHIFT 14: larger scales mean weights above 2^113)."""
    return ((sc + SHIFT) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _gemv_mxfp4(x_ptr, sxm, rows, rvalid, w_ptr, swn, s_ptr, ssn, n0, N, K,
                R: tl.constexpr, BN: tl.constexpr, BKH: tl.constexpr, STAGES: tl.constexpr,
                MX4D: tl.constexpr):
    """[R, BN] fp32 = x[rows] @ W^T with FMAs for MXFP4 W (bytes [N, K/2], low nibble = even element;
    ue8m0 scales [N, K/32]), decoded in registers (Hopper has no FP4 unit); x rows picked
    by `rows` [R] (masked by `rvalid`)."""
    if not MX4D:
        # [rows, N tile, bytes]: a scale load and two strided x loads per byte; measured
        # faster than the 4-D tiles below at 4 and 8 rows (docs/evidence/k2-sm90.md)
        r3 = rows[:, None, None]
        v3 = rvalid[:, None, None]
        n3 = (n0 + tl.arange(0, BN))[None, :, None]
        part3 = tl.zeros((R, BN, BKH), tl.float32)
        for kb in tl.range(0, K // 2, BKH, num_stages=STAGES):
            b3 = kb + tl.arange(0, BKH)[None, None, :]
            nmask = (n3 < N) & (b3 < K // 2)
            byte = tl.load(w_ptr + n3 * swn + b3, mask=nmask, other=0).to(tl.int32)
            sc = tl.load(s_ptr + n3 * ssn + b3 // 16, mask=nmask, other=0).to(tl.int32)
            xm = v3 & (b3 < K // 2)
            xe = tl.load(x_ptr + r3 * sxm + 2 * b3, mask=xm, other=0.0).to(tl.bfloat16).to(tl.float32)
            xo = tl.load(x_ptr + r3 * sxm + 2 * b3 + 1, mask=xm, other=0.0).to(tl.bfloat16).to(tl.float32)
            lo, hi = _e2m1_pair_f32(byte)
            scale = _scale_f32(sc, 14)  # scaled once, then two FMAs a row (exact: a power of two)
            part3 += xe * (lo * scale) + xo * (hi * scale)
        res = tl.sum(part3, axis=2)
    else:
        # [rows, N tile, groups of 32 elements, 16 bytes]: a group's scale is one load and
        # broadcasts; x is read as bf16 pairs (one int32 = the even and the odd element),
        # so every load is a wide vector load.
        G: tl.constexpr = BKH // 16
        r4 = rows[:, None, None, None]
        v4 = rvalid[:, None, None, None]
        n4 = (n0 + tl.arange(0, BN))[None, :, None, None]
        g4 = tl.arange(0, G)[None, None, :, None]
        j4 = tl.arange(0, 16)[None, None, None, :]
        x_pairs = x_ptr.to(tl.pointer_type(tl.int32))
        part = tl.zeros((R, BN, G, 16), tl.float32)
        for kb in tl.range(0, K // 2, BKH, num_stages=STAGES):
            b4 = kb + g4 * 16 + j4
            kmask = b4 < K // 2
            byte = tl.load(w_ptr + n4 * swn + b4, mask=(n4 < N) & kmask, other=0).to(tl.int32)
            sc = tl.load(s_ptr + n4 * ssn + kb // 16 + g4, mask=(n4 < N) & (kb // 16 + g4 < K // 32), other=0)
            pair = tl.load(x_pairs + r4 * (sxm // 2) + b4, mask=v4 & kmask, other=0)
            xe = (pair << 16).to(tl.float32, bitcast=True)
            xo = (pair & -65536).to(tl.float32, bitcast=True)
            lo, hi = _e2m1_pair_f32(byte)
            scale = _scale_f32(sc.to(tl.int32), 14)  # scaled once, then two FMAs a row (exact)
            part += xe * (lo * scale) + xo * (hi * scale)
        res = tl.sum(tl.sum(part, axis=3), axis=2)
    return res


@triton.jit
def _dot_mxfp4_scaled(x_ptr, sxm, M, w_ptr, swn, s_ptr, ssn, n0, N, K, acc,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
                      SA: tl.constexpr):
    """acc[BM, BN] += x[:M, :K] @ W[n0:n0+BN]^T on the tensor cores, for MXFP4 W as SGLang
    stores it (bytes [N, K/2], low nibble = even element; ue8m0 scales [N, K/32]), through
    tl.dot_scaled with the weights as the scaled rhs: Triton decodes the codes to bf16
    (exact: two significant bits times a power of two) in registers and feeds the tensor
    cores from there. Measured 2.3x the planar code-plane dots at 8 rows and 3x the FMA
    GEMV at 2 (docs/evidence/k2-sm90.md). SA: a power of two the scale row stride is a
    multiple of (host._pow2_divisor of the strides): a scale row's bytes then go as one cp.async, where an
    unknown stride (12 at a TP-8 rank's down projection) leaves byte loads outside the
    pipeline. fast_math drops the NaN-scale select (E8M0 255 -> NaN; 22-29 % faster, tools/device/
    fp4_decode_microbench.py): the build refuses experts holding that code (model_reasons)."""
    ssn = (ssn // SA) * SA
    rn = n0 + tl.arange(0, BN)
    rm = tl.arange(0, BM)
    nm = rn[:, None] < N
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        rb = k0 // 2 + tl.arange(0, BK // 2)
        w = tl.load(w_ptr + rn[:, None] * swn + rb[None, :], mask=nm & (rb[None, :] < K // 2), other=0)
        rg = k0 // 32 + tl.arange(0, BK // 32)
        sc = tl.load(s_ptr + rn[:, None] * ssn + rg[None, :], mask=nm & (rg[None, :] < K // 32), other=0)
        rk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        acc = tl.dot_scaled(x.to(tl.bfloat16), None, "bf16", tl.trans(w), sc, "e2m1", acc, fast_math=True)
    return acc


@triton.jit
def _route_row(logits_ptr, bias_ptr, r, E, TOPK: tl.constexpr, BE: tl.constexpr, KB: tl.constexpr):
    """Biased sigmoid top-k of row r: ids [KB] in descending biased score (ties: the
    lower expert id) and the renormalised unbiased weights [KB] (0 past TOPK)."""
    re = tl.arange(0, BE)
    valid = re < E
    s = tl.sigmoid(tl.load(logits_ptr + r * E + re, mask=valid, other=0.0))
    choice = tl.where(valid, s + tl.load(bias_ptr + re, mask=valid, other=0.0), float("-inf"))
    kc = tl.arange(0, KB)
    ids = tl.zeros((KB,), tl.int32)
    wts = tl.zeros((KB,), tl.float32)
    for k in tl.static_range(TOPK):
        idx = tl.argmax(choice, axis=0, tie_break_left=True)
        hit = re == idx
        ids = tl.where(kc == k, idx, ids)
        wts = tl.where(kc == k, tl.sum(tl.where(hit, s, 0.0), axis=0), wts)
        choice = tl.where(hit, float("-inf"), choice)
    return ids, wts / (tl.sum(wts, axis=0) + 1e-20)


@triton.jit
def _distinct(ids_ptr, owner_ptr, M, TOPK: tl.constexpr, BM: tl.constexpr, KB: tl.constexpr):
    """The routed (row, slot) tile, which pairs own their expert, each owner's number in
    (row, slot) order, and how many distinct experts the step routed to."""
    rm = tl.arange(0, BM)
    kc = tl.arange(0, KB)
    keep = (rm[:, None] < M) & (kc[None, :] < TOPK)
    ids = tl.load(ids_ptr + rm[:, None] * TOPK + kc[None, :], mask=keep, other=-1)
    own = tl.load(owner_ptr + ids, mask=keep, other=-1)
    first = (keep & (own == rm[:, None] * TOPK + kc[None, :])).to(tl.int32)
    per_row = tl.sum(first, axis=1)
    number = (tl.cumsum(per_row, axis=0) - per_row)[:, None] + tl.cumsum(first, axis=1) - 1
    return ids, keep, first != 0, number, tl.sum(per_row, axis=0)


@triton.jit
def _user_count(ids, keep, e):
    """How many rows route expert e (a row names an expert at most once)."""
    return tl.sum(tl.sum(((ids == e) & keep).to(tl.int32), axis=1), axis=0)


@triton.jit
def _user_rows(ids, keep, e, u0, XU: tl.constexpr, BM: tl.constexpr):
    """Rows u0 .. u0+XU-1 (in row order) of those that route expert e: their indices [XU]
    and which of them exist [XU]."""
    rm = tl.arange(0, BM)
    uses = tl.max(((ids == e) & keep).to(tl.int32), axis=1)
    rank = tl.cumsum(uses, axis=0) - 1
    want = u0 + tl.arange(0, XU)
    pick = (uses[None, :] != 0) & (rank[None, :] == want[:, None])
    return tl.sum(tl.where(pick, rm[None, :], 0), axis=1), want < tl.sum(uses, axis=0)


@triton.jit
def _nth_expert(ids, first, number, n):
    """The expert the n-th owning pair names."""
    return tl.sum(tl.sum(tl.where(first & (number == n), ids, 0), axis=1), axis=0)


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
    part1_ptr, p_ptr, h2_ptr, gu_ptr, logit_ptr, xin_ptr, ids_ptr, wts_ptr, owner_ptr, act_ptr, y_ptr,
    part2_ptr,
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
    DENSE_GEMV: tl.constexpr = False, EXPERT_GEMV: tl.constexpr = False, XR: tl.constexpr = 16,
    MX4D: tl.constexpr = True, XU: tl.constexpr = 0, SCALE_ALIGN: tl.constexpr = 1,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    PERSISTENT: tl.constexpr = PHASE < 0
    # MXFP4 experts on the tensor cores go through tl.dot_scaled; the FMA paths decode by hand
    SCALED: tl.constexpr = MXFP4 and not EXPERT_GEMV
    t0 = 0
    if PERSISTENT:
        t0 = now_ns(HIP)
    rm = tl.arange(0, BM)  # rows of the dense phases
    rx = tl.arange(0, XR)  # rows of the expert phases
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
                            BM, BN, BK, STAGES, DENSE_GEMV)
            rn = tile * BN + tl.arange(0, BN)
            tl.store(part1_ptr + rm[:, None] * H + rn[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)
        if pid == 0:  # routing (phase 3) takes the minimum (row, slot) per expert
            tl.store(owner_ptr + tl.arange(0, BE), 0x7FFFFFFF, mask=tl.arange(0, BE) < E)
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
                acc = _dot_bf16(h2_ptr, H, M, wgu_ptr, s_wgu, n0, S2, H, acc, BM, BN, BK, STAGES, DENSE_GEMV)
                if FRONT_BF16:
                    acc = acc.to(tl.bfloat16).to(tl.float32)
                tl.store(gu_ptr + rm[:, None] * S2 + (n0 + rn)[None, :], acc, mask=rm[:, None] < M)
            elif n0 < S2 + E:
                acc = _dot_bf16(h2_ptr, H, M, wr_ptr, s_wr, n0 - S2, E, H, acc, BM, BN, BK, STAGES, DENSE_GEMV)
                if FRONT_BF16:
                    acc = acc.to(tl.bfloat16).to(tl.float32)
                tl.store(logit_ptr + rm[:, None] * E + (n0 - S2 + rn)[None, :], acc, mask=rm[:, None] < M)
            else:
                acc = _dot_bf16(h2_ptr, H, M, wdn_ptr, s_wdn, n0 - S2 - E, L, H, acc, BM, BN, BK, STAGES, DENSE_GEMV)
                tl.store(xin_ptr + rm[:, None] * L + (n0 - S2 - E + rn)[None, :], acc.to(tl.bfloat16),
                         mask=rm[:, None] < M)
        if PERSISTENT:
            grid_barrier(sync_ptr, 2, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 2, HIP)

    kc = tl.arange(0, KB)
    # -- 3: routing, one row a program ------------------------------------------------
    if PERSISTENT or PHASE == 3:
        if PERSISTENT:
            maybe_stall(stall_phase, 3, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        for r in range(pid, M, nprog):
            ids, wts = _route_row(logit_ptr, bias_ptr, r, E, TOPK, BE, KB)
            tl.store(ids_ptr + r * TOPK + kc, ids, mask=kc < TOPK)
            tl.store(wts_ptr + r * TOPK + kc, wts, mask=kc < TOPK)
            tl.atomic_min(owner_ptr + ids, r * TOPK + kc, mask=kc < TOPK, sem="relaxed", scope="gpu")
        if PERSISTENT:
            grid_barrier(sync_ptr, 3, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 3, HIP)

    # -- 4: each distinct routed expert's gate/up and SiTU ----------------------------
    if PERSISTENT or PHASE == 4:
        if PERSISTENT:
            maybe_stall(stall_phase, 4, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        ids, keep, first, number, n_e = _distinct(ids_ptr, owner_ptr, M, TOPK, BM, KB)
        for item in range(pid, n_e * (I // BI), nprog):
            n = item // (I // BI)
            i0 = (item % (I // BI)) * BI
            e = _nth_expert(ids, first, number, n).to(tl.int64)
            ri = i0 + tl.arange(0, BI)
            if XU > 0:  # only the rows that route e, XU at a time (most experts have one at M 8)
                for u0 in range(0, _user_count(ids, keep, e), XU):
                    urow, uok = _user_rows(ids, keep, e, u0, XU, BM)
                    if MXFP4:
                        g = _gemv_mxfp4(xin_ptr, L, urow, uok, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                        ssc13_n, i0, I, L, XU, BI, BKX // 2, STAGES, MX4D)
                        u = _gemv_mxfp4(xin_ptr, L, urow, uok, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                        sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L,
                                        XU, BI, BKX // 2, STAGES, MX4D)
                    else:
                        g = _gemv_bf16(xin_ptr, L, urow, uok, w13_ptr + e * s13_e, s13_n, i0, I, L, XU, BI, BKX,
                                       STAGES)
                        u = _gemv_bf16(xin_ptr, L, urow, uok, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L,
                                       XU, BI, BKX, STAGES)
                    act = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                    tl.store(act_ptr + (n * XR + urow[:, None]) * I + ri[None, :], act, mask=uok[:, None])
            else:  # every row (masked past M)
                g = tl.zeros((XR, BI), tl.float32)
                u = tl.zeros((XR, BI), tl.float32)
                if SCALED:
                    g = _dot_mxfp4_scaled(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                          ssc13_n, i0, I, L, g, XR, BI, BKX, STAGES, SCALE_ALIGN)
                    u = _dot_mxfp4_scaled(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                          sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L, u,
                                          XR, BI, BKX, STAGES, SCALE_ALIGN)
                elif MXFP4:
                    g += _gemv_mxfp4(xin_ptr, L, rx, rx < M, w13_ptr + e * s13_e, s13_n, sc13_ptr + e * ssc13_e,
                                     ssc13_n, i0, I, L, XR, BI, BKX // 2, STAGES, MX4D)
                    u += _gemv_mxfp4(xin_ptr, L, rx, rx < M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n,
                                     sc13_ptr + e * ssc13_e + I_UP * ssc13_n, ssc13_n, i0, I, L,
                                     XR, BI, BKX // 2, STAGES, MX4D)
                else:
                    g = _dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e, s13_n, i0, I, L, g, XR, BI, BKX, STAGES,
                                  EXPERT_GEMV)
                    u = _dot_bf16(xin_ptr, L, M, w13_ptr + e * s13_e + I_UP * s13_n, s13_n, i0, I, L, u,
                                  XR, BI, BKX, STAGES, EXPERT_GEMV)
                act = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                tl.store(act_ptr + (n * XR + rx[:, None]) * I + ri[None, :], act)
        if PERSISTENT:
            grid_barrier(sync_ptr, 4, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 4, HIP)

    # -- 5: each distinct routed expert's down projection; the shared experts ----------
    if PERSISTENT or PHASE == 5:
        if PERSISTENT:
            maybe_stall(stall_phase, 5, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
        ids, keep, first, number, n_e = _distinct(ids_ptr, owner_ptr, M, TOPK, BM, KB)
        keep_x = (rx[:, None] < M) & (kc[None, :] < TOPK)  # the same tile with the experts' XR rows
        ids_x = tl.load(ids_ptr + rx[:, None] * TOPK + kc[None, :], mask=keep_x, other=-1)
        n_routed = n_e * (L // BL)
        for item in range(pid, n_routed + H // BN, nprog):
            if item < n_routed:
                n = item // (L // BL)
                l0 = (item % (L // BL)) * BL
                e = _nth_expert(ids, first, number, n)
                e64 = e.to(tl.int64)
                rl = l0 + tl.arange(0, BL)
                if XU > 0:  # only the rows that route e, XU at a time
                    for u0 in range(0, _user_count(ids, keep, e), XU):
                        urow, uok = _user_rows(ids, keep, e, u0, XU, BM)
                        if MXFP4:
                            y = _gemv_mxfp4(act_ptr + n * XR * I, I, urow, uok, w2_ptr + e64 * s2_e, s2_n,
                                            sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, XU, BL, BKD // 2, STAGES, MX4D)
                        else:
                            y = _gemv_bf16(act_ptr + n * XR * I, I, urow, uok, w2_ptr + e64 * s2_e, s2_n, l0, L, I,
                                           XU, BL, BKD, STAGES)
                        ids_u = tl.load(ids_ptr + urow[:, None] * TOPK + kc[None, :],
                                        mask=uok[:, None] & (kc[None, :] < TOPK), other=-1)
                        slot = tl.sum(tl.where(ids_u == e, kc[None, :], 0), axis=1)
                        tl.store(y_ptr + (urow * TOPK + slot)[:, None] * L + rl[None, :], y.to(tl.bfloat16),
                                 mask=uok[:, None])
                else:
                    y = tl.zeros((XR, BL), tl.float32)
                    if SCALED:
                        y = _dot_mxfp4_scaled(act_ptr + n * XR * I, I, M, w2_ptr + e64 * s2_e, s2_n,
                                              sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, y, XR, BL, BKD, STAGES,
                                              SCALE_ALIGN)
                    elif MXFP4:
                        y += _gemv_mxfp4(act_ptr + n * XR * I, I, rx, rx < M, w2_ptr + e64 * s2_e, s2_n,
                                         sc2_ptr + e64 * ssc2_e, ssc2_n, l0, L, I, XR, BL, BKD // 2, STAGES, MX4D)
                    else:
                        y = _dot_bf16(act_ptr + n * XR * I, I, M, w2_ptr + e64 * s2_e, s2_n, l0, L, I, y,
                                      XR, BL, BKD, STAGES, EXPERT_GEMV)
                    # every row that routed to e gets it, in its own (row, slot) place
                    match = (ids_x == e) & keep_x
                    slot = tl.sum(tl.where(match, kc[None, :], 0), axis=1)
                    has = tl.max(match.to(tl.int32), axis=1) > 0
                    tl.store(y_ptr + (rx * TOPK + slot)[:, None] * L + rl[None, :], y.to(tl.bfloat16),
                             mask=has[:, None])
            else:
                n0 = (item - n_routed) * BN
                acc = tl.zeros((BM, BN), tl.float32)
                rn = n0 + tl.arange(0, BN)
                # K chunks of BKD (not BK): SiTU of [16, 512] fp32 pairs spills on sm_90
                if DENSE_GEMV:
                    r3 = rm[:, None, None]
                    n3 = rn[None, :, None]
                    part = tl.zeros((BM, BN, BK), tl.float32)
                    for k0 in tl.range(0, S2 // 2, BK, num_stages=STAGES):
                        k3 = k0 + tl.arange(0, BK)[None, None, :]
                        msk = (r3 < M) & (k3 < S2 // 2)
                        g = tl.load(gu_ptr + r3 * S2 + k3, mask=msk, other=0.0)
                        u = tl.load(gu_ptr + r3 * S2 + S2 // 2 + k3, mask=msk, other=0.0)
                        a = _situ(g, u, BETA, LBETA).to(tl.bfloat16).to(tl.float32)
                        w = tl.load(wsd_ptr + n3 * s_wsd + k3, mask=k3 < S2 // 2, other=0.0).to(tl.float32)
                        part += a * w
                    acc += tl.sum(part, axis=2)
                else:
                    for k0 in tl.range(0, S2 // 2, BKD, num_stages=STAGES):
                        rk = k0 + tl.arange(0, BKD)
                        msk = (rm[:, None] < M) & (rk[None, :] < S2 // 2)
                        g = tl.load(gu_ptr + rm[:, None] * S2 + rk[None, :], mask=msk, other=0.0)
                        u = tl.load(gu_ptr + rm[:, None] * S2 + S2 // 2 + rk[None, :], mask=msk, other=0.0)
                        a = _situ(g, u, BETA, LBETA).to(tl.bfloat16)
                        w = tl.load(wsd_ptr + rn[:, None] * s_wsd + rk[None, :], mask=rk[None, :] < S2 // 2,
                                    other=0.0)
                        acc = tl.dot(a, tl.trans(w), acc)
                tl.store(part2_ptr + rm[:, None] * (L + H) + L + rn[None, :], acc.to(tl.bfloat16),
                         mask=rm[:, None] < M)
        if PERSISTENT:
            grid_barrier(sync_ptr, 5, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 5, HIP)

    # -- 6: latent = sum over the row's slots, in top-k order -------------------------
    if PERSISTENT or PHASE == 6:
        if PERSISTENT:
            maybe_stall(stall_phase, 6, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
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
            grid_barrier(sync_ptr, 6, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 6, HIP)
        if TP > 1:
            _publish(flag_ptr, rank, 2 + epoch % 2, tag, pid)

    # -- 7: TP > 1: [latent | shared] summed over the ranks, in rank order --------------
    red = part2_ptr
    if TP > 1:
        red = red_ptr
        if PERSISTENT or PHASE == 7:
            if PERSISTENT:
                maybe_stall(stall_phase, 7, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
                _wait_peers(flag_ptr, 2 + epoch % 2, tag, TP, t0, deadline_ns, err_addr, rank, layer, 7, HIP)
            for tile in range(pid, (L + H) // BN, nprog):
                rn = tile * BN + tl.arange(0, BN)
                msk = rm[:, None] < M
                acc = tl.zeros((BM, BN), tl.float32)
                for q in tl.static_range(TP):
                    peer = tl.load(peer2_ptr + q).to(tl.pointer_type(tl.bfloat16)) + (epoch % 2) * SLOT2
                    acc += tl.load(peer + rm[:, None] * (L + H) + rn[None, :], mask=msk, other=0.0).to(tl.float32)
                tl.store(red_ptr + rm[:, None] * (L + H) + rn[None, :], acc.to(tl.bfloat16), mask=msk)
            if PERSISTENT:
                grid_barrier(sync_ptr, 7, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, 7, HIP)

    # -- 8: latent norm, up projection, the residual combine --------------------------
    if PERSISTENT or PHASE == 8:
        if PERSISTENT:
            maybe_stall(stall_phase, 8, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
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
            if DENSE_GEMV:
                r3 = rm[:, None, None]
                n3 = rn[None, :, None]
                part = tl.zeros((BM, BN, BK), tl.float32)
                for k0 in tl.range(0, L, BK, num_stages=STAGES):
                    k3 = k0 + tl.arange(0, BK)[None, None, :]
                    lat = tl.load(red + r3 * (L + H) + k3, mask=(r3 < M) & (k3 < L), other=0.0).to(tl.float32)
                    lw = tl.load(lnorm_ptr + k3, mask=k3 < L, other=0.0).to(tl.float32)
                    xn = (lat * rstd[:, None, None] * lw).to(tl.bfloat16).to(tl.float32)
                    w = tl.load(wup_ptr + n3 * s_wup + k3, mask=k3 < L, other=0.0).to(tl.float32)
                    part += xn * w
                acc += tl.sum(part, axis=2)
            else:
                for k0 in tl.range(0, L, BK, num_stages=STAGES):
                    rk = k0 + tl.arange(0, BK)
                    km = rk < L
                    lat = tl.load(red + rm[:, None] * (L + H) + rk[None, :], mask=(rm[:, None] < M) & km[None, :],
                                  other=0.0)
                    xn = lat.to(tl.float32) * rstd[:, None] * \
                        tl.load(lnorm_ptr + rk, mask=km, other=0.0).to(tl.float32)[None, :]
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
