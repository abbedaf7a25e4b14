"""`bench step --full`: all 93 of Kimi-K3's layers at one TP-8 rank's widths, every MoE
layer holding one shared routed-expert store. On the CPU: the model's schedule and widths,
the shared store, and the script run through with its GPU pieces stood in (the timing
itself is the device's: docs/evidence/step-sm90.md)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from sgl_k3_mono.configs import load_config
from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.forward import bench, harness

SCHEDULE = ("layers", "kda_layers", "mla_layers", "attn_res_block", "first_moe_layer", "moe_layer_freq")


def test_the_full_shape_is_kimi_k3s_schedule_at_the_slices_widths():
    full = harness.shape("full", experts=896).dims
    k3 = K3Dims.from_config(load_config("kimi-k3"))
    assert {f: getattr(full, f) for f in SCHEDULE} == {f: getattr(k3, f) for f in SCHEDULE}
    assert (full.layers, len(full.kda_layers), len(full.mla_layers), full.attn_res_block) == (93, 69, 24, 12)
    assert sum(full.is_moe(i) for i in range(full.layers)) == 92
    real = harness.shape("real", experts=896).dims  # the 4-layer slice bench step times by default
    widths = [f.name for f in dataclasses.fields(K3Dims) if f.name not in SCHEDULE]
    assert {f: getattr(full, f) for f in widths} == {f: getattr(real, f) for f in widths}
    assert (full.hidden, full.kda_heads, full.expert_inter, full.experts) == (7168, 12, 384, 896)


def test_shared_experts_are_one_store_and_every_other_weight_is_the_layers_own():
    s = harness.shape("tiny")
    shared = harness.random_weights(s, seed=0, share_experts=True)
    own = harness.random_weights(s, seed=0)
    moe = [lw.k2.moe for lw in shared.layers if lw.k2 is not None]
    assert len(moe) >= 2
    assert all(m.experts is moe[0].experts for m in moe)
    assert not any(m.router.equal(moe[0].router) for m in moe[1:])
    mine = [lw.k2.moe.experts for lw in own.layers if lw.k2 is not None]
    assert len({id(e) for e in mine}) == len(mine)


def test_full_refuses_tp_above_1():
    assert bench.main(["--full", "--tp", "2"]) == 2


def test_full_runs_through_on_the_cpu_with_its_gpu_pieces_stood_in():
    """bench_step_full_smoke_worker.py: the 93 layers at the tiny8 model's widths, the
    launches and timings stood in, the standard step's experts as the gathered bmm (SGLang's
    fused MoE under the interpreter takes minutes for 92 layers; the TP smoke runs it)."""
    worker = Path(__file__).with_name("bench_step_full_smoke_worker.py")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(worker), "--full", "--fmt", "bf16", "--rows", "1", "--experts", "16",
                        "--std-experts", "bmm"], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert any(x.startswith("step bench: Kimi-K3's 93 layers (69 KDA, 24 MLA, dense 0") for x in lines), lines
    (row,) = [x for x in lines if x.startswith(" 1 ")]
    assert len(row.split("experts/layer")[0].split()) == 11 and "n/a" not in row, row
    assert "over 92 layers" in row and "experts gathered bmm" in row, row


def test_a_tp1_shard_is_the_store_itself_not_a_copy():
    """(Each layer's copy ran the H100 out of memory in the fifty-eighth session's first
    `--full` call: a rank's bf16 store is 7.4 GB.) Other ranks' shards are still slices."""
    import torch

    from sgl_k3_mono.k2.synthetic import _experts

    d = harness.shape("tiny").dims
    g = torch.Generator().manual_seed(0)
    for fmt in ("bf16", "mxfp4"):
        store = _experts(g, d, fmt, "cpu", inter=d.expert_inter, fan_in=d.expert_inter)
        assert store.shard(0, 1) is store
        half = store.shard(1, 2)
        assert half is not store and half.inter == d.expert_inter // 2
