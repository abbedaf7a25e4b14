"""K2 at TP 2 on two GPUs: the in-launch reduces over symmetric-memory peer buffers,
against the reference at TP 2, ranks bit-identical, epochs stable over many launches,
and a stalled peer stopping both processes loudly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _two_gpus() -> bool:
    try:
        import torch

        return torch.cuda.device_count() >= 2
    except Exception:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _two_gpus(), reason="needs 2 GPUs (the x2 machine)")]


def _torchrun(args, env=None, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(HERE / "k2_tp_worker.py"),
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_k2_tp2_matches_reference_and_ranks_agree(fmt):
    done = _torchrun([fmt, "8", "6"])
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert len(results) == 2, done.stdout + done.stderr[-2000:]
    for r in results:
        print(r)
        assert r["violations"] == [] and r["stable"] and r["ranks_bitwise_equal"] and r["routing_equal"], r


def test_k2_tp2_stalled_peer_stops_both_ranks():
    from sgl_k3_mono.runtime.failure import EXIT_CODE

    t0 = time.time()
    done = _torchrun(["mxfp4", "4", "3"], env={"SGL_K3_MONO_STALL": "1:1:k2:combine", "DEADLINE_S": "3"},
                     timeout=240)
    print(done.stdout[-2000:], done.stderr[-3000:])
    assert done.returncode != 0
    assert "rank 1, layer 1, launch K2, phase 'combine'" in done.stderr  # the stalled rank
    assert "rank 0, layer 1, launch K2, phase 'reduce'" in done.stderr  # its peer, waiting for it
    assert time.time() - t0 < 180
