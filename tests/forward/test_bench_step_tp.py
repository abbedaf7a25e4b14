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
