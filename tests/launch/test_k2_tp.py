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


def _two_plain_ranks(args, env, timeout):
    """Both ranks as plain processes (no torchrun agent: it kills the survivors when the
    first rank fails, so the second could never say why it stopped). Returns, per rank,
    (exit code, stdout, stderr, wall-clock time the process ended)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        e = {**os.environ, **env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, str(HERE / "k2_tp_worker.py"), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    ended = [None, None]
    t_end = time.time() + timeout
    while None in ended and time.time() < t_end:
        for r, p in enumerate(procs):
            if ended[r] is None and p.poll() is not None:
                ended[r] = time.time()
        time.sleep(0.1)
    out = []
    for r, p in enumerate(procs):
        if ended[r] is None:  # a hang: the thing this test exists to rule out
            p.kill()
        o, e = p.communicate()
        out.append((p.returncode, o, e, ended[r]))
    return out


def test_k2_tp2_stalled_peer_stops_both_ranks():
    """Rank 1 holds at layer 1's combine; rank 0 waits for its partials in the reduce.
    Both processes stop with the watcher's exit code and their own message, each within
    the deadline + 5 s of its warm first layer; neither hangs."""
    from sgl_k3_mono.runtime.failure import EXIT_CODE

    deadline = 3.0
    res = _two_plain_ranks(["mxfp4", "4", "3"], {"SGL_K3_MONO_STALL": "1:1:k2:combine",
                                                  "DEADLINE_S": str(deadline)}, timeout=240)
    expect = {0: "rank 0, layer 1, launch K2, phase 'reduce'", 1: "rank 1, layer 1, launch K2, phase 'combine'"}
    for r, (code, out, err, ended) in enumerate(res):
        print(f"rank {r}: exit {code}", err[-600:])
        assert ended is not None, f"rank {r} hung"
        assert code == EXIT_CODE, (r, code, err[-2000:])
        assert expect[r] in err, (r, err[-2000:])
        start = float(next(x.split()[1] for x in out.splitlines() if x.startswith("LOOP-START")))
        assert ended - start < deadline + 5, f"rank {r} stopped {ended - start:.1f} s after its first layer"
