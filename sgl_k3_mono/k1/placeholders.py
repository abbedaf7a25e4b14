"""One K1 launch at a real TP-8 rank's shapes (12 heads x 128, H 7168) on CPU placeholder
tensors (never touched): what the compile checks, Triton's and FlyDSL's, build their
launches from, through k1/host.py's own launch_args."""

from __future__ import annotations


def tp8_placeholder_launch(mode: str, rows: int, *, isa: str = "sm_90", hip: bool = False, grid: int = 132,
                           write: bool = False, contribution: bool = False, pad_slot=None, slots: int = 64,
                           slot_dtype=None, tp: int = 8, tiles: dict | None = None):
    """(plan, views, io, scratch, args, meta) of one rank of TP `tp` (default 8). `isa`: the
    seam rounding; `hip`: the HIP tiles; `tiles`: more K1Plan fields (an option's build)."""
    import torch

    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.k1.host import K1IO, K1Plan, K1Scratch, K1Views, default_tiles, launch_args
    from sgl_k3_mono.reference.attn_res import SeamWeights

    d = K3Dims.from_config(load_config("kimi-k3"), tp=tp)
    H, h, D, K = d.hidden, d.kda_heads_local, d.kda_head_dim, d.conv_width
    P = h * D
    bf = dict(dtype=torch.bfloat16)
    bfa = torch.empty(D + h + 4, H, **bf)
    views = K1Views(qkvg=torch.empty(4 * P, H, **bf), f_a=bfa[:D], b=bfa[D:D + h], f_b=torch.empty(P, D, **bf),
                    conv=torch.empty(3 * P, K), a_log=torch.empty(h), dt_bias=torch.empty(P),
                    o_norm=torch.empty(D, **bf), seam=SeamWeights(torch.empty(1, H, **bf), torch.empty(H, **bf),
                                                                  torch.empty(H, **bf)),
                    heads=h, head_dim=D, lower_bound=d.gate_lower_bound)
    plan = K1Plan.from_dims(d, rows, mode, isa=isa, grid=grid, **{**default_tiles(mode, rows, hip), **(tiles or {})})
    verify = mode == "verify"
    io = K1IO(prefix=torch.empty(rows, H, **bf), bank=torch.empty(rows, 8, H, **bf), nvb=4, write=write,
              slots=torch.empty(1 if verify else rows, dtype=slot_dtype or torch.int32),
              conv_pool=torch.empty(slots, K - 1, 3 * P, **bf), ssm_pool=torch.empty(slots, h, D, D),
              out=torch.empty(rows, P, **bf), residual=None if write else torch.empty(rows, H, **bf),
              contribution=torch.empty(rows, H, **bf) if contribution else None,
              verify_conv=torch.empty(4, rows, K - 1, 3 * P, **bf) if verify else None,
              verify_ssm=torch.empty(4, rows, h, D, D) if verify else None, verify_index=1 if verify else 0,
              pad_slot=pad_slot)
    scratch = K1Scratch.allocate(plan, "cpu")
    args, meta = launch_args(plan, views, io, scratch, layer=1, deadline_s=60.0)
    return plan, views, io, scratch, args, meta
