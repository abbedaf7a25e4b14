"""CUDA-graph timing shared by the benchmarks: capture once, replay, time with events,
report the median (one launch's host overhead is not what a served step pays)."""

from __future__ import annotations

import statistics
from typing import Callable


SETTLE_GRAPHS = 4
"""Throwaway graphs a process captures before its first timing. On an H100 (torch 2.11,
s48 call 6, tools/device/graph_order_probe.py) the first three graphs a process captured
replayed a chain of 165 small kernels in 394 us and every later one in 451 (0.34 us more a
kernel boundary); bench step timed its first graph, ours at 1 row, 50 us faster than the
same step captured again. A served process holds dozens of graphs, so every timing here
is taken past them."""

_settled = False


def settle_graphs() -> None:
    """Capture and drop SETTLE_GRAPHS one-kernel graphs, once a process, so no timed graph
    is among the process's first few (see SETTLE_GRAPHS)."""
    global _settled
    if _settled:
        return
    import torch

    x = torch.zeros(1, device="cuda")
    for _ in range(SETTLE_GRAPHS):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
        g.replay()
        torch.cuda.synchronize()
        del g
    _settled = True


def captured(fn: Callable[[], object], *, settle: bool = True):
    """`fn` run once (compiling and allocating outside the capture), then captured into a
    CUDA graph and replayed three times: the graph, ready to time. `settle`: past the
    process's first graphs (settle_graphs) first."""
    import torch

    if settle:
        settle_graphs()
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    return g


def graph_time_us(fn: Callable[[], object], *, iters: int = 200, reps: int = 7, per: int = 1) -> float:
    """Median microseconds of one `fn` call divided by `per` (e.g. the layers `fn` runs):
    `fn` captured once into a CUDA graph, the graph replayed `iters` times between two
    events, `reps` such timings (past the process's first graphs: settle_graphs)."""
    return replay_time_us(captured(fn), iters=iters, reps=reps) / per


def replay_time_us(g, *, iters: int = 200, reps: int = 7) -> float:
    """Median microseconds of one replay of graph `g`: `iters` replays between two events,
    `reps` such timings."""
    import torch

    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / iters)
    return statistics.median(times)


def graph_kernels_us(fn: Callable[[], object], *, reps: int = 10) -> list[tuple[str, float, float]]:
    """`fn` captured into a CUDA graph and replayed `reps` times under torch.profiler:
    per kernel of one replay, in launch order, (name, median duration us, median idle
    gap us before it). Where a sum of launches moves and no one launch's own timing
    explains it, this says which kernel of the sequence moved."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    g = captured(fn)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    ev = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda t: t[0])
    if not ev or len(ev) % reps:
        raise RuntimeError(f"graph_kernels_us: {len(ev)} device events over {reps} replays (not a whole sequence "
                           "each: the profiler missed some)")
    n = len(ev) // reps
    out = []
    for i in range(n):
        dur = [ev[r * n + i][1] - ev[r * n + i][0] for r in range(reps)]
        gap = [ev[r * n + i][0] - ev[r * n + i - 1][1] for r in range(reps) if r * n + i > 0]
        out.append((ev[i][2], statistics.median(dur), statistics.median(gap) if gap else 0.0))
    return out
