"""`sgl-k3-mono bench k1`: K1 at real per-rank TP 8 shapes, ours against SGLang's standard
chain and the byte floor, from ONE run on one GPU.

    python3 -m sgl_k3_mono.k1.bench [--rows 1,2,4,8] [--modes decode,verify] [--layers 3]

- ours: the persistent launch (one launch a layer), and each phase alone (the
  phase-by-phase launches) for the per-phase columns (the split seam is three launches);
- standard: what SGLang runs for the same work: the attn-res seam (SGLang's own Triton
  score/combine pair where it imports, else torch: standard_seam.py), the
  in-projection through cuBLAS (torch F.linear on the same weights, [q|k|v|g] and
  `_bfa_w`), f_b through F.linear, then SGLang's `kda_fused_decode` (decode, when
  `sglang.kernels.ops.attention.kda_fused_decode` imports) or else the reference's torch
  chain (conv, gate, norms, delta rule, gated norm); the table header says which ran;
- floor: the bytes K1 must move (budget.k1_bytes) over the copy bandwidth measured in
  this run (a 2 GiB device-to-device copy, read + write bytes over time).

Every variant runs `--layers` consecutive layers with their own weights (so the 90 MB of
weights a layer are not served from L2 by the previous repetition), captured in a CUDA
graph and timed by events over the replays; the table shows the median per layer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from sgl_k3_mono.budget import k1_bytes
from sgl_k3_mono.configs import load_text_config
from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.k1.host import K1IO, K1Plan, K1Scratch, K1Views, run_k1
from sgl_k3_mono.k1.weights import K1Weights
from sgl_k3_mono.reference import kda
from sgl_k3_mono.reference.ops import bf16
from sgl_k3_mono.standard_seam import StandardSeam, seam_kind
from sgl_k3_mono.timing import graph_time_us

DEV = "cuda"


def _graph_time_us(fn: Callable[[], None], reps: int, per: int) -> float:
    """Median time of one `fn` call (which does `per` layers) over CUDA-graph replays, per layer."""
    return graph_time_us(fn, iters=1, reps=reps, per=per)


def copy_bandwidth_tb_s() -> float:
    """Device-to-device copy of 2 GiB: (read + write bytes) / time, median of 20."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.bfloat16, device=DEV).normal_()
    dst = torch.empty_like(src)
    ts = []
    for _ in range(23):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    return 2 * n * 2 / statistics.median(ts[3:]) / 1e12


def sglang_kda():
    try:
        return __import__("sglang.kernels.ops.attention.kda_fused_decode", fromlist=["_"]), None
    except Exception as e:  # no SGLang (kit) on this machine
        return None, f"{type(e).__name__}: {e}"


_WEIGHTS: dict = {}


def _weights(dims: K3Dims, i: int):
    """Layer i's random weights (built once: 90 MB of randn a layer takes seconds on the host).
    12 heads x 128 at TP 1 == one TP-8 rank's shapes, with no 96-head tensor to build."""
    if i not in _WEIGHTS:
        _WEIGHTS[i] = K1Weights.random(dims.hidden, dims.kda_heads_local, dims.kda_head_dim, seed=i).shard(0, 1)
    return _WEIGHTS[i]


