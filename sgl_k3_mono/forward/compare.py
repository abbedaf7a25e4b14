"""Many decode steps of the launch-level step against the reference decode step, on the
harness model (no SGLang): per-step logits KL and error, greedy agreement where the
reference's top-2 margin exceeds the declared logit error, routing agreement, final
states, and the same step replayed from a CUDA graph.

Rows are independent in a decode step, so each row is judged on its own: a row whose
routing ever differed from the reference's (a near-tie of the router flipped one top-k
choice, which two correct GPUs can also disagree on) is reported, and held to the
bounds only up to that step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from sgl_k3_mono.forward import harness, launches
from sgl_k3_mono.forward.build import ServerStep, plans_for
from sgl_k3_mono.forward.plan import StepBuffers
from sgl_k3_mono.forward.step import run_step
from sgl_k3_mono.forward.warm import warm
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.step import DecodeState, decode_step


@dataclass(frozen=True)
class StepBounds:
    """What a step of the launches may differ from the reference step by (per row)."""

    kl: float = 1e-3
    """KL(reference || ours) of the next-token distribution, nats."""
    logit_max_abs: float = 0.125
    """Largest logit difference; also the margin above which the greedy tokens must agree."""
    state_cosine: float = 0.9999
    """KDA recurrent and conv states after the last step (slots of rows that never re-routed)."""
    graph_max_abs: float = 0.0
    """Graph replay against the eager run of the same launches (the launches are deterministic)."""


BOUNDS = StepBounds()


@dataclass
class RowLog:
    """One row's record over the steps."""

    kl: list = field(default_factory=list)
    err: list = field(default_factory=list)
    clean: list = field(default_factory=list)
    """Every layer of every step so far routed as the reference did."""
    greedy_checked: int = 0
    greedy_equal: int = 0
    under_margin: int = 0


