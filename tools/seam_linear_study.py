"""Numerics study (twenty-ninth session, CPU, ~15 s): K2's MoE front computed as a linear
combination of the FFN seam's rows, sum_j a_j W (ow * v_j) / rms in fp32 (no bf16 rounding of
the mix or of h2; rms from the rows' Gram matrix), against SGLang's sm_90 order
(h2 = bf16(rmsnorm(bf16(mix), ow)), front = h2 @ W^T), both against the fp64 truth, at real
Kimi-K3 widths (H 7168, E 896, L 3584, shared gate/up 12288), 8 rows, 4 bank rows and the
prefix, three draws; then K2's output (a TP-8 rank's widths, MXFP4 experts) from each front,
judged by the spec's K2 bounds. The design lead it weighs: docs/evidence/k2-sm90.md, twenty-ninth
session, "Next on a GPU".

    python3 tools/seam_linear_study.py
"""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from sgl_k3_mono.dims import K3Dims  # noqa: E402
from sgl_k3_mono.reference.attn_res import aggregate, score_weight  # noqa: E402
from sgl_k3_mono.reference.ops import bf16, rmsnorm  # noqa: E402

torch.set_num_threads(1)
d = K3Dims.from_config(json.load(open(ROOT / "configs/kimi-k3/config.json")), tp=1)
H, E, L, S2 = d.hidden, d.experts, d.latent, 2 * d.shared_experts * d.expert_inter
g = torch.Generator().manual_seed(0)


def lin(r: int, c: int) -> torch.Tensor:
    return (torch.randn(r, c, generator=g) / c ** 0.5).bfloat16()


W = {"router": lin(E, H), "latent_down": lin(L, H), "shared_gate_up": lin(S2, H)}
bias = 0.01 * torch.randn(E, generator=g)
proj = (torch.randn(1, H, generator=g) / H ** 0.5).bfloat16()
snorm = (1 + 0.1 * torch.randn(H, generator=g)).bfloat16()
ow = (1 + 0.1 * torch.randn(H, generator=g)).bfloat16()
eps = d.rms_eps
M, NVB = 8, 4
res: dict = {k: [] for k in ("rounded", "linear")}
flips = {"rounded": 0, "linear": 0}
for trial in range(3):
    bank = torch.randn(M, NVB, H, generator=g).bfloat16()
    prefix = (2 * torch.randn(M, H, generator=g)).bfloat16()
    rows = torch.cat([bank.double(), prefix.double().unsqueeze(1)], 1)            # [M, R, H]
    cw = score_weight(proj, snorm).double()
    scores = (rows * cw).sum(-1) / torch.sqrt(rows.pow(2).mean(-1) + eps)
    a = torch.softmax(scores, -1)                                                  # [M, R]
    mix64 = (a.unsqueeze(-1) * rows).sum(1)
    h2_64 = mix64 / torch.sqrt(mix64.pow(2).mean(-1, keepdim=True) + eps) * ow.double()
    # SGLang's sm_90 order, as the reference computes it (the mix rounded to bf16, then the norm)
    h2_r = aggregate(bank, NVB, prefix, proj, snorm, ow, eps, isa="sm_90")
    # linear: fp32 front on each row (ow * v_j), combined with a_j and 1 / rms (rms from the Gram matrix)
    G = torch.einsum("mih,mjh->mij", rows.float(), rows.float())
    rms = torch.sqrt(torch.einsum("mi,mij,mj->m", a.float(), G, a.float()) / H + eps)
    for name, w in W.items():
        truth = h2_64 @ w.double().T
        y_r = h2_r @ w.float().T
        parts = (rows.float() * ow.float()) @ w.float().T                           # [M, R, N]
        y_l = (a.float().unsqueeze(-1) * parts).sum(1) / rms.unsqueeze(-1)
        for key, y in (("rounded", y_r), ("linear", y_l)):
            diff = (y.double() - truth)
            res[key].append((name, diff.abs().max().item(), (diff.norm() / truth.norm()).item()))
        if name == "router":  # sigmoid scores and the top-16 sets against the truth's
            s_t = torch.sigmoid(truth)
            ids_t = torch.topk(s_t + bias.double(), d.top_k, -1).indices.sort(-1).values
            for key, y in (("rounded", y_r), ("linear", y_l)):
                s = torch.sigmoid(y.double())
                res[key].append(("router_scores", (s - s_t).abs().max().item(), 0.0))
                ids = torch.topk(s + bias.double(), d.top_k, -1).indices.sort(-1).values
                flips[key] += int((ids != ids_t).any(-1).sum())
