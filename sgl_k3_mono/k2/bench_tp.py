"""`sgl-k3-mono bench k2-tp`: K2 at TP N over the N GPUs of one host (issue 7), one process
a GPU (it starts them through torch.distributed.run), M = 1, 2, 4, 8:

- ours: the persistent launch with both reduces inside it, over symmetric-memory peers;
- ours at TP 1: the same launch of the same rank's shapes with no peers (what the reduces
  and the waits on the other ranks add is the difference);
- standard (bf16 experts): `k2.bench.standard_path` with SGLang's fused MoE kernels and
  NCCL all-reduces where SGLang's layer reduces (the o_proj output; one flat [latent |
  shared] buffer), and the same at TP 1;
- the reduces alone, [M, H] bf16 (the attention all-reduce) and [M, L + H] (the MoE's):
  NCCL; torch symmetric memory's one-shot and two-shot all-reduce (SGLang's
  TorchSymmMemCommunicator runs the two-shot kernel at TP 2, and turns itself off without
  NVLink multicast, which the lent machines keep off); SGLang's JIT custom all-reduce (v2)
  where it builds there (eager calls, timed last: the least known piece);
- the byte floor of one rank (its weights, activations, the partials of every rank it
  reads, the experts its rows touched) at the read bandwidth the rank measured.

Each rank is a real Kimi-K3 TP-8 rank's shapes (`random_k2_rank_weights`: the layer's
widths TP x those, at TP 8 Kimi-K3's own); each rank builds only its shard. Timings are
CUDA-graph replays between events, every rank replaying together (a barrier before each
repetition); the table gives the slowest rank's median. Printed by rank 0."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from typing import Callable, Optional

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""Kept set on every rank: NVLink multicast can take a shared host's GPUs out of service
(the device library's KINDS.md), so neither NCCL nor torch may use it."""


BACKEND = "nccl"
"""The ranks' process group backend (the CPU smoke test of this script swaps in gloo)."""


def rank_device(rank: int):
    """The device of rank `rank` (its GPU; the CPU smoke test swaps in the CPU)."""
    import torch

    return torch.device("cuda", rank)


def parse(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="sgl-k3-mono bench k2-tp", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: the GPUs here, a power of two <= 8)")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--formats", default="mxfp4,bf16")
    ap.add_argument("--iters", type=int, default=100, help="graph replays a repetition")
    ap.add_argument("--no-sglang-ar", action="store_true", help="skip SGLang's JIT custom all-reduce")
    a = ap.parse_args(argv)
    a.rows = tuple(int(x) for x in a.rows.split(","))
    a.formats = tuple(a.formats.split(","))
    if not set(a.rows) <= set(range(1, 9)) or not set(a.formats) <= {"bf16", "mxfp4"}:
        ap.error("rows in 1..8, formats bf16 / mxfp4")
    return a


def launcher_command(argv: list[str], gpus: int, module: str = "sgl_k3_mono.k2.bench_tp") -> list[str]:
    """The torch.distributed.run command that starts one rank of `module` a GPU (this one,
    or `bench step`'s at --tp)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus),
            "-m", module, *argv]


def ranks_for(gpus: int) -> int:
    """The largest power of two <= gpus that divides Kimi-K3's 8-way rank shapes."""
    n = 1
    while n * 2 <= min(gpus, 8):
        n *= 2
    return n


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    if "RANK" in os.environ:
        return _rank_main(a)
    import torch

    n = ranks_for(a.gpus or torch.cuda.device_count())
    if n < 2:
        print("bench k2-tp: needs 2, 4 or 8 GPUs of one host (bench k2 times one rank)", file=sys.stderr)
        return 2
    env = {**os.environ, **NO_MULTICAST}
    return subprocess.run(launcher_command(argv, n), env=env).returncode


def lockstep_us(fn: Callable[[], object], iters: int, reps: int = 5, graph: bool = True) -> float:
    """Median microseconds of `fn`, as a CUDA-graph replay (`graph`) or eager calls, every rank
    running at once (a barrier before each repetition; the reduces' own waits keep them
    together)."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    fn()
    torch.cuda.synchronize()
    run = fn
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run = g.replay
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / iters)
    return statistics.median(times)


def slowest(us: Optional[float]) -> Optional[float]:
    """The largest of every rank's figure (None if any rank has none)."""
    import torch.distributed as dist

    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, us)
    return None if any(v is None for v in got) else max(got)


_SAID: set = set()


def _all_ran(name: str, err: Optional[Exception]) -> bool:
    """Whether `name` ran on every rank. Rank 0 prints each rank's reason where it did not,
    each reason once: the table's only writer, so no rank's line lands inside another's
    (torchrun's ranks share one stdout)."""
    import torch.distributed as dist

    why = None if err is None else f"{type(err).__name__}: {str(err)[:300]}"
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, why)
    if dist.get_rank() == 0:
        for r, w in enumerate(every):
            line = f"K2TP {name} not run on rank {r} ({w})"
            if w is not None and line not in _SAID:
                _SAID.add(line)
                print(line, flush=True)
    return all(w is None for w in every)


