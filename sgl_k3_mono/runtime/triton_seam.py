"""The attention-residual seam split over several programs a row (Triton), shared by K1
(the attention-side seam) and K2 (the FFN-side seam): the same arithmetic on the same
kinds of rows, so one device function serves both launches.

The persistent launch spreads each row's seam over SP programs, one H-slice of BS
columns each (program r * SP + s: row r, slice s), instead of one program walking the
row: the single-program seam is a chain of dependent loads (a pass a bank row) while
the rest of the grid waits at the barrier. Three steps, each a pass over the program's
own slice: (A) p, and the slice's partial score sums of every mixed row; (C) the
scores from all SP partials (summed in slice order: every program and every replay
sums alike), the softmax and the mix; (D) the row's sum of squares from all SP
partials, and h. Between steps a row-local bounded wait (the persistent launch), or a
launch boundary (the phased launch runs the steps as three launches of phase 0).

Not two steps: folding D into C (step A also leaving each slice's Gram matrix of the
mixed rows, so C has the mix's sum of squares as alpha^T G alpha after one wait) was
timed in the twenty-fourth session and lost 2-5 us a launch (a program's in-step work
grew more than the wait it saved), and it moved K1 out of its bounds (the quadratic form
is the unrounded mix's statistic, where the sm_90 seam norms the bf16-rounded mix). It
was rebuilt twice since before that record was found (docs/evidence/k2-sm90.md;
docs/evidence/tried.md indexes what else was timed).
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.runtime.triton_sync import now_ns, wait_geq

SLICES = (256, 512)
"""The split seam's slice widths, narrowest first."""
SEAM_STEPS = 3
"""The split seam's steps (A, C, D): its launches of the seam's phase when a launch runs phased."""
_STEPS = tl.constexpr(SEAM_STEPS)  # the same, for the device code


