"""Dense weight rows staged in shared memory while HBM idles (sm_90, inline PTX).

Two windows of K2 leave HBM idle: the seam (a chain of L2 round trips on a few programs,
the rest waiting at a barrier) and the expert phases (each program's loads held by its
decode, 1.1 of 4.3 TB/s at 1 row). The phases after them stream dense bf16 rows (the front,
latent_up) at the rate each program keeps bytes in flight, so every byte that is already
on the SM when they start is a byte off their critical path. Here one 16-row tile of a
program's next dense phase is copied into shared memory past Triton's own buffers by
Hopper's bulk copy (one `cp.async.bulk` a row, issued by 16 threads; an mbarrier counts
the bytes in), and read back by that tile's own mma.sync over the staged K columns; the
rest of its K goes through the phase's Triton loop as before.

Layout of the staging buffer (runtime/triton_smem.reserve puts it past Triton's own and past
mma_fp4's ring): the mbarrier at 0, the warps' partial sums at STAGE_RED (one 16-byte
accumulator quad a thread), the rows from stage_data(NT) at a stride of their bytes plus
16 (ldmatrix then reads 8 rows at one column without a bank conflict).

Every tensor here has one element per thread ([NT] = 32 x num_warps), as in mma_fp4: a
per-thread register in the PTX is an element in Triton.
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.runtime.triton_sync import fail, now_ns

STAGE_ROWS = tl.constexpr(16)
"""Rows a staged tile holds: one m16 tile of mma.sync."""
STAGE_RED = tl.constexpr(128)
"""Byte offset of the warps' partial sums (past the 8-byte mbarrier, line-aligned)."""
ROW_PAD = tl.constexpr(16)
"""Bytes past each staged row: a row stride of 16 mod 128 keeps ldmatrix conflict-free."""


