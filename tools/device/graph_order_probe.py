"""Is the first CUDA graph a process captures faster to replay than the ones after it?

bench step timed its first graph (ours) ~55 us faster than any later graph of the same
step (s48 calls 4-5: the pools zeroed or not, before or after the other columns). This
probe asks the same of plain torch: a chain of N small kernels captured as graphs A, B, C;
A timed alone, then A and B alive together, then after B is destroyed, then a fresh C.
Prints the median replay time of each (us). `--settle`: sgl_k3_mono.timing.settle_graphs()
first, as every benchmark's timing now does."""

from __future__ import annotations

import statistics
import sys

import torch


def capture(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    return g


def replay_us(g, iters=50, reps=7) -> float:
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / iters)
    return statistics.median(out)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    if "--settle" in sys.argv:  # the benchmarks' remedy first: are A, B and C then as slow as D?
        from sgl_k3_mono.timing import SETTLE_GRAPHS, settle_graphs

        settle_graphs()
        print(f"(settled: {SETTLE_GRAPHS} throwaway graphs captured first)")
    x = torch.randn(1 << 16, device="cuda")
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)

    def chain():
        y, u = x, v
        for i in range(n):
            if i % 10 == 0:
                u = u @ w  # a small GEMM every ten kernels, as the step's common parts have
            y = y * 1.0001 + 0.5
        return y, u

    print(f"graph order probe: {n} kernels a replay ({n + n // 10} with the GEMMs), {torch.cuda.get_device_name()}")
    ga = capture(chain)
    print(f"A alone             {replay_us(ga):8.1f} us")
    print(f"A again             {replay_us(ga):8.1f} us")
    gb = capture(chain)
    print(f"B (A alive)         {replay_us(gb):8.1f} us")
    print(f"A (B alive)         {replay_us(ga):8.1f} us")
    del gb
    torch.cuda.synchronize()
    print(f"A (B destroyed)     {replay_us(ga):8.1f} us")
    gc = capture(chain)
    print(f"C (A alive)         {replay_us(gc):8.1f} us")
    del ga
    torch.cuda.synchronize()
    print(f"C (A destroyed)     {replay_us(gc):8.1f} us")
    gd = capture(chain)
    print(f"D (C alive)         {replay_us(gd):8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
