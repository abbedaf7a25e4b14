"""Design microbenchmark: K2's MXFP4 expert gate/up fed by Hopper's tensor copies (sm_90).

The twenty-eighth session's bulk ring (an mma_fp4 option then, XTB: `git show abd90e2`)
copied each weight row's chunk with its own 1-D bulk copy, 32 a warp a chunk, and lost to
the register loop: its time
fell with the bytes a copy carried (55 / 37 / 28.5 us for 64 / 128 / 256-byte copies at 1
row), so the copies' count, not the bytes in flight, bounded it. This variant asks the
same of a tensor map instead: one copy a 16-row tile (a [16 rows, 256 bytes] box, 4 KB) and
one for its scales ([16 rows, 16 bytes]), four a warp a chunk of four k-blocks, issued by
one lane. The decode and the mmas are mma_fp4's (the same order, so the same sums).

Each warp owns TB stages of [tile 0 | tile 1 weights, 4 KB each | tile 0 | tile 1 scales,
256 B each] and an mbarrier a stage; it waits on a stage's phase, decodes its four k-blocks
and refills it with the chunk TB ahead. The maps ([E, N, K/2] bytes and [E, N, K/32] scale
bytes, 3-D) are made on the host (cuTensorMapEncodeTiled) into device memory, which the
copies read by address.

Run from the repository root on the GPU: `python3 tools/device/fp4_tma_microbench.py`
(MB_ROWS=1,8: the row counts; the register loop and the cp.async ring are timed beside it,
warm and past L2). Results: docs/evidence/k2-sm90.md (twenty-eighth session)."""
import ctypes
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.getcwd())
from fp4_decode_microbench import _store_mma, fp4_mma  # noqa: E402
from gemv_microbench import copy_gbs, fp4_case  # noqa: E402

from sgl_k3_mono.k2.triton.mma_fp4 import (_RING_BASE, _RING_READ_IO, _RING_READ_T,  # noqa: E402
                                           RING_STAGE_BYTES_PER_THREAD, _kblock_mma, _words)
from sgl_k3_mono.runtime.triton_smem import reserve  # noqa: E402
from sgl_k3_mono.timing import graph_time_us  # noqa: E402

# a warp's mbarriers (lane 0 inits, arms and retires them), the bounded wait on a phase, and a
# k-block's reads from a stage (four rows a thread at a stride, their four scale words)
_TB_INIT = tl.constexpr("""{
.reg .pred p;
setp.ne.u32 p, $2, 0;
@p mbarrier.init.shared::cta.b64 [$1], 1;
mov.u32 $0, 0;
}""")

_TB_FENCE = tl.constexpr("fence.mbarrier_init.release.cluster; bar.warp.sync 0xffffffff; mov.u32 $0, 0;")

_TB_INVAL = tl.constexpr("""{
.reg .pred p;
setp.ne.u32 p, $2, 0;
@p mbarrier.inval.shared::cta.b64 [$1];
mov.u32 $0, 0;
}""")

# wait for the phase of parity $2 of the barrier at $1 to complete; a copy that never lands
# (a wrong byte count) traps after a second of %globaltimer instead of hanging the launch
_TB_WAIT = tl.constexpr("""{
.reg .pred p;
.reg .u64 t0, t1;
mov.u64 t0, %globaltimer;
TB_WAIT:
mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;
@p bra TB_DONE;
mov.u64 t1, %globaltimer;
sub.u64 t1, t1, t0;
setp.lt.u64 p, t1, 1000000000;
@p bra TB_WAIT;
trap;
TB_DONE:
mov.u32 $0, 0;
}""")

# a k-block's 16 weight words and 4 scale words from the warp's stage: lines g, 8 + g,
# 16 + g, 24 + g at $20 (weights, stride $22) and $21 (scales, stride $23)
_TB_READ = tl.constexpr("""{
.reg .u32 d, e;
ld.shared.v4.u32 {$0, $1, $2, $3}, [$20];
ld.shared.u32 $16, [$21];
add.u32 d, $20, $22; add.u32 e, $21, $23;
ld.shared.v4.u32 {$4, $5, $6, $7}, [d];
ld.shared.u32 $17, [e];
add.u32 d, d, $22; add.u32 e, e, $23;
ld.shared.v4.u32 {$8, $9, $10, $11}, [d];
ld.shared.u32 $18, [e];
add.u32 d, d, $22; add.u32 e, e, $23;
ld.shared.v4.u32 {$12, $13, $14, $15}, [d];
ld.shared.u32 $19, [e];
}""")


