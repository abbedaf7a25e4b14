"""SGLang's triton-runner routed experts as bench k2's standard path composes them
(sgl_k3_mono/k2/sglang_moe.py) at a TP-8 rank's shapes (E 896, I 384, L 3584, top-k 16),
bf16: their time beside the old gathered bmm and the align alone (CUDA graphs, median). Their
values against float64: tests/launch/test_sglang_moe.py.

    python3 tools/device/sglang_moe_time.py [ROWS,...]
"""
import sys

import torch

sys.path.insert(0, ".")
from sgl_k3_mono.k2.sglang_moe import sglang_routed_experts  # noqa: E402
from sgl_k3_mono.reference.ops import situ  # noqa: E402
from sgl_k3_mono.timing import graph_time_us  # noqa: E402

E, I, L, K = 896, 384, 3584, 16


def rank_experts(g):
    """A TP-8 rank's bf16 routed experts: w13 [E, 2I, L], w2 [E, L, I]."""
    # drawn in bf16: 7.4 GB a process, where fp32 draws peaked at 20 GB (processes run side by side)
    return (torch.randn(E, 2 * I, L, generator=g, device="cuda", dtype=torch.bfloat16).mul_(L ** -0.5),
            torch.randn(E, L, I, generator=g, device="cuda", dtype=torch.bfloat16).mul_(I ** -0.5))


def routed_inputs(m: int, g):
    """x [m, L] bf16, each row's K distinct experts, their normalised weights."""
    x = torch.randn(m, L, generator=g, device="cuda").bfloat16()
    ids = torch.stack([torch.randperm(E, generator=g, device="cuda")[:K] for _ in range(m)])
    wts = torch.rand(m, K, generator=g, device="cuda")
    return x, ids, wts / wts.sum(-1, keepdim=True)


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(7)
    w13, w2 = rank_experts(g)
    for m in [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,2,4,8").split(",")]:
        _time_one(m, g, w13, w2)


def _time_one(m, g, w13, w2) -> None:
    x, ids, wts = routed_inputs(m, g)
    run = sglang_routed_experts(w13, w2, top_k=K, rows=m, beta=4.0, linear_beta=25.0)
    run(x, ids, wts)  # its kernels' compile, apart from the timing
    sg = graph_time_us(lambda: run(x, ids, wts))

    def bmm():
        flat = ids.flatten()
        hx = torch.bmm(w13[flat], x.repeat_interleave(K, 0).unsqueeze(-1)).squeeze(-1).float()
        a = situ(hx[:, :I], hx[:, I:], 4.0, 25.0).bfloat16()
        y = torch.bmm(w2[flat], a.unsqueeze(-1)).squeeze(-1).view(m, K, -1)
        return (y.float() * wts.unsqueeze(-1)).sum(1)

    bm = graph_time_us(bmm)
    from sglang.kernels.ops.moe.moe_align_small_numel import moe_align_small_numel

    s, e, n = (torch.empty(m * K * 64 + 64, dtype=torch.int32, device="cuda"),
               torch.empty(m * K + 8, dtype=torch.int32, device="cuda"), torch.empty(1, dtype=torch.int32, device="cuda"))
    ids32 = ids.int()
    al = graph_time_us(lambda: moe_align_small_numel(ids32, E + 1, 16, s, e, n))
    floor_mb = len(torch.unique(ids)) * 3 * I * L * 2 / 1e6
    print(f"SGMOE M={m} us: sglang {sg:.1f}, gathered bmm {bm:.1f}, align alone {al:.1f}; experts' bytes "
          f"{floor_mb:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