def stage_data(threads: int) -> int:
    """Byte offset of the first staged row: past the partial sums, line-aligned."""
    return -(-(STAGE_RED.value + 16 * threads) // 128) * 128


def stage_bytes(row_bytes: int, threads: int, x_rows: int) -> int:
    """Shared memory a staged tile of STAGE_ROWS rows of `row_bytes` takes, with its header
    and the x_rows rows of x it is multiplied by (staged_dot copies them in first)."""
    return stage_data(threads) + STAGE_ROWS.value * (row_bytes + ROW_PAD.value) + x_rows * row_bytes


# thread 0 sets the mbarrier up (one arrival a phase: the issuing thread's expect_tx)
_INIT = tl.constexpr("""{
.reg .pred p;
.reg .u32 b;
mov.u32 b, global_smem; add.u32 b, b, $2;
setp.eq.u32 p, $1, 0;
@p mbarrier.init.shared::cta.b64 [b], 1;
@p fence.mbarrier_init.release.cluster;
mov.u32 $0, 0;
}""")
# threads 0..15 copy one row each ($4: its global address, $3: its shared slot, $5: bytes);
# thread 0 also arrives, expecting all the rows' bytes ($6). The tx count may run below zero
# while copies land before the arrival; the phase completes when both are in.
_ISSUE = tl.constexpr("""{
.reg .pred p, q;
.reg .b64 st;
.reg .u32 b, d;
mov.u32 b, global_smem; add.u32 d, b, $3; add.u32 b, b, $2;
setp.lt.u32 p, $1, 16;
setp.eq.u32 q, $1, 0;
@p fence.proxy.async.shared::cta;
@q mbarrier.arrive.expect_tx.shared::cta.b64 st, [b], $6;
@p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [d], [$4], $5, [b];
mov.u32 $0, 0;
}""")
_TRY_WAIT = tl.constexpr("""{
.reg .pred p;
.reg .u32 b;
mov.u32 b, global_smem; add.u32 b, b, $1;
mbarrier.try_wait.parity.shared::cta.b64 p, [b], $2;
selp.u32 $0, 1, 0, p;
}""")
# one k16 step: the A fragment of 16 staged rows by ldmatrix ($8), B from the staged x row
# of this lane's column (its words at $9 and $9 + 16; zeros where $10 is 0: a row past M)
_STEP = tl.constexpr("""{
.reg .b32 a0, a1, a2, a3, b, x0, x1;
.reg .pred p;
mov.u32 b, global_smem; add.u32 b, b, $8;
ldmatrix.sync.aligned.m8n8.x4.shared.b16 {a0, a1, a2, a3}, [b];
mov.u32 b, global_smem; add.u32 b, b, $9;
setp.ne.u32 p, $10, 0;
mov.u32 x0, 0; mov.u32 x1, 0;
@p ld.shared.b32 x0, [b]; @p ld.shared.b32 x1, [b + 16];
mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, {a0, a1, a2, a3}, {x0, x1}, {$4, $5, $6, $7};
}""")
# 16 bytes of x from global into the staging buffer ($2: its offset past global_smem), where $3
_COPY16 = tl.constexpr("""{
.reg .b32 a, b, c, d, s;
.reg .pred p;
setp.ne.u32 p, $3, 0;
mov.u32 s, global_smem; add.u32 s, s, $2;
@p ld.global.v4.u32 {a, b, c, d}, [$1];
@p st.shared.v4.u32 [s], {a, b, c, d};
mov.u32 $0, 0;
}""")
_PUT = tl.constexpr("""{
.reg .u32 b;
mov.u32 b, global_smem; add.u32 b, b, $1;
st.shared.v4.f32 [b], {$2, $3, $4, $5}; mov.u32 $0, 0;
}""")
# row m of x against staged row n: the 8 warps' partials of lane 4 (n % 8) + m / 2, register
# 2 (n / 8) + m % 2, summed in warp order (every launch and replay sums alike)
_SUM8 = tl.constexpr("""{
.reg .f32 v;
.reg .u32 b;
mov.u32 b, global_smem; add.u32 b, b, $1;
ld.shared.f32 $0, [b];
ld.shared.f32 v, [b + 512]; add.rn.f32 $0, $0, v;
ld.shared.f32 v, [b + 1024]; add.rn.f32 $0, $0, v;
ld.shared.f32 v, [b + 1536]; add.rn.f32 $0, $0, v;
ld.shared.f32 v, [b + 2048]; add.rn.f32 $0, $0, v;
ld.shared.f32 v, [b + 2560]; add.rn.f32 $0, $0, v;
ld.shared.f32 v, [b + 3072]; add.rn.f32 $0, $0, v;
ld.shared.f32 v, [b + 3584]; add.rn.f32 $0, $0, v;
}""")


@triton.jit
def stage_init(base, NT: tl.constexpr):
    """Set the mbarrier of the buffer at `base` (its byte offset past global_smem) up
    (thread 0), then every thread past it."""
    t = tl.arange(0, NT)
    tl.inline_asm_elementwise(_INIT, "=r,r,r", [t, t * 0 + base], dtype=tl.int32, is_pure=False, pack=1)
    tl.debug_barrier()


@triton.jit
def stage_issue(base, w_ptr, s_w, n0, NBYTES: tl.constexpr, NT: tl.constexpr):
    """Copy the first NBYTES of rows n0 .. n0 + 15 of W (bf16, row stride s_w elements)
    into the buffer; every thread of the program is past its last read of the buffer."""
    tl.static_assert(NT % 32 == 0 and NT >= 16)
    tl.static_assert(NBYTES % 16 == 0)
    t = tl.arange(0, NT)
    RS: tl.constexpr = NBYTES + ROW_PAD
    DATA: tl.constexpr = (STAGE_RED + 16 * NT + 127) // 128 * 128
    row = tl.minimum(t, STAGE_ROWS - 1)
    src = w_ptr + (n0 + row).to(tl.int64) * s_w
    dst = base + DATA + row * RS
    nb = t * 0 + NBYTES
    tl.debug_barrier()
    tl.inline_asm_elementwise(_ISSUE, "=r,r,r,r,l,r,r", [t, t * 0 + base, dst, src, nb, nb * STAGE_ROWS], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def stage_wait(base, parity, t0, deadline_ns, err_addr, rank, layer, launch_id, phase, NT: tl.constexpr):
    """Every thread until the buffer's copies of phase `parity` (0, 1, ...: one a window
    the launch has issued before) have landed, bounded by the launch's deadline."""
    t = tl.arange(0, NT)
    par = t * 0 + parity % 2
    bar = t * 0 + base
    done = tl.min(tl.inline_asm_elementwise(_TRY_WAIT, "=r,r,r", [bar, par], dtype=tl.int32, is_pure=False,
                                            pack=1), axis=0)
    while done == 0:
        waited = now_ns() - t0
        if waited > deadline_ns:
            fail(err_addr, rank, layer, launch_id, phase, waited)
            done = 1
        else:
            done = tl.min(tl.inline_asm_elementwise(_TRY_WAIT, "=r,r,r", [bar, par], dtype=tl.int32,
                                                    is_pure=False, pack=1), axis=0)


@triton.jit
def staged_dot(base, x_ptr, sxm, M, NBYTES: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               NT: tl.constexpr, U: tl.constexpr = 4):
    """[BM, BN] fp32 = x[:M, :K] @ staged^T over the staged tile's K = NBYTES / 2 columns
    (x bf16 [M, >= K], row stride sxm; M <= 8, BN = 16): warp w takes k16 steps w, w + NW,
    ..., U at a time; the warps' partials meet in the buffer and are summed in warp order."""
    tl.static_assert(BN == STAGE_ROWS)
    NW: tl.constexpr = NT // 32
    tl.static_assert(NW == 8)  # _SUM8
    NSTEP: tl.constexpr = NBYTES // 32
    tl.static_assert(NSTEP % (NW * U) == 0)
    RS: tl.constexpr = NBYTES + ROW_PAD
    DATA: tl.constexpr = (STAGE_RED + 16 * NT + 127) // 128 * 128
    t = tl.arange(0, NT)
    w = t // 32
    ln = t % 32
    g = ln // 4
    c = ln % 4
    XS: tl.constexpr = DATA + STAGE_ROWS * RS  # x's rows, NBYTES each
    # x[:M, :K] into the buffer first, 16 bytes a thread a pass (every element of x is read by
    # one warp once: from global memory that was a chain of L2 round trips a k-step)
    NCH: tl.constexpr = BM * NBYTES // 16
    for j in tl.static_range((NCH + NT - 1) // NT):
        ch = t + NT * j
        xr = ch // (NBYTES // 16)
        src = x_ptr + xr.to(tl.int64) * sxm + (ch % (NBYTES // 16)) * 8
        tl.inline_asm_elementwise(_COPY16, "=r,l,r,r", [src, base + XS + 16 * ch, ((ch < NCH) & (xr < M)).to(tl.int32)],
                                  dtype=tl.int32, is_pure=False, pack=1)
    tl.debug_barrier()
    a_addr = base + DATA + ((ln % 8) + 8 * ((ln // 8) % 2)) * RS + 16 * (ln // 16)
    x_addr = base + XS + tl.minimum(g, BM - 1) * NBYTES + 4 * c
    xok = (g < M).to(tl.int32)
    d0 = tl.zeros((NT,), tl.float32)
    d1, d2, d3 = d0, d0, d0
    for i in range(0, NSTEP // (NW * U)):
        for u in tl.static_range(U):
            k0 = (w + NW * (U * i + u)) * 16
            d0, d1, d2, d3 = tl.inline_asm_elementwise(
                _STEP, "=f,=f,=f,=f,f,f,f,f,r,r,r", [d0, d1, d2, d3, a_addr + 2 * k0, x_addr + 2 * k0, xok],
                dtype=(tl.float32,) * 4, is_pure=False, pack=1)
    tl.inline_asm_elementwise(_PUT, "=r,r,f,f,f,f", [base + STAGE_RED + 16 * t, d0, d1, d2, d3], dtype=tl.int32,
                              is_pure=False, pack=1)
    tl.debug_barrier()
    m = tl.arange(0, BM)[:, None]
    n = tl.arange(0, BN)[None, :]
    lane = 4 * (n % 8) + (m % 8) // 2
    addr = base + STAGE_RED + 16 * lane + 4 * (2 * (n // 8) + m % 2)
    part = tl.inline_asm_elementwise(_SUM8, "=f,r", [addr], dtype=tl.float32, is_pure=False, pack=1)
    return tl.where(m < M, part, 0.0)
