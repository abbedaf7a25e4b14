"""K2 test cases shared by the CPU (Triton interpreter) and GPU runs: weights, inputs,
the reference, and the comparison against the declared bounds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.k2.reference import K2RankWeights, K2Weights, k2_reference
from sgl_k3_mono.numerics import measure, violations

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def dims(config: str, **override) -> K3Dims:
    cfg = json.loads((CONFIGS / config / "config.json").read_text())
    return dataclasses.replace(K3Dims.from_config(cfg, tp=1), **override)


from sgl_k3_mono.k2.synthetic import tp8_rank_dims  # noqa: E402


def make_inputs(d: K3Dims, rows: int, *, seed: int, nvb: int, nb: int, with_prefix: bool, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = d.kda_heads * d.kda_head_dim
    attn = torch.randn(rows, a, generator=g).bfloat16().to(device)
    bank = torch.randn(rows, nb, d.hidden, generator=g).bfloat16().to(device)
    prefix = (2 * torch.randn(rows, d.hidden, generator=g)).bfloat16().to(device) if with_prefix else None
    return attn, bank, prefix


def compare(res_out: torch.Tensor, ref) -> dict:
    m = measure(res_out.float().cpu(), ref.out.float().cpu())
    return {"hidden": m, "violations": violations("k2.hidden", m)}


def reference(w: K2Weights, attn, bank, nvb, prefix, isa):
    return k2_reference(attn, w, tp=1, bank=bank, nvb=nvb, prefix=prefix, isa=isa)


@dataclasses.dataclass(frozen=True)
class Case:
    """One K2 run: model shape, rows, expert format, ISA rounding, seam state."""

    config: str
    rows: int
    fmt: str = "bf16"
    isa: str = "sm_90"
    nvb: int = 2
    prefix: bool = True
    seed: int = 0
    tp: int = 1
    tiles: str = ""
    """K2Launch.set_block overrides, e.g. "EXPERT_GEMV=0,DENSE_GEMV=0" (the tensor-core
    tiles the gfx950 Triton build uses); empty: the launch's defaults."""
    layout: str = ""
    """The MXFP4 experts as SGLang leaves them: "" its plain loaded layout; "a16w4",
    "generic" AITER's preshuffles at I_pad = round_up(I_l, 256) ("generic-opt": 128, as
    SGLANG_AITER_K3_OPT=1), padding filled with 0xff (NaN scales) so a read of it shows;
    "plain-nomma": plain, on the path those take (mma_fp4 off by plan), to compare bits."""

    @property
    def name(self) -> str:
        return (f"{self.config}-M{self.rows}-{self.fmt}-{self.isa}-nvb{self.nvb}"
                f"{'' if self.prefix else '-restart'}{'' if self.tp == 1 else f'-tp{self.tp}'}"
                f"{'-' + self.tiles if self.tiles else ''}{'-' + self.layout if self.layout else ''}")

    def block(self) -> dict:
        return {k: int(v) for k, v in (kv.split("=") for kv in self.tiles.split(",") if kv)}


def case_dims(case: Case) -> K3Dims:
    return tp8_rank_dims() if case.config == "kimi-k3-tp8-rank" else dims(case.config)


def run_case(case: Case, device, *, phase="all", grid=None, weights=None, repeat: int = 1, keep_out: bool = False) -> dict:
    """Build weights and inputs, run the launch (phase "all": phase by phase; None:
    persistent), poison the output first, and compare with the reference."""
    from sgl_k3_mono.k2.host import K2Launch, K2Plan

    d = case_dims(case)
    if weights is not None:
        w = weights
    elif str(device).startswith("cuda"):
        from sgl_k3_mono.k2.synthetic import random_k2_weights

        w = random_k2_weights(d, fmt=case.fmt, device=device, seed=case.seed)
    else:
        w = K2Weights.random(d, seed=case.seed, expert_format=case.fmt)
    w = to_device(w, device)
    nb = max(case.nvb, 1) + 1
    attn, bank, prefix = make_inputs(d, case.rows, seed=case.seed + 100, nvb=case.nvb, nb=nb,
                                     with_prefix=case.prefix, device=device)
    grid = grid or (torch.cuda.get_device_properties(0).multi_processor_count if str(device).startswith("cuda") else 4)
    if case.tp > 1:
        return _run_tp(case, w, d, attn, bank, prefix, nb, grid, device, keep_out=keep_out)
    rw = held_as(w.shard(0, 1), case.layout)
    launch = K2Launch.build(K2Plan.for_weights(rw, case.rows, isa=case.isa, bank_rows=nb, grid=grid,
                                               **plan_facts(case)), device)
    if case.tiles:
        launch.set_block(**case.block())
    out = torch.full((case.rows, d.hidden), float("nan"), dtype=torch.bfloat16, device=device)
    for _ in range(repeat):
        out.fill_(float("nan"))
        launch(rw, attn, bank, case.nvb, prefix, out, phase=phase)
    ref = reference(w, attn, bank, case.nvb, prefix, case.isa)
    s = launch.scratch
    res = compare(out, ref)
    res["routing_equal"] = routing_agrees(s.ids.long().cpu(), ref, w)
    res["router_scores"] = measure(torch.sigmoid(s.logits.float().cpu()), torch.sigmoid(ref.moe.router_logits.float().cpu()))
    res["violations"] += violations("k2.router_scores", res["router_scores"])
    res["finite"] = bool(torch.isfinite(out.float()).all())
    res["mma"] = bool(launch.tiles_used.get("MMA", 0))
    res["flatd"] = int(launch.tiles_used.get("FLATD", 0))
    res["flatx"] = int(launch.tiles_used.get("FLATX", 0))
    if keep_out:  # the launch's own output, for launch-against-launch checks (not JSON)
        res["out"] = out.float().cpu()
    return res


