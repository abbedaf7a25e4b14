"""Runs bench k2's SGLang routed experts (k2/sglang_moe.py) against a float64 reference on
fresh random inputs and prints one JSON line a case. Started by test_sglang_moe.py: on the
CPU under Triton's interpreter in fp16 (its bf16 gives garbage for SGLang's fused MoE
kernel), on a GPU in bf16, as bench k2 runs it.

    python sglang_moe_worker.py DEVICE DTYPE ROWS[,ROWS...] E I L K [CONFIG_JSON]

CONFIG_JSON: one kernel config for both GEMMs (a tuned file's entry) instead of SGLang's lookup.
SGMOE_NO_SGL_KERNEL=1: sgl_kernel hidden, as on the lent GPU machine (SGLang's modules then
import under sglang_moe's stand-in).
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

if os.environ.get("SGMOE_NO_SGL_KERNEL") == "1":
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a, **k: None if name == "sgl_kernel" else _find_spec(name, *a, **k)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

from sgl_k3_mono.k2.sglang_moe import sglang_routed_experts  # noqa: E402
from sgl_k3_mono.numerics import measure  # noqa: E402
from sgl_k3_mono.reference.ops import situ  # noqa: E402

device, dtype = sys.argv[1], getattr(torch, sys.argv[2])
E, I, L, K = (int(v) for v in sys.argv[4:8])
config = json.loads(sys.argv[8]) if len(sys.argv) > 8 else None
for rows in (int(v) for v in sys.argv[3].split(",")):
    g = torch.Generator(device=device).manual_seed(rows)
    # drawn in the dtype (4.9 GB of w13 at Kimi-K3's shapes, where fp32 draws held 20 GB at their peak and ran
    # the GPU case out of memory beside other processes twice, thirty-seventh session)
    w13 = torch.randn(E, 2 * I, L, generator=g, device=device, dtype=dtype).mul_(L ** -0.5)
    w2 = torch.randn(E, L, I, generator=g, device=device, dtype=dtype).mul_(I ** -0.5)
    # a column slice of a wider row, as both benches pass it (the latent input's columns of the front's output)
    x = torch.randn(rows, 40 + L, generator=g, device=device).to(dtype)[:, 40:]
    ids = torch.stack([torch.randperm(E, generator=g, device=device)[:K] for _ in range(rows)])
    wts = torch.rand(rows, K, generator=g, device=device)
    wts = wts / wts.sum(-1, keepdim=True)
    run = sglang_routed_experts(w13, w2, top_k=K, rows=rows, beta=4.0, linear_beta=25.0, config=config)
    run(x, ids, wts).fill_(float("nan"))  # poisoned: the next run must write every element
    got = run(x, ids, wts).double()
    ref = torch.zeros(rows, L, dtype=torch.float64, device=device)
    for r in range(rows):
        for j in range(K):
            e = int(ids[r, j])
            h = x[r].double() @ w13[e].double().t()
            act = situ(h[:I], h[I:], 4.0, 25.0).to(dtype).double()
            ref[r] += wts[r, j].double() * (act @ w2[e].double().t())
    m = measure(got.float(), ref.float())
    print(json.dumps({"rows": rows, "finite": bool(torch.isfinite(got).all()), "scale": float(ref.abs().max()),
                      **{k: float(m[k]) for k in ("max_abs", "rel", "cosine")}}), flush=True)
