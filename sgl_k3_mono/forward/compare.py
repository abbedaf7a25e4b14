"""Many decode steps of the launch-level step against the reference decode step, on the
harness model (no SGLang): per-step logits KL and error, greedy agreement where the
reference's top-2 margin exceeds the declared logit error, router scores, the stream
each MoE layer leaves, final states, and the same steps replayed from a CUDA graph.

Routing is discrete: where the 16th and 17th expert scores lie closer together than the
two sides' score error, two correct implementations pick different sets, and from then
on their rows are not comparable. So the reference *follows* the launch's choice where
that choice is explained by the score error (`RouteFollower`): the launch's set must be
the top-k of its own scores, and its scores must be within the declared bound of the
reference's; then the reference takes the launch's set for that row (and counts it).
Anything else is a violation. Every row-step is compared.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from sgl_k3_mono.forward import harness, launches
from sgl_k3_mono.forward.build import ServerStep, plans_for
from sgl_k3_mono.forward.plan import StepBuffers
from sgl_k3_mono.forward.step import Capture, run_step
from sgl_k3_mono.forward.warm import warm
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.step import DecodeState, decode_step


@dataclass(frozen=True)
class StepBounds:
    """What a step of the launches may differ from the reference step by (per row)."""

    kl: float = 1e-3
    """KL(reference || ours) of the next-token distribution, nats (largest over row-steps)."""
    logit_max_abs: float = 0.125
    """Largest logit difference; also the margin above which the greedy tokens must agree."""
    router_score_max_abs: float = 0.01
    """Sigmoid router scores, ours against the reference's, each on its own layer input,
    at every MoE layer and step: what lets the reference follow the launch's top-k set."""
    state_cosine: float = 0.9999
    """KDA recurrent and conv states after the last step."""
    graph_max_abs: float = 0.0
    """Graph replay against the eager run of the same launches (the launches are deterministic)."""
    aux_cosine: float = 0.999
    """A draft's inputs (`step.Capture`: the stream after each captured layer, per step)
    against the reference's, smallest over layers and steps. Declared ahead of a GPU
    measurement: about 9 times the 1.1e-4 (1 - cosine) of the interpreted Triton launches
    over 3 steps (tests/forward/test_step_cpu.py), which equals the error of the stream
    those layers leave (rel 1.5e-2 there)."""

BOUNDS = StepBounds()


