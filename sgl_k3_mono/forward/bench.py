"""`sgl-k3-mono bench step`: one decode step of a real-width Kimi-K3 slice on this GPU
(TP-8 per-rank widths, a few layers in K3's order: KDA layers with a block write, the
dense layer 0, MoE layers, one MLA layer), timed as CUDA-graph replays in one run, for
M = 1, 2, 4, 8:
- ours: the step with the K1 / K2 launches;
- standard: the same step with each launch replaced by the standard path's composition
  for the same work (`forward.standard`: SGLang's seam kernels, cuBLAS, SGLang's KDA
  decode kernel, SGLang's fused MoE Triton kernels for the routed experts, or with
  `--std-experts bmm` the old gathered bmm; bf16 experts only, as sm_90 has no MXFP4 MoE
  op to compose and SGLang's default runner serves an MXFP4 checkpoint's experts in bf16);
- bare: the step with the launches replaced by no-ops (what the common parts cost: MLA,
  layer 0, seams and logits, identical in both); `--common bf16` (the default) runs them
  as bf16 GEMMs like a served step (`forward.bench_hooks`), `--common fp32` as the
  tests' reference-exact hooks (fp32-widened weights);
- L2 hand-off (`--l2-next`): ours with each KDA layer's K1 asking L2 for its K2's o_proj
  weights during its recurrence (K1Plan.l2_next, off by default; its thirteenth-session
  loss at M 1, 994.3 against 934.6 us, was the size of the first-graphs artifact below, so
  it is not known to lose);
- K2 block (`--k2-block KEY=V,...`): ours with every K2 launched with those options
  over the step's own (k2/options.py), e.g. XL2B=256,XL2BD=256: the routed experts'
  loads ask L2 for the aligned 256 bytes around them;
- `--full`: all of Kimi-K3's 93 layers in its own order (69 KDA with K1, 24 MLA, layer 0
  dense, 92 MoE with K2; attn-res blocks of 12) instead of the slice, with every MoE layer
  holding one shared routed-expert store (a rank's 896 bf16 experts are 7.4 GB a layer;
  the rest of the model is about 24 GB): each layer's router picks its own experts and
  reads them from HBM, as between two MoE layers some 260 MB of other weights pass
  through the 50 MB L2. The whole-step columns are then a served step's shape;
- `--kernels`: each kernel of one replay of ours as the profiler saw it (duration, idle gap
  before it); `--order-check`: ours and the bare step again, back to back, right after the
  first timing and after every column (the launches column's two terms from one moment);
- the launches' byte floor at the read bandwidth measured in the run: their weights,
  activations and the routed experts the step's rows really touch (each row its own
  token, so rows route apart as in serving).

Every timing is taken past the process's first CUDA graphs (timing.settle_graphs): before
the forty-eighth session the 1-row row timed ours on the process's third graph, which
replayed ~50 us (0.34 us a kernel boundary) faster than any later graph, while the bare and
standard steps were timed later.

The harness's MLA, layer 0 and logits are plain torch, not SGLang's kernels, so the
whole-step numbers are not serving numbers; the launch columns (step - bare) are what a
served step changes.

`--tp N` (2, 4 or 8 GPUs of one host; one process a GPU through torch.distributed.run):
each rank a TP-8 rank's widths of a model N times as wide, K2 reducing over the ranks
inside its launch and the standard step's K2 over NCCL where SGLang's layer reduces, the
common parts as the tests' fp32 hooks over NCCL; every figure the slowest rank's."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from typing import Callable


def _graph_us(fn: Callable[[], object], iters: int = 20, reps: int = 5) -> float:
    from sgl_k3_mono.timing import graph_time_us

    return graph_time_us(fn, iters=iters, reps=reps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sgl-k3-mono bench step", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--layers", type=int, default=4, help="layers of the slice (the last one is MLA)")
    ap.add_argument("--full", action="store_true",
                    help="all 93 layers in Kimi-K3's order instead of a slice (--layers not read); every MoE "
                         "layer holds one shared routed-expert store, which its own router reads from HBM")
    ap.add_argument("--experts", type=int, default=896)
    ap.add_argument("--fmt", default="mxfp4", choices=("bf16", "mxfp4"))
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--common", default="bf16", choices=("bf16", "fp32"),
                    help="MLA, layer 0 and logits as bf16 GEMMs (a served step's way) or the tests' fp32 hooks")
    ap.add_argument("--std-experts", default="sglang", choices=("sglang", "bmm"),
                    help="the standard step's routed experts: SGLang's fused MoE kernels, or the gathered bmm")
    ap.add_argument("--std-config", default=None,
                    help="a JSON of SGLang fused MoE configs by rows (tools/device/sglang_moe_tune.py's): the "
                         "standard step's routed experts with them where it has the row count")
    ap.add_argument("--l2-next", action="store_true",
                    help="also time the step with K1's L2 hand-off on (K1Plan.l2_next)")
    ap.add_argument("--k2-block", default=None,
                    help="also time the step with every K2 launched with these options (KEY=V,...: over "
                         "the step's own; k2/options.py)")
    ap.add_argument("--kernels", action="store_true",
                    help="also print each kernel of one replay of ours (profiler, graph replays): duration and the "
                         "idle gap before it")
    ap.add_argument("--order-check", action="store_true",
                    help="also time ours and the bare step back to back, twice, right after ours' first timing and "
                         "after every column, with the pools as they are and zeroed (does a timing depend on what "
                         "ran before it in the process?)")
    ap.add_argument("--tp", type=int, default=1,
                    help="ranks: 2, 4 or 8 GPUs of this host, one process each (torch.distributed.run); each rank "
                         "a Kimi-K3 TP-8 rank's widths, K2 reducing over the ranks, the common parts over NCCL")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)

    if args.full and args.tp > 1:
        print("bench step: --full runs at TP 1 (one rank's widths on this GPU)", file=sys.stderr)
        return 2
    import torch

    from sgl_k3_mono.k2 import bench_tp

    if not torch.cuda.is_available() and bench_tp.BACKEND == "nccl":  # (gloo: the CPU smoke test's stand-ins)
        print("bench step: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.tp > 1 and "RANK" not in os.environ:
        from sgl_k3_mono.k2.bench_tp import NO_MULTICAST, launcher_command, ranks_for

        if args.tp not in (2, 4, 8) or ranks_for(torch.cuda.device_count()) < args.tp:
            print(f"bench step: --tp {args.tp} needs 2, 4 or 8 and as many GPUs here "
                  f"({torch.cuda.device_count()})", file=sys.stderr)
            return 2
        import subprocess

        cmd = launcher_command(argv, args.tp, module="sgl_k3_mono.forward.bench")
        return subprocess.run(cmd, env={**os.environ, **NO_MULTICAST}).returncode
    rank, world, group = _rank_group(args.tp)
    say = print if rank == 0 else (lambda *a, **k: None)
    from sgl_k3_mono.budget import expected_experts, k1_bytes, k2_bytes
    from sgl_k3_mono.forward import harness
    from sgl_k3_mono.forward.build import ServerStep, plans_for
    from sgl_k3_mono.forward.plan import StepBuffers
    from sgl_k3_mono.forward.step import run_step
    from sgl_k3_mono.forward.warm import warm
    from sgl_k3_mono.k2.bench import copy_bandwidth_gb_s

    s = harness.shape("full" if args.full else "real", experts=args.experts, layers=args.layers, vocab=args.vocab,
                      expert_format=args.fmt)
    d = s.dims  # one TP-8 rank's widths: every rank's, at any --tp (the floor's dims)
    dev = bench_tp.rank_device(rank)
    if args.full:
        w = harness.random_weights(s, seed=0, device=dev, share_experts=True)
        model = harness.step_model(w)
    elif world == 1:
        w = _device_weights(s)
        model = harness.step_model(w)
    else:
        w, model = _device_weights_tp(args, rank, world, dev)
    copy_gb_s, read_gb_s = copy_bandwidth_gb_s()
    timed = _graph_us
    if world > 1:
        from sgl_k3_mono.k2.bench_tp import lockstep_us, slowest

        read_gb_s = -slowest(-read_gb_s)  # the slowest rank's
        timed = lambda fn: slowest(lockstep_us(fn, iters=20))  # noqa: E731
        if args.common == "bf16" or args.l2_next:
            say("bench step: at TP > 1 the common parts run as the tests' fp32 hooks over NCCL (--common fp32), "
                "and --l2-next is not timed")
            args.common, args.l2_next = "fp32", False
    layers = (f"Kimi-K3's {d.layers} layers ({len(d.kda_layers)} KDA, {len(d.mla_layers)} MLA, dense 0; the MoE "
              f"layers' routed experts one shared store)" if args.full else
              f"{d.layers} layers (KDA {list(d.kda_layers)}, MLA {list(d.mla_layers)}, dense 0)")
    say(f"step bench: {layers}, H {d.hidden}, "
        f"{d.kda_heads} KDA / {d.mla_heads} MLA heads a rank, E {d.experts} {args.fmt}, vocab {d.vocab}; TP {world} "
        f"(every figure the slowest rank's); read bandwidth {read_gb_s:.0f} GB/s; common parts: {args.common}")
    say(f"{'M':>2} {'ours us':>8} {'std us':>8} {'bare us':>8} {'launches us':>12} {'std launches us':>16} "
          f"{'step speedup':>13} {'launch speedup':>15} {'floor us':>9} {'floor/launches':>15} "
          f"{'L2 hand-off us':>15}" + (f" {'K2 ' + args.k2_block + ' us':>16}" if args.k2_block else ""))
    from sgl_k3_mono.forward.standard import standard_launches
    from sgl_k3_mono.k2.sglang_moe import tuned_configs

    std_configs = tuned_configs(args.std_config)

    reduce = None
    if world > 1:
        import torch.distributed as dist

        reduce = lambda t: dist.all_reduce(t, group=group)  # noqa: E731  (SGLang's layer reduces; NCCL)

    for m in (int(x) for x in args.rows.split(",")):
        plan = plans_for(model, (m,), ServerStep("decode", 1), tp=world, rank=rank, isa="sm_90",
                         impl="triton")[("decode", m, 1)]
        peers, barrier = None, None
        if world > 1:
            from sgl_k3_mono.k2.host import K2Peers

            peers = K2Peers.symmetric(plan.k2, group.group_name, dev)
            barrier = lambda: dist.barrier(group=group)  # noqa: E731
        bufs = StepBuffers.allocate(plan, dev, deadline_s=10, rank=rank, peers=peers)
        warm(model, plan, bufs, deadline_s=10, barrier=barrier)
        slots = torch.arange(m)
        state = harness.HarnessState.fresh(w, slots, m, 64, dev, tp=world)
        if args.common == "bf16":
            from sgl_k3_mono.forward.bench_hooks import Bf16BenchHooks

            hooks = Bf16BenchHooks(w, state, slots)
        else:
            hooks = harness.HarnessHooks(w, state, slots, rank=rank, tp=world, group=group)
        # distinct tokens a row (the same token in every row would route every row alike and
        # let the launch read a row's 16 experts once for all M); the same on every rank
        ids = torch.randint(0, d.vocab, (m,), generator=torch.Generator().manual_seed(m)).to(dev)

        def step():
            state.lengths.zero_()  # replays stay inside the cache
            return run_step(model, plan, bufs, hooks, ids, deadline_s=10)

        touched = _experts_touched(step)
        full = timed(step)
        if args.order_check:
            _order_pairs(say, m, "right after ours", step, timed, state)
        kern = _kernels(say, step) if args.kernels else None
        # the same step with each KDA layer's K1 asking L2 for its K2's o_proj (K1Plan.l2_next)
        with_l2 = float("nan")
        if args.l2_next:
            plan_nx = dataclasses.replace(plan, k1=dataclasses.replace(plan.k1, l2_next=True))
            with_l2 = _graph_us(lambda: (state.lengths.zero_(),
                                         run_step(model, plan_nx, bufs, hooks, ids, deadline_s=10)))
        # the same step with K2's block amended (its launches compiled first, apart from the timing)
        with_blk = float("nan")
        if args.k2_block:
            from sgl_k3_mono.k2.options import check_overrides

            over = _parse_block(args.k2_block)
            check_overrides(over)
            k2s = [k for k in (bufs.k2, bufs.k2_mla) if k is not None]
            own = [dict(k.block) for k in k2s]
            for k in k2s:
                k.block = {**k.block, **over}
            step()
            torch.cuda.synchronize()
            with_blk = timed(step)
            for k, b in zip(k2s, own):
                k.block = b
        std, std_what = None, {}
        if args.fmt == "bf16":
            try:
                with standard_launches(model, top_k=d.top_k, rows=m if args.std_experts == "sglang" else None,
                                       reduce=reduce, config=std_configs.get(str(m))) as std_what:
                    std = timed(step)
            except ImportError as e:  # SGLang's Triton MoE ops (the kit) missing: the column says so
                say(f"bench step: the standard step did not run ({type(e).__name__}: {e})", flush=True)
        with _launches_off():
            bare = timed(step)
        if args.order_check:
            _order_pairs(say, m, "after every column", step, timed, state)
        floor = sum(k1_bytes(d, i, m, "decode").total for i in d.kda_layers)
        for i, n in touched.items():  # the experts this step's rows really route to, per layer
            b = k2_bytes(d, i, m, args.fmt, d.kda_heads * d.kda_head_dim)
            # (+ every other rank's partials, which K2's reduces read at TP > 1)
            floor += b.weights + b.activations + b.experts / expected_experts(d, m) * n \
                + (world - 1) * m * (2 * d.hidden + d.latent) * 2
        floor_us = floor / (read_gb_s * 1e3)
        ours = full - bare
        std_s = f"{std:8.1f}" if std else f"{'n/a':>8}"
        std_l = f"{std - bare:16.1f}" if std else f"{'n/a':>16}"
        sp = f"{std / full:12.2f}x" if std else f"{'n/a':>13}"
        lsp = f"{(std - bare) / ours:14.2f}x" if std else f"{'n/a':>15}"
        say(f"{m:>2} {full:8.1f} {std_s} {bare:8.1f} {ours:12.1f} {std_l} {sp} {lsp} {floor_us:9.1f} "
              f"{floor_us / ours:15.2f} {with_l2:15.1f}" + (f" {with_blk:16.1f}" if args.k2_block else "")
              + f"   experts/layer {_spread(touched.values())}"
              + (f"; standard: KDA {std_what['kda']}, experts {std_what['experts']}" if std else ""), flush=True)
        if kern is not None:
            _print_kernels(say, m, kern)
        bufs = state = hooks = None  # (the closures above hold these names: drop what they point to)
        torch.cuda.empty_cache()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def _spread(counts) -> str:
    """A few layers' counts as a list; many as min / median / max."""
    c = sorted(counts)
    return str(c) if len(c) <= 8 else f"min {c[0]} median {c[len(c) // 2]} max {c[-1]} over {len(c)} layers"


