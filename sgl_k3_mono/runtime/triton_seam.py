"""The attention-residual seam split over several programs a row (Triton), shared by K1
(the attention-side seam) and K2 (the FFN-side seam): the same arithmetic on the same
kinds of rows, so one device function serves both launches.

The persistent launch spreads each row's seam over SP programs, one H-slice of BS
columns each (program r * SP + s: row r, slice s), instead of one program walking the
row: the single-program seam is a chain of dependent loads (a pass a bank row) while
the rest of the grid waits at the barrier. Two steps, one row-local wait between them:

  (A) p, and over the program's own slice the partial sums every later number needs:
      each mixed row's score dot with cw and sum of squares, and (SP > 1) their Gram
      matrix G_jk = v_j . v_k (tl.dot of the bf16 rows: exact products, fp32 sums), so
      the mix's sum of squares is the quadratic form sum_jk a_j a_k G_jk, known before
      the mix exists.
  (B) the SP partials summed (in slice order: every program and every replay sums
      alike), the softmax, the mix of the slice, and h = mix * rstd * w.

The quadratic form is why one wait suffices where a pass per norm needed two (the mix's
norm used to wait for every slice's mix). With one slice a row (SP 1) the whole mix is the
program's own, so its sum of squares is taken directly, as the reference does. With more,
two consequences, both far below a bf16 ulp of h: the norm's statistic is that of the fp32 mix, also where the sm_90 seam rounds the mix
to bf16 before the norm (SGLang squares the rounded mix: relative differences ~1e-5 in
rstd on random rows); and the form sums signed terms, so its relative error is fp32's
times (sum_j a_j |v_j|)^2 / |mix|^2, which a convex mix of residual-stream rows keeps
small (it nears 1e-3 only if the mix cancels to 1 % of its rows' norms).

Between the steps a row-local bounded wait (the persistent launch), or a launch boundary
(the phased launch runs the steps as SEAM_STEPS launches of the seam's phase, and step B
reads the rows back from memory where the persistent launch keeps them in registers).
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.runtime.triton_sync import wait_geq

SLICES = (256, 512)
"""The split seam's slice widths, narrowest first."""
SEAM_STEPS = 2
"""The split seam's steps: its launches of the seam's phase when a launch runs phased."""