def seam_slice(rows: int, hidden: int, grid: int) -> int:
    """BS: the narrowest slice width that gives every slice of every row a program of the
    grid (the most programs at work, each pass the shortest); 0 when none fits."""
    for bs in SLICES:
        if rows * -(-hidden // bs) <= grid:
            return bs
    return 0


def seam_part_width(nbp: int) -> int:
    """fp32 words of one slice's partials: NBP score dots, NBP sums of squares, the mix's
    sum of squares (split_seam_step's PW, the layout it writes)."""
    return 2 * nbp + 1


@triton.jit
def seam_p_row(row, nvb, prefix_ptr, s_pm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
               WRITE_BANK: tl.constexpr, WRITE_RESID: tl.constexpr):
    """Where p (the prefix after the pending add) lives from here on: the bank row it is
    banked into, the caller's residual, or the prefix itself when nothing changes it."""
    if WRITE_BANK:
        p_row = bank_ptr + row * s_bm + nvb * s_bj
    elif WRITE_RESID:
        p_row = resid_ptr + row * s_rm
    else:
        p_row = prefix_ptr + row * s_pm
    return p_row


@triton.jit
def split_mixed_rows(bank_row, s_bj, p_row, nvb, cols, cm, NBP: tl.constexpr, WITH_P: tl.constexpr = True):
    """[NBP, BS] fp32: slice `cols` of bank rows 0..nvb-1, then p (row nvb; zero without
    WITH_P, for a caller that holds p), zero past it."""
    rj = tl.arange(0, NBP)[:, None]
    v = tl.load(bank_row + rj * s_bj + cols[None, :], mask=(rj < nvb) & cm[None, :], other=0.0).to(tl.float32)
    if WITH_P:
        vp = tl.load(p_row + cols, mask=cm, other=0.0).to(tl.float32)
        v = tl.where(rj == nvb, vp[None, :], v)
    return v


@triton.jit
def split_seam_step(pid, M, nvb, eps,
                    prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                    wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr,
                    STEP: tl.constexpr, H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr,
                    SP: tl.constexpr, SPP: tl.constexpr, HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr,
                    WRITE_RESID: tl.constexpr, ROUND_MIX: tl.constexpr):
    """Step A (0), C (1) or D (2) of the split seam for program pid < M * SP. Partials
    live in spart [M, SP, seam_part_width(NBP)] fp32."""
    row = pid // SP
    sl = pid % SP
    cols = sl * BS + tl.arange(0, BS)
    cm = cols < H
    rj = tl.arange(0, NBP)
    PW: tl.constexpr = 2 * NBP + 1  # seam_part_width(NBP)
    mine = spart_ptr + (row * SP + sl) * PW
    p_row = seam_p_row(row, nvb, prefix_ptr, s_pm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm, WRITE_BANK, WRITE_RESID)
    # Each step issues all of its loads before its first reduction: a reduction is a CTA
    # barrier, which no load moves across, so a load written after one waits a round trip.
    if STEP == 0:
        cw = tl.load(wsn_ptr + cols, mask=cm, other=0.0).to(tl.float32) * \
            tl.load(wproj_ptr + cols, mask=cm, other=0.0).to(tl.float32)
        if WRITE_BANK or WRITE_RESID:  # p = bf16(prefix + contribution) where it lives from now on
            v = split_mixed_rows(bank_ptr + row * s_bm, s_bj, p_row, nvb, cols, cm, NBP, False)
            p = tl.load(prefix_ptr + row * s_pm + cols, mask=cm, other=0.0).to(tl.float32)
            if HAS_CONTRIB:
                p += tl.load(contrib_ptr + row * s_cm + cols, mask=cm, other=0.0).to(tl.float32)
            p = p.to(tl.bfloat16)
            tl.store(p_row + cols, p, mask=cm)
            v = tl.where(rj[:, None] == nvb, p.to(tl.float32)[None, :], v)
        else:
            v = split_mixed_rows(bank_ptr + row * s_bm, s_bj, p_row, nvb, cols, cm, NBP)
        tl.store(mine + rj, tl.sum(v * cw[None, :], axis=1))
        tl.store(mine + NBP + rj, tl.sum(v * v, axis=1))
    elif STEP == 1:
        qq = tl.arange(0, SPP)[:, None]
        parts = spart_ptr + (row * SP + qq) * PW + rj[None, :]
        pdots = tl.load(parts, mask=qq < SP, other=0.0, cache_modifier=".cg")
        psqs = tl.load(parts + NBP, mask=qq < SP, other=0.0, cache_modifier=".cg")
        v = split_mixed_rows(bank_ptr + row * s_bm, s_bj, p_row, nvb, cols, cm, NBP)
        dots = tl.sum(pdots, axis=0)
        sqs = tl.sum(psqs, axis=0)
        scores = tl.where(rj <= nvb, dots / tl.sqrt(sqs / H + eps), float("-inf"))
        e = tl.where(rj <= nvb, tl.exp(scores - tl.max(scores, axis=0)), 0.0)
        alpha = e / tl.sum(e, axis=0)  # nvb == 0: the mix is p itself
        mix = tl.sum(alpha[:, None] * v, axis=0)
        if ROUND_MIX:
            mix = mix.to(tl.bfloat16).to(tl.float32)
        tl.store(mix_ptr + row * H + cols, mix, mask=cm)
        tl.store(mine + 2 * NBP, tl.sum(mix * mix, axis=0))
    else:
        qq = tl.arange(0, SPP)
        x = tl.load(mix_ptr + row * H + cols, mask=cm, other=0.0)
        w = tl.load(won_ptr + cols, mask=cm, other=0.0).to(tl.float32)
        ss = tl.sum(tl.load(spart_ptr + (row * SP + qq) * PW + 2 * NBP, mask=qq < SP, other=0.0,
                            cache_modifier=".cg"), axis=0)
        rstd = 1.0 / tl.sqrt(ss / H + eps)
        tl.store(h_ptr + row * H + cols, (x * rstd * w).to(tl.bfloat16), mask=cm)


@triton.jit
def _seam_pass(it, pid, M, nvb, eps, cnt,
               prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
               wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr,
               t0, deadline_ns, err_addr, rank, layer,
               H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr,
               SPP: tl.constexpr, HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr,
               WRITE_RESID: tl.constexpr, ROUND_MIX: tl.constexpr, HIP: tl.constexpr,
               LAUNCH: tl.constexpr, PHASE: tl.constexpr, trace_row, TRACE_AT: tl.constexpr):
    """Pass `it` (0, ...) of the three steps: its row waits count on from the passes before,
    its stamps sit 15 slots on a pass."""
    if TRACE_AT > 0:
        tl.store(trace_row + TRACE_AT + 15 * it, now_ns(HIP))
    for step in tl.static_range(_STEPS):
        split_seam_step(pid, M, nvb, eps, prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj,
                        resid_ptr, s_rm, wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr,
                        step, H, NBP, BS, SP, SPP, HAS_CONTRIB, WRITE_BANK, WRITE_RESID, ROUND_MIX)
        if step < _STEPS - 1:
            tl.debug_barrier()
            if TRACE_AT > 0:
                tl.store(trace_row + TRACE_AT + 15 * it + 2 * step + 1, now_ns(HIP))
            tl.atomic_add(cnt, 1, sem="release", scope="gpu")
            wait_geq(cnt, ((_STEPS - 1) * it + step + 1) * SP, t0, deadline_ns, err_addr, rank, layer,
                     LAUNCH, PHASE, "gpu", HIP)
            tl.debug_barrier()
            if TRACE_AT > 0:
                tl.store(trace_row + TRACE_AT + 15 * it + 2 * step + 2, now_ns(HIP))


@triton.jit
def split_seam_persistent(pid, M, nvb, eps,
                          prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                          wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr, scnt_ptr,
                          t0, deadline_ns, err_addr, rank, layer,
                          H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr,
                          SPP: tl.constexpr, HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr,
                          WRITE_RESID: tl.constexpr, ROUND_MIX: tl.constexpr, HIP: tl.constexpr,
                          LAUNCH: tl.constexpr = 0, PHASE: tl.constexpr = 0, trace_row=None,
                          TRACE_AT: tl.constexpr = 0, PASSES: tl.constexpr = 1):
    """Steps A, C, D with a bounded row-local wait after A and after C (on expiry the
    failure names launch LAUNCH, phase PHASE: runtime.failure's numbering). The caller
    puts the row counters back to 0 after its next grid barrier. TRACE_AT > 0: the
    program's timer into trace_row (its int64 row of the caller's trace) at the seam's
    start (slot TRACE_AT), after step A and after its wait (+1, +2), after step C and
    after its wait (+3, +4), so a trace says which of the chain's links takes the time.
    PASSES 2 (a probe, K2's SPASS): the same code runs the seam twice over, a loop of two
    trips, so the second pass runs with its code fetched and its rows in L1 (the same values
    written again: the same bits); its stamps from TRACE_AT + 15."""
    tl.static_assert(PASSES == 1 or PASSES == 2)
    if pid < M * SP:
        cnt = scnt_ptr + pid // SP
        # with two passes a trip count the compiler cannot unroll (M >= 1): one copy of the code runs twice
        for it in range(0, PASSES + (tl.minimum(M, 0) if PASSES > 1 else 0)):
            _seam_pass(it, pid, M, nvb, eps, cnt, prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj,
                       resid_ptr, s_rm, wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr,
                       t0, deadline_ns, err_addr, rank, layer, H, NBP, BS, SP, SPP, HAS_CONTRIB, WRITE_BANK,
                       WRITE_RESID, ROUND_MIX, HIP, LAUNCH, PHASE, trace_row, TRACE_AT)
