"""Tune SGLang's fused MoE Triton kernel for a Kimi-K3 TP-8 rank's routed experts (bf16,
E 896, I 384, L 3584, top-k 16) the way SGLang's own tuner does for a model it has no config
file for: every config of a grid timed for each row count, the fastest kept. What it writes
is SGLang's config-file form ({rows: config}, one config for both GEMMs), which
`bench k2 --std-config FILE` times as the standard path's `std_tuned` column beside SGLang's
default (`std`). The grid is a subset of SGLang's tuner's search space at BLOCK_SIZE_M 16
(the decode row counts' block): N 32-128, K 64-256, 4 warps with 3-5 stages or 8 with 4.

    python3 tools/device/sglang_moe_tune.py [ROWS,...] [OUT.json]
    python3 tools/device/sglang_moe_tune.py ROWS,... --warm-part I/N   # compile configs I, I+N, ... only

Compiling the grid is most of a tune's time (two GEMMs a config); `--warm-part` processes
side by side fill Triton's cache on the host's cores first (tools/device/bench.sh bf16-gate).
"""
import argparse
import itertools
import json
import sys

import torch

sys.path[:0] = [".", "tools/device"]
from sglang_moe_time import K, rank_experts, routed_inputs  # noqa: E402

from sgl_k3_mono.k2.sglang_moe import sglang_routed_experts  # noqa: E402
from sgl_k3_mono.timing import graph_time_us  # noqa: E402

TILES = [(n, k) for n, k in itertools.product((32, 64, 128), (64, 128, 256)) if n * k <= 128 * 128]
"""(Larger tiles: SGLang's tuned H200 files for decode row counts stay within these.)"""
GRID = [dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, GROUP_SIZE_M=1, num_warps=w, num_stages=st)
        for (n, k), (w, st) in itertools.product(TILES, ((4, 3), (4, 4), (4, 5), (8, 4)))]
"""32 configs, each two GEMMs' compiles (`--warm-part` spreads them over processes), then timed
a row count each."""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="?", default="1,2,4,8")
    ap.add_argument("out_path", nargs="?", default=None)
    ap.add_argument("--warm-part", default=None, help="I/N: run configs I, I+N, ... once each, time nothing")
    a = ap.parse_args()
    rows = [int(v) for v in a.rows.split(",")]
    out_path = a.out_path
    if a.warm_part:
        return _warm(rows, *(int(v) for v in a.warm_part.split("/")))
    g = torch.Generator(device="cuda").manual_seed(7)
    w13, w2 = rank_experts(g)
    best = {}
    for m in rows:
        x, ids, wts = routed_inputs(m, g)
        default = sglang_routed_experts(w13, w2, top_k=K, rows=m, beta=4.0, linear_beta=25.0)
        ref = default(x, ids, wts).clone()
        base_us = graph_time_us(lambda: default(x, ids, wts), iters=100, reps=5)
        times = []
        for cfg in GRID:
            try:
                run = sglang_routed_experts(w13, w2, top_k=K, rows=m, beta=4.0, linear_beta=25.0, config=cfg)
                got = run(x, ids, wts)
                # the same sums in another tile order: a bf16 step or two of the outputs' scale apart
                if not torch.allclose(got.float(), ref.float(), atol=3e-2 * float(ref.float().abs().max()), rtol=0):
                    print(f"SGTUNE M={m} {cfg}: outputs differ from the default config's; skipped", flush=True)
                    continue
                times.append((graph_time_us(lambda: run(x, ids, wts), iters=100, reps=5), cfg))
            except Exception as e:  # (a config the kernel cannot take: out of shared memory, ...)
                print(f"SGTUNE M={m} {cfg}: {type(e).__name__}: {str(e)[:160]}", flush=True)
        times.sort(key=lambda t: t[0])
        best[str(m)] = times[0][1]
        print(f"SGTUNE M={m} SGLang default {base_us:.1f} us; best of {len(times)} configs {times[0][0]:.1f} us "
              f"{times[0][1]}; next {[round(t, 1) for t, _ in times[1:4]]}", flush=True)
        if out_path:  # after every row count, so a call's time limit keeps the rows already tuned
            with open(out_path, "w") as f:
                f.write(json.dumps(best, indent=1) + "\n")
    print("SGTUNE configs " + json.dumps(best), flush=True)
    return 0


def _warm(rows: list[int], part: int, parts: int) -> int:
    g = torch.Generator(device="cuda").manual_seed(7)
    w13, w2 = rank_experts(g)
    done = 0
    for m in rows:  # (Triton specializes integer arguments on their value's divisibility: every row count)
        x, ids, wts = routed_inputs(m, g)
        for cfg in GRID[part::parts]:
            try:
                sglang_routed_experts(w13, w2, top_k=K, rows=m, beta=4.0, linear_beta=25.0, config=cfg)(x, ids, wts)
                done += 1
            except Exception as e:
                print(f"SGTUNE warm M={m} {cfg}: {type(e).__name__}: {str(e)[:160]}", flush=True)
    torch.cuda.synchronize()
    print(f"SGTUNE warm part {part}/{parts}: {done} runs", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