def _kl(ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    lp, lq = torch.log_softmax(ref.double(), -1), torch.log_softmax(got.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def _sorted_ids(t: torch.Tensor) -> torch.Tensor:
    return t.long().sort(-1).values.cpu()


@dataclass
class Comparison:
    """Inputs and results of one comparison run."""

    name: str
    rows: int
    steps: int
    logs: list
    graph_max_abs: Optional[float]
    states: dict
    unused_slot_untouched: bool
    seconds: dict

    def summary(self, b: StepBounds = BOUNDS) -> dict:
        clean_kl = [k for r in self.logs for k, c in zip(r.kl, r.clean) if c]
        clean_err = [e for r in self.logs for e, c in zip(r.err, r.clean) if c]
        return dict(
            name=self.name, rows=self.rows, steps=self.steps,
            row_steps=self.rows * self.steps, clean_row_steps=len(clean_kl),
            rerouted_rows=sum(1 for r in self.logs if not r.clean[-1]),
            first_reroute=[next((s for s, c in enumerate(r.clean) if not c), None) for r in self.logs],
            kl_max_clean=max(clean_kl, default=math.nan), kl_max_all=max(k for r in self.logs for k in r.kl),
            err_max_clean=max(clean_err, default=math.nan), err_max_all=max(e for r in self.logs for e in r.err),
            greedy_checked=sum(r.greedy_checked for r in self.logs),
            greedy_equal=sum(r.greedy_equal for r in self.logs),
            under_margin=sum(r.under_margin for r in self.logs),
            graph_max_abs=self.graph_max_abs, states=self.states,
            unused_slot_untouched=self.unused_slot_untouched, seconds=self.seconds,
        )


def compare(s: harness.HarnessShape, *, rows: int, steps: int, seed: int = 0, graph: bool = True,
            device: str = "cuda", isa: str = "sm_90", impl: str = "triton", deadline_s: float = 10.0,
            bounds: StepBounds = BOUNDS) -> Comparison:
    t0 = time.monotonic()
    w = harness.random_weights(s, seed=seed)
    wd = harness.to_device(w, device)
    model = harness.step_model(wd, isa=isa)
    plan = plans_for(model, (rows,), ServerStep("decode", 1), tp=1, rank=0, isa=isa, impl=impl)[("decode", rows, 1)]
    bufs = StepBuffers.allocate(plan, device, deadline_s=deadline_s)
    warm(model, plan, bufs, deadline_s=deadline_s)
    sec = {"build": time.monotonic() - t0}

    n_slots = rows + 1  # slot `rows` is never used: it must stay untouched
    slots = torch.arange(rows - 1, -1, -1)
    g = torch.Generator().manual_seed(seed + 1)
    ids = [torch.randint(0, w.dims.vocab, (rows,), generator=g) for _ in range(steps)]

    # ours, eager, recording each MoE layer's routing
    state = harness.HarnessState.fresh(wd, slots, n_slots, steps + 1, device)
    hooks = harness.HarnessHooks(wd, state, slots, isa=isa)
    routes: list = []
    inner = launches.k2

    def k2(plan_, bufs_, *a, **k):
        out = inner(plan_, bufs_, *a, **k)
        if plan_.impl != "reference":
            routes.append(_sorted_ids(bufs_.k2.scratch.ids))
        return out

    ours, our_routes = [], []
    t0 = time.monotonic()
    launches.k2 = k2
    try:
        for x in ids:
            routes.clear()
            ours.append(run_step(model, plan, bufs, hooks, x.to(device), deadline_s=deadline_s).float().cpu())
            our_routes.append(list(routes))
    finally:
        launches.k2 = inner
    sec["ours_eager"] = time.monotonic() - t0

    # the reference step on the CPU, same weights and tokens
    ref_state = DecodeState.fresh(w.dims, 1, n_slots)
    t0 = time.monotonic()
    logs = [RowLog() for _ in range(rows)]
    clean = [True] * rows
    for step, x in enumerate(ids):
        trace: list = []
        ref = decode_step(w, ref_state, x, slots, tp=1, isa=isa, trace=trace).float()
        ref_routes = [_sorted_ids(t["expert_ids"]) for t in trace if t["expert_ids"] is not None]
        got = ours[step]
        kl = _kl(ref, got)
        top2 = ref.topk(2, -1).values
        for r in range(rows):
            if our_routes[step]:
                clean[r] &= all(torch.equal(a[r], b[r]) for a, b in zip(our_routes[step], ref_routes))
            lg = logs[r]
            lg.kl.append(kl[r].item())
            lg.err.append((got[r] - ref[r]).abs().max().item())
            lg.clean.append(clean[r])
            if not clean[r]:
                continue
            if top2[r, 0] - top2[r, 1] > bounds.logit_max_abs:
                lg.greedy_checked += 1
                lg.greedy_equal += int(got[r].argmax() == ref[r].argmax())
            else:
                lg.under_margin += 1
    sec["reference"] = time.monotonic() - t0

    states = {}
    live = [int(slots[r]) for r in range(rows) if clean[r]]
    for i in w.dims.kda_layers:
        ref_st = ref_state.kda[i][0]
        st = state.kda[i]
        states[f"layer{i}.ssm"] = measure(st.ssm_pool[live].cpu(), ref_st.ssm[live]) if live else None
        states[f"layer{i}.conv"] = measure(st.conv_pool[live].cpu(), ref_st.conv[live]) if live else None
    untouched = all(bool((state.kda[i].ssm_pool[rows] == 0).all()) and bool((state.kda[i].conv_pool[rows] == 0).all())
                    for i in w.dims.kda_layers)

    graph_err = None
    if graph:
        t0 = time.monotonic()
        gstate = harness.HarnessState.fresh(wd, slots, n_slots, steps + 1, device)
        ghooks = harness.HarnessHooks(wd, gstate, slots, isa=isa)
        static_ids = ids[0].to(device).clone()
        torch.cuda.synchronize()
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            static_out = run_step(model, plan, bufs, ghooks, static_ids, deadline_s=deadline_s)
        graph_err = 0.0
        for step, x in enumerate(ids):
            static_ids.copy_(x)
            cg.replay()
            graph_err = max(graph_err, (static_out.float().cpu() - ours[step]).abs().max().item())
        sec["graph"] = time.monotonic() - t0
    return Comparison(s.name, rows, steps, logs, graph_err, states, untouched, sec)


def violations(c: Comparison, b: StepBounds = BOUNDS) -> list[str]:
    """Every bound the run broke (empty: within bounds)."""
    out = []
    for r, lg in enumerate(c.logs):
        for step, (kl, err, ok) in enumerate(zip(lg.kl, lg.err, lg.clean)):
            if ok and kl > b.kl:
                out.append(f"row {r} step {step}: KL {kl:.3e} > {b.kl}")
            if ok and err > b.logit_max_abs:
                out.append(f"row {r} step {step}: logit error {err:.3e} > {b.logit_max_abs}")
        if lg.greedy_equal != lg.greedy_checked:
            out.append(f"row {r}: greedy token differs at {lg.greedy_checked - lg.greedy_equal} of "
                       f"{lg.greedy_checked} steps whose reference margin exceeds {b.logit_max_abs}")
    for name, m in c.states.items():
        if m is not None and m["cosine"] < b.state_cosine:
            out.append(f"{name}: cosine {m['cosine']:.6f} < {b.state_cosine}")
    if not c.unused_slot_untouched:
        out.append("a state slot no row uses was written")
    if c.graph_max_abs is not None and c.graph_max_abs > b.graph_max_abs:
        out.append(f"graph replay differs from the eager run by {c.graph_max_abs:.3e} > {b.graph_max_abs}")
    return out