def _timed(name: str, make: Callable[[], Callable[[], object]], iters: int, graph: bool = True) -> Optional[float]:
    """The slowest rank's time of what `make` builds, or None where it does not build or run
    on some rank (the reason printed by rank 0; every rank then skips it)."""
    err = None
    try:
        fn = make()
    except Exception as e:  # a path that does not exist here (SGLang's JIT all-reduce, ...)
        err = e
    if not _all_ran(name, err):
        return None
    us = None
    try:  # (a piece that builds but cannot be captured fails alike on every rank: reported, the run goes on)
        us = lockstep_us(fn, iters, graph=graph)
    except Exception as e:
        err = e
    _all_ran(name, err)
    return slowest(us)


def _reduces(group, dev, m: int, width: int, iters: int) -> dict:
    """The all-reduce of an [m, width] bf16 buffer each way there is here, the slowest rank's us."""
    import torch
    import torch.distributed as dist

    out = {}
    buf = torch.randn(m, width, device=dev).bfloat16()
    out["nccl"] = _timed("NCCL all-reduce", lambda: (lambda: dist.all_reduce(buf, group=group)), iters)

    def symm(kind):
        import torch.distributed._symmetric_memory as symm_mem

        sbuf = symm_mem.empty(m * width, dtype=torch.bfloat16, device=dev)
        symm_mem.rendezvous(sbuf, group.group_name)
        sbuf.copy_(buf.flatten())
        if kind == "one_shot":
            op = lambda: torch.ops.symm_mem.one_shot_all_reduce(sbuf, "sum", group.group_name)  # noqa: E731
        else:
            op = lambda: torch.ops.symm_mem.two_shot_all_reduce_(sbuf, "sum", group.group_name)  # noqa: E731
        op()  # here, so a size or build it refuses is reported (on every rank alike) and skipped
        torch.cuda.synchronize()
        return op

    out["symm_one_shot"] = _timed("torch symm-mem one-shot", lambda: symm("one_shot"), iters)
    out["symm_two_shot"] = _timed("torch symm-mem two-shot", lambda: symm("two_shot"), iters)
    return out


_SGLANG_AR: dict = {}


def _sglang_ar(group, dev, buf):
    """SGLang's JIT custom all-reduce (v2) of `buf` as eager calls (its graph mode registers
    the captured inputs after capture, which this bench does not set up)."""
    from sgl_k3_mono.k2.sglang_moe import _sgl_kernel_for_import

    with _sgl_kernel_for_import():
        from sglang.srt.distributed.device_communicators.custom_all_reduce_v2 import CustomAllReduceV2
    if "car" not in _SGLANG_AR:
        _SGLANG_AR["car"] = CustomAllReduceV2(group, dev)
    car = _SGLANG_AR["car"]
    if car.disabled or not car.should_custom_ar(buf):
        raise RuntimeError("CustomAllReduceV2 is disabled here or declines this size")
    car.custom_all_reduce(buf)  # eager first: its JIT build, apart from the timing
    return lambda: car.custom_all_reduce(buf)


def init_rank() -> tuple[int, int, object, object]:
    """(rank, ranks, group, device) of this torch.distributed.run process: its GPU set first,
    then the process group (device/README: the other order hung once), multicast kept off."""
    import torch
    import torch.distributed as dist

    for k, v in NO_MULTICAST.items():
        os.environ.setdefault(k, v)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group(BACKEND)
    return rank, world, dist.group.WORLD, rank_device(rank)