class RouteFollower:
    """`decode_step`'s `choose` hook: the reference takes the launch's top-k set per row
    where the two differ only inside the launch's router-score error.

    Holds the launch's (ids [M, k], logits [M, E] fp32) per MoE layer of the current step,
    and the router biases per layer; records the score error, the rows followed, and any
    choice the scores do not explain."""

    def __init__(self, biases: dict[int, torch.Tensor]):
        self.biases = {i: b.float().cpu() for i, b in biases.items()}
        self.ours: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.step = 0
        self.score_err: list[float] = []
        self.followed = 0
        self.problems: list[str] = []

    def __call__(self, layer: int, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        our_ids, our_logits = self.ours[layer]
        bias = self.biases[layer]
        ref_s, our_s = torch.sigmoid(logits.float()), torch.sigmoid(our_logits.float())
        out = ids.clone()
        for r in range(ids.shape[0]):
            err = (our_s[r] - ref_s[r]).abs().max().item()
            self.score_err.append(err)
            mine, theirs = set(our_ids[r].tolist()), set(ids[r].tolist())
            if mine == theirs:
                continue
            where = f"step {self.step} layer {layer} row {r}"
            biased = our_s[r] + bias
            chosen = torch.zeros_like(biased, dtype=torch.bool)
            chosen[our_ids[r].long()] = True
            if biased[chosen].min() < biased[~chosen].max():
                self.problems.append(f"{where}: the launch's experts are not the top-k of its own scores")
                continue
            self.followed += 1
            ref_biased = ref_s[r] + bias
            pick = our_ids[r].long()
            out[r] = pick[ref_biased[pick].argsort(descending=True)]  # the reference's slot order
        return out


def _kl(ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    lp, lq = torch.log_softmax(ref.double(), -1), torch.log_softmax(got.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


@dataclass
class RowLog:
    """One row's record over the steps."""

    kl: list = field(default_factory=list)
    err: list = field(default_factory=list)
    greedy_checked: int = 0
    greedy_equal: int = 0
    under_margin: int = 0


@dataclass
class Comparison:
    """Inputs and results of one comparison run."""

    name: str
    rows: int
    steps: int
    logs: list
    router: RouteFollower
    stream_rel: dict
    """MoE layer -> (rel error of the stream it leaves at step 0, the largest over steps)."""
    graph_max_abs: Optional[float]
    states: dict
    unused_slot_untouched: bool
    seconds: dict
    logits: list
    """Our logits per step [M, V] fp32 on the host (TP: every rank's must be identical)."""
    aux: dict = field(default_factory=dict)
    """Captured layer -> (largest rel error, smallest cosine) of its stream value over the steps."""
    k2_tiles: dict = field(default_factory=dict)
    """The K2 launch options the steps ran with (K2Launch.tiles_used: MMA, KSX, SDU, XPD,
    XPDD, SEAM_SPLIT; empty for the reference impl)."""

    def summary(self) -> dict:
        kl = [k for r in self.logs for k in r.kl]
        err = [e for r in self.logs for e in r.err]
        return dict(
            name=self.name, rows=self.rows, steps=self.steps, row_steps=len(kl),
            kl_max=max(kl), kl_median=sorted(kl)[len(kl) // 2], err_max=max(err),
            err_median=sorted(err)[len(err) // 2],
            router_score_max_abs=max(self.router.score_err, default=0.0),
            rows_followed=self.router.followed, route_problems=len(self.router.problems),
            greedy_checked=sum(r.greedy_checked for r in self.logs),
            greedy_equal=sum(r.greedy_equal for r in self.logs),
            under_margin=sum(r.under_margin for r in self.logs),
            stream_rel={i: (f"{a:.2e}", f"{b:.2e}") for i, (a, b) in self.stream_rel.items()},
            graph_max_abs=self.graph_max_abs,
            aux={i: (f"{a:.2e}", f"{b:.6f}") for i, (a, b) in self.aux.items()},
            states={k: None if m is None else {n: float(f"{v:.6g}") for n, v in m.items()}
                    for k, m in self.states.items()},
            unused_slot_untouched=self.unused_slot_untouched,
            seconds={k: round(v, 1) for k, v in self.seconds.items()},
            k2_tiles=self.k2_tiles,
        )


@dataclass
class Run:
    """What the side under test produced over the steps (host tensors)."""

    logits: list
    """Per step [M, V] fp32."""
    layers: list
    """Per step: MoE layer -> (top-k ids [M, k], router logits [M, E] fp32, the stream it leaves [M, H])."""
    ssm: dict
    """KDA layer -> recurrent states of the rows' slots after the last step [M, h, V, K] (this rank's heads)."""
    conv: dict
    """KDA layer -> conv windows of the rows' slots, or None where the layout is not the reference's."""
    aux: list = field(default_factory=list)
    """Per step: captured layer -> the stream value handed to a draft [M, H] (empty: no capture)."""


def run_inputs(s: harness.HarnessShape, rows: int, steps: int, seed: int):
    """The weights (host), the slots (reversed, so slot order != row order; slot `rows` is
    never used) and the tokens of a run: the same for every side compared."""
    w = harness.random_weights(s, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    ids = [torch.randint(0, w.dims.vocab, (rows,), generator=g) for _ in range(steps)]
    return w, torch.arange(rows - 1, -1, -1), ids


def judge(name: str, w, slots, ids, run: Run, *, tp: int, rank: int, isa: str, bounds: StepBounds,
          seconds: dict, graph_err=None, untouched: bool = True) -> Comparison:
    """The reference step at TP `tp` over the same tokens, following `run`'s routing where
    its router scores explain the difference, and every metric of `run` against it."""
    rows, steps = slots.numel(), len(ids)
    follow = RouteFollower({i: lw.k2.moe.router_bias for i, lw in enumerate(w.layers) if lw.k2 is not None})
    ref_state = DecodeState.fresh(w.dims, tp, rows + 1)
    t0 = time.monotonic()
    logs = [RowLog() for _ in range(rows)]
    stream_rel: dict = {}
    aux_err: dict = {}
    for step, x in enumerate(ids):
        follow.step, follow.ours = step, {i: rec[:2] for i, rec in run.layers[step].items()}
        trace: list = []
        ref_aux = {i: None for i in run.aux[step]} if run.aux else None
        ref = decode_step(w, ref_state, x, slots, tp=tp, isa=isa, trace=trace, choose=follow, aux=ref_aux).float()
        for i, v in (ref_aux or {}).items():
            m = measure(run.aux[step][i], v)
            rel, cos = aux_err.get(i, (0.0, 1.0))
            aux_err[i] = (max(rel, m["rel"]), min(cos, m["cosine"]))
        for t in trace:
            if t["layer"] in run.layers[step]:
                rel = measure(run.layers[step][t["layer"]][2], t["stream"])["rel"]
                first, worst = stream_rel.get(t["layer"], (rel, 0.0))
                stream_rel[t["layer"]] = (first, max(worst, rel))
        got = run.logits[step]
        kl = _kl(ref, got)
        top2 = ref.topk(2, -1).values
        for r in range(rows):
            lg = logs[r]
            lg.kl.append(kl[r].item())
            lg.err.append((got[r] - ref[r]).abs().max().item())
            if top2[r, 0] - top2[r, 1] > bounds.logit_max_abs:
                lg.greedy_checked += 1
                lg.greedy_equal += int(got[r].argmax() == ref[r].argmax())
            else:
                lg.under_margin += 1
    seconds = {**seconds, "reference": time.monotonic() - t0}
    live = slots.tolist()
    states = {}
    for i in w.dims.kda_layers:
        ref_st = ref_state.kda[i][rank]
        states[f"layer{i}.ssm"] = measure(run.ssm[i], ref_st.ssm[live])
        if run.conv.get(i) is not None:
            states[f"layer{i}.conv"] = measure(run.conv[i], ref_st.conv[live])
    return Comparison(name, rows, steps, logs, follow, stream_rel, graph_err, states, untouched, seconds,
                      run.logits, aux_err)


def compare(s: harness.HarnessShape, *, rows: int, steps: int, seed: int = 0, graph: bool = True,
            device="cuda", isa: str = "sm_90", impl: str = "triton", deadline_s: float = 10.0,
            bounds: StepBounds = BOUNDS, tp: int = 1, rank: int = 0, group=None,
            on_start=None, capture: tuple[int, ...] = (), k2_block: Optional[dict] = None) -> Comparison:
    """One rank's comparison (TP > 1: every rank of `group` calls this with the same
    arguments; K2 reduces over symmetric-memory peers, the harness hooks over `group`,
    and each rank judges its own logits and states against the reference at TP `tp`).
    `on_start()` is called once the launches are built and warm, before the first step.
    `capture` names layers whose output the eager steps hand a draft (`step.Capture`),
    each compared with the reference's. `k2_block`: tile overrides for every K2 launch
    (K2Launch.set_block, before warming), to judge a tile option over whole steps."""
    t0 = time.monotonic()
    w, slots, ids = run_inputs(s, rows, steps, seed)
    wd = harness.to_device(w, device)
    model = harness.step_model(wd, isa=isa, rank=rank, tp=tp)
    plan = plans_for(model, (rows,), ServerStep("decode", 1), tp=tp, rank=rank, isa=isa,
                     impl=impl)[("decode", rows, 1)]
    peers = None
    if tp > 1:
        from sgl_k3_mono.k2.host import K2Peers

        peers = K2Peers.symmetric(plan.k2, (group or _world()).group_name, torch.device(device))
    bufs = StepBuffers.allocate(plan, device, deadline_s=deadline_s, rank=rank, peers=peers)
    for k2 in (bufs.k2, bufs.k2_mla) if k2_block else ():
        if k2 is not None:
            k2.set_block(**k2_block)
    warm(model, plan, bufs, deadline_s=deadline_s,
         barrier=(lambda: torch.distributed.barrier(group=group or _world())) if tp > 1 else None)
    if on_start is not None:
        on_start()
    sec = {"build": time.monotonic() - t0}

    # ours, eager, recording each MoE layer's routing, router logits and output stream
    n_slots = rows + 1
    state = harness.HarnessState.fresh(wd, slots, n_slots, steps + 1, device, tp=tp)
    hooks = harness.HarnessHooks(wd, state, slots, isa=isa, rank=rank, tp=tp, group=group)
    ours, our_layers, our_aux = [], [], []

    def record(layer, bufs_, out):
        sc = bufs_.k2.scratch
        our_layers[-1][layer] = tuple(t.to("cpu", copy=True) for t in (sc.ids.long(), sc.logits, out.float()))

    t0 = time.monotonic()
    with launches.after_k2(record):
        for x in ids:
            our_layers.append({})
            got: list = []
            cap = Capture(frozenset(capture), lambda v: got.append(v.float().cpu())) if capture else None
            ours.append(run_step(model, plan, bufs, hooks, x.to(device), deadline_s=deadline_s,
                                 capture=cap).float().cpu())
            if capture:
                our_aux.append(dict(zip(sorted(capture), got)))
    sec["ours_eager"] = time.monotonic() - t0
    live = slots.tolist()
    run = Run(ours, our_layers, {i: state.kda[i].ssm_pool[live].cpu() for i in w.dims.kda_layers},
              {i: state.kda[i].conv_pool[live].cpu() for i in w.dims.kda_layers}, our_aux)
    untouched = all(bool((state.kda[i].ssm_pool[rows] == 0).all()) and bool((state.kda[i].conv_pool[rows] == 0).all())
                    for i in w.dims.kda_layers)

    graph_err = None
    if graph:
        t0 = time.monotonic()
        gstate = harness.HarnessState.fresh(wd, slots, n_slots, steps + 1, device, tp=tp)
        ghooks = harness.HarnessHooks(wd, gstate, slots, isa=isa, rank=rank, tp=tp, group=group)
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
    c = judge(s.name, w, slots, ids, run, tp=tp, rank=rank, isa=isa, bounds=bounds, seconds=sec,
              graph_err=graph_err, untouched=untouched)
    used = getattr(bufs.k2, "tiles_used", None) or {}
    shown = ("MMA", "KSX", "SDU", "XPD", "XPDD", "XRS", "XRSD", "CARVE", "BK", "SEAM_SPLIT")
    c.k2_tiles = {k: used[k] for k in shown if k in used}
    return c


def _world():
    import torch.distributed as dist

    return dist.group.WORLD


def violations(c: Comparison, b: StepBounds = BOUNDS) -> list[str]:
    """Every bound the run broke (empty: within bounds)."""
    out = list(c.router.problems)
    worst = max(c.router.score_err, default=0.0)
    if worst > b.router_score_max_abs:
        out.append(f"router scores differ from the reference's by {worst:.3e} > {b.router_score_max_abs}")
    for r, lg in enumerate(c.logs):
        for step, (kl, err) in enumerate(zip(lg.kl, lg.err)):
            if kl > b.kl:
                out.append(f"row {r} step {step}: KL {kl:.3e} > {b.kl}")
            if err > b.logit_max_abs:
                out.append(f"row {r} step {step}: logit error {err:.3e} > {b.logit_max_abs}")
        if lg.greedy_equal != lg.greedy_checked:
            out.append(f"row {r}: greedy token differs at {lg.greedy_checked - lg.greedy_equal} of "
                       f"{lg.greedy_checked} steps whose reference margin exceeds {b.logit_max_abs}")
    for name, m in c.states.items():
        if m["cosine"] < b.state_cosine:
            out.append(f"{name}: cosine {m['cosine']:.6f} < {b.state_cosine}")
    if not c.unused_slot_untouched:
        out.append("a state slot no row uses was written")
    for i, (_, cos) in c.aux.items():
        if cos < b.aux_cosine:
            out.append(f"layer {i}'s captured stream (a draft's input): cosine {cos:.6f} < {b.aux_cosine}")
    if c.graph_max_abs is not None and c.graph_max_abs > b.graph_max_abs:
        out.append(f"graph replay differs from the eager run by {c.graph_max_abs:.3e} > {b.graph_max_abs}")
    return out