class Layer:
    """One KDA layer's weights, states and IO on the GPU, and both ways to run it."""

    def __init__(self, dims: K3Dims, layer: int, rows: int, mode: str, seed: int, grid: int, tiles: dict):
        g = torch.Generator().manual_seed(1000 + seed)
        w = _weights(dims, seed % 1000)
        t = lambda x: x.to(DEV)  # noqa: E731
        from sgl_k3_mono.k1.weights import K1LocalWeights
        from sgl_k3_mono.reference.attn_res import SeamWeights

        self.lw = K1LocalWeights(qkvg=t(w.qkvg), bfa=t(w.bfa), f_b=t(w.f_b), conv=t(w.conv), a_log=t(w.a_log),
                                 dt_bias=t(w.dt_bias), o_norm=t(w.o_norm),
                                 seam=SeamWeights(t(w.seam.proj), t(w.seam.score_norm), t(w.seam.out_norm)),
                                 heads=w.heads, head_dim=w.head_dim, lower_bound=w.lower_bound)
        self.views = K1Views.from_local(self.lw)
        self.plan = K1Plan.from_dims(dims, rows, mode, isa="sm_90", grid=grid, **tiles)
        self.scratch = K1Scratch.allocate(self.plan, DEV)
        self.nvb = dims.bank_rows_at_attn(layer)
        self.write = dims.is_block_write(layer)
        p, h, d, kw = self.plan.proj, self.plan.heads, self.plan.head_dim, self.plan.conv_width
        H = dims.hidden
        n_slots = 64
        rnd = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
        slots = torch.randperm(n_slots, generator=g)[: (rows if mode == "decode" else 1)].to(torch.int32)
        verify = mode == "verify"
        self.io = K1IO(
            prefix=t(rnd(rows, H).bfloat16()), bank=t(rnd(rows, dims.bank_rows(), H).bfloat16()), nvb=self.nvb,
            write=self.write, slots=t(slots), conv_pool=t(rnd(n_slots, kw - 1, 3 * p).bfloat16()),
            ssm_pool=t(rnd(n_slots, h, d, d) * 0.05), out=torch.empty(rows, p, dtype=torch.bfloat16, device=DEV),
            contribution=None, residual=None if self.write else torch.empty(rows, H, dtype=torch.bfloat16,
                                                                            device=DEV),
            verify_conv=t(rnd(2, 8, kw - 1, 3 * p).bfloat16()) if verify else None,
            verify_ssm=t(rnd(2, 8, h, d, d)) if verify else None, verify_index=1)
        self.std = StandardK1.from_views(self.views, self.plan.eps)

    # ---- ours ---------------------------------------------------------------------------
    def ours(self, phase: int | None = None) -> None:
        run_k1(self.plan, self.views, self.io, scratch=self.scratch, phase=phase)

    def standard(self, op) -> None:
        standard_k1(self.std, self.io, self.plan, op)


@dataclass(frozen=True)
class StandardK1:
    """One KDA layer's weights as SGLang's standard chain reads them (built at setup, not
    timed: SGLang holds `_bfa_w` merged and hands its KDA op per-tap conv weights)."""

    views: K1Views
    bfa: torch.Tensor
    """[D + h, H] bf16: f_a over b, one GEMM."""
    conv_taps: tuple
    """3 x [K, P] fp32: the q, k, v conv taps."""
    conv_bias: torch.Tensor
    onorm_f32: torch.Tensor
    seam: StandardSeam

    @classmethod
    def from_views(cls, v: K1Views, eps: float) -> "StandardK1":
        p = v.heads * v.head_dim
        wt = v.conv.t().contiguous()
        return cls(v, torch.cat([v.f_a, v.b]), tuple(wt[:, i * p:(i + 1) * p].contiguous() for i in range(3)),
                   torch.zeros(3 * p, device=v.conv.device), v.o_norm.float(),
                   StandardSeam(v.seam.proj, v.seam.score_norm, v.seam.out_norm, eps))


def standard_k1(sw: StandardK1, io: K1IO, plan: K1Plan, op) -> None:
    """The standard chain for K1's work, writing what K1 writes (io.out, the pools, the bank
    row on a block write, io.residual): the attn-res seam (`StandardSeam`: SGLang's
    sm_90 Triton pair where it runs), the in-projection through cuBLAS,
    then SGLang's `kda_fused_decode` (`op`; decode) or the reference's torch chain."""
    v = sw.views
    p, h, d = plan.proj, plan.heads, plan.head_dim
    pre = io.prefix if io.contribution is None else (io.prefix.float() + io.contribution.float()).bfloat16()
    if io.residual is not None:
        io.residual.copy_(pre)
    hn = sw.seam(io.bank, io.nvb, pre)
    if io.write:
        io.bank[:, io.nvb] = pre
    qkvg = F.linear(hn, v.qkvg)
    bfa = F.linear(hn, sw.bfa)
    mixed, gate = qkvg[:, : 3 * p], qkvg[:, 3 * p:]
    f_a, b = bfa[:, :d], bfa[:, d: d + h]
    a = F.linear(f_a, v.f_b)
    if op is not None and plan.mode == "decode":
        slots = io.slots if io.slots.dtype == torch.int32 else io.slots.to(torch.int32)
        o = op.kda_fused_decode(mixed, a, b, io.conv_pool, *sw.conv_taps, sw.conv_bias, v.a_log, v.dt_bias,
                                gate, sw.onorm_f32, io.ssm_pool, slots, scale=d ** -0.5, onorm_eps=1e-5,
                                lower_bound=v.lower_bound)
        io.out.copy_(o.reshape(io.out.shape))
        return
    _torch_kda(v, io, plan, mixed, a, b, gate)


