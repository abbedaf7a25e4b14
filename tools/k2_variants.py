"""How many K2 builds does one width of a served step compile? Triton compiles one build
for each specialisation class of the launch's scalar arguments (a value of 1, a multiple
of 16, other; pointers by 16-byte alignment), so this counts the distinct classes of the
arguments K2Launch.launch_args gives Kimi-K3's 92 MoE layers (bank rows in use and a
block write as the step computes them: an attn-res block of 12 layers) on each of 8
ranks, with Triton's own binder on the CPU (no GPU, nothing compiled):

    python tools/k2_variants.py            # as the kernel is declared
    python tools/k2_variants.py --specialise-all   # as it was before K2_RUNTIME_SCALARS
"""

from __future__ import annotations

import argparse
import math


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--specialise-all", action="store_true")
    a = ap.parse_args(argv)
    import torch

    from sgl_k3_mono import compile_check

    compile_check._stub_driver("sm_90")
    from triton.compiler import make_backend
    from triton.runtime.driver import driver
    from triton.runtime.jit import create_function_from_signature

    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.k2 import host
    from sgl_k3_mono.k2.reference import K2Weights
    from sgl_k3_mono.k2.triton.kernel import k2_kernel

    if a.specialise_all:
        for p in k2_kernel.params:
            p.do_not_specialize = False
    binder = create_function_from_signature(k2_kernel.signature, k2_kernel.params,
                                            make_backend(driver.active.get_current_target()))
    # small widths: the classes depend on the scalars' values and the tensors' alignment only
    rw = K2Weights.random(K3Dims.from_config(load_config("k3-small"), tp=1), seed=0, expert_format="mxfp4").shard(0, 1)
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=8, grid=4)
    bf = torch.bfloat16
    attn, bank = torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 8, plan.hidden, dtype=bf)
    out = torch.empty(2, plan.hidden, dtype=bf)
    prefix = torch.zeros_like(out)
    builds: dict[str, list] = {}
    for rank in range(8):
        launch = host.K2Launch.build(plan, "cpu", impl="triton")
        launch.rank = rank
        for layer in range(1, 93):
            write = layer % 12 == 0
            nvb = math.ceil(layer / 12) + int(write)
            args, meta = launch.launch_args(rw, attn, bank, nvb, None if write else prefix, out, layer=layer)
            builds.setdefault(str(binder(*args, PHASE=-1, **meta)[1]), []).append((rank, layer))
    per_rank = max(len({k for k, v in builds.items() if any(r == rank for r, _ in v)}) for rank in range(8))
    print(f"K2 builds for one width: {len(builds)} over 8 ranks, at most {per_rank} on one rank")
    for v in builds.values():
        print(f"  {len(v):3d} launches, e.g. (rank, layer) {v[:3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
