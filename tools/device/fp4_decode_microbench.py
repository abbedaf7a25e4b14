"""Design microbenchmark: cheaper MXFP4 decodes for K2's expert projections (sm_90).

The sixth session found the `tl.dot_scaled` experts issue-bound on the decode (about 9
PTX instructions a code). The variants here decode by bit placement instead: an e2m1 code
s|e1 e0|m placed at bf16 bits 15 and 8..6 reads as its value times 2^-126 (normals and
the one subnormal alike), so a decode is two shifts and two masks a code pair, and one
multiply by 2^(S-1) (S the ue8m0 byte; exact while S <= 128) applies the group scale.
The low nibbles (even k) and the high nibbles (odd k) decode to two bf16 planes, each
meeting the matching half of x (even / odd k) in its own dot, so no interleave is needed.

Variants (persistent grid, one program an SM; gate/up N 768 K 3584 and down N 3584 K 384
at a TP-8 rank; 16/32/59/117 experts at 1/2/4/8 rows):
  ds[fm]      tl.dot_scaled, weights the rhs (gemv_microbench.fp4_ds); fm: fast_math=True (K2 now)
  nib         bit-placement decode in Triton integer ops, weights the rhs
  nibasm      the same through packed PTX (bf16x2 scale multiply), weights the rhs
  nibasmT     packed PTX, weights the lhs (acc [BN, 16]: wgmma M = BN)
  mma         the weights decoded straight into mma.sync registers (k2/triton/mma_fp4.py;
              KU: 128-code blocks a loop step, ST: pipeline stages of the weight loads, PW:
              an item a warp)
Run from the repository root on the GPU: `python3 tools/device/fp4_decode_microbench.py`
(MB_ONLY=<substring>[|<substring>...] filters; MB_COLD=1 also times each mma and ring variant over
eight weight sets in one graph, past L2, so its weights come from HBM as in K2: the same
times as the warm ones, sixteenth session). Results (docs/evidence/k2-sm90.md):
seventh session: fast_math takes 22-23 % of the time off gate/up and 13-20 % off down,
and went into K2; the bit-placement planes lose to dot_scaled (weights the rhs: Triton
gives the K/2 dots mma.sync, not wgmma; weights the lhs: wgmma, but the decoded planes go
through shared memory). Eighth session: `mma` (the same bit placement, but decoded in the
mma.sync operand registers themselves) beats dot_scaled fast_math at every shape, 1.5x
on gate/up and 1.7x on down at 8 rows with 8 warps, plain loads (ST=1) and an item a
program (1.6x / 1.9x with 16 warps); it went into K2."""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemv_microbench import _measure, copy_gbs, fp4_case, fp4_ds, store_rows, wanted  # noqa: E402

sys.path.insert(0, os.getcwd())
from sgl_k3_mono.k2.triton.mma_fp4 import RING_STAGE_BYTES_PER_THREAD, mxfp4_mma_tiles  # noqa: E402
from sgl_k3_mono.runtime.triton_smem import reserve  # noqa: E402

# 4 bytes (8 codes) in $4, scales of elements 0..3 in $5/$6 (bf16x2); lo plane -> $0/$1,
# hi plane -> $2/$3, element i of each plane from byte i. Bytes 0/2 (and 1/3) already sit
# 16 bits apart, i.e. in bf16x2 lanes; prmt restores element order at the end.
_NIB_PTX = tl.constexpr("""{
.reg .b32 o, a, c, le, lo, he, ho;
shr.b32 o, $4, 8;
shl.b32 a, $4, 6; and.b32 a, a, 0x01C001C0; shl.b32 c, $4, 12; lop3.b32 le, a, c, 0x80008000, 0xF8;
shl.b32 a, o, 6; and.b32 a, a, 0x01C001C0; shl.b32 c, o, 12; lop3.b32 lo, a, c, 0x80008000, 0xF8;
shl.b32 a, $4, 2; and.b32 a, a, 0x01C001C0; shl.b32 c, $4, 8; lop3.b32 he, a, c, 0x80008000, 0xF8;
shl.b32 a, o, 2; and.b32 a, a, 0x01C001C0; shl.b32 c, o, 8; lop3.b32 ho, a, c, 0x80008000, 0xF8;
prmt.b32 $0, le, lo, 0x5410; prmt.b32 $1, le, lo, 0x7632;
prmt.b32 $2, he, ho, 0x5410; prmt.b32 $3, he, ho, 0x7632;
mul.rn.bf16x2 $0, $0, $5; mul.rn.bf16x2 $1, $1, $6;
mul.rn.bf16x2 $2, $2, $5; mul.rn.bf16x2 $3, $3, $6;
}""")