for key in res:
    agg = {}
    for name, mx, rel in res[key]:
        o = agg.setdefault(name, [0.0, 0.0])
        o[0], o[1] = max(o[0], mx), max(o[1], rel)
    print(f"SEAMLIN {key:8s}: " + "; ".join(f"{n} max_abs {v[0]:.3g} rel {v[1]:.3g}" for n, v in agg.items())
          + f"; rows whose top-16 set differs from fp64's: {flips[key]} of {3 * M}", flush=True)


def moe_through(front, w, prefix, isa="sm_90"):
    """moe_reference's steps after its front (one rank), from given front outputs
    (gate_up, logits, routed_in): what K2 returns, and the routing."""
    from sgl_k3_mono.reference.moe import all_reduce, route, routed_partials, shared_partial

    rw, p = w.shard(0, 1), w.params
    gate_up, logits, routed_in = front
    wts, ids = route(logits, w.router_bias, p.top_k, renormalize=p.renormalize)
    shared = all_reduce(torch.stack([shared_partial(gate_up, rw.shared_down, p)]))
    latent = all_reduce(routed_partials(bf16(routed_in), ids, wts, [rw.experts], p, isa=isa))
    normed = bf16(rmsnorm(latent, w.latent_norm, p.eps))
    out = bf16(normed @ w.latent_up.float().T)
    return bf16(bf16(out + shared) + prefix.float()), torch.sigmoid(logits.float()), ids


def moe_study(m: int = 8, nvb: int = 4, seed: int = 3) -> None:
    """The K2 output (a TP-8 rank's widths, MXFP4 experts) with the linear front against the
    one from SGLang's order, judged by the spec's K2 bounds."""
    from sgl_k3_mono.k2.synthetic import tp8_rank_dims
    from sgl_k3_mono.numerics import BOUNDS, measure
    from sgl_k3_mono.reference.experts import SeededExperts
    from sgl_k3_mono.reference.moe import MoeWeights

    dd = tp8_rank_dims()
    w = MoeWeights.random(dd, seed=seed, expert_format="mxfp4",
                          experts=SeededExperts(dd.experts, dd.expert_inter, dd.latent, seed + 1, "mxfp4"))
    gg = torch.Generator().manual_seed(seed + 5)
    hh = dd.hidden
    bank = torch.randn(m, nvb, hh, generator=gg).bfloat16()
    pre = (2 * torch.randn(m, hh, generator=gg)).bfloat16()
    prj = (torch.randn(1, hh, generator=gg) / hh ** 0.5).bfloat16()
    sn = (1 + 0.1 * torch.randn(hh, generator=gg)).bfloat16()
    on = (1 + 0.1 * torch.randn(hh, generator=gg)).bfloat16()
    rows_ = torch.cat([bank.float(), pre.float().unsqueeze(1)], 1)
    cw_ = score_weight(prj, sn)
    a_ = torch.softmax((rows_ * cw_).sum(-1) / torch.sqrt(rows_.pow(2).mean(-1) + eps), -1)
    h2 = aggregate(bank, nvb, pre, prj, sn, on, eps, isa="sm_90")                  # SGLang's sm_90 order
    fronts = {"rounded": [h2 @ t.float().T for t in (w.shared_gate_up, w.router, w.latent_down)]}
    gram = torch.einsum("mih,mjh->mij", rows_, rows_)
    rms_ = torch.sqrt(torch.einsum("mi,mij,mj->m", a_, gram, a_) / hh + eps)
    fronts["linear"] = [(a_.unsqueeze(-1) * ((rows_ * on.float()) @ t.float().T)).sum(1) / rms_.unsqueeze(-1)
                        for t in (w.shared_gate_up, w.router, w.latent_down)]
    ref, s_ref, ids_ref = moe_through(fronts["rounded"], w, pre)
    got, s_got, ids_got = moe_through(fronts["linear"], w, pre)
    hid = measure(got, ref)
    sets = int((ids_got.sort(-1).values != ids_ref.sort(-1).values).any(-1).sum())
    print(f"SEAMLIN K2 output (TP-8 rank widths, MXFP4, {m} rows, {nvb} bank rows), linear front against "
          f"SGLang's order: max_abs {hid['max_abs']:.4g} rel {hid['rel']:.3g} cosine {hid['cosine']:.7f} "
          f"(bounds {BOUNDS['k2.hidden.max_abs']} / {BOUNDS['k2.hidden.rel']} / {BOUNDS['k2.hidden.cosine']}); "
          f"router scores max_abs {(s_got - s_ref).abs().max().item():.3g} (bound "
          f"{BOUNDS['k2.router_scores.max_abs']}); rows whose top-k set differs {sets} of {m}", flush=True)


moe_study()