@triton.jit
def _tb_wait(bar, parity):
    return tl.inline_asm_elementwise(_TB_WAIT, "=r,r,r", [bar, parity], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _tb_read(wslot, sslot, wst, sst):
    return tl.inline_asm_elementwise(_TB_READ, _RING_READ_IO, [wslot, sslot, wst, sst], dtype=_RING_READ_T,
                                     is_pure=False, pack=1)


STAGE_BYTES = tl.constexpr(8704)
"""A warp's stage: two [16, 256 B] weight boxes and two [16, 16 B] scale boxes."""

# lane 0 ($9 != 0): expect the stage's bytes on barrier $1, then the two tiles' weight boxes
# (map $2, x = $4 bytes, rows $5 / $6 of expert $7) to $3 / $3 + 4096 and their scale boxes
# (map $2 + 128, x = $8) to $3 + 8192 / + 8448; $10: 0 to skip (past the last chunk)
_TMA_ISSUE = tl.constexpr("""{
.reg .pred p;
.reg .b64 st, sm;
.reg .u32 d;
and.b32 d, $9, $10;
setp.ne.u32 p, d, 0;
add.u64 sm, $2, 128;
@p mbarrier.arrive.expect_tx.shared::cta.b64 st, [$1], 8704;
@p cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$3], [$2, {$4, $5, $7}], [$1];
add.u32 d, $3, 4096;
@p cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [d], [$2, {$4, $6, $7}], [$1];
add.u32 d, $3, 8192;
@p cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [d], [sm, {$8, $5, $7}], [$1];
add.u32 d, $3, 8448;
@p cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [d], [sm, {$8, $6, $7}], [$1];
mov.u32 $0, 0;
}""")


@triton.jit
def _tma_issue(bar, tmap, dst, kx, row0, row1, e, ks, lane0, live):
    return tl.inline_asm_elementwise(_TMA_ISSUE, "=r,r,l,r,r,r,r,r,r,r,r",
                                     [bar, tmap, dst, kx, row0, row1, e, ks, lane0, live], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def tma_tiles(x_ptr, sxm, M, tmap, e, row0, row1, K, NT: tl.constexpr, TB: tl.constexpr, ring_off):
    """mma_fp4.mxfp4_mma_tiles' eight accumulators for the two 16-row tiles of each warp
    whose first rows (within expert e) are row0 / row1 ([NT], the warp's), the weights by
    tensor copies in chunks of four k-blocks (K % 512 == 0)."""
    t = tl.arange(0, NT)
    g = (t % 32) // 4
    c = t % 4
    lane0 = (t % 32 == 0).to(tl.int32)
    warp = t // 32
    NW: tl.constexpr = NT // 32
    nch = K // 512
    x_words = x_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    xq = x_words + tl.minimum(g, M - 1).to(tl.int64) * (sxm // 2) + c * 16
    base = tl.inline_asm_elementwise(_RING_BASE, "=r,r", [t], dtype=tl.int32, is_pure=True, pack=1) + ring_off
    bar0 = base + warp * (TB * 8)
    stage0 = base + (NW * TB * 8 + 127) // 128 * 128 + warp * STAGE_BYTES
    SST: tl.constexpr = NW * STAGE_BYTES
    ee = (t * 0 + e).to(tl.int32)
    for s in tl.static_range(TB):
        tl.inline_asm_elementwise(_TB_INIT, "=r,r,r", [bar0 + s * 8, lane0], dtype=tl.int32, is_pure=False, pack=1)
    tl.inline_asm_elementwise(_TB_FENCE, "=r,r", [t], dtype=tl.int32, is_pure=False, pack=1)
    for s in tl.static_range(TB):
        _tma_issue(bar0 + s * 8, tmap, stage0 + s * SST, t * 0 + s * 256, row0, row1, ee, t * 0 + s * 16, lane0,
                   (t * 0 + s < nch).to(tl.int32))
    c0 = tl.zeros((NT,), tl.float32)
    c1, c2, c3, c4, c5, c6, c7 = c0, c0, c0, c0, c0, c0, c0
    d0, d1, d2, d3, d4, d5, d6, d7 = c0, c0, c0, c0, c0, c0, c0, c0
    for j in tl.range(0, nch, num_stages=1):
        st = j % TB
        _tb_wait(bar0 + st * 8, (j // TB) & 1)
        at = stage0 + st * SST
        for u in tl.static_range(4):
            w = _tb_read(at + g * 256 + u * 64 + c * 16, at + 8192 + g * 16 + u * 4, 2048, 128)
            xk = xq + (j * 4 + u) * 64
            x0, x1, x2, x3 = _words(xk)
            x4, x5, x6, x7 = _words(xk + 4)
            x8, x9, x10, x11 = _words(xk + 8)
            x12, x13, x14, x15 = _words(xk + 12)
            v = (x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15,
                 w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14],
                 w[15], w[16], w[17], w[18], w[19])
            c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7 = _kblock_mma(
                v, c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7, c, True, RAW=True)
        # every lane past its reads of the stage before lane 0 refills it
        tl.inline_asm_elementwise("bar.warp.sync 0xffffffff; mov.u32 $0, 0;", "=r,r", [t], dtype=tl.int32,
                                  is_pure=False, pack=1)
        nx = j + TB
        _tma_issue(bar0 + st * 8, tmap, at, t * 0 + nx * 256, row0, row1, ee, t * 0 + nx * 16, lane0,
                   (t * 0 + nx < nch).to(tl.int32))
    tl.inline_asm_elementwise("bar.warp.sync 0xffffffff; mov.u32 $0, 0;", "=r,r", [t], dtype=tl.int32,
                              is_pure=False, pack=1)
    for s in tl.static_range(TB):
        tl.inline_asm_elementwise(_TB_INVAL, "=r,r,r", [bar0 + s * 8, lane0], dtype=tl.int32, is_pure=False, pack=1)
    return c0 + d0, c1 + d1, c2 + d2, c3 + d3, c4 + d4, c5 + d5, c6 + d6, c7 + d7


@triton.jit(do_not_specialize=["ring_off"])
def fp4_tma(x_ptr, tmap, out_ptr, n_e, R, N: tl.constexpr, K: tl.constexpr, NT: tl.constexpr, TB: tl.constexpr,
            ring_off=0):
    """out[e, :R] = x @ W_e^T, a program's warps sharing one item of NT rows (fp4_mma's PW 0)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    t = tl.arange(0, NT)
    g = (t % 32) // 4
    c = t % 4
    if n_e < 0:  # never runs: a cross-warp sum, so that Triton declares global_smem
        tl.store(out_ptr + t, tl.sum(t, 0) + t)
    for item in range(pid, n_e * (N // NT), nprog):
        e = item // (N // NT)
        tile0 = (item % (N // NT)) * NT + (t // 32) * 16
        acc = tma_tiles(x_ptr, K, R, tmap, e, tile0, tile0 + NT // 2, K, NT, TB, ring_off)
        _store_mma(out_ptr, acc, e.to(tl.int64), R, N, tile0 + g, tile0 + NT // 2 + g, c, t >= 0)


def tensor_map(t: torch.Tensor, box: tuple[int, int, int]) -> bytes:
    """A tiled tensor map of 3-D uint8 `t` ([E, N, B] bytes, rows and experts on 16-byte
    strides), box (bytes, rows, experts) innermost first, no swizzle, 256-byte L2 promotion."""
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int]
    raw = (ctypes.c_uint8 * 256)()
    at = (ctypes.addressof(raw) + 63) // 64 * 64  # CUtensorMap is 64-byte aligned
    dims = (ctypes.c_uint64 * 3)(t.shape[2], t.shape[1], t.shape[0])
    strides = (ctypes.c_uint64 * 2)(t.stride(1), t.stride(0))
    boxd = (ctypes.c_uint32 * 3)(*box)
    ones = (ctypes.c_uint32 * 3)(1, 1, 1)
    rc = fn(ctypes.c_void_p(at), 0, 3, ctypes.c_void_p(t.data_ptr()), dims, strides, boxd, ones, 0, 0, 3, 0)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {rc}")
    return bytes((ctypes.c_uint8 * 128).from_address(at))


def maps(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The weights' and the scales' maps, one after the other, in device memory."""
    host = tensor_map(w, (256, 16, 1)) + tensor_map(s, (16, 16, 1))
    return torch.frombuffer(bytearray(host), dtype=torch.uint8).to(w.device)


def main():
    dev = "cuda"
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = copy_gbs(dev)
    print(f"MB copy {bw:.0f} GB/s (read+write); frac: GB/s over half of it", flush=True)
    n_of = {1: 16, 2: 32, 4: 59, 8: 117}
    for R in [int(r) for r in os.environ.get("MB_ROWS", "1,8").split(",")]:
        N, K, n_e, nw = 768, 3584, n_of[R], 8
        _, w, s, x, _, ref = fp4_case(dev, N, K, n_e, R, scales=(110, 129))
        nbytes = w.numel() + s.numel()
        out = torch.empty(n_e, R, N, device=dev)
        copies = 8  # the cold sets: eight weight copies, past the 60 MB L2, each read from HBM
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        ss = [s] + [s.clone() for _ in range(copies - 1)]

        def line(name, f_one, f_cold):
            try:
                out.fill_(float("nan"))
                f_one()
                torch.cuda.synchronize()
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                us = graph_time_us(f_one, iters=20, reps=5)
                cold = graph_time_us(f_cold, iters=5, reps=5) / copies
                frac = lambda t: nbytes / t / 1e3 / (bw / 2)  # noqa: E731
                print(f"MB {name} R={R} E={n_e} us={us:7.1f} cold_us={cold:7.1f} frac={frac(us):.2f} "
                      f"cold_frac={frac(cold):.2f} relerr={err:.1e}", flush=True)
            except Exception as ex:  # noqa: BLE001 (printed; the sweep goes on)
                print(f"MB {name} R={R} FAILED {type(ex).__name__}: {str(ex)[:400]}", flush=True)

        base = dict(x_ptr=x, n_e=n_e, R=R, N=N, K=K, NT=32 * nw)
        reg = dict(base, KU=1, ST=1, PW=0)
        line("mma (register loop)", lambda: fp4_mma[(nsm,)](out_ptr=out, w_ptr=w, s_ptr=s, num_warps=nw, **reg),
             lambda: [fp4_mma[(nsm,)](out_ptr=out, w_ptr=a, s_ptr=b, num_warps=nw, **reg) for a, b in zip(ws, ss)])
        ring = dict(reg, RS=3)
        ck = fp4_mma.warmup(grid=(nsm,), out_ptr=out, w_ptr=w, s_ptr=s, num_warps=nw, ring_off=0, **ring)
        ring["ring_off"] = reserve(ck, 3 * 32 * nw * RING_STAGE_BYTES_PER_THREAD.value)
        line("ring RS=3", lambda: fp4_mma[(nsm,)](out_ptr=out, w_ptr=w, s_ptr=s, num_warps=nw, **ring),
             lambda: [fp4_mma[(nsm,)](out_ptr=out, w_ptr=a, s_ptr=b, num_warps=nw, **ring) for a, b in zip(ws, ss)])
        tms = [maps(a, b) for a, b in zip(ws, ss)]
        for tb in (2, 3, 4, 6):
            meta = dict(base, TB=tb)
            try:
                ck = fp4_tma.warmup(grid=(nsm,), tmap=tms[0], out_ptr=out, num_warps=nw, ring_off=0, **meta)
                meta["ring_off"] = reserve(ck, (nw * tb * 8 + 127) // 128 * 128 + tb * nw * STAGE_BYTES.value)
            except Exception as ex:  # noqa: BLE001
                print(f"MB tma TB={tb} R={R} FAILED {type(ex).__name__}: {str(ex)[:400]}", flush=True)
                continue
            line(f"tma TB={tb}", lambda: fp4_tma[(nsm,)](tmap=tms[0], out_ptr=out, num_warps=nw, **meta),
                 lambda: [fp4_tma[(nsm,)](tmap=m, out_ptr=out, num_warps=nw, **meta) for m in tms])
        del ws, ss, tms


if __name__ == "__main__":
    main()
