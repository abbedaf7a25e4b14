"""The pieces K2's phases are built from (Triton): SiTU, the dense phases' row tiles, the
front's tiles and their counts, one row's routing, the shared experts' SiTU chunks and
down tiles, and the expert phases' L2 asks and stores."""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.k2.triton.matmul import dot_bf16
from sgl_k3_mono.k2.triton.routing import route_row, table_slot
from sgl_k3_mono.runtime.triton_l2 import l2_prefetch_rows

SITU_CHUNK = tl.constexpr(512)
"""Columns of the shared experts' SiTU a program writes at a time (M x ceil(S2 / 2 / 512) chunks)."""


@triton.jit
def situ(g, u, BETA: tl.constexpr, LBETA: tl.constexpr):
    """beta*tanh(g/beta)*sigmoid(g) * lbeta*tanh(u/lbeta), fp32 (tanh via exp: no libdevice)."""
    tg = 2.0 * tl.sigmoid(2.0 * g / BETA) - 1.0
    tu = 2.0 * tl.sigmoid(2.0 * u / LBETA) - 1.0
    return BETA * tg * tl.sigmoid(g) * (LBETA * tu)


@triton.jit
def h_tile(tile, H: tl.constexpr, BN: tl.constexpr, BNH: tl.constexpr):
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
def h_mask(rm, M, rn, nend, BN: tl.constexpr, BNH: tl.constexpr):
    if BNH == BN:
        return rm[:, None] < M
    else:
        return (rm[:, None] < M) & (rn[None, :] < nend)