def seam_slice(rows: int, hidden: int, grid: int) -> int:
    """BS: the narrowest slice width that gives every slice of every row a program of the
    grid (the most programs at work, each pass the shortest); 0 when none fits."""
    for bs in SLICES:
        if rows * -(-hidden // bs) <= grid:
            return bs
    return 0


def seam_part_width(nbp: int) -> int:
    """fp32 words of one slice's partials: NBP score dots, NBP sums of squares, then the
    [NBP, NBP] Gram matrix (written where a row has more than one slice)."""
    return 2 * nbp + nbp * nbp


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
def split_mixed_rows(bank_row, s_bj, p, nvb, cols, cm, NBP: tl.constexpr):
    """[NBP, BS] fp32: slice `cols` of bank rows 0..nvb-1, then p ([BS] fp32, row nvb), zero past it."""
    rj = tl.arange(0, NBP)[:, None]
    v = tl.load(bank_row + rj * s_bj + cols[None, :], mask=(rj < nvb) & cm[None, :], other=0.0).to(tl.float32)
    return tl.where(rj == nvb, p[None, :], v)


@triton.jit
def _seam_partials(row, sl, nvb, prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, p_row,
                   wproj_ptr, wsn_ptr, spart_ptr,
                   H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr,
                   HAS_CONTRIB: tl.constexpr, WRITES_P: tl.constexpr):
    """Step A for (row, slice sl): p = bf16(prefix (+ contrib)) into p_row (WRITES_P; else
    p_row holds p), the slice's score dots, sums of squares and (SP > 1) Gram matrix into
    spart. Returns the slice's mixed rows [NBP, BS] fp32 (p as the one this program stored)."""
    cols = sl * BS + tl.arange(0, BS)
    cm = cols < H
    if WRITES_P:
        p = tl.load(prefix_ptr + row * s_pm + cols, mask=cm, other=0.0).to(tl.float32)
        if HAS_CONTRIB:
            p += tl.load(contrib_ptr + row * s_cm + cols, mask=cm, other=0.0).to(tl.float32)
        p = p.to(tl.bfloat16)
        tl.store(p_row + cols, p, mask=cm)
        p = p.to(tl.float32)
    else:
        p = tl.load(p_row + cols, mask=cm, other=0.0).to(tl.float32)
    v = split_mixed_rows(bank_ptr + row * s_bm, s_bj, p, nvb, cols, cm, NBP)
    cw = tl.load(wsn_ptr + cols, mask=cm, other=0.0).to(tl.float32) * \
        tl.load(wproj_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    rj = tl.arange(0, NBP)
    mine = spart_ptr + (row * SP + sl) * (2 * NBP + NBP * NBP)
    tl.store(mine + rj, tl.sum(v * cw[None, :], axis=1))
    tl.store(mine + NBP + rj, tl.sum(v * v, axis=1))
    if SP > 1:
        vb = v.to(tl.bfloat16)  # exact: every mixed row holds bf16 values
        tl.store(mine + 2 * NBP + rj[:, None] * NBP + rj[None, :], tl.dot(vb, tl.trans(vb)))
    return v


@triton.jit
def _seam_out(row, sl, nvb, eps, v, won_ptr, h_ptr, spart_ptr,
              H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr, SPP: tl.constexpr,
              ROUND_MIX: tl.constexpr):
    """Step B for (row, slice sl): every slice's partials summed, the softmax over the
    rows 0..nvb, the slice's mix (v: its mixed rows) and h = bf16(mix * rstd * w)."""
    rj = tl.arange(0, NBP)
    qq = tl.arange(0, SPP)
    part = spart_ptr + (row * SP + qq) * (2 * NBP + NBP * NBP)
    live = qq < SP
    dots = tl.sum(tl.load(part[:, None] + rj[None, :], mask=live[:, None], other=0.0, cache_modifier=".cg"),
                  axis=0)
    sqs = tl.sum(tl.load(part[:, None] + NBP + rj[None, :], mask=live[:, None], other=0.0, cache_modifier=".cg"),
                 axis=0)
    scores = tl.where(rj <= nvb, dots / tl.sqrt(sqs / H + eps), float("-inf"))
    e = tl.where(rj <= nvb, tl.exp(scores - tl.max(scores, axis=0)), 0.0)
    alpha = e / tl.sum(e, axis=0)  # nvb == 0: the mix is p itself
    mix = tl.sum(alpha[:, None] * v, axis=0)
    if ROUND_MIX:
        mix = mix.to(tl.bfloat16).to(tl.float32)
    if SP > 1:
        gram = tl.sum(tl.load(part[:, None, None] + 2 * NBP + rj[None, :, None] * NBP + rj[None, None, :],
                              mask=live[:, None, None], other=0.0, cache_modifier=".cg"), axis=0)
        msq = tl.sum(alpha * tl.sum(gram * alpha[None, :], axis=1), axis=0)
    else:
        msq = tl.sum(mix * mix, axis=0)
    cols = sl * BS + tl.arange(0, BS)
    cm = cols < H
    w = tl.load(won_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    tl.store(h_ptr + row * H + cols, (mix * (1.0 / tl.sqrt(msq / H + eps)) * w).to(tl.bfloat16), mask=cm)


@triton.jit
def split_seam_step(pid, M, nvb, eps,
                    prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                    wproj_ptr, wsn_ptr, won_ptr, h_ptr, spart_ptr,
                    STEP: tl.constexpr, H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr,
                    SP: tl.constexpr, SPP: tl.constexpr, HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr,
                    WRITE_RESID: tl.constexpr, ROUND_MIX: tl.constexpr):
    """Step A (0) or B (1) of the split seam for program pid < M * SP, one launch a step.
    Partials live in spart [M, SP, seam_part_width(NBP)] fp32."""
    row = pid // SP
    sl = pid % SP
    p_row = seam_p_row(row, nvb, prefix_ptr, s_pm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm, WRITE_BANK, WRITE_RESID)
    if STEP == 0:
        _seam_partials(row, sl, nvb, prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, p_row,
                       wproj_ptr, wsn_ptr, spart_ptr, H, NBP, BS, SP, HAS_CONTRIB, WRITE_BANK or WRITE_RESID)
    else:
        cols = sl * BS + tl.arange(0, BS)
        cm = cols < H
        p = tl.load(p_row + cols, mask=cm, other=0.0).to(tl.float32)
        v = split_mixed_rows(bank_ptr + row * s_bm, s_bj, p, nvb, cols, cm, NBP)
        _seam_out(row, sl, nvb, eps, v, won_ptr, h_ptr, spart_ptr, H, NBP, BS, SP, SPP, ROUND_MIX)


@triton.jit
def split_seam_persistent(pid, M, nvb, eps,
                          prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                          wproj_ptr, wsn_ptr, won_ptr, h_ptr, spart_ptr, scnt_ptr,
                          t0, deadline_ns, err_addr, rank, layer,
                          H: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr,
                          SPP: tl.constexpr, HAS_CONTRIB: tl.constexpr, WRITE_BANK: tl.constexpr,
                          WRITE_RESID: tl.constexpr, ROUND_MIX: tl.constexpr, HIP: tl.constexpr,
                          LAUNCH: tl.constexpr = 0, PHASE: tl.constexpr = 0):
    """Steps A and B with a bounded row-local wait between them (on expiry the failure
    names launch LAUNCH, phase PHASE: runtime.failure's numbering); the slice's mixed rows
    stay in registers across it. The caller puts the row counters back to 0 after its
    next grid barrier."""
    if pid < M * SP:
        row = pid // SP
        sl = pid % SP
        p_row = seam_p_row(row, nvb, prefix_ptr, s_pm, bank_ptr, s_bm, s_bj, resid_ptr, s_rm,
                           WRITE_BANK, WRITE_RESID)
        v = _seam_partials(row, sl, nvb, prefix_ptr, s_pm, contrib_ptr, s_cm, bank_ptr, s_bm, s_bj, p_row,
                           wproj_ptr, wsn_ptr, spart_ptr, H, NBP, BS, SP, HAS_CONTRIB, WRITE_BANK or WRITE_RESID)
        tl.debug_barrier()
        tl.atomic_add(scnt_ptr + row, 1, sem="release", scope="gpu")
        wait_geq(scnt_ptr + row, SP, t0, deadline_ns, err_addr, rank, layer, LAUNCH, PHASE, "gpu", HIP)
        tl.debug_barrier()
        _seam_out(row, sl, nvb, eps, v, won_ptr, h_ptr, spart_ptr, H, NBP, BS, SP, SPP, ROUND_MIX)
