"""Numerics study (twenty-ninth session, CPU, ~15 s): K2's MoE front computed as a linear
combination of the FFN seam's rows, sum_j a_j W (ow * v_j) / rms in fp32 (no bf16 rounding of
the mix or of h2; rms from the rows' Gram matrix), against SGLang's sm_90 order
(h2 = bf16(rmsnorm(bf16(mix), ow)), front = h2 @ W^T), both against the fp64 truth, at real
Kimi-K3 widths (H 7168, E 896, L 3584, shared gate/up 12288), 8 rows, 4 bank rows and the
prefix, three draws. The design lead it weighs: docs/evidence/k2-sm90.md, twenty-ninth
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
from sgl_k3_mono.reference.attn_res import score_weight  # noqa: E402
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
    # SGLang sm_90: fp32 mix -> bf16, then RMSNorm (fp32 math) -> bf16
    mix32 = (a.float().unsqueeze(-1) * rows.float()).sum(1)
    h2_r = bf16(rmsnorm(bf16(mix32), ow, eps)).float()
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