def held_as(rw: K2RankWeights, layout: str) -> K2RankWeights:
    """A rank's weights with its MXFP4 experts held in `layout` (Case.layout), the way
    SGLang's AITER post-load leaves them (reference/mxfp4_aiter.held_like_sglang)."""
    if layout in ("", "plain-nomma"):
        return rw
    from sgl_k3_mono.reference.experts import Mxfp4Experts
    from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout, held_like_sglang

    kind, ex = layout.split("-")[0], rw.moe.experts
    pad = 128 if layout.endswith("-opt") else 256
    lay = AiterLayout(kind, ex.inter, -(-ex.inter // pad) * pad)
    h = held_like_sglang(ex.w13, ex.w13_scale, ex.w2, ex.w2_scale, lay, fill=255)
    store = Mxfp4Experts.from_sglang(h.w13, h.w13_scale, h.w2, h.w2_scale, ex.inter, kind)
    return dataclasses.replace(rw, moe=dataclasses.replace(rw.moe, experts=store))


def plan_facts(case: Case) -> dict:
    """K2Plan.for_weights' build-time facts for the case: "plain-nomma" says its scales
    are past mma_fp4's range, so the plan takes the path the AITER layouts take."""
    from sgl_k3_mono.k2.host import MMA_SCALE_MAX

    return {"scale_max": MMA_SCALE_MAX + 1} if case.layout == "plain-nomma" else {}


def to_device(w: K2Weights, device) -> K2Weights:
    """Move every tensor of a K2Weights (and its MoE and expert store) to `device`."""
    def mv(obj):
        if isinstance(obj, torch.Tensor):
            return obj.to(device)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.replace(obj, **{f.name: mv(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                                               if f.init})
        return obj
    return mv(w)


TIE_TOL = 2e-3
"""Biased router scores closer than this to a row's k-th best are a tie within rounding:
h2 is bf16, and one ulp of it moves a logit by ~1e-3 at Kimi-K3's scales."""


def routing_agrees(ids: torch.Tensor, ref, w: K2Weights) -> bool:
    """The top-k sets equal the reference's, except for experts whose biased score ties
    the k-th best within TIE_TOL (either side of the cut)."""
    ref_ids = ref.topk_ids.cpu()
    choice = torch.sigmoid(ref.moe.router_logits.float().cpu()) + w.moe.router_bias.float().cpu()
    for r in range(ids.shape[0]):
        a, b = set(ids[r].tolist()), set(ref_ids[r].tolist())
        if a == b:
            continue
        kth = choice[r].gather(0, ref_ids[r]).min()
        if any(abs(choice[r, e] - kth) > TIE_TOL for e in a ^ b):
            return False
    return True


def _run_tp(case: Case, w: K2Weights, d: K3Dims, attn, bank, prefix, nb: int, grid: int, device,
            keep_out: bool = False) -> dict:
    """All `tp` ranks of one layer in this process, phase by phase, rank after rank; the
    reduces pull the other ranks' partials through the emulated peer address tables."""
    from sgl_k3_mono.k2.host import K2Launch, K2Peers, K2Plan
    from sgl_k3_mono.k2.triton.frame import PHASES

    tp, al = case.tp, attn.shape[1] // case.tp
    ranks = [held_as(w.shard(r, tp), case.layout) for r in range(tp)]
    plan = K2Plan.for_weights(ranks[0], case.rows, isa=case.isa, bank_rows=nb, grid=grid, tp=tp, **plan_facts(case))
    peers = K2Peers.emulated(plan, device)
    launches = [K2Launch.build(plan, device, rank=r, peers=peers[r]) for r in range(tp)]
    for launch in launches:
        if case.tiles:
            launch.set_block(**case.block())
    outs = [torch.full((case.rows, d.hidden), float("nan"), dtype=torch.bfloat16, device=device) for _ in range(tp)]
    parts = [attn[:, r * al:(r + 1) * al].contiguous() for r in range(tp)]
    for p in range(len(PHASES)):
        for r in range(tp):
            launches[r](ranks[r], parts[r], bank, case.nvb, prefix, outs[r], phase=p)
    ref = reference_tp(w, attn, bank, case.nvb, prefix, case.isa, tp)
    res = compare(outs[0], ref)
    res["ranks_bitwise_equal"] = all(torch.equal(outs[0], o) for o in outs[1:])
    res["routing_equal"] = routing_agrees(launches[0].scratch.ids.long().cpu(), ref, w) and all(
        torch.equal(launches[0].scratch.ids, l.scratch.ids) for l in launches[1:])
    res["router_scores"] = measure(torch.sigmoid(launches[0].scratch.logits.float().cpu()),
                                   torch.sigmoid(ref.moe.router_logits.float().cpu()))
    res["violations"] += violations("k2.router_scores", res["router_scores"])
    res["finite"] = all(bool(torch.isfinite(o.float()).all()) for o in outs)
    res["mma"] = bool(launches[0].tiles_used.get("MMA", 0))
    res["flatd"] = int(launches[0].tiles_used.get("FLATD", 0))
    res["flatx"] = int(launches[0].tiles_used.get("FLATX", 0))
    if keep_out:
        res["out"] = outs[0].float().cpu()
    return res


def reference_tp(w: K2Weights, attn, bank, nvb, prefix, isa, tp):
    return k2_reference(attn, w, tp=tp, bank=bank, nvb=nvb, prefix=prefix, isa=isa)
