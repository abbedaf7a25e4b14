"""`bench step --full` run through on the CPU with its GPU-only pieces stood in (as
bench_step_tp_smoke_worker.py does) and one TP-8 rank's widths shrunk to the tiny8
model's: Kimi-K3's 93-layer schedule itself (69 KDA, 24 MLA, blocks of 12, one shared
expert store) through the script's weights, step model, plans, warm-up, bf16 hooks on
all 24 MLA layers, floor and table line. argv: the bench's arguments."""

import dataclasses
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

from support.gpu_stand_ins import stand_in  # noqa: E402

from sgl_k3_mono.forward import bench, harness, launches, warm  # noqa: E402
from sgl_k3_mono.k2 import synthetic  # noqa: E402

_calls = []


def one_call(fn, iters=20, reps=5, graph=True):  # a timing: one call, "taking" 10, 20, 30... us
    fn()
    _calls.append(None)
    return 10.0 * len(_calls)


stand_in(one_call)
bench._graph_us = one_call
warm.wait = lambda *a, **k: None
launches.k1 = lambda plan, bufs, views, io, *, layer, deadline_s: None
real_rank_dims = synthetic.rank_dims
tiny8 = harness.shape("tiny8").dims


def small_rank_dims(tp: int = 8):
    """A TP-8 rank of Kimi-K3 with the tiny8 model's widths, Kimi-K3's schedule kept."""
    d = real_rank_dims(tp)
    widths = ("hidden", "kda_heads", "kda_head_dim", "mla_heads", "mla_v_head_dim", "latent", "expert_inter",
              "shared_experts", "dense_inter")
    return dataclasses.replace(d, **{f: getattr(tiny8, f) for f in widths})


synthetic.rank_dims = small_rank_dims
sys.exit(bench.main(sys.argv[1:]))
