"""`bench step`'s standard step (`forward.standard`) against the reference step, shared by
the CPU test (routed experts as the gathered bmm) and the GPU one (SGLang's fused MoE
kernels): the step it times must compute the same step as ours, else its speedup compares
different work."""

from __future__ import annotations

import torch

from sgl_k3_mono.forward import harness, launches
from sgl_k3_mono.forward.build import ServerStep, plans_for
from sgl_k3_mono.forward.plan import StepBuffers
from sgl_k3_mono.forward.standard import standard_launches
from sgl_k3_mono.forward.step import run_step
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.step import DecodeState, decode_step


def standard_step_against_reference(device: str, *, rows: int = 3, steps: int = 3,
                                    sglang_experts: bool = False) -> tuple[dict, list[dict]]:
    """The tiny model's standard step on `device` over `steps` decode steps of `rows` rows,
    and the reference step on the CPU fed the same tokens: (what the standard step ran, a
    measure of the logits a step). Asserts the argmax equal and the launches restored."""
    w = harness.random_weights(harness.shape("tiny"), seed=0)
    dw = harness.to_device(w, device)
    model = harness.step_model(dw)
    plan = plans_for(model, (rows,), ServerStep("decode", 1), tp=1, rank=0, isa="sm_90", impl="reference",
                     grid=4)[("decode", rows, 1)]
    bufs = StepBuffers.allocate(plan, device, deadline_s=10)
    slots = torch.arange(rows)
    state = harness.HarnessState.fresh(dw, slots.to(device), rows, 8, device)
    hooks = harness.HarnessHooks(dw, state, slots.to(device))
    ref_state = DecodeState.fresh(w.dims, 1, rows)
    g = torch.Generator().manual_seed(3)
    got_m = []
    with standard_launches(model, top_k=w.dims.top_k, rows=rows if sglang_experts else None) as what:
        for _ in range(steps):
            ids = torch.randint(0, w.dims.vocab, (rows,), generator=g)
            got = run_step(model, plan, bufs, hooks, ids.to(device), deadline_s=10).float().cpu()
            ref = decode_step(w, ref_state, ids, slots, tp=1, isa="sm_90")
            got_m.append(measure(got, ref))
            assert torch.equal(got.argmax(-1), ref.argmax(-1)), got_m[-1]
    assert launches.k1.__module__ == launches.k2.__module__ == "sgl_k3_mono.forward.launches"  # restored
    return what, got_m
