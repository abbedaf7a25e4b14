"""Is the first CUDA graph a process captures faster to replay than the ones after it?

bench step timed its first graph (ours) ~55 us faster than any later graph of the same
step (s48 calls 4-5: the pools zeroed or not, before or after the other columns). This
probe asks the same of plain torch: one chain of N small kernels captured as graphs A, B,
C and D, each timed as it comes, A again beside B and after B is destroyed (s48 call 6: A,
B and C 394 us, D 451 at N 150). Prints the median replay time of each (us). `--settle`:
sgl_k3_mono.timing.settle_graphs() first, as every benchmark's timing now does (call 7:
all of them 451-452 us). Run from the checkout (tools/device/env.sh puts it on the path)."""

from __future__ import annotations

import sys

import torch


def capture(fn):
    from sgl_k3_mono.timing import captured

    return captured(fn, settle=False)  # (settled or not is this probe's question)


def replay_us(g) -> float:
    from sgl_k3_mono.timing import replay_time_us

    return replay_time_us(g, iters=50, reps=7)


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
