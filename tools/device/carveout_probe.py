"""Which shared-memory size and carveout each K2 build runs with on the H200 (a TP-8 rank,
MXFP4): for each row count and tile override, one persistent launch, then the compiled
function's dynamic shared bytes, registers and carveout hint (-1: none set) as the driver
holds them. Under Nsight Compute's LaunchStats section the same launches also show the
shared size the SM was configured with, which is what leaves L1 the rest:

    python3 tools/device/carveout_probe.py 1,2,4,8 "" CARVE=0 XRSD=0 CARVE=0,XRSD=0
    ncu --clock-control none -k regex:k2_kernel --section LaunchStats \\
        python3 tools/device/carveout_probe.py 8 "" CARVE=0

Prints one CARVEPROBE line a build."""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())


def main(rows_arg: str, blocks: list) -> None:
    from sgl_k3_mono.k2.host import K2Launch, K2Plan
    from sgl_k3_mono.k2.synthetic import random_k2_weights, tp8_rank_dims
    from sgl_k3_mono.k2.triton.kernel import k2_kernel
    from sgl_k3_mono.runtime import triton_smem

    d = tp8_rank_dims()
    rw = random_k2_weights(d, fmt="mxfp4", device="cuda", seed=1).shard(0, 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in (int(r) for r in rows_arg.split(",")):
        g = torch.Generator(device="cuda").manual_seed(m)
        attn = torch.randn(m, rw.o_proj.shape[1], generator=g, device="cuda").bfloat16()
        bank = torch.randn(m, 8, d.hidden, generator=g, device="cuda").bfloat16()
        prefix = (2 * torch.randn(m, d.hidden, generator=g, device="cuda")).bfloat16()
        out = torch.empty(m, d.hidden, dtype=torch.bfloat16, device="cuda")
        for blk in blocks:
            launch = K2Launch.build(K2Plan.for_weights(rw, m, isa="sm_90", bank_rows=8, grid=sms), "cuda")
            over = {k: int(v) for k, v in (kv.split("=") for kv in blk.split(",") if kv)}
            if over:
                launch.set_block(**over)
            launch(rw, attn, bank, 4, prefix, out)
            torch.cuda.synchronize()
            args, meta = launch.launch_args(rw, attn, bank, 4, prefix, out)
            ck = k2_kernel.warmup(*args, grid=(sms,), PHASE=-1, **meta)
            print(f"CARVEPROBE M={m} block={blk or 'default'} shared={ck.metadata.shared} regs={ck.n_regs} "
                  f"spills={ck.n_spills} carveout_hint={triton_smem.carveout_of(ck)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or [""])
