"""`bench step --tp N` on the CPU: the rank's step model it builds (each MoE layer's K2 the
rank's own real TP-8-rank shard, the rest sharded from the model of N x those widths) has a
TP-8 rank's shapes and plans at TP N. The timing itself needs N GPUs of one host (issue 7)."""

from __future__ import annotations

import argparse

from sgl_k3_mono.forward.bench import _device_weights_tp
from sgl_k3_mono.forward.build import ServerStep, plans_for


def test_a_ranks_step_model_at_tp_2_has_tp8_rank_shapes():
    args = argparse.Namespace(experts=16, layers=4, vocab=8192, fmt="bf16")
    w, model = _device_weights_tp(args, rank=1, world=2, dev="cpu")
    assert model.reasons() == []
    k2s = [lr.k2 for lr in model.layers if lr.k2 is not None]
    assert len(k2s) == 3
    for k2 in k2s:
        assert k2.moe.tp == 2 and k2.moe.rank == 1 and k2.moe.experts.inter == 384
        assert k2.moe.experts.num_experts == 16 and k2.moe.shared_gate_up.shape == (1536, 7168)
    assert [k2.o_proj.shape[1] for k2 in k2s] == [1536, 1536, 12 * 128]  # KDA, KDA, MLA (12 heads x v 128)
    k1s = [lr.k1 for lr in model.layers if lr.k1 is not None]
    assert all(k1.heads == 12 for k1 in k1s)
    plan = plans_for(model, (2,), ServerStep("decode", 1), tp=2, rank=1, isa="sm_90", impl="triton",
                     grid=132)[("decode", 2, 1)]
    assert plan.k2.tp == 2 and plan.k2.inter == 384 and plan.k2.attn_width == 1536 and plan.k1.heads == 12


def test_the_launcher_starts_bench_steps_module():
    from sgl_k3_mono.k2.bench_tp import launcher_command

    cmd = launcher_command(["--tp", "8", "--fmt", "bf16"], 8, module="sgl_k3_mono.forward.bench")
    assert cmd[-5:] == ["-m", "sgl_k3_mono.forward.bench", "--tp", "8", "--fmt", "bf16"][-5:]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "8"


def test_the_bench_runs_through_on_the_cpu_with_its_gpu_pieces_stood_in():
    """`bench step --tp 2` end to end over two gloo ranks (bench_step_tp_smoke_worker.py: the
    launches, peers and timings stood in; real TP-8 rank widths with 16 experts; the standard
    step's SGLang fused MoE under Triton's interpreter): the header, a table row with every
    column, the standard step named, exit 0: the script's own mistakes found here rather
    than on a lent multi-GPU machine."""
    from pathlib import Path

    from support.ranks import plain_ranks, told

    # each rank its own pipe, not torchrun's shared stdout (test_k2_bench_tp.py says why)
    ranks = plain_ranks(2, Path(__file__).with_name("bench_step_tp_smoke_worker.py"),
                        ["--tp", "2", "--fmt", "bf16", "--rows", "1", "--experts", "16"],
                        {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}, timeout=900)
    outputs = told(ranks)
    assert all(rc == 0 for rc, *_ in ranks), outputs
    lines = ranks[0][1].splitlines()
    assert any(x.startswith("step bench: 4 layers") and "TP 2" in x for x in lines), lines
    rows = [x for x in lines if x.startswith(" 1 ")]
    assert len(rows) == 1, outputs
    (row,) = rows
    assert len(row.split("experts/layer")[0].split()) == 11 and "n/a" not in row, row
    assert "standard: KDA torch KDA chain" in row and "experts SGLang fused MoE" in row, row