def _torch_kda(v: K1Views, io: K1IO, plan: K1Plan, mixed, a, b, gate) -> None:
    """The reference's KDA chain as torch ops (no SGLang kernels)."""
    p, h, d = plan.proj, plan.heads, plan.head_dim
    sl = io.slots.long() if plan.mode == "decode" else io.slots.long()[:1]
    toks = [slice(None)] if plan.mode == "decode" else [slice(t, t + 1) for t in range(plan.rows)]
    win, st = io.conv_pool[sl], io.ssm_pool[sl]
    for t, r in enumerate(toks):
        y, win = kda.conv_update(win, mixed[r], v.conv)
        n = y.shape[0]
        q, k, vv = (z.reshape(n, h, d) for z in y.split(p, -1))
        g = kda.log_decay(a[r].float().reshape(n, h, d), v.a_log, v.dt_bias.reshape(h, d), v.lower_bound)
        o, st = kda.delta_rule_step(st, kda.l2norm(q) * d ** -0.5, kda.l2norm(k), vv, torch.exp(g),
                                    torch.sigmoid(b[r].float()))
        out = bf16(kda.gated_rmsnorm(bf16(o), v.o_norm, gate[r].reshape(n, h, d)))
        io.out[r] = out.reshape(n, p).to(io.out.dtype)
        if plan.mode == "verify":
            io.verify_conv[io.verify_index, t] = win[0]
            io.verify_ssm[io.verify_index, t] = st[0]
    if plan.mode == "decode":
        io.conv_pool[sl] = win
        io.ssm_pool[sl] = st


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sgl-k3-mono bench k1", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--modes", default="decode,verify")
    ap.add_argument("--layers", type=int, default=3, help="consecutive layers a replay runs (own weights each)")
    ap.add_argument("--layer", type=int, default=37, help="model layer index (sets nvb and block write)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--block-k", type=int, default=None)
    ap.add_argument("--stages", type=int, default=None)
    ap.add_argument("--prefetch", type=int, default=None,
                    help="K1Plan.prefetch: bytes of each in-projection row asked into L2 during the seam")
    ap.add_argument("--config", default="kimi-k3")
    ap.add_argument("--no-phases", action="store_true", help="skip the per-phase timings")
    ap.add_argument("--carve", action="store_true",
                    help="K1Plan.carve: the launch's carveout fitted to its block (runtime/triton_smem)")
    ap.add_argument("--g-last", choices=("on", "off"), default=None,
                    help="K1Plan.g_last (the gate's rows streamed during the recurrence) on or off at every row "
                         "count (default: the plan's, on in verify from 2 rows)")
    ap.add_argument("--block-k-g", type=int, default=None, help="K1Plan.block_k_g (with --g-last)")
    ap.add_argument("--seam-single", action="store_true",
                    help="one program a row for the seam (K1Plan.seam_split off), for comparison")
    ap.add_argument("--after-code", action="store_true",
                    help="also time ours with 110 KB of other straight-line code run before each layer's launch, "
                         "less that code alone (after_code: as a served step's K1 runs after a K2 or an MLA; "
                         "fifty-third session: K2 loses ~12 us at 1 row so)")
    ap.add_argument("--warm-only", action="store_true",
                    help="compile the persistent launches into Triton's cache, time nothing")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench k1: needs a CUDA GPU", file=sys.stderr)
        return 2
    dims = K3Dims.from_config(load_text_config(args.config), tp=8)
    grid = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = {k: v for k, v in (("block_k", args.block_k), ("num_stages", args.stages),
                                ("prefetch", args.prefetch)) if v is not None}
    if args.seam_single:
        tiles["seam_split"] = False
    if args.carve:
        tiles["carve"] = True
    if args.g_last is not None:
        tiles["g_last"] = args.g_last == "on"
    if args.block_k_g is not None:
        tiles["block_k_g"] = args.block_k_g
    if args.warm_only:
        from sgl_k3_mono.k1.host import compile_k1

        for mode in args.modes.split(","):
            for m in (int(x) for x in args.rows.split(",")):
                L = Layer(dims, args.layer, m, mode, seed=1000 * m, grid=grid, tiles=tiles)
                compile_k1(L.plan, L.views, L.io, L.scratch)
                print(f"K1WARM {mode} M={m} {tiles}", flush=True)
        return 0
    op, why = sglang_kda()
    bw = copy_bandwidth_tb_s()
    std_decode = "SGLang kda_fused_decode" if op is not None else f"torch reference chain (no SGLang: {why})"
    print(f"K1 at TP 8 per-rank shapes (H {dims.hidden}, {dims.kda_heads_local} heads x {dims.kda_head_dim}), "
          f"layer {args.layer} (nvb {dims.bank_rows_at_attn(args.layer)}), grid {grid}, {args.layers} layers a replay")
    print(f"standard = seam: {seam_kind(dims.hidden, DEV)} + cuBLAS F.linear in-projection + F.linear f_b + "
          f"[decode: {std_decode}; verify: torch reference chain]; copy bandwidth {bw:.2f} TB/s (read+write)")
    hdr = (f"{'M':>2} {'mode':>6} {'ours us':>8} {'seam':>6} {'in_proj':>8} {'kda':>6} {'std us':>8} "
           f"{'floor us':>9} {'BW frac':>8} {'speedup':>8}  plan")
    print(hdr)
    for mode in args.modes.split(","):
        for m in (int(x) for x in args.rows.split(",")):
            layers = [Layer(dims, args.layer, m, mode, seed=1000 * m + i, grid=grid, tiles=tiles)
                      for i in range(args.layers)]
            n = len(layers)
            ours = _graph_time_us(lambda: [L.ours() for L in layers], args.reps, n)
            phases = [float("nan")] * 3 if args.no_phases else \
                [_graph_time_us(lambda ph=ph: [L.ours(ph) for L in layers], args.reps, n) for ph in (0, 1, 2)]
            after = ""
            if args.after_code:  # other code first, as in a served step (runtime/l2_stream.code_sweep: 5 x 22 KB)
                from sgl_k3_mono.runtime.l2_stream import code_sweep

                xbuf, cout = torch.ones(1 << 12, device=DEV), torch.empty(grid, 128, device=DEV)
                other = lambda: code_sweep(xbuf, cout, kernels=5)  # noqa: E731
                cold = _graph_time_us(lambda: [(other(), L.ours()) for L in layers], args.reps, n) \
                    - _graph_time_us(lambda: [other() for _ in layers], args.reps, n)
                after = f" after_code={cold:.1f}us"
            std = _graph_time_us(lambda: [L.standard(op) for L in layers], args.reps, n)
            floor = k1_bytes(dims, args.layer, m, "decode" if mode == "decode" else "target_verify").total \
                / (bw * 1e12) * 1e6
            cx = layers[0].plan.constexprs()
            print(f"{m:>2} {mode:>6} {ours:8.1f} {phases[0]:6.1f} {phases[1]:8.1f} {phases[2]:6.1f} {std:8.1f} "
                  f"{floor:9.1f} {floor / ours:8.2f} {std / ours:8.2f}  BN_EFF={cx['BN_EFF']} BK={cx['BK']} "
                  f"stages={cx['NUM_STAGES']} NV={cx['NV']} PF={cx['PF']} carve={int(layers[0].plan.carve)}"
                  + (f" GL NKP={cx['NKP']} BNG_EFF={cx['BNG_EFF']} BKG={cx['BKG']}" if cx["GL"] else "") + after,
                  flush=True)
            layers = None  # (the lambdas above hold the name: drop the layers it points to)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
