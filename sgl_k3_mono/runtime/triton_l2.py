"""Cross-phase L2 prefetch for the persistent Triton launches (sm_90).

A latency-bound phase (a seam, routing, a grid barrier) leaves HBM idle while the next
phase's weights, which do not depend on its result, wait to be streamed. A program can
ask L2 for the head of its next tile's rows first: `cp.async.bulk.prefetch.L2` is a
hint, fire and forget, with nothing to wait on and no register or shared memory held.
"""

from __future__ import annotations

import triton
import triton.language as tl

_PREFETCH = tl.constexpr("{\n.reg .pred p;\nsetp.ne.b32 p, $3, 0;\n"
                         "@p cp.async.bulk.prefetch.L2.global [$1], $2;\n}\nmov.u32 $0, 0;")


@triton.jit
def l2_prefetch_rows(ptr, row_stride, nrows, R: tl.constexpr, BYTES: tl.constexpr, NT: tl.constexpr):
    """Prefetch the first BYTES bytes of rows 0 .. nrows - 1 (at most R), `row_stride`
    bytes apart, from `ptr` (any element type; 16-byte aligned rows, BYTES a multiple of
    16 x pieces a row and at most the row's bytes: no address leaves the tensor). The
    R x BYTES bytes are cut into one piece a thread (NT threads), so none is asked twice."""
    P: tl.constexpr = NT // R if NT > R else 1
    t = tl.arange(0, R * P)
    base = ptr.to(tl.pointer_type(tl.int8), bitcast=True)
    addr = base + (t // P).to(tl.int64) * row_stride + (t % P) * (BYTES // P)
    size = tl.full((R * P,), BYTES // P, tl.int32)
    tl.inline_asm_elementwise(_PREFETCH, "=r,l,r,r", [addr, size, (t // P < nrows).to(tl.int32)], dtype=tl.int32,
                              is_pure=False, pack=1)
