"""K2 at TP 2 on two GPUs (TP 4 / 8 where the machine has them, `support.ranks.tp_size`):
the in-launch reduces over symmetric-memory peer buffers, against the reference at that
TP, ranks bit-identical, epochs stable over many launches, and a stalled peer stopping
every process loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ranks import assert_every_rank_stopped, json_records, plain_ranks, tp_size

HERE = Path(__file__).resolve().parent

TP = tp_size()  # k3-small has 8 heads: TP 8 at most
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(TP < 2, reason="needs 2 GPUs (the x2 machine)")]


def _torchrun(args, env=None, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(TP), str(HERE / "k2_tp_worker.py"),
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_k2_tp_matches_reference_and_ranks_agree(fmt):
    """Every rank within the reference's bounds at this TP, 6 launches through both epoch
    parities bitwise stable, the ranks' hidden states bitwise equal, routing equal; then
    1000 replays of a captured launch bitwise stable on every rank, and a replay on new
    inputs equal to an eager launch."""
    done = _torchrun([fmt, "8", "6", "1000"])
    assert done.returncode == 0, done.stderr[-3000:]
    results = json_records(done.stdout)
    assert len(results) == TP, done.stdout + done.stderr[-2000:]  # one record a rank
    for r in results:
        print(r)
        assert r["violations"] == [] and r["stable"] and r["ranks_bitwise_equal"] and r["routing_equal"], r
        assert r["replays_bitwise_stable"] == 1000 and r["replay_equals_eager"], r


@pytest.mark.parametrize("fmt,rows", [("mxfp4", 1), ("mxfp4", 8), ("bf16", 8)])
def test_k2_tp_real_rank_shapes(fmt, rows):
    """Every rank a real Kimi-K3 TP-8 rank's shapes (at TP 8 Kimi-K3's own layer; at TP 2 / 4
    a layer TP times a TP-8 rank wide), each rank building only its own shard: within the
    reference's bounds, the reference formed across the ranks from their own shards (the
    partials all-gathered in rank order), launches through both epoch parities bitwise
    stable, ranks bitwise equal, routing equal, 1000 graph replays bitwise stable."""
    done = _torchrun([fmt, str(rows), "4", "1000", "--real"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json_records(done.stdout)
    assert len(results) == TP, done.stdout + done.stderr[-2000:]
    for r in results:
        print(r)
        assert r["real"] and r["rank_shapes"] == {"o_proj": [7168, 1536], "experts": 896, "inter": 384}, r
        assert r["violations"] == [] and r["stable"] and r["ranks_bitwise_equal"] and r["routing_equal"], r
        assert r["replays_bitwise_stable"] == 1000 and r["replay_equals_eager"], r


@pytest.mark.parametrize("stalled", sorted({1, TP - 1}) if TP >= 2 else [1])
def test_k2_tp_stalled_peer_stops_every_rank(stalled):
    """One rank (1, and the last where TP > 2) holds at layer 1's combine; every other rank
    waits for its partials in the reduce. Every process stops with the watcher's exit code
    and its own message, each within the deadline + 5 s of its warm first layer; none
    hangs."""
    deadline = 3.0
    res = plain_ranks(TP, HERE / "k2_tp_worker.py", ["mxfp4", "4", "3"],
                      {"SGL_K3_MONO_STALL": f"{stalled}:1:k2:combine", "DEADLINE_S": str(deadline)}, timeout=240)
    expect = {r: f"rank {r}, layer 1, launch K2, phase 'reduce'" for r in range(TP)}
    expect[stalled] = f"rank {stalled}, layer 1, launch K2, phase 'combine'"
    assert_every_rank_stopped(res, expect, deadline)