@triton.jit
def group_sum(v, G: tl.constexpr):
    """[NT] per-thread partials of G warp groups (group-major) summed: [NT / G]."""
    return tl.sum(tl.reshape(v, (G, v.shape[0] // G)), axis=0)


@triton.jit
def front_rows(h2_ptr, M, w_ptr, s_w, n0, N, out_ptr, rm, H: tl.constexpr, BM: tl.constexpr, BT: tl.constexpr,
               BK: tl.constexpr, STAGES: tl.constexpr, DENSE_GEMV: tl.constexpr, ROUND: tl.constexpr,
               OUT_BF16: tl.constexpr):
    """Rows n0 .. n0 + BT - 1 of one segment of the front (N rows of stride s_w) over h2
    into out [M, N]: fp32 (bf16-rounded first with ROUND), or bf16 (OUT_BF16)."""
    acc = dot_bf16(h2_ptr, H, M, w_ptr, s_w, n0, N, H, tl.zeros((BM, BT), tl.float32), BM, BT, BK, STAGES,
                   DENSE_GEMV)
    front_store(acc, out_ptr, n0, N, M, rm, BT, ROUND, OUT_BF16)


@triton.jit
def front_store(acc, out_ptr, n0, N, M, rm, BT: tl.constexpr, ROUND: tl.constexpr, OUT_BF16: tl.constexpr):
    """A front tile's [rows, BT] sums into out [M, N] from row n0: fp32 (bf16-rounded first
    with ROUND), or bf16 (OUT_BF16)."""
    rn = n0 + tl.arange(0, BT)
    if OUT_BF16:
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=rm[:, None] < M)
    else:
        if ROUND:
            acc = acc.to(tl.bfloat16).to(tl.float32)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)


@triton.jit
def tiles_of(pid, nprog, ntiles):
    """How many of `ntiles` tiles dealt round the grid program pid owns."""
    return tl.maximum(ntiles - pid + nprog - 1, 0) // nprog


@triton.jit
def items_of(first, end, step):
    """How many items first, first + step, ... below `end` there are (a program's share):
    tiles_of's count, written apart because the bf16 builds the GPU ran were compiled from
    this form (through tiles_of their SASS is 16-32 instructions shorter, not yet run)."""
    return tl.where(first < end, (end - first + step - 1) // step, 0)


@triton.jit
def count_tile(counter_ptr, ASM: tl.constexpr = False):
    """This program's front tile is stored (every thread's part: the CTA barrier); one more
    on the counter, with release, for the helpers that wait on it to read the tile. ASM
    (sm_90, in FLATD's loop): the same bar.sync as inline PTX, which Triton's software
    pipeliner does not see; with tl.debug_barrier in its body it leaves the loop's loads
    unpipelined."""
    if ASM:
        tl.inline_asm_elementwise("mov.u32 $0, 0;\n\tbar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def route_one(r, logit_ptr, bias_ptr, ids_ptr, wts_ptr, owner_ptr, E, TOPK: tl.constexpr, BE: tl.constexpr,
              KB: tl.constexpr):
    """Row r's top-k into ids / wts; each expert's owner is the least (row, slot) naming it."""
    kc = tl.arange(0, KB)
    ids, wts = route_row(logit_ptr, bias_ptr, r, E, TOPK, BE, KB)
    tl.store(ids_ptr + r * TOPK + kc, ids, mask=kc < TOPK)
    tl.store(wts_ptr + r * TOPK + kc, wts, mask=kc < TOPK)
    tl.atomic_min(owner_ptr + ids, r * TOPK + kc, mask=kc < TOPK, sem="relaxed", scope="gpu")


@triton.jit
def situ_chunk(sq, gu_ptr, sact_ptr, S2: tl.constexpr, NSC: tl.constexpr, BETA: tl.constexpr,
               LBETA: tl.constexpr):
    """Chunk sq (row sq // NSC, SITU_CHUNK columns) of the shared experts' activation bf16(SiTU(gu))."""
    srow = sq // NSC
    scol = (sq % NSC) * SITU_CHUNK + tl.arange(0, SITU_CHUNK)
    sg = tl.load(gu_ptr + srow * S2 + scol, mask=scol < S2 // 2, other=0.0)
    su = tl.load(gu_ptr + srow * S2 + S2 // 2 + scol, mask=scol < S2 // 2, other=0.0)
    tl.store(sact_ptr + srow * (S2 // 2) + scol, situ(sg, su, BETA, LBETA).to(tl.bfloat16), mask=scol < S2 // 2)


@triton.jit
def l2_expert_rows(w_ptr, s_n, r0, SECOND: tl.constexpr, R: tl.constexpr, BYTES: tl.constexpr, NT: tl.constexpr):
    """Ask L2 for R MXFP4 weight rows from row r0 (and as many from r0 + SECOND, the up
    rows, unless SECOND is 0), each row's BYTES whole: a prefetch, fire and forget. The
    scales (1/16 of the bytes, rows not 16-byte multiples) load as they did."""
    l2_prefetch_rows(w_ptr + r0.to(tl.int64) * s_n, s_n, R, R, BYTES, NT)
    if SECOND != 0:
        l2_prefetch_rows(w_ptr + (r0 + SECOND).to(tl.int64) * s_n, s_n, R, R, BYTES, NT)


@triton.jit
def shared_down_tile(tile, sact_ptr, wsd_ptr, s_wsd, part2_ptr, M, rm, H: tl.constexpr, L: tl.constexpr,
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
def down_store(ya, e, lr, ids_ptr, y_ptr, M, qc, L: tl.constexpr, BL: tl.constexpr, TOPK: tl.constexpr,
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


@triton.jit
def latent_up_store(acc, n0, nend, red, p_ptr, out_ptr, M, rm, H: tl.constexpr, L: tl.constexpr,
                    BN: tl.constexpr, BNH: tl.constexpr):
    """latent_up's epilogue for rows n0 .. nend - 1 of H: out = bf16(bf16(bf16(acc) + shared) + p),
    shared from the reduced [latent | shared] rows `red`."""
    rn = n0 + tl.arange(0, BN)
    msk = h_mask(rm, M, rn, nend, BN, BNH)
    out = acc.to(tl.bfloat16).to(tl.float32)
    shared = tl.load(red + rm[:, None] * (L + H) + L + rn[None, :], mask=msk, other=0.0)
    x = (out + shared.to(tl.float32)).to(tl.bfloat16).to(tl.float32)
    p = tl.load(p_ptr + rm[:, None] * H + rn[None, :], mask=msk, other=0.0)
    x = (x + p.to(tl.float32)).to(tl.bfloat16)
    tl.store(out_ptr + rm[:, None] * H + rn[None, :], x, mask=msk)
