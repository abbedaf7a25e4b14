"""L2 prefetch of weight rows a program will read in a later phase (sm_90).

Why: each launch has phases that are latency-bound and use a few SMs (the attn-res seam
and the routing run one program a row; the rest of the grid waits at the next barrier),
while HBM sits idle. The next phase's weights do not depend on what those phases
compute, so every program can ask L2 for the head of each weight row it will stream
next, and then wait. The next phase reads that head from L2 and only the tail from HBM.

The request is one `cp.async.bulk.prefetch.L2` per row (sm_90's bulk prefetch: no
registers, no completion to wait for, at most a hint the memory system may drop), so it
can never change a result, only when bytes arrive. Rows must start 16-byte aligned and
NBYTES be a multiple of 16: the host (`fit_prefetch`) turns the prefetch off for
weights that are not. On HIP builds it compiles to nothing (gfx950 has no bulk prefetch;
the FlyDSL launches keep their own schedule). Triton's CPU interpreter has no inline
assembly: the kernels call this in their persistent launch only, which the interpreter
never runs.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def prefetch_rows_l2(base_ptr, row_stride, r0, n_rows, NBYTES: tl.constexpr, R: tl.constexpr,
                     HIP: tl.constexpr = False):
    """Ask L2 for bytes [0, NBYTES) of rows r0 .. r0 + min(R, n_rows) - 1 of a weight whose
    rows are `row_stride` elements apart (R rows a call; rows past n_rows are not asked)."""
    if not HIP:
        if NBYTES > 0:
            rr = tl.arange(0, R)
            row = r0 + tl.where(rr < n_rows, rr, 0)  # past the end: row r0 again (harmless)
            addr = (base_ptr + row.to(tl.int64) * row_stride).to(tl.int64)
            size = tl.full([R], NBYTES, tl.int32)
            tl.inline_asm_elementwise(
                "cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;",
                "=r,l,r", [addr, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_block_l2(ptr, NBYTES: tl.constexpr, HIP: tl.constexpr = False):
    """Ask L2 for the NBYTES contiguous bytes at `ptr` (a scalar pointer, 16-byte aligned;
    NBYTES a multiple of 16): one bulk request, issued once a warp."""
    if not HIP:
        if NBYTES > 0:
            addr = tl.full([1], 0, tl.int64) + ptr.to(tl.int64)
            size = tl.full([1], NBYTES, tl.int32)
            tl.inline_asm_elementwise(
                "cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;",
                "=r,l,r", [addr, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_matrix_l2(pid, nprog, base_ptr, row_stride, n_rows, NBYTES: tl.constexpr, R: tl.constexpr,
                       HIP: tl.constexpr = False):
    """The head (NBYTES) of every row of a weight [n_rows, ...], R-row chunks striped over
    the programs. L2 is shared, so which program asks for a row does not matter; only
    that the whole grid asks at once."""
    if NBYTES > 0:
        for r0 in range(pid * R, n_rows, nprog * R):
            prefetch_rows_l2(base_ptr, row_stride, r0, n_rows - r0, NBYTES, R, HIP)


def blocks_prefetchable(*blocks) -> bool:
    """Whether every (tensor, rows a block) can take prefetch_block_l2 at any block start:
    rows contiguous (a block is one span), and the base, the span and every stride a
    multiple of 16 bytes."""
    for t, rows in blocks:
        es, row = t.element_size(), t.shape[-1] * t.element_size()
        if t.stride(-1) != 1 or t.stride(-2) * es != row or t.data_ptr() % 16 or (rows * row) % 16:
            return False
        if any((st * es) % 16 for st in t.stride()[:-2]):
            return False
    return True


def fit_prefetch(want: int, *weights) -> int:
    """The per-row prefetch a launch can take over these 2-D weights: `want` bytes rounded
    down to 16 and capped at the shortest row, or 0 when any weight's base or row stride is
    not 16-byte aligned (the bulk prefetch's rule)."""
    n = int(want)
    for t in weights:
        n = min(n, t.shape[1] * t.element_size())
        if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return 0
    return max(n // 16 * 16, 0)
