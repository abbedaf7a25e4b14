"""K2's phase 1 seam on its own tensors (Triton): through the split seam K1 runs too
(runtime/triton_seam.py), at TP > 1 the slice's rank-order sum of the peers' o_proj
partials first, then p and h2 (seam_split); or one program a row (seam_rows, SEAM_SPLIT 0)."""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.k2.triton.frame import LAUNCH_ID, TRACE_SEAM, TRACE_SLOTS
from sgl_k3_mono.runtime.triton_seam import split_seam_persistent, split_seam_step


@triton.jit
def seam_split(pid, M, nvb, has_prefix, NB, part1_ptr, peer1_ptr, SLOT1, epoch, sa_ptr, prefix_ptr, bank_ptr,
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
            seam_steps(pid, M, nvb, prefix_ptr, contrib, bank_ptr, NB, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr,
                       h2_ptr, smix_ptr, spart_ptr, scnt_ptr, t0, deadline_ns, err_addr, rank, layer,
                       H, NBB, BS, SP, SPP, EPS, MIX_BF16, True, PERSISTENT, STEP, HIP, trace_ptr, TRACE, SPASS)
        else:  # a block write restarted the residual: p = a
            seam_steps(pid, M, nvb, contrib, contrib, bank_ptr, NB, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr,
                       h2_ptr, smix_ptr, spart_ptr, scnt_ptr, t0, deadline_ns, err_addr, rank, layer,
                       H, NBB, BS, SP, SPP, EPS, MIX_BF16, False, PERSISTENT, STEP, HIP, trace_ptr, TRACE, SPASS)


@triton.jit
def seam_steps(pid, M, nvb, prefix_ptr, contrib_ptr, bank_ptr, NB, p_ptr, proj_ptr, rnorm_ptr, onorm_ptr,
               h2_ptr, smix_ptr, spart_ptr, scnt_ptr, t0, deadline_ns, err_addr, rank, layer,
               H: tl.constexpr, NBB: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr, SPP: tl.constexpr,
               EPS: tl.constexpr, MIX_BF16: tl.constexpr, HAS_CONTRIB: tl.constexpr, PERSISTENT: tl.constexpr,
               STEP: tl.constexpr, HIP: tl.constexpr, trace_ptr=None, TRACE: tl.constexpr = False,
               SPASS: tl.constexpr = 1):
    """seam_split's steps on K2's tensors: p = bf16(prefix (+ contrib)) into p_ptr (the
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
def seam_rows(pid, nprog, M, nvb, has_prefix, NB, part1_ptr, peer1_ptr, SLOT1, epoch, prefix_ptr, bank_ptr,
              p_ptr, proj_ptr, rnorm_ptr, onorm_ptr, h2_ptr, H: tl.constexpr, BH: tl.constexpr, NBB: tl.constexpr,
              EPS: tl.constexpr, MIX_BF16: tl.constexpr, TP: tl.constexpr):
    """The seam of phase 1 one program a row (SEAM_SPLIT 0): a = bf16(the rank-order sum of
    the peers' partials, or this rank's), p = bf16(prefix + a) (has_prefix) or a, then the
    scores of the bank rows and p, their softmax, the mix and its norm into h2: each row a
    chain of passes over H in one program."""
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
