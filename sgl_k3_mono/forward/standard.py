"""The standard path of a step, for `bench step`: the same step with each launch replaced
by what SGLang's standard path runs for the same work (K1: `k1.bench.standard_k1`, the
seam as SGLang's Triton pair (`standard_seam`), cuBLAS in-projection and SGLang's
`kda_fused_decode`; K2: `k2.bench.standard_path`, library calls with bf16 experts), so
the two steps differ in the launches alone. Per-layer weight layouts are prepared on
entry (not timed).

The routed experts are SGLang's own fused MoE Triton kernels (`k2/sglang_moe.py`, buffers
for the step's rows) when the step's rows are given, as in `bench step`; without them, the
gathered bmm (copies each pair's experts first: more bytes than SGLang reads), which the
CPU test runs because Triton's interpreter computes SGLang's kernel wrong in bf16."""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch

from sgl_k3_mono.forward import launches
from sgl_k3_mono.forward.layers import StepModel


SGLANG_KDA_HEADS = (3, 6, 12)
"""The local KDA head counts SGLang 0.5.23's kda_fused_decode is built for (Kimi-K3 at TP 32 /
16 / 8), each of 128 dims: its kernel refuses any other at run time."""


@contextlib.contextmanager
def standard_launches(model: StepModel, *, top_k: int, rows: Optional[int] = None,
                      reduce: Optional[Callable[[torch.Tensor], object]] = None, config: Optional[dict] = None):
    """Within the block, `launches.k1` / `launches.k2` run the standard path; yields what
    runs the KDA recurrence and the routed experts (a dict of two strings). `rows`: the
    step's rows, for SGLang's fused MoE (raises ImportError where its Triton ops do not
    import); None: the gathered bmm. `reduce` (TP > 1): K2's all-reduces, in place
    (`k2.bench.standard_path`); K1's work is TP-local. `config`: SGLang's fused MoE config
    for the step's rows (a tuned file's entry; None: SGLang's lookup, its default for
    Kimi-K3's shapes). Refuses (ValueError) MXFP4 experts:
    sm_90 has no MXFP4 MoE op in SGLang to compose (its default runner dequantizes them at
    load)."""
    from sgl_k3_mono.k1.bench import StandardK1, sglang_kda, standard_k1
    from sgl_k3_mono.k2.bench import standard_path

    k1w = {lr.index: StandardK1.from_views(lr.k1, model.eps) for lr in model.layers if lr.k1 is not None}
    on_gpu = any(v.views.qkvg.is_cuda for v in k1w.values())
    v0 = next(iter(k1w.values())).views if k1w else None
    serves = v0 is not None and v0.heads in SGLANG_KDA_HEADS and v0.head_dim == 128
    op = sglang_kda()[0] if on_gpu and serves else None  # SGLang's KDA kernel is CUDA-only
    if op is not None:
        kda_what = "SGLang kda_fused_decode"
    elif v0 is not None and not serves:
        kda_what = (f"torch KDA chain (SGLang's KDA kernel serves {SGLANG_KDA_HEADS} heads of 128 a rank; "
                    f"this model has {v0.heads} of {v0.head_dim})")
    else:
        kda_what = "torch KDA chain (SGLang's KDA kernel needs CUDA and the kit)"
    if rows is None:
        experts_what = "gathered bmm (cuBLAS; copies the experts)"
    else:
        experts_what = (f"SGLang fused MoE (Triton), {rows} rows, "
                        + (f"config {config}" if config else "SGLang's default config"))
    experts = "bmm" if rows is None else "sglang"
    k2w = {lr.index: standard_path(lr.k2, top_k=top_k, rows=rows, experts=experts, reduce=reduce, config=config)
           for lr in model.layers if lr.k2 is not None}

    def k1(plan, bufs, views, io, *, layer, deadline_s):
        standard_k1(k1w[layer], io, plan.k1, op)

    def k2(plan, bufs, w, attn_out, nvb, prefix, out, *, layer):
        k2w[layer](attn_out, bufs.bank, nvb, prefix, out)
        return out

    saved = launches.k1, launches.k2
    launches.k1, launches.k2 = k1, k2
    try:
        yield dict(kda=kda_what, experts=experts_what)
    finally:
        launches.k1, launches.k2 = saved
