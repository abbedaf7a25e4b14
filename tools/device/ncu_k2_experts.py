"""Nsight Compute target for K2's MXFP4 expert phases on the H200 (a TP-8 rank, M 8).

`k2`: the persistent launch once (routing), then experts_up (phase 4) and experts_down
(phase 5), each as its own launch. `mb`: the microbenchmark's K2 helper alone over the
same down shape (117 experts through a table); `mma`: the microbenchmark's mma_fp4
kernel over the down then the gate/up shape (8 warps, the tiles K2 runs); `mbup`: the gate/up shape as the
microbenchmark's fp4_ds with fast_math (seventh session: experts_up takes 1.7x its time,
unexplained). From the repository root on the GPU:

    S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
       --section LaunchStats --section MemoryWorkloadAnalysis"
    ncu --clock-control none -k regex:k2_kernel --launch-skip 1 --launch-count 2 $S \\
        python3 tools/device/ncu_k2_experts.py k2
    ncu --clock-control none -k regex:fp4_k2dot --launch-count 1 $S python3 tools/device/ncu_k2_experts.py mb
    ncu --clock-control none -k regex:fp4_ds --launch-count 1 $S python3 tools/device/ncu_k2_experts.py mbup
    ncu --clock-control none -k regex:fp4_mma --launch-count 2 $S python3 tools/device/ncu_k2_experts.py mma
    ncu --clock-control none -k regex:fp4_mma --launch-count 2 $S python3 tools/device/ncu_k2_experts.py ring

(`k2` takes NCU_M, the rows, 8 by default, NCU_BLOCK, a tile override, NCU_FMT, mxfp4 or bf16, and
NCU_BEFORE: warm / code / sum, the persistent launch then run again after nothing / 110 KB of other
code / torch's 256 MB sum, to profile with --launch-skip 1 --cache-control none --replay-mode
application (fifty-third session: the second launch as a served step's K2 runs, or warm);
`ring` NCU_RS.)

Results: docs/evidence/logs/s6-ncu-*.log (k2-sm90.md)."""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())


