"""The K2 reference with one rank a process (`k2.reference.k2_from_ranks` and
`all_gather_exchange`), which the real-shape TP runs judge each GPU rank by (a real layer's
experts do not fit one GPU once per rank): across processes (gloo, on the CPU) it must be
bitwise the one-process reference that emulates every rank, for shards of one layer and for
ranks that build only their own shard (`k2.synthetic.random_k2_rank_weights`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.ranks import json_records

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "launch"))


@pytest.mark.parametrize("tp,fmt", [(2, "bf16"), (4, "mxfp4")])
def test_reference_across_processes_is_the_one_process_reference(tp, fmt):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(tp), "--master-port", str(29600 + tp),
           str(HERE / "k2_ranks_worker.py"), "k3-small", fmt, "3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    recs = json_records(done.stdout)
    assert sorted(r["rank"] for r in recs) == list(range(tp)), done.stdout
    for r in recs:
        assert all(r["sharded"].values()) and all(r["rank_built"].values()), r
        assert r["ranks_equal"] and r["finite"] and r["scale"] > 0.1, r


def test_rank_built_weights_have_the_shard_shapes_and_share_the_replicated_tensors():
    """Every tensor of rank r's own build has the shape of the unsharded layer's shard r;
    the replicated tensors are equal on every rank and the sharded ones differ."""
    import dataclasses

    from k2_cases import dims
    from sgl_k3_mono.k2.synthetic import random_k2_rank_weights, random_k2_weights

    d, tp = dims("k3-small"), 4
    ref = random_k2_weights(d, fmt="mxfp4", device="cpu", seed=0)

    def tensors(w, prefix=""):
        for f in dataclasses.fields(w):
            v = getattr(w, f.name)
            if isinstance(v, torch.Tensor):
                yield prefix + f.name, v
            elif dataclasses.is_dataclass(v):
                yield from tensors(v, prefix + f.name + ".")

    built = [dict(tensors(random_k2_rank_weights(d, fmt="mxfp4", device="cpu", rank=r, tp=tp, seed=5)))
             for r in range(tp)]
    shard = dict(tensors(ref.shard(1, tp)))
    assert built[1].keys() == shard.keys()
    sharded = {"o_proj", "moe.shared_gate_up", "moe.shared_down", "moe.experts.w13", "moe.experts.w13_scale",
               "moe.experts.w2", "moe.experts.w2_scale"}
    for name, t in shard.items():
        assert built[1][name].shape == t.shape and built[1][name].dtype == t.dtype, name
        equal = all(torch.equal(built[0][name], b[name]) for b in built[1:])
        assert equal == (name not in sharded), name
