"""Design microbenchmark: K2's MXFP4 expert loop through int8 mma.sync (mma_i8.py, beside
this file) against mma_fp4's bf16 one, at 1 and 2 rows (sm_90).

The same persistent grid as fp4_decode_microbench's `mma` rows (one program an SM, an item
NT weight rows of one expert, two 16-row tiles a warp), at a TP-8 rank's gate/up (N 768,
K 3584) and down (N 3584, K 384) shapes, 16 / 32 experts at 1 / 2 rows, ue8m0 scales drawn
from [110, 129). Each variant is checked against the fp32 reference and against the bf16
loop's own output, then timed warm (graph replays) and cold (eight weight sets in turn
in one graph: past L2, as in K2). x's preparation (mma_i8.store_x8, which K2's producers
would run as they store x) is timed on its own. Results and the K2 A/B (thirtieth session:
the loop 24 % faster at 1 row here, K2 no faster): docs/evidence/k2-sm90.md.

Run from the repository root on the GPU: `python3 tools/device/i8_mma_microbench.py`
(MB_ONLY=<substring>[|...] filters the variants, MB_ROWS=1,2 the rows)."""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemv_microbench import copy_gbs, fp4_case, wanted  # noqa: E402

sys.path.insert(0, os.getcwd())
from mma_i8 import mxfp4_i8_tiles, store_x8  # noqa: E402
from sgl_k3_mono.k2.triton.mma_fp4 import mxfp4_mma_tiles  # noqa: E402


