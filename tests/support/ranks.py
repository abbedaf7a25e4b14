"""Starting the ranks of a multi-GPU test as plain processes (no torchrun agent: it kills
the survivors when the first rank fails, so the others could never say why they stopped).

The TP tests run at `tp_size()`: as many ranks as the machine has GPUs, up to a limit
(2 on the x2 machine; 4 or 8 where those kinds are lent)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def tp_size(limit: int = 8) -> int:
    """The largest power of two <= min(GPUs, limit) (0 or 1: no TP test here)."""
    n = min(gpu_count(), limit)
    return 1 << (n.bit_length() - 1) if n else 0


def plain_ranks(n: int, script, args, env, timeout):
    """Runs `script args` as ranks 0..n-1 (RANK, WORLD_SIZE, MASTER_* set). Returns, per
    rank, (exit code, stdout, stderr, wall-clock time the process ended or None: a hang,
    killed at `timeout`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        e = {**os.environ, **env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    ended = [None] * n
    t_end = time.time() + timeout
    while None in ended and time.time() < t_end:
        for r, p in enumerate(procs):
            if ended[r] is None and p.poll() is not None:
                ended[r] = time.time()
        time.sleep(0.1)
    out = []
    for r, p in enumerate(procs):
        if ended[r] is None:  # a hang: the thing these tests exist to rule out
            p.kill()
        o, e = p.communicate()
        out.append((p.returncode, o, e, ended[r]))
    return out


def told(ranks) -> str:
    """Every rank's exit code and the tail of its stdout and stderr (what `plain_ranks`
    returned), for an assertion's message."""
    return "\n".join(f"rank {r}: rc {rc}\n{o[-2000:]}\n{e[-3000:]}" for r, (rc, o, e, _) in enumerate(ranks))


def json_records(stdout: str) -> list[dict]:
    """Every JSON object the ranks printed on a shared stdout. torchrun's ranks write to one
    pipe, and a rank's line can land right after another's without a line break between
    (seen once at TP 2), so objects are found where they start, not one a line."""
    import json

    dec, out, i = json.JSONDecoder(), [], stdout.find('{"')
    while i >= 0:
        obj, end = dec.raw_decode(stdout, i)
        out.append(obj)
        i = stdout.find('{"', end)
    return out


def loop_start(stdout: str) -> float:
    """The time a worker printed `LOOP-START <t>` (its launches built and warm)."""
    return float(next(x.split()[1] for x in stdout.splitlines() if x.startswith("LOOP-START")))


def assert_every_rank_stopped(res, expect: dict, deadline: float) -> None:
    """Each rank of `plain_ranks` ended (no hang) with the watcher's exit code, its own
    message (`expect[rank]` in its stderr), within deadline + 5 s of its LOOP-START."""
    from sgl_k3_mono.runtime.failure import EXIT_CODE

    for r, (code, out, err, ended) in enumerate(res):
        print(f"rank {r}: exit {code}", err[-600:])
        assert ended is not None, f"rank {r} hung"
        assert code == EXIT_CODE, (r, code, err[-2000:])
        assert expect[r] in err, (r, err[-2000:])
        took = ended - loop_start(out)
        assert took < deadline + 5, f"rank {r} stopped {took:.1f} s after it was warm"
