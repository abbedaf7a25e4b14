"""K2 phase 3 (route) for gfx950, and the distinct-expert numbering the expert phases
share, as the Triton kernel's route_row and distinct_experts.

route: one workgroup a row. Biased sigmoid top-k: choice = sigmoid(logit) + bias; k
times the largest choice (ties: the lower expert id) is taken and struck out; its
unbiased score is the weight; the weights are renormalised by their sum (+1e-20).
Then owner[e] = min over the (row, slot) pairs naming e (an atomic min, agent scope:
the owner does not depend on timing; o_proj reset owner to INT_MAX).

distinct: every workgroup numbers the owning pairs (owner[ids[pair]] == pair) in
(row, slot) order, so the n-th distinct expert is the same everywhere."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr
from flydsl.expr.typing import T

from sgl_k3_mono.k2.flydsl.block import NEG_INF, block_argmax, exclusive_count, sigmoid
from sgl_k3_mono.k2.flydsl.geometry import IDS, LIST, OOB, THREADS
from sgl_k3_mono.runtime.flydsl_sync import AGENT, RELAXED, _device


@_device
def route_phase(M, logits_r, bias_r, logits_p, ids_p, wts_p, owner_p, cand, aux, E: int, TOPK: int):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    per = (E + THREADS - 1) // THREADS
    exp_id = [i * THREADS + tid for i in range_constexpr(per)]
    bias = [fx.Float32(fx.rocdl.raw_ptr_buffer_load(T.f32, bias_r, (e < E).select(e * 4, OOB), 0, 0))
            for e in exp_id]
    for r in range(bid, M, nblk):
        # this thread's candidates live in LDS (cand[i * THREADS + tid]): a runtime top-k
        # loop keeps the code small and the registers few
        for i in range_constexpr(per):
            e = exp_id[i]
            lg = fx.Float32(fx.rocdl.raw_ptr_buffer_load(T.f32, logits_r, (e < E).select((r * E + e) * 4, OOB), 0, 0))
            fx.generic_store(cand.ptr + (i * THREADS + tid), (e < E).select(sigmoid(lg) + bias[i], NEG_INF))
        my_id = fx.Int32(0)
        my_w = fx.Float32(0.0)
        wsum = fx.Float32(0.0)
        for k in range(TOPK):
            best = fx.Float32(fx.ptr_load(cand.ptr + tid))
            best_i = exp_id[0]
            for i in range_constexpr(1, per):  # ascending ids: strictly greater keeps the lower id on a tie
                c = fx.Float32(fx.ptr_load(cand.ptr + (i * THREADS + tid)))
                take = c > best
                best = take.select(c, best)
                best_i = take.select(exp_id[i], best_i)
            idx = block_argmax(best, best_i, aux)
            # the unbiased score of the winner, computed as above from the same logit
            s = sigmoid(fx.Float32(fx.ptr_load(logits_p + (r * E + idx))))
            wsum = wsum + s
            mine = tid == k
            my_id = mine.select(idx, my_id)
            my_w = mine.select(s, my_w)
            if (idx - tid) % THREADS == 0:  # the thread holding the winner strikes it out
                fx.generic_store(cand.ptr + ((idx - tid) // THREADS * THREADS + tid), fx.Float32(NEG_INF))
        if tid < TOPK:
            (ids_p + (r * TOPK + tid)).store(my_id)
            (wts_p + (r * TOPK + tid)).store(my_w / (wsum + 1e-20))
            fx.atomic_min(owner_p + my_id, r * TOPK + tid, syncscope=AGENT, ordering=RELAXED)


@_device
def distinct(M, ids_p, owner_p, ints, TOPK: int):
    """Number the owning pairs: ints[LIST + n] = the n-th distinct expert, ints[IDS + pair]
    = the pair's expert (the down phase's slot lookup). Returns how many there are."""
    tid = fx.thread_idx.x
    inb = tid < M * TOPK
    e = fx.Int32(fx.ptr_load(ids_p + inb.select(tid, 0)))
    own = fx.Int32(fx.ptr_load(owner_p + e))
    first = inb & (own == tid)
    fx.generic_store(ints.ptr + (IDS + tid), e)
    number, total = exclusive_count(first.select(1, 0), ints)
    if first:
        fx.generic_store(ints.ptr + (LIST + number), e)
    fx.gpu.barrier()
    return total