def _rank_main(a: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    rank, world, group, dev = init_rank()
    if 8 % world:
        raise SystemExit(f"bench k2-tp: TP {world} does not divide Kimi-K3's 8-way rank shapes")
    from sgl_k3_mono.budget import expected_experts, k2_bytes
    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.k2.bench import copy_bandwidth_gb_s, standard_path
    from sgl_k3_mono.k2.host import K2Launch, K2Peers, K2Plan
    from sgl_k3_mono.k2.synthetic import rank_dims, random_k2_rank_weights

    d = rank_dims(8 // world)
    d8 = K3Dims.from_config(load_config("kimi-k3"), tp=8)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    _, read_gb_s = copy_bandwidth_gb_s()
    bw = slowest(-read_gb_s)  # the slowest rank's bandwidth (negated: slowest takes the max)
    say = print if rank == 0 else (lambda *x, **k: None)
    say(f"K2TP {world} ranks of {torch.cuda.get_device_name(dev)}, {sms} SMs each; read bandwidth (slowest rank) "
        f"{-bw:.0f} GB/s; each rank a Kimi-K3 TP-8 rank's shapes (H {d.hidden}, o_proj {d8.kda_proj_local} "
        f"columns, E {d.experts}, I {d.expert_inter // world} a rank); every figure the slowest rank's median us",
        flush=True)
    for fmt in a.formats:
        rw = random_k2_rank_weights(d, fmt=fmt, device=dev, rank=rank, tp=world, seed=1)
        for m in a.rows:
            g = torch.Generator(device=dev).manual_seed(m)  # the same bank and prefix on every rank
            bank = torch.randn(m, 8, d.hidden, generator=g, device=dev).bfloat16()
            prefix = (2 * torch.randn(m, d.hidden, generator=g, device=dev)).bfloat16()
            attn = torch.randn(m, rw.o_proj.shape[1], generator=torch.Generator(device=dev).manual_seed(97 * m + rank),
                               device=dev).bfloat16()  # each rank its own heads' output
            out = torch.empty(m, d.hidden, dtype=torch.bfloat16, device=dev)

            def ours_at(tp):
                plan = K2Plan.for_weights(rw, m, isa="sm_90", bank_rows=8, grid=sms, tp=tp)
                peers = K2Peers.symmetric(plan, group.group_name, dev) if tp > 1 else None
                launch = K2Launch.build(plan, dev, rank=rank if tp > 1 else 0, peers=peers, deadline_s=10.0)
                if tp > 1:
                    launch.errors.watch()  # an expired wait exits the process loudly
                # compiled on every rank before any runs: a real launch's compile (20-45 s) would
                # otherwise outlast the deadline of a peer already waiting inside its launch
                launch.compile(rw, attn, bank, 4, prefix, out)
                dist.barrier()
                return launch

            launch = ours_at(world)
            row = {"ours": _timed("ours", lambda: (lambda: launch(rw, attn, bank, 4, prefix, out)), a.iters)}
            touched = int(torch.unique(launch.scratch.ids).numel())
            solo = ours_at(1)
            row["ours_tp1"] = _timed("ours at TP 1", lambda: (lambda: solo(rw, attn, bank, 4, prefix, out)), a.iters)
            if fmt == "bf16":
                std_out = torch.empty_like(out)
                for key, red in (("std", lambda t: dist.all_reduce(t, group=group)), ("std_tp1", None)):
                    row[key] = _timed(f"standard ({key})", lambda: _std(standard_path, rw, m, red, attn, bank,
                                                                        prefix, std_out), a.iters)
            lb = k2_bytes(d8, 13, m, fmt, rw.o_proj.shape[1])
            acts = lb.activations + (world - d8.tp) * m * (2 * d.hidden + d.latent) * 2  # every rank's partials
            floor_b = lb.weights + acts + lb.experts / expected_experts(d8, m) * slowest(touched)
            floor_us = floor_b / (-bw * 1e3)
            red_o = _reduces(group, dev, m, d.hidden, a.iters)
            red_m = _reduces(group, dev, m, d.hidden + d.latent, a.iters)
            say(_line(fmt, m, world, row, floor_us, red_o, red_m), flush=True)
    if not a.no_sglang_ar:  # last: its JIT build and constructor's collectives are the least known here
        for m in a.rows:
            got = {w: _timed("SGLang custom all-reduce v2", lambda: _sglang_ar(
                group, dev, torch.randn(m, w, device=dev).bfloat16()), a.iters, graph=False)
                for w in (d.hidden, d.hidden + d.latent)}
            say(f"K2TP-AR TP={world} M={m} SGLang custom all-reduce v2 (eager calls; its graph mode not set up): "
                + " ".join(f"[M,{w}]={v:.1f}us" if v is not None else f"[M,{w}]=n/a" for w, v in got.items()),
                flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _std(standard_path, rw, m, reduce, attn, bank, prefix, out):
    run = standard_path(rw, top_k=rw.moe.params.top_k, rows=m, experts="sglang", reduce=reduce)
    return lambda: run(attn, bank, 4, prefix, out)


def _line(fmt: str, m: int, world: int, row: dict, floor_us: float, red_o: dict, red_m: dict) -> str:
    f = lambda v: f"{v:.1f}us" if v is not None else "n/a"  # noqa: E731
    ours, std = row["ours"], row.get("std")
    parts = [f"K2TP {fmt:5s} TP={world} M={m} ours={f(ours)} ours_tp1={f(row['ours_tp1'])}",
             f"std={f(std)} std_tp1={f(row.get('std_tp1'))}",
             f"speedup={std / ours:.2f}x" if std and ours else "speedup=n/a",
             f"floor={floor_us:.1f}us bw_frac={floor_us / ours:.2f}" if ours else f"floor={floor_us:.1f}us",
             "reduce[M,H] " + " ".join(f"{k}={f(v)}" for k, v in red_o.items()),
             "reduce[M,L+H] " + " ".join(f"{k}={f(v)}" for k, v in red_m.items())]
    return " ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
