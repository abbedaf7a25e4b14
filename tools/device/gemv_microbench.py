"""Design microbenchmark for K2's projections on one GPU (persistent grid = one program
an SM, like K2): the MXFP4 experts' gate/up at a TP-8 rank's shapes (N 768, K 3584;
16 experts x 1 row, 59 x 4, 117 x 8) and a dense bf16 front (N 5504, K 7168), each
formulation against an fp32 torch reference. One line a variant:
`MB <fp4|dense> <variant> ... us=<graph-replay median> GBs=<weight bytes / us>`.

Variants: `cur` = K2's FMA GEMV helpers; `words` = MXFP4 read as int32 words with x
stored planar, FMAs; `tc` = the same words on the tensor cores, one code plane a dot
(K2's path until the sixth session); `ds swap|noswap` = `tl.dot_scaled` over the weights as SGLang stores them, the
weights the lhs or the rhs (noswap is what K2 runs now); `k2dot` / `k2up` = K2's own
helper (masks, runtime strides, experts through a table) and K2's gate/up item shape;
dense `cur` (GEMV), `split` (FMAs with an in-thread K split) and `tc` (tl.dot with rows
padded to 16). MB_SWEEP=ds: the dot_scaled tile sweep; MB_SWEEP=k2: the K2 bisect;
MB_DENSE=0 skips the dense shapes.

Run on the GPU from the repository root: `python3 tools/device/gemv_microbench.py`
(MB_ONLY=<substring>[|<substring>...] to run only matching variants). The `frac` column divides by half
the D2D copy rate measured here, which undercounts the read bandwidth (K2's bench
measures 4.26 TB/s reads): read GBs against 4260 instead.
Results: docs/evidence/logs/gemv-microbench-2026-11-30.log, logs/s6-*-microbench*,
s6-dot-scaled-*, s6-k2-helper-bisect-*."""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from sgl_k3_mono.k2.triton.matmul import dot_mxfp4_scaled, gemv_bf16, gemv_mxfp4  # noqa: E402