@triton.jit
def _nib_planes(w, sc, ASM: tl.constexpr):
    """(lo, hi) bf16 planes of the byte tile w scaled by sc (bf16 2^(S-1), broadcastable)."""
    if ASM:
        lo, hi = tl.inline_asm_elementwise(_NIB_PTX, "=r,=r,=r,=r,r,r,r", [w, sc],
                                           dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    else:
        b = w.to(tl.int32)
        lo = (((b & 7) << 6) | ((b & 8) << 12)).to(tl.int16).to(tl.bfloat16, bitcast=True) * sc
        hi = (((b & 0x70) << 2) | ((b & 0x80) << 8)).to(tl.int16).to(tl.bfloat16, bitcast=True) * sc
    return lo, hi


@triton.jit
def fp4_nib(x_ptr, w_ptr, s_ptr, out_ptr, n_e, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
            BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, ASM: tl.constexpr,
            SWAP: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    G: tl.constexpr = BK // 32
    BKH: tl.constexpr = BK // 2
    nn = tl.arange(0, BN)[:, None, None]
    gg = tl.arange(0, G)[None, :, None]
    jj = tl.arange(0, 16)[None, None, :]
    xr = tl.arange(0, 16)[:, None, None]
    xk = tl.arange(0, BKH)[None, :, None]
    xt = tl.arange(0, 2)[None, None, :]
    for item in range(pid, n_e * (N // BN), nprog):
        e = (item // (N // BN)).to(tl.int64)
        n0 = (item % (N // BN)) * BN
        acc = tl.zeros((BN, 16) if SWAP else (16, BN), tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            w = tl.load(w_ptr + e * N * (K // 2) + (n0 + nn) * (K // 2) + k0 // 2 + gg * 16 + jj)
            sb = tl.load(s_ptr + e * N * (K // 32) + (n0 + nn) * (K // 32) + k0 // 32 + gg)
            sc = ((sb.to(tl.int32) + 126) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
            lo, hi = _nib_planes(w, sc, ASM)
            lo = tl.reshape(lo, (BN, BKH))
            hi = tl.reshape(hi, (BN, BKH))
            xv = tl.load(x_ptr + xr * K + k0 + 2 * xk + xt, mask=xr < R, other=0.0)
            xe, xo = tl.split(xv)
            if SWAP:
                acc = tl.dot(lo, tl.trans(xe), acc)
                acc = tl.dot(hi, tl.trans(xo), acc)
            else:
                acc = tl.dot(xe, tl.trans(lo), acc)
                acc = tl.dot(xo, tl.trans(hi), acc)
        store_rows(out_ptr, acc, e, R, N, n0, BN, SWAP)


@triton.jit
def _store_mma(out_ptr, acc, e, R, N: tl.constexpr, r0, r1, c, ok):
    """out[e, x row, weight row] from mxfp4_mma_tiles' eight per-thread values (rows r0 /
    r0 + 8 of tile 0, r1 / r1 + 8 of tile 1; x rows 2c, 2c + 1)."""
    for tile in tl.static_range(2):
        o = out_ptr + (e * R + 2 * c) * N + (r1 if tile else r0)
        tl.store(o, acc[4 * tile], mask=ok & (2 * c < R))
        tl.store(o + N, acc[4 * tile + 1], mask=ok & (2 * c + 1 < R))
        tl.store(o + 8, acc[4 * tile + 2], mask=ok & (2 * c < R))
        tl.store(o + N + 8, acc[4 * tile + 3], mask=ok & (2 * c + 1 < R))


@triton.jit(do_not_specialize=["ring_off"])
def fp4_mma(x_ptr, w_ptr, s_ptr, out_ptr, n_e, R, N: tl.constexpr, K: tl.constexpr,
            KU: tl.constexpr, ST: tl.constexpr, NT: tl.constexpr, PW: tl.constexpr, RS: tl.constexpr = 0,
            ring_off=0):
    """out[e, :R] = x @ W_e^T through mma_fp4.mxfp4_mma_tiles, 32 rows a warp. PW: each warp
    takes its own item (expert, 32 rows); else a program's warps share one (NT rows). RS:
    mma_fp4's shared-memory ring of RS stages at ring_off (0: plain loads into registers)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    t = tl.arange(0, NT)
    g = (t % 32) // 4
    c = t % 4
    NW: tl.constexpr = NT // 32
    if RS > 0 and n_e < 0:  # never runs: a cross-warp sum, so that Triton declares global_smem for the ring
        tl.store(out_ptr + t, tl.sum(t, 0) + t)
    if PW:
        for it in range(pid * NW, n_e * (N // 32), nprog * NW):
            wi = it + t // 32
            ok = wi < n_e * (N // 32)
            wi = tl.minimum(wi, n_e * (N // 32) - 1)  # the tail warps repeat the last item, unstored
            e = (wi // (N // 32)).to(tl.int64)
            r0 = (wi % (N // 32)) * 32 + g
            acc = mxfp4_mma_tiles(x_ptr, K, R, w_ptr + e * N * (K // 2), K // 2, s_ptr + e * N * (K // 32), K // 32,
                                  r0, r0 + 16, K, NT, KU, ST, 0, 0, RS, ring_off)
            _store_mma(out_ptr, acc, e, R, N, r0, r0 + 16, c, ok)
    else:
        for item in range(pid, n_e * (N // NT), nprog):
            e = (item // (N // NT)).to(tl.int64)
            r0 = (item % (N // NT)) * NT + (t // 32) * 16 + g
            acc = mxfp4_mma_tiles(x_ptr, K, R, w_ptr + e * N * (K // 2), K // 2, s_ptr + e * N * (K // 32), K // 32,
                                  r0, r0 + NT // 2, K, NT, KU, ST, 0, 0, RS, ring_off)
            _store_mma(out_ptr, acc, e, R, N, r0, r0 + NT // 2, c, t >= 0)


MMA_TILES = [(nw, ku, st, pw) for nw in (4, 8, 16) for ku in (1, 2, 4) for st in (1, 2) for pw in (0, 1)]
# mma_fp4's shared-memory ring (fifteenth session): warps, stages, an item a warp
RING_TILES = [(nw, rs, pw) for nw in (4, 8, 16) for rs in (2, 3, 4) for pw in (0, 1)]


def main():
    dev = "cuda"
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = copy_gbs(dev)
    print(f"MB copy {bw:.0f} GB/s (read+write); read-rate columns: GBs / 4260", flush=True)
    rows = [int(r) for r in os.environ.get("MB_ROWS", "1,2,4,8").split(",")]
    n_of = {1: 16, 2: 32, 4: 59, 8: 117}
    cases = [(768, 3584, n_of[r], r) for r in rows] + [(3584, 384, n_of[r], r) for r in rows]
    for N, K, n_e, R in cases:
        # scales up to 128: the bit-placement variants multiply by 2^(S-1), finite while S <= 128
        _, w, s, x, x16, ref = fp4_case(dev, N, K, n_e, R, scales=(110, 129))
        nbytes = w.numel() + s.numel()
        out = torch.empty(n_e, R, N, device=dev)

        def go(name, fn, **meta):
            _measure(f"fp4 {name} N={N} K={K} E={n_e} R={R}", fn, out, lambda: out, ref, nbytes, nsm, bw, **meta)

        def cold(name, nw, meta, copies=8):
            # the same launch over `copies` weight sets in turn, one graph: the sets together pass
            # L2 (60 MB), so every launch reads its weights from HBM, as K2 does
            from sgl_k3_mono.timing import graph_time_us

            ws = [w] + [w.clone() for _ in range(copies - 1)]
            ss = [s] + [s.clone() for _ in range(copies - 1)]
            run = dict(meta)

            def f():
                for wc, sc in zip(ws, ss):
                    run.update(w_ptr=wc, s_ptr=sc)
                    fp4_mma[(nsm,)](out_ptr=out, num_warps=nw, **run)
            f()
            us = graph_time_us(f, iters=5, reps=5) / copies
            print(f"MB fp4 {name} N={N} K={K} E={n_e} R={R} COLD us={us:8.1f} GBs={nbytes / us / 1e3:7.0f} "
                  f"frac={nbytes / us / 1e3 / (bw / 2):.2f}", flush=True)
            del ws, ss

        bk0 = 256 if K >= 1024 else 128
        bn0 = 64 if K >= 1024 else 128
        for fast in (False, True):
            go(f"ds{'fm' if fast else ''} BN={bn0} BK={bk0}", fp4_ds, x_ptr=x16, w_ptr=w, s_ptr=s, n_e=n_e, R=R,
               N=N, K=K, BN=bn0, BK=bk0, STAGES=3, SWAP=False, FAST=fast, num_warps=4)
        for nw, ku, st, pw in MMA_TILES:
            if K % (128 * ku) == 0 and (pw or N % (32 * nw) == 0):
                meta = dict(x_ptr=x, w_ptr=w, s_ptr=s, n_e=n_e, R=R, N=N, K=K, KU=ku, ST=st, NT=32 * nw, PW=pw)
                name = f"mma nw={nw} KU={ku} ST={st} PW={pw}"
                go(name, fp4_mma, num_warps=nw, **meta)
                if os.environ.get("MB_COLD") == "1" and wanted(f"fp4 {name}"):
                    cold(name, nw, meta)
        for nw, rs, pw in RING_TILES:
            if pw or N % (32 * nw) == 0:
                meta = dict(x_ptr=x, w_ptr=w, s_ptr=s, n_e=n_e, R=R, N=N, K=K, KU=1, ST=1, NT=32 * nw, PW=pw, RS=rs)
                name = f"ring nw={nw} RS={rs} PW={pw}"
                if not wanted(f"fp4 {name}"):
                    continue
                try:
                    ck = fp4_mma.warmup(grid=(nsm,), out_ptr=out, num_warps=nw, ring_off=0, **meta)
                    meta["ring_off"] = reserve(ck, rs * 32 * nw * RING_STAGE_BYTES_PER_THREAD.value)
                except Exception as ex:  # noqa: BLE001 (printed; the sweep goes on)
                    print(f"MB fp4 {name} N={N} FAILED {type(ex).__name__}: {str(ex)[:300]}", flush=True)
                    continue
                go(name, fp4_mma, num_warps=nw, **meta)
                if os.environ.get("MB_COLD") == "1":
                    cold(name, nw, meta)
        for asm, swap, tag in ((False, False, "nib"), (True, False, "nibasm"), (True, True, "nibasmT")):
            for bn, bk, st, nw in ((64, 256, 3, 4), (128, 128, 3, 4), (128, 256, 3, 8)):
                if bk <= K and K % bk == 0:
                    go(f"{tag} BN={bn} BK={bk} st={st} nw={nw}", fp4_nib, x_ptr=x16, w_ptr=w, s_ptr=s, n_e=n_e,
                       R=R, N=N, K=K, BN=bn, BK=bk, STAGES=st, ASM=asm, SWAP=swap, num_warps=nw)


if __name__ == "__main__":
    main()
