"""Runs one K2 layer with fault injection (SGL_K3_MONO_STALL) and a short deadline; the
watcher must stop this process with EXIT_CODE, naming rank, layer, launch and phase.
argv: the deadline in seconds, then optionally tile options (KEY=VALUE,...)."""

import dataclasses
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import torch  # noqa: E402

from k2_cases import Case, case_dims, make_inputs  # noqa: E402
from sgl_k3_mono.k2.host import K2Launch, K2Plan  # noqa: E402
from sgl_k3_mono.k2.reference import K2Weights  # noqa: E402

case = Case("k3-small", 4, "mxfp4")
d = case_dims(case)
from k2_cases import to_device  # noqa: E402

w = to_device(K2Weights.random(d, seed=1, expert_format="mxfp4"), "cuda").shard(0, 1)
attn, bank, prefix = make_inputs(d, 4, seed=2, nvb=1, nb=2, with_prefix=True, device="cuda")
plan = K2Plan.for_weights(w, 4, isa="sm_90", bank_rows=2, grid=torch.cuda.get_device_properties(0).multi_processor_count)
launch = K2Launch.build(plan, "cuda", deadline_s=float(sys.argv[1]))
if len(sys.argv) > 2 and sys.argv[2]:  # tile options, KEY=VALUE,... (Case.block parses them)
    launch.set_block(**dataclasses.replace(case, tiles=sys.argv[2]).block())
out = torch.empty(4, d.hidden, dtype=torch.bfloat16, device="cuda")
launch(w, attn, bank, 1, prefix, out, layer=0)  # compile and run once unstalled (layer 0)
torch.cuda.synchronize()
launch.errors.watch()
print("armed", flush=True)
t0 = time.time()
launch(w, attn, bank, 1, prefix, out, layer=5)
try:
    torch.cuda.synchronize()
except Exception as e:
    print(f"cuda error after {time.time() - t0:.1f}s: {type(e).__name__}", flush=True)
time.sleep(30)
print("NOT STOPPED", flush=True)
