"""`sgl-k3-mono bench k2`: one real per-rank Kimi-K3 MoE layer (TP-8 slice) on this GPU,
M = 1, 2, 4, 8, in one run: our persistent K2 launch, a standard-path composition of
the same layer, and the byte floor (bytes the launch must read / copy bandwidth
measured in this run). Everything timed as CUDA-graph replays with events, median.

The standard path here is what runs on the lent H200 without SGLang's runtime:
cuBLAS (torch.matmul) for o_proj, the merged MoE front, the shared down and the latent
up projections; SGLang's own SiTU kernel op (through the kit) or torch; routing in torch
ops (sigmoid, bias, top-k, renormalise); the attn-res seam as `StandardSeam` (SGLang's
Triton score/combine pair, torch RMSNorm); the routed experts as SGLang's triton MoE runner
forms them from its own Triton ops (k2/sglang_moe.py; `std`), and, as before, as one batched
cuBLAS matmul over the gathered experts in bf16 (`std_bmm`, which copies the experts first).
On sm_90 SGLang 0.5.23 keeps no MXFP4 experts under its default MoE runner (auto, i.e. triton): Mxfp4MoEMethod's
post-load dequantizes them to bf16, and the flag's K2 then reads those bf16 experts too. The
runners that keep MXFP4 there (Marlin, FlashInfer's cutlass_sm90, triton_kernels) repack it,
which the flag refuses; Marlin and FlashInfer are CUDA builds that do not run on the lent
machine. So the like-for-like comparison is bf16 experts on both sides; MXFP4 rows (the
gfx950 design's path) are ours vs floor.
TP 1 on one GPU: no all-reduce on either side (`bench k2-tp`, k2/bench_tp.py, runs the
same layer over several GPUs with the reduces).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import time
from typing import Callable, Optional

import torch

from sgl_k3_mono.standard_seam import StandardSeam, seam_kind
from sgl_k3_mono.timing import graph_time_us


def _graph_time_us(fn: Callable[[], None], iters: int = 200, reps: int = 7) -> float:
    return graph_time_us(fn, iters=iters, reps=reps)


@functools.lru_cache(maxsize=None)
def copy_bandwidth_gb_s(gib: float = 4.0) -> tuple[float, float]:
    """(copy, read) bandwidth in GB/s: (read + write bytes) / time of a large D2D copy,
    and bytes / time of a read-only fp32-accumulated sum (what a weight stream does)."""
    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    acc = torch.empty((), dtype=torch.float32, device="cuda")
    copy_us = _graph_time_us(lambda: dst.copy_(src), iters=10, reps=5)
    read_us = _graph_time_us(lambda: acc.copy_(src.sum(dtype=torch.float32)), iters=10, reps=5)
    return 2 * n * 2 / (copy_us * 1e-6) / 1e9, n * 2 / (read_us * 1e-6) / 1e9


def _situ_op(device: str = "cuda"):
    """SGLang's SiTU-and-mul kernel where it runs (the kit on a CUDA GPU), else torch."""
    def torch_situ(x):
        g, u = x.float().chunk(2, -1)
        return (4 * torch.tanh(g / 4) * torch.sigmoid(g) * 25 * torch.tanh(u / 25)).bfloat16()

    if torch.device(device).type != "cuda":
        return torch_situ, "torch SiTU"
    try:
        from sglang.kernels.ops.activation.kimi_k3_situ_and_mul import situ_and_mul

        return lambda x: situ_and_mul(x, None, 4.0, 25.0), "SGLang situ_and_mul (kit)"
    except Exception:
        return torch_situ, "torch SiTU"


