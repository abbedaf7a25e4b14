"""One rank of the build's TP barrier test (torchrun, gloo): `build._tp_barrier` over a stood-in
SGLang TP group whose CPU group is the world. argv: late_rank sleep_s barrier_s. Rank
`late_rank` arrives after `sleep_s`; every rank prints one JSON line: met, or the error."""

import json
import os
import sys
import time
import types

import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
late, sleep_s, barrier_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])

import sglang.srt.runtime_context as rc  # noqa: E402

from sgl_k3_mono.forward import build  # noqa: E402

rc.get_parallel = lambda: types.SimpleNamespace(tp_group=types.SimpleNamespace(cpu_group=dist.group.WORLD))
build.COMPILE_BARRIER_S = barrier_s
barrier = build._tp_barrier()
if rank == late:
    time.sleep(sleep_s)
t0 = time.monotonic()
try:
    barrier()
    res = {"rank": rank, "met": True}
except Exception as e:
    res = {"rank": rank, "met": False, "error": f"{type(e).__name__}: {e}"[:400]}
res["waited_s"] = round(time.monotonic() - t0, 2)
print(json.dumps(res), flush=True)
if rank == late:
    time.sleep(1)
os._exit(0)  # (a rank whose barrier timed out leaves gloo's state torn: no clean shutdown)
