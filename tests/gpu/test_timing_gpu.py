"""The benchmarks' timer on a GPU: its first timing settles the process's first graphs
(timing.settle_graphs: they replay faster than every later one, step-sm90.md's
forty-eighth section), and the profiler's kernel list has one row a kernel of the
captured function, in launch order."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_the_first_timing_settles_and_the_kernel_list_follows_the_launches():
    import torch

    from sgl_k3_mono import timing

    x = torch.randn(1 << 20, device="cuda")
    us = timing.graph_time_us(lambda: x.mul_(1.0001), iters=20, reps=3)
    assert timing._settled and us > 0

    y = torch.empty_like(x)

    def three():  # three kernels: a fill, an elementwise add, a reduction
        y.fill_(1.0)
        y.add_(x)
        return y.sum()

    rows = timing.graph_kernels_us(three, reps=5)
    assert len(rows) in (3, 4), rows  # (torch may finish a large sum in a second kernel)
    assert all(us > 0 and gap >= 0 for _, us, gap in rows), rows
    assert "fill" in rows[0][0].lower() and "reduce" in rows[-1][0].lower(), rows