def _parse_block(spec: str) -> dict:
    """"KEY=V,KEY=V" -> {KEY: int(V)} (bench k2's --block spelling)."""
    return {k: int(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}


@contextlib.contextmanager
def _launches_off():
    """Within the block the step's K1 and K2 are no-ops (the bare step: what the common
    parts cost)."""
    from sgl_k3_mono.forward import launches

    k1, k2 = launches.k1, launches.k2
    launches.k1 = lambda *a, **k: None
    launches.k2 = lambda plan_, bufs_, w_, attn, nvb, prefix, out, **k: out
    try:
        yield
    finally:
        launches.k1, launches.k2 = k1, k2


def _order_pairs(say, m: int, when: str, step, timed, state) -> None:
    """Ours and the bare step timed back to back, twice with the harness's pools as they
    are and twice zeroed before each timing (as the first timing finds them); each line
    says how far the pools had grown. The forty-eighth session found the table's 1-row
    launches column ~50 us short this way (the first graphs of a process replay faster)."""
    def zero():
        for st in state.kda.values():
            st.conv_pool.zero_()
            st.ssm_pool.zero_()
        for c in state.mla.values():
            c.zero_()

    def grown() -> str:
        ssm = [st.ssm_pool for st in state.kda.values()]
        return (f"max |ssm| {max(float(t.abs().amax()) for t in ssm):.3g}, "
                f"non-finite {sum(int((~t.isfinite()).sum()) for t in ssm)}")

    for reset in (False, True):
        for r in (1, 2):
            if reset:
                zero()
            before = grown()
            ours = timed(step)
            if reset:
                zero()
            with _launches_off():
                bare = timed(step)
            say(f"order M {m} {when}{', pools zeroed' if reset else ''} ({r}): ours {ours:8.1f} bare {bare:8.1f} "
                f"launches {ours - bare:8.1f}  (pools before: {before}; after: {grown()})", flush=True)


def _kernels(say, fn):
    """timing.graph_kernels_us(fn), or None with the reason said (the table still prints)."""
    from sgl_k3_mono.timing import graph_kernels_us

    try:
        return graph_kernels_us(fn)
    except Exception as e:  # the profiler (CUPTI) may be missing or busy: say so, keep the step's figures
        say(f"bench step --kernels: no kernel list ({type(e).__name__}: {e})", flush=True)
        return None


def _print_kernels(say, m: int, kernels) -> None:
    """One replay's kernels in order: duration and the idle gap before each, then the sums."""
    say(f"kernels M {m}: {'#':>3} {'us':>8} {'gap us':>7}  name")
    for i, (name, us, gap) in enumerate(kernels):
        say(f"kernels M {m}: {i:>3} {us:8.1f} {gap:7.1f}  {name[:70]}")
    say(f"kernels M {m}: sum {sum(k[1] for k in kernels):8.1f} {sum(k[2] for k in kernels):7.1f}")


def _rank_group(tp: int):
    """(rank, ranks, group): this process's rank of a torch.distributed.run job (NCCL), or
    (0, 1, None) at TP 1."""
    if tp == 1:
        return 0, 1, None
    from sgl_k3_mono.k2.bench_tp import init_rank

    return init_rank()[:3]


def _device_weights_tp(args, rank: int, world: int, dev):
    """At TP `world`: (the unsharded weights the common parts and K1 read, the rank's step
    model). The layer widths are `world` x a TP-8 rank's (`harness.shape("real", tp=world)`);
    each MoE layer's K2 is this rank's own real shard (`random_k2_rank_weights`, 896 experts),
    in place of the unsharded K2 the harness would build (59 GB a layer at TP 8): that one is
    a small placeholder (16 experts, I 32 a rank) the step never reads."""
    from sgl_k3_mono.forward import harness
    from sgl_k3_mono.k2.synthetic import random_k2_rank_weights

    s = harness.shape("real", experts=args.experts, layers=args.layers, vocab=args.vocab, expert_format=args.fmt,
                      tp=world)
    placeholder = dataclasses.replace(s, expert_format="bf16", dims=dataclasses.replace(
        s.dims, experts=16, expert_inter=32 * world))
    w = harness.to_device(harness.random_weights(placeholder, seed=0), dev)
    model = harness.step_model(w, rank=rank, tp=world)
    layers = []
    for lr in model.layers:
        if lr.k2 is not None:
            lr = dataclasses.replace(lr, k2=random_k2_rank_weights(
                s.dims, fmt=args.fmt, device=dev, rank=rank, tp=world, seed=1000 + lr.index,
                attn_width=lr.k2.o_proj.shape[1] * world))
        layers.append(lr)
    return w, dataclasses.replace(model, layers=tuple(layers))


def _experts_touched(step) -> dict:
    """Run `step` once eagerly; per MoE layer, the distinct experts its rows routed to."""
    import torch

    from sgl_k3_mono.forward import launches

    seen = {}
    with launches.after_k2(lambda layer, bufs, out: seen.__setitem__(
            layer, int(torch.unique(bufs.k2.scratch.ids).numel()))):
        step()
    return seen


def _device_weights(s):
    """Random weights of shape `s` on the GPU (the routed experts generated there: at 896
    experts the CPU would take minutes)."""
    import torch

    from sgl_k3_mono.forward import harness
    from sgl_k3_mono.k2.synthetic import random_k2_weights

    small = dataclasses.replace(s, dims=dataclasses.replace(s.dims, experts=16))
    w = harness.to_device(harness.random_weights(small, seed=0), "cuda")
    layers = []
    for i, lw in enumerate(w.layers):
        if lw.k2 is not None:
            k2 = random_k2_weights(s.dims, fmt=s.expert_format, device="cuda", seed=1000 + i,
                                   attn_width=lw.k2.o_proj.shape[1])
            lw = dataclasses.replace(lw, k2=k2)
        layers.append(lw)
    torch.cuda.synchronize()
    return dataclasses.replace(w, dims=s.dims, layers=tuple(layers))