@triton.jit
def prep_x8(x_ptr, x8_ptr, xq_ptr, K: tl.constexpr, NG: tl.constexpr):
    """Row program_id(0)'s groups program_id(1) * NG .. + NG - 1 of x (bf16 [R, K])."""
    r = tl.program_id(0)
    g0 = tl.program_id(1) * NG
    k = g0 * 32 + tl.arange(0, NG)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + r * K + k).to(tl.float32)
    store_x8(x8_ptr, xq_ptr, tl.reshape(x, (1, NG, 32)), r + tl.arange(0, 1), g0, K // 32)


@triton.jit
def loop(x_ptr, x8_ptr, xq_ptr, w_ptr, s_ptr, out_ptr, n_e, R, N: tl.constexpr, K: tl.constexpr,
         NT: tl.constexpr, I8: tl.constexpr, PD: tl.constexpr, XR: tl.constexpr, XL: tl.constexpr = 0):
    """out[e, :R] = x @ W_e^T, an item NT rows of one expert a program (K2's layout)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    t = tl.arange(0, NT)
    g = (t % 32) // 4
    c = t % 4
    for item in range(pid, n_e * (N // NT), nprog):
        e = (item // (N // NT)).to(tl.int64)
        r0 = (item % (N // NT)) * NT + (t // 32) * 16 + g
        r1 = r0 + NT // 2
        wp = w_ptr + e * N * (K // 2)
        sp = s_ptr + e * N * (K // 32)
        if I8:
            acc = mxfp4_i8_tiles(x8_ptr, xq_ptr, K // 32, R, wp, K // 2, sp, K // 32, r0, r1, K, NT, XR, 0, PD, XL)
        else:
            acc = mxfp4_mma_tiles(x_ptr, K, R, wp, K // 2, sp, K // 32, r0, r1, K, NT, 1, 1, 0, PD)
        for tile in tl.static_range(2):
            o = out_ptr + (e * R + 2 * c) * N + (r1 if tile else r0)
            tl.store(o, acc[4 * tile], mask=2 * c < R)
            tl.store(o + N, acc[4 * tile + 1], mask=2 * c + 1 < R)
            tl.store(o + 8, acc[4 * tile + 2], mask=2 * c < R)
            tl.store(o + N + 8, acc[4 * tile + 3], mask=2 * c + 1 < R)


def main():
    from sgl_k3_mono.timing import graph_time_us

    dev = "cuda"
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = copy_gbs(dev)
    print(f"MB copy {bw:.0f} GB/s (read+write); frac = read rate / (copy / 2)", flush=True)
    rows = [int(r) for r in os.environ.get("MB_ROWS", "1,2").split(",")]
    n_of = {1: 16, 2: 32}
    for N, K in ((768, 3584), (3584, 384)):
        for R in rows:
            n_e = n_of[R]
            _, w, s, x, _, ref = fp4_case(dev, N, K, n_e, R, scales=(110, 129))
            G = K // 32
            x8 = torch.empty(R, G, 4, 32, dtype=torch.int8, device=dev)
            xq = torch.empty(R, G, dtype=torch.uint8, device=dev)
            prep = lambda: prep_x8[(R, G // 4)](x, x8, xq, K=K, NG=4)  # noqa: E731
            prep()
            us = graph_time_us(prep, iters=20, reps=5)
            print(f"MB prep K={K} R={R} us={us:.2f}", flush=True)
            nbytes = w.numel() + s.numel()
            outs = {}
            variants = [(0, pd, 0) for pd in (1, 2)] + [(1, pd, xl) for pd in (1, 2, 3) for xl in (0, 1)]
            for nw in (4, 8):
                for i8, pd, xl in variants:
                        name = f"{'i8' if i8 else 'bf16'} nw={nw} PD={pd} XL={xl} N={N} K={K} E={n_e} R={R}"
                        if not wanted(name) or N % (32 * nw):
                            continue
                        out = torch.full((n_e, R, N), float("nan"), device=dev)
                        meta = dict(x_ptr=x, x8_ptr=x8, xq_ptr=xq, out_ptr=out, n_e=n_e, R=R, N=N, K=K, NT=32 * nw,
                                    I8=i8, PD=pd, XR=2 if R == 2 else 1, XL=xl, num_warps=nw)
                        try:
                            loop[(nsm,)](w_ptr=w, s_ptr=s, **meta)
                            torch.cuda.synchronize()
                        except Exception as ex:  # noqa: BLE001 (printed; the sweep goes on)
                            print(f"MB {name} FAILED {type(ex).__name__}: {str(ex)[:400]}", flush=True)
                            continue
                        err = ((out - ref).abs().max() / ref.abs().max()).item()
                        outs[(nw, i8, pd, xl)] = out.clone()
                        base = outs.get((nw, 0, 1, 0))
                        vs = ((out - base).abs().max() / ref.abs().max()).item() if base is not None else float("nan")
                        warm = graph_time_us(lambda: loop[(nsm,)](w_ptr=w, s_ptr=s, **meta), iters=20, reps=5)
                        ws = [w] + [w.clone() for _ in range(7)]
                        ss = [s] + [s.clone() for _ in range(7)]

                        def cold():
                            for wc, sc in zip(ws, ss):
                                loop[(nsm,)](w_ptr=wc, s_ptr=sc, **meta)
                        cold()
                        cus = graph_time_us(cold, iters=5, reps=5) / len(ws)
                        del ws, ss
                        print(f"MB {name} warm_us={warm:7.2f} cold_us={cus:7.2f} cold_frac="
                              f"{nbytes / cus / 1e3 / (bw / 2):.2f} relerr={err:.1e} vs_bf16={vs:.1e}",
                              flush=True)
                        if i8 and nw == 8 and pd == 1 and xl == 0:  # a non-finite x element: its row comes out NaN
                            xs = x.clone()
                            x[R - 1, K // 2 + 3] = float("inf")
                            prep()
                            loop[(nsm,)](w_ptr=w, s_ptr=s, **meta)
                            torch.cuda.synchronize()
                            print(f"MB {name} inf-in-x: row {R - 1} all NaN {bool(out[:, R - 1].isnan().all())}, "
                                  f"other rows finite {bool(out[:, :R - 1].isfinite().all())}", flush=True)
                            x.copy_(xs)
                            prep()


if __name__ == "__main__":
    main()
