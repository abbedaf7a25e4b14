"""The GPU-only pieces of the TP benchmarks stood in, so that `bench k2-tp` and `bench step
--tp` run through on the CPU over gloo ranks (their smoke workers): ranks on the CPU, gloo
for NCCL, a timing that is one call, no copy-bandwidth run, placeholder symmetric-memory
peers, and a K2 launch that compiles nothing and writes its prefix to `out`."""

from __future__ import annotations

import os
import types
from typing import Callable


def stand_in(timing: Callable) -> None:
    """Apply them; `timing(fn, iters, reps=5, graph=True) -> us` replaces bench_tp.lockstep_us."""
    import torch

    from sgl_k3_mono.k2 import bench, bench_tp
    from sgl_k3_mono.k2.host import K2Launch, K2Peers

    bench_tp.BACKEND = "gloo"
    bench_tp.rank_device = lambda rank: torch.device("cpu")
    bench_tp.lockstep_us = timing
    torch.cuda.set_device = lambda *a: None
    bench.copy_bandwidth_gb_s = lambda: (4000.0, 4000.0)
    K2Peers.symmetric = classmethod(lambda cls, plan, group, dev: types.SimpleNamespace(
        tp=plan.tp, rank=int(os.environ["RANK"])))
    K2Launch.compile = lambda self, *a, **k: None

    def run(self, w, attn_out, bank, nvb, prefix, out, *, layer=0, phase=None):
        out.copy_(prefix if prefix is not None else attn_out.new_zeros(out.shape))
        return out

    K2Launch.__call__ = run
