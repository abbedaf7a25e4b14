"""K2 phases 6 and 7 (combine, reduce) for gfx950, as the Triton kernel's.

combine  latent[r, l] = bf16(sum_k w[r, k] y[(r, k), l]), fp32 in top-k order, into
         this rank's [latent | shared] partials (the parity slot at TP > 1).
reduce   TP > 1: [latent | shared] = bf16(sum_q partial_q) over the ranks in rank
         order, pulled from the peers' symmetric buffers (after the caller waited for
         their ready tags at system scope), into this rank's reduced copy.

A tile is 64 columns x 8 rows: thread t takes row t // 32, columns 2 (t % 32) + {0, 1}."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k2.flydsl.geometry import COMBINE_BL
from sgl_k3_mono.runtime.flydsl_sync import _device


def _pair(p):
    """2 bf16 at p, as fp32."""
    return fx.generic_load(p, dtype=fx.BFloat16, count=2).to(fx.Float32)


@_device
def combine_phase(M, wts_p, y_p, part2_p, L: int, H: int, TOPK: int):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    row = tid // 32
    col = (tid % 32) * 2
    for tile in range(bid, L // COMBINE_BL, nblk):
        if row < M:
            l = tile * COMBINE_BL + col
            acc = fx.Vector.filled(2, 0.0, fx.Float32)
            for k in range_constexpr(TOPK):
                w = fx.Float32(fx.ptr_load(wts_p + (row * TOPK + k)))
                acc = acc + w * _pair(y_p + ((row * TOPK + k) * L + l))
            fx.generic_store(part2_p + (row * (L + H) + l), acc.to(fx.BFloat16))


@_device
def reduce_phase(M, peers, red_p, L: int, H: int):
    """`peers`: every rank's [latent | shared] partials (bf16 pointers, this parity's slot)."""
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    row = tid // 32
    col = (tid % 32) * 2
    for tile in range(bid, (L + H) // COMBINE_BL, nblk):
        if row < M:
            off = row * (L + H) + tile * COMBINE_BL + col
            acc = _pair(peers[0] + off)
            for q in range_constexpr(1, len(peers)):
                acc = acc + _pair(peers[q] + off)
            fx.generic_store(red_p + off, acc.to(fx.BFloat16))
