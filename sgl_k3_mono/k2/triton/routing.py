"""K2's routing pieces (Triton): the top-k of a row, and the distinct experts a step
routed to, each owned by the first (row, slot) that names it."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def route_row(logits_ptr, bias_ptr, r, E, TOPK: tl.constexpr, BE: tl.constexpr, KB: tl.constexpr):
    """Biased sigmoid top-k of row r: ids [KB] in descending biased score (ties: the
    lower expert id) and the renormalised unbiased weights [KB] (0 past TOPK).

    One bitonic top-k over keys that order as (biased score, lower id) do, where a loop of
    TOPK argmaxes costs two CTA-wide reductions (two shared-memory round trips) a pick:
    95 barriers against 12 in the sm_90 PTX of an 8-warp CTA."""
    re = tl.arange(0, BE)
    valid = re < E
    logit = tl.load(logits_ptr + r * E + re, mask=valid, other=0.0)
    choice = tl.where(valid, tl.sigmoid(logit) + tl.load(bias_ptr + re, mask=valid, other=0.0), float("-inf"))
    # fp32 bits as an int32 that orders like the float (negatives: the magnitude bits
    # flipped), above an id field where the lower id is the larger key
    bits = choice.to(tl.int32, bitcast=True)
    key = (tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64) << 32) | (BE - 1 - re).to(tl.int64)
    top = tl.topk(key, KB)  # descending
    kc = tl.arange(0, KB)
    ids = tl.where(kc < TOPK, (BE - 1 - (top & 0xFFFFFFFF)).to(tl.int32), 0)
    # the same sigmoid of the same logit: bit-equal to the score the key was built from
    wts = tl.where(kc < TOPK, tl.sigmoid(tl.load(logits_ptr + r * E + ids, mask=kc < TOPK, other=0.0)), 0.0)
    return ids, wts / (tl.sum(wts, axis=0) + 1e-20)


@triton.jit
def distinct_experts(ids_ptr, owner_ptr, M, TOPK: tl.constexpr, BM: tl.constexpr, KB: tl.constexpr):
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
def user_count(ids, keep, e):
    """How many rows route expert e (a row names an expert at most once)."""
    return tl.sum(tl.sum(((ids == e) & keep).to(tl.int32), axis=1), axis=0)


@triton.jit
def user_rows(ids, keep, e, u0, XU: tl.constexpr, BM: tl.constexpr):
    """Rows u0 .. u0+XU-1 (in row order) of those that route expert e: their indices [XU]
    and which of them exist [XU]."""
    rm = tl.arange(0, BM)
    uses = tl.max(((ids == e) & keep).to(tl.int32), axis=1)
    rank = tl.cumsum(uses, axis=0) - 1
    want = u0 + tl.arange(0, XU)
    pick = (uses[None, :] != 0) & (rank[None, :] == want[:, None])
    return tl.sum(tl.where(pick, rm[None, :], 0), axis=1), want < tl.sum(uses, axis=0)


@triton.jit
def nth_expert(ids, first, number, n):
    """The expert the n-th owning pair names."""
    return tl.sum(tl.sum(tl.where(first & (number == n), ids, 0), axis=1), axis=0)


@triton.jit
def write_expert_table(tab_ptr, ids, keep, first, number, n_e, owner_ptr, TOPK: tl.constexpr, BM: tl.constexpr,
                       KB: tl.constexpr, XR: tl.constexpr):
    """One program writes the step's expert table (int32) from distinct_experts' tiles:
    [0] the distinct experts' count n_e, [1, 1 + P) the n-th one's id, [1 + P, 1 + 2P) each
    owning pair's n (by pair index row * TOPK + slot; scratch), then [1 + 2P, ...) for each
    n and x row the slot that names expert n in that row, or -1 (P = BM x KB). experts_down
    then reads an item's expert and its rows' slots with a few loads: no CTA-wide sum an
    item (nth_expert) and no scan of every slot of its rows."""
    P: tl.constexpr = BM * KB
    rm = tl.arange(0, BM)
    kc = tl.arange(0, KB)
    slots = tab_ptr + 1 + 2 * P
    tl.store(tab_ptr, n_e)
    tl.store(tab_ptr + 1 + number, ids, mask=first)
    tl.store(tab_ptr + 1 + P + rm[:, None] * TOPK + kc[None, :], number, mask=first)
    q = tl.arange(0, P * XR)
    tl.store(slots + q, -1, mask=q < n_e * XR)
    tl.debug_barrier()  # the owners' numbers and the -1s are in before the slots land (one CTA)
    n = tl.load(tab_ptr + 1 + P + tl.load(owner_ptr + ids, mask=keep, other=0), mask=keep, other=0)
    tl.store(slots + n * XR + rm[:, None], tl.broadcast_to(kc[None, :], (BM, KB)), mask=keep)


@triton.jit
def table_expert(tab_ptr, n):
    """The n-th distinct expert, from write_expert_table's table."""
    return tl.load(tab_ptr + 1 + n)


@triton.jit
def table_slot(tab_ptr, n, tok, P: tl.constexpr, XR: tl.constexpr):
    """The slot of x row `tok` ([NT]) that names the n-th distinct expert, or -1."""
    return tl.load(tab_ptr + 1 + 2 * P + n * XR + tok)