# ---------------------------------------------------------------- FP4 experts (gate|up)
@triton.jit
def fp4_cur(x_ptr, w_ptr, s_ptr, out_ptr, n_e, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
            BN: tl.constexpr, BKH: tl.constexpr, STAGES: tl.constexpr, MX4D: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rows = tl.arange(0, R)
    for item in range(pid, n_e * (N // BN), nprog):
        e = (item // (N // BN)).to(tl.int64)
        n0 = (item % (N // BN)) * BN
        y = gemv_mxfp4(x_ptr, K, rows, rows < R, w_ptr + e * N * (K // 2), K // 2, s_ptr + e * N * (K // 32),
                       K // 32, n0, N, K, R, BN, BKH, STAGES, MX4D)
        tl.store(out_ptr + (e * R + rows[:, None]) * N + n0 + tl.arange(0, BN)[None, :], y)


@triton.jit
def _dec_plane(w, p: tl.constexpr):
    t = w >> (4 * p)
    h = (((t & 7) << 9) | ((t & 8) << 12)).to(tl.int16).to(tl.float16, bitcast=True)
    return h.to(tl.float32)


@triton.jit
def fp4_words(xp_ptr, w_ptr, s_ptr, out_ptr, n_e, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
              BN: tl.constexpr, G: tl.constexpr, STAGES: tl.constexpr):
    """w as int32 words [N, K/8] (8 codes a word); x planar xp[r, p, j] = x[r, 8j+p];
    tile [BN, G groups, 4 words] (a group = 32 codes = one scale)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    KW: tl.constexpr = K // 8
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    n3 = tl.arange(0, BN)[:, None, None]
    g3 = tl.arange(0, G)[None, :, None]
    q3 = tl.arange(0, 4)[None, None, :]
    r4 = tl.arange(0, R)[:, None, None, None]
    for item in range(pid, n_e * (N // BN), nprog):
        e = (item // (N // BN)).to(tl.int64)
        n0 = (item % (N // BN)) * BN
        acc = tl.zeros((R, BN, G), tl.float32)
        for j0 in tl.range(0, KW, 4 * G, num_stages=STAGES):
            w = tl.load(wp + e * N * KW + (n0 + n3) * KW + j0 + g3 * 4 + q3)
            sc = tl.load(s_ptr + e * N * (K // 32) + (n0 + n3) * (K // 32) + j0 // 4 + g3).to(tl.int32)
            scale = ((sc + 14) << 23).to(tl.float32, bitcast=True)
            part = tl.zeros((R, BN, G, 4), tl.float32)
            for p in tl.static_range(8):
                v = _dec_plane(w, p)
                xv = tl.load(xp_ptr + r4 * K + p * KW + j0 + g3[None] * 4 + q3[None]).to(tl.float32)
                part += xv * v[None]
            acc += tl.sum(part, axis=3) * tl.reshape(scale, (BN, G))[None]
        y = tl.sum(acc, axis=2)
        rr = tl.arange(0, R)[:, None]
        tl.store(out_ptr + (e * R + rr) * N + n0 + tl.arange(0, BN)[None, :], y)


@triton.jit
def fp4_tc(xp_ptr, w_ptr, s_ptr, out_ptr, n_e, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
           BN: tl.constexpr, BW: tl.constexpr, STAGES: tl.constexpr):
    """Tensor cores over planes: acc[16, BN] += xp_p[16, BW] @ dec(w >> 4p)[BN, BW]^T, bf16."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    KW: tl.constexpr = K // 8
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    n2 = tl.arange(0, BN)[:, None]
    j2 = tl.arange(0, BW)[None, :]
    r2 = tl.arange(0, 16)[:, None]
    for item in range(pid, n_e * (N // BN), nprog):
        e = (item // (N // BN)).to(tl.int64)
        n0 = (item % (N // BN)) * BN
        acc = tl.zeros((16, BN), tl.float32)
        for j0 in tl.range(0, KW, BW, num_stages=STAGES):
            w = tl.load(wp + e * N * KW + (n0 + n2) * KW + j0 + j2)
            sc = tl.load(s_ptr + e * N * (K // 32) + (n0 + n2) * (K // 32) + (j0 + j2) // 4).to(tl.int32)
            scale = ((sc + 14) << 23).to(tl.float32, bitcast=True)
            for p in tl.static_range(8):
                v = (_dec_plane(w, p) * scale).to(tl.bfloat16)
                xv = tl.load(xp_ptr + r2 * K + p * KW + j0 + j2, mask=r2 < R, other=0.0)
                acc = tl.dot(xv, tl.trans(v), acc)
        rr = tl.arange(0, 16)[:, None]
        tl.store(out_ptr + (e * R + rr) * N + n0 + tl.arange(0, BN)[None, :], acc, mask=rr < R)


@triton.jit
def store_rows(out_ptr, acc, e, R: tl.constexpr, N: tl.constexpr, n0, BN: tl.constexpr, SWAP: tl.constexpr):
    """out[e, :R, n0:n0+BN] = the R live rows of acc ([BN, 16] if SWAP, else [16, BN])."""
    if SWAP:
        rr = tl.arange(0, 16)[None, :]
        tl.store(out_ptr + (e * R + rr) * N + n0 + tl.arange(0, BN)[:, None], acc, mask=rr < R)
    else:
        rr = tl.arange(0, 16)[:, None]
        tl.store(out_ptr + (e * R + rr) * N + n0 + tl.arange(0, BN)[None, :], acc, mask=rr < R)


@triton.jit
def fp4_ds(x_ptr, w_ptr, s_ptr, out_ptr, n_e, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
           BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, SWAP: tl.constexpr,
           FAST: tl.constexpr = False):
    """tl.dot_scaled over the weights as SGLang stores them (bytes [N, K/2], ue8m0 scales
    [N, K/32]) and x as it is: SWAP: acc[BN, 16] = W[BN, BK] @ x^T (weights the lhs), else
    acc[16, BN] = x @ W^T (weights the rhs). Triton decomposes it on sm_90 (no FP4 unit).
    FAST: fast_math (no NaN-scale select)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    BKH: tl.constexpr = BK // 2
    n2 = tl.arange(0, BN)[:, None]
    for item in range(pid, n_e * (N // BN), nprog):
        e = (item // (N // BN)).to(tl.int64)
        n0 = (item % (N // BN)) * BN
        acc = tl.zeros((BN, 16) if SWAP else (16, BN), tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            w = tl.load(w_ptr + e * N * (K // 2) + (n0 + n2) * (K // 2) + k0 // 2 + tl.arange(0, BKH)[None, :])
            sc = tl.load(s_ptr + e * N * (K // 32) + (n0 + n2) * (K // 32) + k0 // 32
                         + tl.arange(0, BK // 32)[None, :])
            if SWAP:
                kk = k0 + tl.arange(0, BK)[:, None]
                rr = tl.arange(0, 16)[None, :]
                xt = tl.load(x_ptr + rr * K + kk, mask=rr < R, other=0.0)
                acc = tl.dot_scaled(w, sc, "e2m1", xt, None, "bf16", acc, fast_math=FAST)
            else:
                rr = tl.arange(0, 16)[:, None]
                kk = k0 + tl.arange(0, BK)[None, :]
                xv = tl.load(x_ptr + rr * K + kk, mask=rr < R, other=0.0)
                acc = tl.dot_scaled(xv, None, "bf16", tl.trans(w), sc, "e2m1", acc, fast_math=FAST)
        store_rows(out_ptr, acc, e, R, N, n0, BN, SWAP)


@triton.jit
def fp4_k2dot(x_ptr, w_ptr, s_ptr, out_ptr, eid_ptr, n_e, R, sw_e, sw_n, ss_e, ss_n, N: tl.constexpr,
              K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, SA: tl.constexpr,
              UP: tl.constexpr):
    """K2's own helper (dot_mxfp4_scaled: masks, runtime rows and strides) over experts picked
    through a table (eid) like routing does. UP: K2's gate/up item (two BN-row dots, rows n0
    and N/2 + n0, then SiTU), else one dot over BN rows."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    NT: tl.constexpr = N // BN // (2 if UP else 1)
    for item in range(pid, n_e * NT, nprog):
        n = item // NT
        e = tl.load(eid_ptr + n).to(tl.int64)
        n0 = (item % NT) * BN
        acc = tl.zeros((16, BN), tl.float32)
        acc = dot_mxfp4_scaled(x_ptr, K, R, w_ptr + e * sw_e, sw_n, s_ptr + e * ss_e, ss_n, n0, N, K, acc,
                               16, BN, BK, STAGES, SA)
        rr = tl.arange(0, 16)[:, None]
        if UP:
            u = tl.zeros((16, BN), tl.float32)
            u = dot_mxfp4_scaled(x_ptr, K, R, w_ptr + e * sw_e + (N // 2) * sw_n, sw_n,
                                 s_ptr + e * ss_e + (N // 2) * ss_n, ss_n, n0, N, K, u, 16, BN, BK, STAGES, SA)
            acc = acc * tl.sigmoid(acc) * u
        tl.store(out_ptr + (n * R + rr) * N + n0 + tl.arange(0, BN)[None, :], acc, mask=rr < R)


# ---------------------------------------------------------------- dense bf16
@triton.jit
def bf16_cur(x_ptr, w_ptr, out_ptr, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
             BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rows = tl.arange(0, R)
    for t in range(pid, N // BN, nprog):
        y = gemv_bf16(x_ptr, K, rows, rows < R, w_ptr, K, t * BN, N, K, R, BN, BK, STAGES)
        tl.store(out_ptr + rows[:, None] * N + t * BN + tl.arange(0, BN)[None, :], y)


@triton.jit
def bf16_tc(x_ptr, w_ptr, out_ptr, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
            BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rm = tl.arange(0, 16)
    for t in range(pid, N // BN, nprog):
        rn = t * BN + tl.arange(0, BN)
        acc = tl.zeros((16, BN), tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            rk = k0 + tl.arange(0, BK)
            x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < R, other=0.0)
            w = tl.load(w_ptr + rn[:, None] * K + rk[None, :])
            acc = tl.dot(x, tl.trans(w), acc)
        tl.store(out_ptr + rm[:, None] * N + t * BN + tl.arange(0, BN)[None, :], acc, mask=rm[:, None] < R)


@triton.jit
def bf16_split(x_ptr, w_ptr, out_ptr, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """CUDA cores, [R, BN, BK/4... ]: part [R, BN, 8] reduced in-thread each step (K split in
    chunks of 8 contiguous bf16 = one 16 B vector a thread)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    G: tl.constexpr = BK // 8
    n3 = tl.arange(0, BN)[:, None, None]
    g3 = tl.arange(0, G)[None, :, None]
    q3 = tl.arange(0, 8)[None, None, :]
    r4 = tl.arange(0, R)[:, None, None, None]
    for t in range(pid, N // BN, nprog):
        acc = tl.zeros((R, BN, G), tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            w = tl.load(w_ptr + (t * BN + n3) * K + k0 + g3 * 8 + q3).to(tl.float32)
            xv = tl.load(x_ptr + r4 * K + k0 + g3[None] * 8 + q3[None]).to(tl.float32)
            acc += tl.sum(xv * w[None], axis=3)
        y = tl.sum(acc, axis=2)
        rr = tl.arange(0, R)[:, None]
        tl.store(out_ptr + rr * N + t * BN + tl.arange(0, BN)[None, :], y)


def wanted(label: str) -> bool:
    """MB_ONLY's filter: the label holds one of its |-separated substrings (unset: all)."""
    return any(part in label for part in os.environ.get("MB_ONLY", "").split("|"))


def _measure(label: str, fn, out, got, ref, nbytes: int, nsm: int, bw: float, **meta) -> None:
    """Poison `out`, run `fn` once on the persistent grid, check `got()` against `ref`, then
    time graph replays and print one `MB` line (a compile or launch failure is printed)."""
    from sgl_k3_mono.timing import graph_time_us

    if not wanted(label):
        return
    try:
        out.fill_(float("nan"))
        f = lambda: fn[(nsm,)](out_ptr=out, **meta)  # noqa: E731
        f()
        torch.cuda.synchronize()
        err = (got() - ref).abs().max().item() / ref.abs().max().item()
        us = graph_time_us(f, iters=20, reps=5)
        print(f"MB {label} us={us:8.1f} GBs={nbytes / us / 1e3:7.0f} frac={nbytes / us / 1e3 / (bw / 2):.2f} "
              f"relerr={err:.1e}", flush=True)
    except Exception as ex:
        print(f"MB {label} FAILED {type(ex).__name__}: {str(ex)[:200]}", flush=True)


def copy_gbs(dev: str) -> float:
    """Device-to-device copy rate of 1 GiB, GB/s of reads plus writes."""
    from sgl_k3_mono.timing import graph_time_us

    big = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
    cp_us = graph_time_us(lambda: big[: 1 << 30].copy_(big[1 << 30:]), iters=10)
    return 2 * (1 << 30) / cp_us / 1e3


def fp4_case(dev: str, N: int, K: int, n_e: int, R: int, *, scales: tuple[int, int]):
    """n_e random MXFP4 experts [N, K] (bytes, ue8m0 scale bytes drawn from [lo, hi)) and R
    bf16 rows x (also padded to 16): (generator, w, s, x, x16, fp32 reference [n_e, R, N])."""
    g = torch.Generator(device=dev).manual_seed(n_e)
    w = torch.randint(0, 256, (n_e, N, K // 2), dtype=torch.uint8, device=dev, generator=g)
    s = torch.randint(*scales, (n_e, N, K // 32), dtype=torch.uint8, device=dev, generator=g)
    x = torch.randn(R, K, device=dev, generator=g).bfloat16()
    x16 = torch.zeros(16, K, dtype=torch.bfloat16, device=dev)
    x16[:R] = x
    lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6], device=dev)
    wf = torch.stack([lut[(w & 15).long()], lut[(w >> 4).long()]], -1).reshape(n_e, N, K)
    wf = wf * torch.exp2(s.float() - 127).repeat_interleave(32, -1)
    return g, w, s, x, x16, torch.einsum("rk,enk->ern", x.float(), wf)


def main():

    dev = "cuda"
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = copy_gbs(dev)
    print(f"MB copy {bw:.0f} GB/s (read+write)")
    # -- FP4 experts at a TP-8 rank: up (N = 2*384, K = 3584) and down (N = 3584, K = 384)
    cases = [(768, 3584, n_e, R) for n_e, R in ((16, 1), (32, 2), (59, 4), (117, 8))]
    cases += [(3584, 384, n_e, R) for n_e, R in ((16, 1), (32, 2), (59, 4), (117, 8))]
    for N, K, n_e, R in cases:
        g, w, s, x, x16, ref = fp4_case(dev, N, K, n_e, R, scales=(118, 128))
        xp = x.view(R, K // 8, 8).permute(0, 2, 1).contiguous()  # [R, 8, K/8]
        xp16 = torch.zeros(16, 8, K // 8, dtype=torch.bfloat16, device=dev)
        xp16[:R] = xp
        nbytes = w.numel() + s.numel()
        out = torch.empty(n_e, R, N, device=dev)

        def go(name, fn, **meta):
            _measure(f"fp4 {name} N={N} K={K} E={n_e} R={R}", fn, out, lambda: out, ref, nbytes, nsm, bw, **meta)

        if os.environ.get("MB_SWEEP") == "k2":  # bisect K2's expert phases against fp4_ds
            bk = 256 if K >= 1024 else 128
            bn = 64 if K >= 1024 else 128
            go(f"ds noswap BN={bn} BK={bk}", fp4_ds, x_ptr=x16, w_ptr=w, s_ptr=s, n_e=n_e, R=R, N=N, K=K,
               BN=bn, BK=bk, STAGES=3, SWAP=False, num_warps=4)
            big_w = torch.empty(896, N, K // 2, dtype=torch.uint8, device=dev)
            big_s = torch.empty(896, N, K // 32, dtype=torch.uint8, device=dev)
            eid = torch.randperm(896, device=dev, generator=g)[:n_e].to(torch.int32)
            big_w[eid.long()] = w
            big_s[eid.long()] = s
            for sa in (16, 1):
                go(f"k2dot SA={sa} BN={bn} BK={bk}", fp4_k2dot, x_ptr=x16, w_ptr=big_w, s_ptr=big_s, eid_ptr=eid,
                   n_e=n_e, R=R, sw_e=big_w.stride(0), sw_n=big_w.stride(1), ss_e=big_s.stride(0),
                   ss_n=big_s.stride(1), N=N, K=K, BN=bn, BK=bk, STAGES=3, SA=sa, UP=False, num_warps=4)
            if K >= 1024:
                out.fill_(0)
                print("MB (k2up: relerr is against the plain product, not gated)", flush=True)
                go(f"k2up BN=64 BK={bk}", fp4_k2dot, x_ptr=x16, w_ptr=big_w, s_ptr=big_s, eid_ptr=eid,
                   n_e=n_e, R=R, sw_e=big_w.stride(0), sw_n=big_w.stride(1), ss_e=big_s.stride(0),
                   ss_n=big_s.stride(1), N=N, K=K, BN=64, BK=bk, STAGES=3, SA=16, UP=True, num_warps=4)
            del big_w, big_s
            continue
        if os.environ.get("MB_SWEEP") == "ds":  # dot_scaled, weights the rhs: tile sweep
            for bn, bk, st, nw in ((64, 256, 3, 4), (64, 128, 3, 4), (64, 128, 4, 4), (32, 256, 3, 4),
                                   (32, 128, 4, 4), (128, 128, 3, 4), (128, 256, 2, 8), (64, 256, 3, 8),
                                   (128, 128, 3, 8), (32, 512, 2, 4), (64, 512, 2, 4), (16, 256, 3, 4)):
                if K % bk == 0:
                    go(f"ds noswap BN={bn} BK={bk} st={st} nw={nw}", fp4_ds, x_ptr=x16, w_ptr=w, s_ptr=s,
                       n_e=n_e, R=R, N=N, K=K, BN=bn, BK=bk, STAGES=st, SWAP=False, num_warps=nw)
            continue
        if R <= 2:
            bkh = min(K // 2, 256 if R == 1 else 128)
            go(f"cur BN=16 BKH={bkh} nw8", fp4_cur, x_ptr=x, w_ptr=w, s_ptr=s,
               n_e=n_e, R=R, N=N, K=K, BN=16, BKH=bkh, STAGES=3, MX4D=1, num_warps=8)
        for bn, bw_, st, nw in ((64, 32, 3, 4), (64, 16, 3, 4)):
            if 8 * bw_ <= K:
                go(f"tc BN={bn} BW={bw_} st={st} nw={nw}", fp4_tc, xp_ptr=xp16, w_ptr=w, s_ptr=s,
                   n_e=n_e, R=R, N=N, K=K, BN=bn, BW=bw_, STAGES=st, num_warps=nw)
        for bn, bk, st, nw in ((64, 256, 3, 4), (64, 128, 4, 4), (32, 256, 3, 4), (128, 256, 3, 8),
                               (64, 512, 2, 4), (128, 128, 4, 8), (64, 128, 3, 8)):
            if bk <= K:
                go(f"ds swap BN={bn} BK={bk} st={st} nw={nw}", fp4_ds, x_ptr=x16, w_ptr=w, s_ptr=s,
                   n_e=n_e, R=R, N=N, K=K, BN=bn, BK=bk, STAGES=st, SWAP=True, num_warps=nw)
        go("ds noswap BN=64 BK=256 st=3 nw=4", fp4_ds, x_ptr=x16, w_ptr=w, s_ptr=s,
           n_e=n_e, R=R, N=N, K=K, BN=64, BK=min(256, K), STAGES=3, SWAP=False, num_warps=4)
    if os.environ.get("MB_DENSE", "1") == "0":
        return
    # -- dense: the front [S2+E+L = 1536+384+3584 -> 5504, H 7168]
    N, K = 5504, 7168
    for R in (1, 2, 8):
        g = torch.Generator(device=dev).manual_seed(R)
        w = torch.randn(N, K, device=dev, generator=g).bfloat16()
        x = torch.randn(R, K, device=dev, generator=g).bfloat16()
        ref = x.float() @ w.float().T
        out = torch.empty(max(R, 16), N, device=dev)
        nbytes = w.numel() * 2

        def god(name, fn, **meta):
            _measure(f"dense {name} R={R}", fn, out, lambda: out[:R], ref, nbytes, nsm, bw, **meta)

        for bn, bk, st, nw in ((16, 512, 3, 8), (16, 256, 4, 8), (32, 512, 3, 16)):
            if R * bn * bk // (32 * nw) <= 64:
                god(f"cur BN={bn} BK={bk} st={st} nw={nw}", bf16_cur, x_ptr=x, w_ptr=w, R=R, N=N,
                    K=K, BN=bn, BK=bk, STAGES=st, num_warps=nw)
        for bn, bk, st, nw in ((16, 512, 3, 8), (32, 256, 4, 8), (64, 256, 3, 8), (32, 512, 3, 16)):
            god(f"split BN={bn} BK={bk} st={st} nw={nw}", bf16_split, x_ptr=x, w_ptr=w, R=R, N=N,
                K=K, BN=bn, BK=bk, STAGES=st, num_warps=nw)
        for bn, bk, st, nw in ((32, 256, 3, 4), (64, 128, 4, 4), (64, 256, 3, 4), (128, 128, 3, 8)):
            god(f"tc BN={bn} BK={bk} st={st} nw={nw}", bf16_tc, x_ptr=x, w_ptr=w, R=R, N=N, K=K,
                BN=bn, BK=bk, STAGES=st, num_warps=nw)


if __name__ == "__main__":
    main()