def standard_path(w, *, top_k: int, rows: Optional[int] = None, experts: str = "bmm",
                  reduce: Optional[Callable[[torch.Tensor], object]] = None, config: Optional[dict] = None):
    """The layer as separate library calls (bf16 experts): `run(attn, bank, nvb, prefix,
    out)` writes `out` (prefix None: a block write restarted the residual). `experts`:
    "sglang", the routed experts as SGLang's triton runner forms them (k2/sglang_moe.py;
    buffers for `rows` rows); "bmm", one batched cuBLAS matmul over the gathered experts
    (which copies each (row, slot)'s expert weights first: more bytes than SGLang reads).
    `reduce` (TP > 1; `w` one rank's): an in-place sum over the ranks of a bf16 tensor,
    called where SGLang's layer all-reduces: the o_proj output, then one flat buffer of
    [routed latent | shared output] (reference doc, steps D and E). `config`: SGLang's fused
    MoE kernel config for both GEMMs (`sglang_routed_experts`; None: SGLang's lookup)."""
    situ, _ = _situ_op(w.o_proj.device)
    moe = w.moe
    if not hasattr(moe.experts, "w13"):
        raise ValueError("standard_path: composed for bf16 routed experts only (no MXFP4 MoE op on sm_90)")
    routed = None
    if experts == "sglang":
        from sgl_k3_mono.k2.sglang_moe import sglang_routed_experts

        routed = sglang_routed_experts(moe.experts.w13, moe.experts.w2, top_k=top_k, rows=rows,
                                       beta=moe.params.situ_beta, linear_beta=moe.params.situ_linear_beta,
                                       config=config)
    front = torch.cat([moe.shared_gate_up, moe.router, moe.latent_down])  # SGLang's merged _front_w
    s2, e = moe.shared_gate_up.shape[0], moe.router.shape[0]
    w13, w2 = moe.experts.w13, moe.experts.w2
    eps = moe.params.eps
    seam = StandardSeam(w.mlp_res_proj, w.mlp_res_norm, w.post_attention_layernorm, eps)

    def run(attn, bank, nvb, prefix, out):
        a = attn @ w.o_proj.t()
        if reduce is not None:
            reduce(a)
        p = a if prefix is None else (prefix.float() + a.float()).bfloat16()
        h2 = seam(bank, nvb, p)
        f = h2 @ front.t()
        gu, logits, xin = f[:, :s2], f[:, s2:s2 + e].float(), f[:, s2 + e:]
        shared = situ(gu) @ moe.shared_down.t()
        s = torch.sigmoid(logits)
        ids = torch.topk(s + moe.router_bias, top_k, -1).indices
        wts = s.gather(1, ids)
        wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        if routed is not None:
            lat = routed(xin, ids, wts).float()
        else:
            flat = ids.flatten()
            hx = torch.bmm(w13[flat], xin.repeat_interleave(top_k, 0).unsqueeze(-1)).squeeze(-1)
            act = situ(hx)
            y = torch.bmm(w2[flat], act.unsqueeze(-1)).squeeze(-1).view(ids.shape[0], top_k, -1)
            lat = (y.float() * wts.unsqueeze(-1)).sum(1)
        if reduce is not None:  # SGLang's one all-reduce of the flat bf16 [latent | shared]
            m, n = lat.shape
            buf = torch.cat([lat.bfloat16().flatten(), shared.flatten()])
            reduce(buf)
            lat, shared = buf[:m * n].view(m, n).float(), buf[m * n:].view(m, -1)
        ln = (lat * torch.rsqrt(lat.pow(2).mean(-1, keepdim=True) + eps) * moe.latent_norm.float()).bfloat16()
        o = ln @ moe.latent_up.t()
        out.copy_(((o.float() + shared.float()).bfloat16().float() + p.float()).bfloat16())

    return run


def trace_summary(t: torch.Tensor) -> dict:
    """One launch's trace ([grid, TRACE_SLOTS] ns; -1 where a phase did not run) as
    {phase: (us from the median program's entry to the median entry into the next phase
    that ran, us between the first and the last program's entry)}."""
    from sgl_k3_mono.k2.triton.frame import PHASES, TRACE_EXIT

    ran = [i for i in range(len(PHASES)) if bool((t[:, i] >= 0).all())] + [TRACE_EXIT.value]
    med = {i: float(t[:, i].double().median()) for i in ran}
    return {PHASES[a]: ((med[b] - med[a]) / 1e3, float(t[:, a].max() - t[:, a].min()) / 1e3)
            for a, b in zip(ran, ran[1:])}


def work_summary(t: torch.Tensor) -> dict:
    """One launch's trace as {phase: (us of the median program's own work, us of the
    longest, the program that took it)}: a program's work in a phase runs from its entry
    to its arrival at the phase's barrier (to its exit for the last phase), so the longest
    is the pole the others waited on at that barrier."""
    from sgl_k3_mono.k2.trace_report import phase_spans

    return {name: (float(work.median()), float(work.max()), int(work.argmax()))
            for name, (work, _) in phase_spans(t[None]).items()}


