"""Runs the tiny harness step with the Triton launches under the CPU interpreter and
prints one JSON line per step (started by test_step_cpu.py with TRITON_INTERPRET=1)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.triton_interp import patch  # noqa: E402

patch()
import torch  # noqa: E402

from sgl_k3_mono.forward import harness, launches  # noqa: E402
from sgl_k3_mono.forward.build import ServerStep, plans_for  # noqa: E402
from sgl_k3_mono.forward.plan import StepBuffers  # noqa: E402
from sgl_k3_mono.forward.step import run_step  # noqa: E402
from sgl_k3_mono.forward.warm import warm  # noqa: E402
from sgl_k3_mono.numerics import measure  # noqa: E402
from sgl_k3_mono.reference.step import DecodeState, decode_step  # noqa: E402

rows, steps = int(sys.argv[1]), int(sys.argv[2])
w = harness.random_weights(harness.shape("tiny"), seed=0)
model = harness.step_model(w)
plan = plans_for(model, (rows,), ServerStep("decode", 1), tp=1, rank=0, isa="sm_90",
                 impl="triton-phased")[("decode", rows, 1)]
bufs = StepBuffers.allocate(plan, "cpu", deadline_s=10)
warm(model, plan, bufs, deadline_s=10)
slots = torch.arange(rows).flip(0)
state = harness.HarnessState.fresh(w, slots, rows + 1, steps + 1, "cpu")
hooks = harness.HarnessHooks(w, state, slots)
ref_state = DecodeState.fresh(w.dims, 1, rows + 1)
routes = []
_k2 = launches.k2


def k2(plan, bufs, *args, **kwargs):  # record each layer's routing (the launch's top-k ids)
    out = _k2(plan, bufs, *args, **kwargs)
    routes.append(bufs.k2.scratch.ids.sort(-1).values.clone())
    return out


launches.k2 = k2
g = torch.Generator().manual_seed(1)
same = True  # every layer of every step so far routed as the reference did
for step in range(steps):
    ids = torch.randint(0, w.dims.vocab, (rows,), generator=g)
    routes.clear()
    trace = []
    got = run_step(model, plan, bufs, hooks, ids, deadline_s=10)
    ref = decode_step(w, ref_state, ids, slots, tp=1, isa="sm_90", trace=trace)
    ref_routes = [t["expert_ids"].sort(-1).values for t in trace if t["expert_ids"] is not None]
    same &= all(torch.equal(a.long(), b.long()) for a, b in zip(routes, ref_routes))
    print(json.dumps({"step": step, **measure(got.float(), ref.float()), "same_routing_so_far": same,
                      "argmax_equal": bool(torch.equal(got.argmax(-1), ref.argmax(-1)))}), flush=True)