def k2() -> None:
    from sgl_k3_mono.k2.host import K2Launch, K2Plan
    from sgl_k3_mono.k2.synthetic import random_k2_weights, tp8_rank_dims

    d, m = tp8_rank_dims(), int(os.environ.get("NCU_M", "8"))
    rw = random_k2_weights(d, fmt=os.environ.get("NCU_FMT", "mxfp4"), device="cuda", seed=1).shard(0, 1)
    g = torch.Generator(device="cuda").manual_seed(m)
    attn = torch.randn(m, 1536, generator=g, device="cuda").bfloat16()
    bank = torch.randn(m, 8, d.hidden, generator=g, device="cuda").bfloat16()
    prefix = (2 * torch.randn(m, d.hidden, generator=g, device="cuda")).bfloat16()
    out = torch.empty(m, d.hidden, dtype=torch.bfloat16, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    launch = K2Launch.build(K2Plan.for_weights(rw, m, isa="sm_90", bank_rows=8, grid=sms), "cuda")
    block = {k: int(v) for k, v in (kv.split("=") for kv in os.environ.get("NCU_BLOCK", "").split(",") if kv)}
    if block:  # a sweep's override (bench k2 --block), e.g. NCU_BLOCK=XRS=2,XRSD=2
        launch.set_block(**block)
    launch(rw, attn, bank, 4, prefix, out)
    before = os.environ.get("NCU_BEFORE")
    if before is not None:  # the persistent launch again after `before`: profile it with --launch-skip 1
        if before == "code":  # 110 KB of other straight-line code (bench k2's after_code_110kb)
            from sgl_k3_mono.runtime.l2_stream import code_sweep

            code_sweep(torch.ones(1 << 12, device="cuda"), torch.empty(sms, 128, device="cuda"), kernels=5)
        elif before == "sum":  # torch's sum of 256 MB (bench k2's l2_cold)
            torch.ones(1 << 26, device="cuda").sum()
        elif before != "warm":  # warm: nothing between the two launches
            raise SystemExit(f"NCU_BEFORE={before!r}: warm, code or sum")
        launch(rw, attn, bank, 4, prefix, out)
        torch.cuda.synchronize()
        return
    for p in (4, 5):
        launch(rw, attn, bank, 4, prefix, out, phase=p)
    torch.cuda.synchronize()


def mb() -> None:
    sys.path.insert(0, "tools/device")
    import gemv_microbench as bench

    N, K, n_e, R = 3584, 384, 117, 8
    w = torch.randint(0, 256, (896, N, K // 2), dtype=torch.uint8, device="cuda")
    s = torch.randint(118, 128, (896, N, K // 32), dtype=torch.uint8, device="cuda")
    eid = torch.randperm(896, device="cuda")[:n_e].to(torch.int32)
    x16 = torch.randn(16, K, device="cuda").bfloat16()
    out = torch.empty(n_e, R, N, device="cuda")
    bench.fp4_k2dot[(132,)](x16, w, s, out, eid, n_e, R, w.stride(0), w.stride(1), s.stride(0), s.stride(1),
                            N=N, K=K, BN=128, BK=128, STAGES=3, SA=4, UP=False, num_warps=4)
    torch.cuda.synchronize()


def mbup() -> None:
    """The gate/up work of experts_up at M 8 as the microbenchmark's fastest form: one
    64-row fast_math dot_scaled an item (131.7 us against K2's 227.9 in the seventh session)."""
    sys.path.insert(0, "tools/device")
    import gemv_microbench as bench

    N, K, n_e, R = 768, 3584, 117, 8
    _, w, s, _, x16, _ = bench.fp4_case("cuda", N, K, n_e, R, scales=(118, 128))
    out = torch.empty(n_e, R, N, device="cuda")
    bench.fp4_ds[(132,)](x16, w, s, out, n_e, R=R, N=N, K=K, BN=64, BK=256, STAGES=3, SWAP=False, FAST=True,
                         num_warps=4)
    torch.cuda.synchronize()


def mma() -> None:
    sys.path.insert(0, "tools/device")
    import fp4_decode_microbench as bench

    for N, K, ku in ((3584, 384, 1), (768, 3584, 2)):
        _, w, s, x, _, _ = bench.fp4_case("cuda", N, K, 117, 8, scales=(118, 128))
        out = torch.empty(117, 8, N, device="cuda")
        bench.fp4_mma[(132,)](x, w, s, out, 117, 8, N=N, K=K, KU=ku, ST=1, NT=256, PW=0, num_warps=8)
    torch.cuda.synchronize()


def ring() -> None:
    """The microbenchmark's mma_fp4 kernel through the shared-memory ring (NCU_RS stages,
    2 by default) over the down then the gate/up shape, 8 warps, a program's warps an item."""
    sys.path.insert(0, "tools/device")
    import fp4_decode_microbench as bench
    from sgl_k3_mono.runtime.triton_smem import reserve

    rs = int(os.environ.get("NCU_RS", "2"))
    for N, K in ((3584, 384), (768, 3584)):
        _, w, s, x, _, _ = bench.fp4_case("cuda", N, K, 117, 8, scales=(118, 128))
        out = torch.empty(117, 8, N, device="cuda")
        meta = dict(x_ptr=x, w_ptr=w, s_ptr=s, out_ptr=out, n_e=117, R=8, N=N, K=K, KU=1, ST=1, NT=256, PW=0, RS=rs,
                    num_warps=8)
        ck = bench.fp4_mma.warmup(grid=(132,), ring_off=0, **meta)
        bench.fp4_mma[(132,)](ring_off=reserve(ck, rs * 256 * bench.RING_STAGE_BYTES_PER_THREAD.value), **meta)
    torch.cuda.synchronize()


if __name__ == "__main__":
    {"k2": k2, "mb": mb, "mbup": mbup, "mma": mma, "ring": ring}[sys.argv[1]]()