def phase_trace(launch, run_once: Callable[[], None], runs: int = 20) -> dict:
    """In-launch phase profile: the persistent launch writes every program's entry time
    into each phase and its arrival at each barrier (K2Launch.trace). Over `runs` eager
    launches: {"entries": trace_summary's medians per phase (barrier exits are close
    together, so the median program's entry is where the grid stands), "work":
    work_summary's medians, with the program most often the longest, "raw": every
    launch's stamps, [runs, grid, slots] (trace_report reads them)}."""
    from sgl_k3_mono.k2.triton.frame import TRACE_SLOTS

    launch.trace = torch.full((launch.plan.grid, TRACE_SLOTS.value), -1, dtype=torch.int64, device="cuda")
    try:
        runs_, works, raw = [], [], []
        for _ in range(runs):
            launch.trace.fill_(-1)
            run_once()
            torch.cuda.synchronize()
            t = launch.trace.cpu()
            raw.append(t)
            runs_.append(trace_summary(t))
            works.append(work_summary(t))
    finally:
        launch.trace = None
    entries = {p: tuple(statistics.median(r[p][i] for r in runs_) for i in range(2)) for p in runs_[0]}
    # the pole: the medians of its work, and the program that was it most often
    poles = {p: (statistics.median(w[p][0] for w in works), statistics.median(w[p][1] for w in works),
                 statistics.mode(w[p][2] for w in works)) for p in works[0]}
    return {"entries": entries, "work": poles, "raw": torch.stack(raw)}


