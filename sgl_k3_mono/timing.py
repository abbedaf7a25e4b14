"""CUDA-graph timing shared by the benchmarks: capture once, replay, time with events,
report the median (one launch's host overhead is not what a served step pays)."""

from __future__ import annotations

import statistics
from typing import Callable


def graph_time_us(fn: Callable[[], object], *, iters: int = 200, reps: int = 7, per: int = 1) -> float:
    """Median microseconds of one `fn` call divided by `per` (e.g. the layers `fn` runs):
    `fn` captured once into a CUDA graph, the graph replayed `iters` times between two
    events, `reps` such timings."""
    import torch

    fn()  # compile and allocate outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / iters / per)
    return statistics.median(times)
