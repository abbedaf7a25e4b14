"""Why does a timed `bench k2` row still take 20-37 s on its first launch after the warm
step compiled its variant (fourteenth session, `wall_s=first:...`)? Run it twice on the
device, in two processes, at one row count of the default K2:

    python3 tools/device/cache_probe.py both   # warmup (as `bench k2 --warm-only`), then a call
    python3 tools/device/cache_probe.py call   # a new process: the call alone

It prints, per step, the seconds taken and how often Triton's in-memory cache missed
(`jit_cache_hook`) and whether the Triton disk cache grew. A second miss in `both`
means the warmup and the call specialise differently; a slow `call` with no cache
growth means the disk cache hit but something else is slow; growth means a disk miss.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import triton
from triton import knobs

from sgl_k3_mono.k2 import bench
from sgl_k3_mono.k2.synthetic import tp8_rank_dims

MISSES: list[str] = []


def _miss(*args, **kwargs) -> bool:
    MISSES.append(str(kwargs.get("key", args[:1]))[:160])
    return False  # compile as usual


def _cache_entries() -> int:
    d = Path(getattr(knobs.cache, "dir", "") or os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton/cache")
    return sum(1 for _ in d.iterdir()) if d.is_dir() else -1


def _step(name, fn) -> None:
    n0, c0, t = len(MISSES), _cache_entries(), time.monotonic()
    fn()
    torch.cuda.synchronize()
    print(f"PROBE {name}: {time.monotonic() - t:.1f} s, in-memory misses {len(MISSES) - n0}, "
          f"disk cache entries {c0} -> {_cache_entries()}", flush=True)


def main(mode: str, rows: int = 2) -> int:
    knobs.runtime.jit_cache_hook = _miss
    print(f"PROBE triton {triton.__version__}, cache dir {getattr(knobs.cache, 'dir', '?')}, mode {mode}", flush=True)
    d = tp8_rank_dims()
    rw = bench._rank_weights(d, "mxfp4")
    launch, inputs = bench._launch(rw, d, rows, {}, torch.cuda.get_device_properties(0).multi_processor_count)
    if mode == "both":
        _step("warmup", lambda: launch.compile(rw, *inputs))
    _step("first call", lambda: launch(rw, *inputs))
    _step("second call", lambda: launch(rw, *inputs))
    for k in MISSES:
        print(f"PROBE miss key {k}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "both"))