def run(rows_list=(1, 2, 4, 8), fmts=("mxfp4", "bf16"), phases: bool = True,
        block: Optional[dict] = None, per_sm: int = 1, trace: bool = False, warm_only: bool = False,
        trace_out: Optional[str] = None, std_configs: Optional[dict] = None,
        std_seen: Optional[dict] = None, l2_cold: bool = False, rotate: int = 0,
        cold_only: tuple = ()) -> list[dict]:
    """`block`: tile overrides for K2Launch.block (the sweep the defaults came from).
    `trace`: also the in-launch phase profile (phase_trace); `trace_out`: a folder for its
    stamps, every launch's, one file for the block (trace_report.save). `warm_only`: compile the
    persistent launches (and the traced ones with `trace`) into Triton's cache and time
    nothing (tools/device/env.sh `warm` runs several such processes at once).
    `per_sm`: persistent programs an SM (an experiment: co-residency is not checked, so a
    build too large for it times out at the launch's 5 s deadline and exits).
    `std_configs`: {rows: SGLang fused MoE config} (a tuned file's content,
    tools/device/sglang_moe_tune.py): also the standard path with those configs (`std_tuned`).
    `std_seen`: {(fmt, rows): standard-path times} from an earlier block of the same process, which
    it reuses (the standard path reads the same seeded layer and inputs whatever the block), so a
    sweep of many blocks times it once a row count; filled in here.
    `l2_cold`: also ours with L2 emptied before each launch (`ours_cold_us["l2_cold"]`: a
    256 MB buffer read by torch's sum, then the launch, less the read timed alone), as a served
    step's K2 runs after K1 or MLA streamed their own bytes; three ways of putting part of L2
    back after the flush: the launch's small tensors (`l2_cold_data_warm`), a word of every
    64 KB of its weights (their translations: `l2_cold_pages_warm`), the same launch on a copy
    of the weights (its code with the rest: `l2_cold_after_other`); and the launch after each
    other read of _L2Flush.READS (`after_<read>`). On an H100 at 1 row bf16 (k2-sm90.md's
    forty-ninth section) 133.4 us warm, 145.6 cold, 144.7 / 145.5 with the small tensors /
    pages back, 132.9 after the other launch; fifty-second: 133.0 after the same 256 MB read by
    l2_stream's kernel, 135.7 after it read evict-first.
    `rotate`: also ours over that many copies of the layer's weights, one launch each in turn
    in one graph (`ours_rot_us`, a launch's share): no launch finds its own weights from the
    launch before, as in a served step, and nothing is subtracted.
    `cold_only`: with `l2_cold`, only the ways of these names."""
    from sgl_k3_mono.budget import k2_bytes
    from sgl_k3_mono.k2.synthetic import tp8_rank_dims
    from sgl_k3_mono.k2.triton.frame import PHASES

    d = tp8_rank_dims()
    from sgl_k3_mono.budget import expected_experts
    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims

    d8 = K3Dims.from_config(load_config("kimi-k3"), tp=8)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if warm_only:
        return _warm(d, rows_list, fmts, block, per_sm * sms, trace)
    copy_bw, bw = copy_bandwidth_gb_s()
    print(f"device {torch.cuda.get_device_name(0)}, {sms} SMs; copy bandwidth (read+write) {copy_bw:.0f} GB/s, "
          f"read bandwidth {bw:.0f} GB/s (the floor uses this); "
          f"standard path SiTU: {_situ_op()[1]}; seam: "
          f"{seam_kind(d.hidden, 'cuda')}")
    results, raw = [], {}
    for fmt in fmts:
        rw = _rank_weights(d, fmt)
        for m in rows_list:
            t_row = time.monotonic()
            launch, (attn, bank, nvb, prefix, out) = _launch(rw, d, m, block, per_sm * sms)
            launch(rw, attn, bank, nvb, prefix, out)  # Triton's cache (or a compile), apart from the timing
            torch.cuda.synchronize()
            t_first = time.monotonic()
            ours = _graph_time_us(lambda: launch(rw, attn, bank, nvb, prefix, out))
            cold: dict = {}  # (the printed name, ours_<name>: us)
            if l2_cold:
                flush = _L2Flush()
                once = lambda: launch(rw, attn, bank, nvb, prefix, out)  # noqa: E731
                # cold: L2 emptied first, then put partly back: the launch's inputs, scratch and small
                # weights; and one word of every 64 KB of the weights (their address translations, next
                # to none of their bytes); and the same launch on a copy of the weights (its code, scratch
                # and inputs, none of this copy's weights). Then other reads before the launch, to find
                # which of them cost it what the flush does (fifty-second session: after a 256 MB read
                # by runtime/l2_stream.py's kernel the launch ran warm, after torch's sum of it cold)
                small = _small_tensors((rw, launch.scratch, attn, bank, prefix, out))
                pages = _page_touches(rw)
                other = _weight_copies(fmt, rw, 2)[1]
                cold_ways = {"l2_cold": flush.before(), "l2_cold_data_warm": flush.before(rewarm=small),
                             "l2_cold_pages_warm": flush.before(rewarm=small + pages),
                             "l2_cold_after_other": flush.before(
                                 prelaunch=lambda: launch(other, attn, bank, nvb, prefix, out)),
                             **{f"after_{how}": flush.before(read=how) for how in _L2Flush.READS if how != "sum"}}
                assert set(cold_ways) == set(cold_way_names())
                if cold_only:
                    cold_ways = {k: b for k, b in cold_ways.items() if k in cold_only}
                cold = {k: _graph_time_us(lambda b=b: (b(), once())) - _graph_time_us(b) for k, b in cold_ways.items()}
            ours_rot = None
            if rotate > 1:
                copies = _weight_copies(fmt, rw, rotate)
                ours_rot = _graph_time_us(lambda: [launch(c, attn, bank, nvb, prefix, out) for c in copies],
                                          iters=max(1, 200 // rotate)) / rotate
            t_timed = time.monotonic()
            per_phase = []
            if phases:
                for p in range(len(PHASES)):
                    per_phase.append(_graph_time_us(lambda: launch(rw, attn, bank, nvb, prefix, out, phase=p),
                                                    iters=100, reps=3))
            traced = phase_trace(launch, lambda: launch(rw, attn, bank, nvb, prefix, out)) if trace else {}
            # rotated, the stamps left are the last copy's: a launch after two others, none of its weights in L2
            traced_rot = phase_trace(launch, lambda: [launch(c, attn, bank, nvb, prefix, out) for c in copies]) \
                if trace and rotate > 1 else {}
            traced_cold = {k: phase_trace(launch, lambda b=b: (b(), once())) for k, b in cold_ways.items()} \
                if trace and l2_cold else {}
            touched = int(torch.unique(launch.scratch.ids).numel())
            lb = k2_bytes(d8, 13, m, fmt, 1536)
            expert_b = lb.experts / expected_experts(d8, m) * touched  # the experts this step really touched
            floor_bytes = lb.weights + lb.activations + expert_b
            floor_us = floor_bytes / (bw * 1e9) * 1e6
            std = std_bmm = std_tuned = None
            if std_seen is not None and (fmt, m) in std_seen:
                std, std_bmm, std_tuned = std_seen[(fmt, m)]
            elif fmt == "bf16":
                std_out = torch.empty_like(out)

                def std_us(**kw) -> float:
                    run_std = standard_path(rw, top_k=16, rows=m, **kw)
                    run_std(attn, bank, nvb, prefix, std_out)  # its kernels' compile, apart from the timing
                    return _graph_time_us(lambda: run_std(attn, bank, nvb, prefix, std_out))

                std_bmm = std_us(experts="bmm")
                try:
                    std = std_us(experts="sglang")
                except Exception as e:  # (SGLang's Triton MoE ops where they do not import or run)
                    print(f"K2BENCH standard path with SGLang's fused MoE: not run ({type(e).__name__}: {e})",
                          flush=True)
                cfg = (std_configs or {}).get(str(m))
                if cfg is not None and std is not None:
                    std_tuned = std_us(experts="sglang", config=cfg)
                if std_seen is not None:
                    std_seen[(fmt, m)] = (std, std_bmm, std_tuned)
            r = dict(fmt=fmt, rows=m, ours_us=ours, ours_cold_us=cold, ours_rot_us=ours_rot,
                     std_us=std, std_bmm_us=std_bmm, std_tuned_us=std_tuned, floor_us=floor_us,
                     touched=touched, bytes=floor_bytes, phases_us=per_phase, trace_us=traced)
            results.append(r)
            std_s = f"{std:9.1f}" if std else "      n/a"
            sp = f"{std / ours:6.2f}x" if std else "    n/a"
            bmm_s = f" std_bmm={std_bmm:.1f}us ({std_bmm / ours:.2f}x)" if std_bmm else ""
            if std_tuned:
                bmm_s += f" std_tuned={std_tuned:.1f}us ({std_tuned / ours:.2f}x)"
            if cold:
                bmm_s += f" ours_l2_cold={cold['l2_cold']:.1f}us (bw_frac {floor_us / cold['l2_cold']:.2f})"
                bmm_s += "".join(f" ours_{k}={v:.1f}us" for k, v in cold.items() if k != "l2_cold")
            if ours_rot is not None:
                bmm_s += f" ours_rot{rotate}={ours_rot:.1f}us (bw_frac {floor_us / ours_rot:.2f})"
            print(f"K2BENCH {fmt:5s} M={m} experts={touched:3d} bytes={floor_bytes / 1e6:7.1f}MB "
                  f"ours={ours:8.1f}us std={std_s}us floor={floor_us:7.1f}us "
                  f"bw_frac={floor_us / ours:5.2f} speedup={sp}{bmm_s} experts="
                  f"{'mma' if launch.tiles_used.get('MMA') else 'dot'} KSX={launch.tiles_used.get('KSX')} "
                  f"SDU={launch.tiles_used.get('SDU')} phases=" + "/".join(f"{t:.1f}" for t in per_phase)
                  + f" wall_s=first:{t_first - t_row:.1f},timed:{t_timed - t_first:.1f},"
                  f"rest:{time.monotonic() - t_timed:.1f}", flush=True)
            if traced:
                raw[(fmt, m)] = traced.pop("raw")
                _print_trace(f"{fmt:5s} M={m}", traced)
            for label, tr in ((f"rot{rotate}", traced_rot), *traced_cold.items()):
                if tr:
                    tr.pop("raw")
                    _print_trace(f"{fmt:5s} M={m} {label}", tr)
    if trace_out and raw:
        from sgl_k3_mono.k2.trace_report import save

        os.makedirs(trace_out, exist_ok=True)
        label = "_".join(f"{k}{v}" for k, v in sorted((block or {}).items())) or "default"
        path = os.path.join(trace_out, f"k2-traces-{label}.pt")
        save(path, raw, block=block or {}, grid=per_sm * sms)
        print(f"K2TRACES saved {path}", flush=True)
    return results


def _print_trace(label: str, traced: dict) -> None:
    print(f"K2TRACE {label} in-launch us (entry spread us): " + " ".join(
        f"{p}={d:.1f}({sk:.1f})" for p, (d, sk) in traced["entries"].items()) +
        f" sum={sum(d for d, _ in traced['entries'].values()):.1f}", flush=True)
    print(f"K2WORK  {label} a program's own work us (median / longest @ program): " + " ".join(
        f"{p}={md:.1f}/{mx:.1f}@{who}" for p, (md, mx, who) in traced["work"].items()), flush=True)


def cold_way_names() -> tuple:
    """The ways `run(l2_cold=True)` times the launch after something (its `cold` keys)."""
    return ("l2_cold", "l2_cold_data_warm", "l2_cold_pages_warm", "l2_cold_after_other",
            *(f"after_{how}" for how in _L2Flush.READS if how != "sum"))


class _L2Flush:
    """Empties L2 of everything a launch left there: a 256 MB buffer (five times the H100's
    50 MB L2) read. A read, not a fill: a fill leaves L2 full of dirty lines whose write-back
    the launch would then pay for. `read` (READS) picks what runs instead, to tell L2's
    contents from the kernel that ran last (fifty-second session: after a 256 MB read by
    runtime/l2_stream.py's kernel the launch ran warm, after torch's sum of it cold)."""

    READS = ("sum", "stream", "stream_evict_first", "sum_tiny", "stream_then_sum_tiny", "stream_fit_carveout",
             "gemv", "code_22kb", "code_110kb", "stream_4kb", "spin_1", "spin_sms", "spin_sms_100us", "code_22kb_1")
    """sum: torch's sum of the buffer (the flush). stream / stream_evict_first: l2_stream's
    kernel over it, default and evict-first policy. sum_tiny: torch's sum of 4 KB (a torch
    kernel last, L2 not emptied); stream_then_sum_tiny: the stream, then that. stream_fit_
    carveout: the stream with its carveout fitted to its tiny shared memory (SMs left mostly
    L1). gemv: cuBLAS, a row times a [8192, 7168] bf16 matrix (117 MB: as an MLA layer's
    projections before its K2). code_22kb / code_110kb: one / five Triton kernels of 22 KB of
    straight-line code each on every SM, reading 4 KB (l2_stream.code_sweep: other code fetched,
    L2's data kept). Then, to tell the kernel that ran last by its length, its
    code and the SMs it ran on (fifty-third session): stream_4kb: the stream's kernel and grid over
    4 KB (a short kernel of the stream's code); spin_1 / spin_sms: l2_stream.spin's few instructions,
    returning at once, on one program / one on each SM; spin_sms_100us: the same busy 100 us (long,
    no code, no reads); code_22kb_1: code_22kb on one program (one SM: an SM's own caches, or one
    the SMs share? The 53rd found the latter: 139.9 us bf16 1 row, every program slower)."""

    def __init__(self, flush_bytes: int = 256 << 20):
        self.buf = torch.ones(flush_bytes // 4, dtype=torch.float32, device="cuda")
        self.sink = torch.empty((), dtype=torch.float32, device="cuda")
        self.parts: dict = {}  # (the reads' kernels' outputs: _out)
        self.mat = None

    def _stream(self, evict_first: bool = False, carve: bool = False) -> None:
        from sgl_k3_mono.runtime.l2_stream import stream_read

        block = 512 if carve else 1024  # (its own compiled kernel: the carveout stays with it)
        stream_read(self.buf, self._parts(block), evict_first=evict_first, carve=carve)

    def _parts(self, block: int):
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        return self._out(block, (4096 * sms // block, block))

    def _out(self, key, shape: tuple):
        """The fp32 output buffer a read's kernel writes, made on its first use (not on every call:
        the reads run inside the timed CUDA graphs)."""
        if key not in self.parts:
            self.parts[key] = torch.empty(shape, dtype=torch.float32, device="cuda")
        return self.parts[key]

    def read(self, how: str = "sum") -> None:
        if how not in self.READS:
            raise ValueError(f"_L2Flush.read: {how!r} is none of {self.READS}")
        if how == "sum":
            torch.sum(self.buf, 0, out=self.sink)
        elif how in ("stream", "stream_evict_first", "stream_fit_carveout"):
            self._stream(evict_first=how == "stream_evict_first", carve=how == "stream_fit_carveout")
        elif how in ("sum_tiny", "stream_then_sum_tiny"):
            if how == "stream_then_sum_tiny":
                self._stream()
            torch.sum(self.buf[:1024], 0, out=self.sink)
        elif how in ("code_22kb", "code_110kb", "code_22kb_1"):
            from sgl_k3_mono.runtime.l2_stream import code_sweep

            programs = 1 if how == "code_22kb_1" else torch.cuda.get_device_properties(0).multi_processor_count
            code_sweep(self.buf, self._out(how, (programs, 128)), kernels=5 if how == "code_110kb" else 1)
        elif how == "stream_4kb":
            from sgl_k3_mono.runtime.l2_stream import stream_read

            stream_read(self.buf[:1024], self._parts(1024), evict_first=False)
        elif how.startswith("spin_"):
            from sgl_k3_mono.runtime.l2_stream import spin

            programs = 1 if how == "spin_1" else torch.cuda.get_device_properties(0).multi_processor_count
            spin(self._out(how, (programs,)), ns=100_000 if how.endswith("100us") else 0)
        else:
            if self.mat is None:
                self.mat = torch.ones(8192, 7168, dtype=torch.bfloat16, device="cuda")
                self.vec = torch.ones(7168, dtype=torch.bfloat16, device="cuda")
                self.mv = torch.empty(8192, dtype=torch.bfloat16, device="cuda")
            torch.mv(self.mat, self.vec, out=self.mv)

    def before(self, rewarm: tuple = (), prelaunch: Optional[Callable[[], None]] = None,
               read: str = "sum") -> Callable[[], None]:
        """What runs before the launch to be timed: the flush, then `rewarm` read back into L2,
        then `prelaunch` (the launch is timed with it, less it timed alone)."""
        def run():
            self.read(read)
            for t in rewarm:
                t.sum()
            if prelaunch is not None:
                prelaunch()
        return run


def _page_touches(objs, every_bytes: int = 64 << 10) -> tuple:
    """Every tensor over `every_bytes` in `objs`, as a strided view of one element each
    `every_bytes` (a sum of it reads a sector a 64 KB: the pages' translations, not their bytes)."""
    big = [t for t in _tensors(objs) if t.numel() * t.element_size() >= every_bytes and t.is_contiguous()]
    return tuple(t.reshape(-1)[::every_bytes // t.element_size()] for t in big)


def _tensors(objs):
    import dataclasses

    if isinstance(objs, torch.Tensor):
        yield objs
    elif dataclasses.is_dataclass(objs) and not isinstance(objs, type):
        for f in dataclasses.fields(objs):
            yield from _tensors(getattr(objs, f.name))
    elif isinstance(objs, (list, tuple)):
        for x in objs:
            yield from _tensors(x)


def _small_tensors(objs, limit_bytes: int = 1 << 20) -> tuple:
    """Every tensor under `limit_bytes` in `objs` (dataclasses, tuples and lists walked), as it
    is (a converted copy would warm the copy)."""
    return tuple(t for t in _tensors(objs) if 0 < t.numel() * t.element_size() < limit_bytes)


_COPIES: dict = {}


def _weight_copies(fmt: str, rw, n: int) -> list:
    """`rw` and n - 1 copies of its tensors (clones: the launch reads the same values at other
    addresses), made once a format and process."""
    have = _COPIES.setdefault(fmt, [rw])
    while len(have) < n:
        have.append(_clone_tensors(rw))
    return have[:n]


def _clone_tensors(obj):
    """`obj` with every tensor in it cloned: dataclasses, tuples, lists and dicts walked."""
    import dataclasses

    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _clone_tensors(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone_tensors(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _clone_tensors(v) for k, v in obj.items()}
    return obj


def _launch(rw, d, m: int, block: Optional[dict], grid: int):
    """The launch at M rows with the block's tile overrides, and a step's inputs for it:
    attention output, bank (nvb 4 of 8 rows), prefix, out."""
    from sgl_k3_mono.k2.host import K2Launch, K2Plan

    g = torch.Generator(device="cuda").manual_seed(m)
    attn = torch.randn(m, 1536, generator=g, device="cuda").bfloat16()
    bank = torch.randn(m, 8, d.hidden, generator=g, device="cuda").bfloat16()
    prefix = (2 * torch.randn(m, d.hidden, generator=g, device="cuda")).bfloat16()
    out = torch.empty(m, d.hidden, dtype=torch.bfloat16, device="cuda")
    launch = K2Launch.build(K2Plan.for_weights(rw, m, isa="sm_90", bank_rows=bank.shape[1], grid=grid), "cuda",
                            deadline_s=5.0)
    launch.set_block(**(block or {}))
    return launch, (attn, bank, 4, prefix, out)


_WEIGHTS: dict = {}


def _rank_weights(d, fmt: str):
    """One real-size random layer a format, built once a process (a sweep's blocks share
    it: building it costs more than timing a block)."""
    if fmt not in _WEIGHTS:
        from sgl_k3_mono.k2.synthetic import random_k2_weights

        t = time.monotonic()
        with _one_builder_at_a_time():
            _WEIGHTS[fmt] = random_k2_weights(d, fmt=fmt, device="cuda", seed=1).shard(0, 1)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # (the fp32 draws, 10 GB for bf16 experts: free for the processes beside this one)
        print(f"K2BENCH {fmt} weights built in {time.monotonic() - t:.1f} s", flush=True)
    return _WEIGHTS[fmt]


@contextlib.contextmanager
def _one_builder_at_a_time():
    """With SGL_K3_MONO_WEIGHTS_LOCK (a file path; env.sh's `warm` sets it), the processes of
    one sweep build their layers one at a time: each holds about 19 GB while it draws a bf16
    layer and 9 GB after, and five drawing at once ran an H100 out of memory (40th session)."""
    path = os.environ.get("SGL_K3_MONO_WEIGHTS_LOCK")
    if not path:
        yield
        return
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _warm(d, rows_list, fmts, block, grid: int, trace: bool) -> list[dict]:
    from sgl_k3_mono.k2.triton.frame import TRACE_SLOTS

    for fmt in fmts:
        rw = _rank_weights(d, fmt)
        for m in rows_list:
            launch, inputs = _launch(rw, d, m, block, grid)
            launch.compile(rw, *inputs)
            if trace:
                launch.trace = torch.full((grid, TRACE_SLOTS.value), -1, dtype=torch.int64, device="cuda")
                launch.compile(rw, *inputs)
            print(f"K2WARM {fmt} M={m} block {block or 'default'}", flush=True)
    return []


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="sgl-k3-mono bench k2")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--formats", default="mxfp4,bf16")
    ap.add_argument("--no-phases", action="store_true")
    ap.add_argument("--block", action="append", default=[],
                    help="tile overrides, e.g. BI=16,BL=128,num_warps=8; repeat to compare several; "
                         "ROWS:BLOCK (e.g. 4,8:num_warps=4) times that block at those rows only")
    ap.add_argument("--per-sm", type=int, default=1, help="persistent programs an SM (experiment)")
    ap.add_argument("--trace", action="store_true", help="also the in-launch phase profile (eager launches)")
    ap.add_argument("--trace-out", default=None,
                    help="with --trace: save every traced launch's stamps into this folder, a file a block "
                         "(python -m sgl_k3_mono.k2.trace_report FILE reads them)")
    ap.add_argument("--warm-only", action="store_true",
                    help="compile the launches into Triton's cache, time nothing")
    ap.add_argument("--std-config", default=None,
                    help="a JSON of SGLang fused MoE configs by rows (tools/device/sglang_moe_tune.py's): also time "
                         "the bf16 standard path with them (std_tuned)")
    ap.add_argument("--l2-cold", action="store_true",
                    help="also time ours with L2 emptied before each launch (ours_l2_cold: as a served step's K2 "
                         "runs), and with its small tensors, its weights' pages or its code put back after the flush")
    ap.add_argument("--cold-ways", default="",
                    help="with --l2-cold: only these of its ways, comma-separated (l2_cold, l2_cold_data_warm, "
                         "l2_cold_pages_warm, l2_cold_after_other, after_<read> for each read of _L2Flush.READS "
                         "but sum)")
    ap.add_argument("--rotate", type=int, default=0,
                    help="also time ours over N copies of the layer's weights in turn (ours_rotN, a launch's share: "
                         "no launch finds its weights left in L2 by the one before; with --trace, also the last copy's "
                         "phase profile)")
    a = ap.parse_args(argv)
    unknown = sorted(set(w for w in a.cold_ways.split(",") if w) - set(cold_way_names()))
    if unknown:
        ap.error(f"--cold-ways: {unknown} are none of {', '.join(cold_way_names())}")
    from sgl_k3_mono.k2.sglang_moe import tuned_configs

    std_configs = tuned_configs(a.std_config)
    std_seen: dict = {}  # (the standard path timed once a row count, for the first block that runs it)
    for spec in a.block or [""]:
        rows = a.rows
        if ":" in spec:
            rows, spec = spec.split(":", 1)
        block = {k: int(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}
        print(f"K2BENCH block {block or 'default'}", flush=True)
        run(tuple(int(x) for x in rows.split(",")), tuple(a.formats.split(",")), phases=not a.no_phases,
            block=block, per_sm=a.per_sm, trace=a.trace, warm_only=a.warm_only, trace_out=a.trace_out,
            std_configs=std_configs, std_seen=std_seen, l2_cold=a.l2_cold,
            rotate=a.rotate, cold_only=tuple(w for w in a.cold_ways.split(",") if w))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


