"""K1 (attn-res seam + KDA front) against `k1_reference`, one test body per property,
parametrized over the implementations this machine can run:

- "triton-interpret": the Triton kernel's phases as consecutive launches under Triton's
  CPU interpreter (a fresh process with TRITON_INTERPRET=1), small shapes;
- "triton-gpu": the persistent launch (PHASE=-1, grid barriers) on the H200;
- "triton-gpu-phased": the same kernel phase by phase on the H200.

Every case draws fresh random weights, states and inputs (never zeros), poisons the
outputs with NaN first, and holds the outputs to numerics.BOUNDS: attention output,
recurrent state; the conv window bitwise where it is a copy (see k1_cases._conv_checks);
unused slots and scratch untouched bitwise; padded rows zero; bank / residual bitwise.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from k1_cases import Case, case_json, run_case  # noqa: E402

IMPLS = [
    pytest.param("triton-interpret", id="triton-interpret"),
    pytest.param("triton-gpu", id="triton-gpu", marks=pytest.mark.gpu),
    pytest.param("triton-gpu-phased", id="triton-gpu-phased", marks=pytest.mark.gpu),
]

# CPU: tiny shapes (heads x 128, H 256-512), grid 4 (or 16 to split V over 8 programs)
CPU_CASES = [
    Case("decode M=1 layer-0-like (nvb 0, block write, no add)", 256, 2, 1, nvb=0, write=True, contrib=False),
    Case("decode M=3 nvb 2 + pending add", 256, 2, 3, nvb=2, seed=1),
    Case("decode M=2 grid 16 (V split 4)", 256, 2, 2, nvb=7, seed=2, grid=16),
    Case("decode M=8 TP2 rank 1", 512, 4, 8, tp=2, rank=1, nvb=5, seed=3),
    Case("decode M=5 TP2 rank 0, block write", 512, 4, 5, tp=2, rank=0, nvb=3, write=True, seed=4),
    Case("decode M=4 gfx950 seam, pad slot 0", 256, 2, 4, pad_slot=0, isa="gfx950", seed=5),
    Case("verify M=1", 256, 2, 1, mode="verify", nvb=1, seed=6),
    Case("verify M=5 grid 16 (V split 8)", 256, 2, 5, mode="verify", nvb=1, grid=16, seed=7),
    Case("verify M=8 TP2 rank 1, block write", 512, 4, 8, mode="verify", tp=2, rank=1, nvb=4, write=True, seed=8),
    Case("verify M=6 TP2 rank 0", 512, 4, 6, mode="verify", tp=2, rank=0, nvb=6, contrib=False, seed=9),
    # GL (K1Plan.g_last, the default in verify from 2 rows): phase by phase the gate's tiles end
    # the in-projection phase (grid 8); in decode it is an option, in verify it can be turned off
    Case("decode M=2 gate last (GL)", 256, 2, 2, nvb=3, seed=17, grid=8, g_last=True),
    Case("verify M=3 TP2 rank 1, gate last (GL) off", 512, 4, 3, mode="verify", tp=2, rank=1, nvb=2, seed=18,
         grid=8, g_last=False),
    # the seam over several programs a row (grid 16: 256-column slices, 2 a row at H 512;
    # at grid 4 most cases above get one slice a row, M=8 the one-program seam)
    Case("decode M=3 split seam (2 slices), block write", 512, 4, 3, nvb=4, write=True, seed=15, grid=16),
    Case("decode M=4 split seam (2 slices), pending add, gfx950", 512, 4, 4, nvb=6, isa="gfx950", seed=16,
         grid=16),
    # the one-program seam: block write, pending add, nvb 0, gfx950 rounding
    Case("decode M=3 one-program seam, block write", 256, 2, 3, nvb=4, write=True, seed=12, seam_split=False),
    Case("decode M=2 one-program seam, nvb 0", 256, 2, 2, nvb=0, seed=13, seam_split=False),
    Case("verify M=4 one-program seam, gfx950 seam", 256, 2, 4, mode="verify", nvb=7, isa="gfx950", seed=14,
         seam_split=False),
]
CPU_STEPS = [Case("64 decode steps M=2", 256, 2, 2, nvb=3, steps=64, seed=11)]

REAL = dict(hidden=7168, heads=12)  # one TP-8 rank's shapes (12 heads x 128, H 7168) built at TP 1
FULL = dict(hidden=7168, heads=96)  # the whole layer, one rank of TP 8 sliced out (slow to build: few cases)
GPU_CASES = [
    *[dataclasses.replace(c, grid=None) for c in CPU_CASES],
    *[Case(f"TP8 shapes decode M={m}", **REAL, rows=m, nvb=m - 1, seed=20 + m) for m in range(1, 9)],
    *[Case(f"TP8 shapes verify M={m}", **REAL, rows=m, mode="verify", nvb=(m + 3) % 8, seed=40 + m)
      for m in range(1, 9)],
    Case("TP8 shapes decode M=8 block write", **REAL, rows=8, nvb=7, write=True, seed=50),
    Case("TP8 shapes decode M=2, in-projection prefetch", **REAL, rows=2, nvb=3, seed=53, prefetch=4096),
    Case("TP8 shapes verify M=4, in-projection prefetch", **REAL, rows=4, mode="verify", nvb=2, seed=54,
         prefetch=14336),
    # GL: the gate's rows streamed by a quarter to a half of the grid during the recurrence
    # (the verify cases above have it from 2 rows, the default): on in decode and at 1 row,
    # off in verify
    *[Case(f"TP8 shapes decode M={m}, gate last (GL)", **REAL, rows=m, nvb=m - 1, seed=80 + m, g_last=True)
      for m in (1, 2, 4, 8)],
    Case("TP8 shapes verify M=1, gate last (GL)", **REAL, rows=1, mode="verify", nvb=3, seed=91, g_last=True),
    *[Case(f"TP8 shapes verify M={m}, gate last (GL) off", **REAL, rows=m, mode="verify", nvb=3, seed=94 + m,
           g_last=False) for m in (4, 8)],
    Case("TP8 rank 5 of the full layer, decode M=4", **FULL, rows=4, tp=8, rank=5, nvb=2, seed=51),
    Case("TP8 rank 7 of the full layer, verify M=8", **FULL, rows=8, mode="verify", tp=8, rank=7, nvb=4, seed=52),
]
GPU_STEPS = [Case("64 decode steps TP8 shapes M=8", **REAL, rows=8, nvb=4, steps=64, seed=60),
             Case("64 decode steps small M=3", 1024, 4, 3, nvb=2, steps=64, seed=61),
             Case("64 decode steps TP8 shapes M=2, gate last (GL)", **REAL, rows=2, nvb=4, steps=64, seed=62,
                  g_last=True)]


def _run(impl: str, cases: list[Case]) -> list[dict]:
    if impl == "triton-interpret":
        env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run([sys.executable, str(HERE / "k1_cases.py"), *map(case_json, cases)], env=env,
                              capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-4000:]
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert len(results) == len(cases), done.stdout[-2000:] + done.stderr[-2000:]
        return results
    phased = impl == "triton-gpu-phased"
    return [run_case(dataclasses.replace(c, phased=phased), "cuda") for c in cases]


def _check(results: list[dict]) -> None:
    bad = []
    for r in results:
        assert "error" not in r, f"{r['case']}: {r['error']}"
        summary = {k: {m: r[k][m] for m in ("max_abs", "rel", "cosine", "flips") if m in r[k]}
                   for k in ("attn_out", "ssm_state", "conv_state") if k in r}
        print(f"{r['case']} {r['plan']}: {summary}")
        if r["all_violations"]:
            bad.append(f"{r['case']}: {r['all_violations']}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("impl", IMPLS)
def test_k1_matches_reference(impl):
    """M = 1..8, decode and verify, TP 1 and both ranks of TP 2 (and TP 8 shapes on the GPU),
    block-write and plain layers, pending add or none, padded rows, both seam roundings."""
    _check(_run(impl, CPU_CASES if impl == "triton-interpret" else GPU_CASES))


@pytest.mark.parametrize("impl", IMPLS)
def test_k1_64_decode_steps_stay_within_bounds(impl):
    """64 consecutive decode steps on the same states (ours carried, the reference's carried)."""
    _check(_run(impl, CPU_STEPS if impl == "triton-interpret" else GPU_STEPS))


# ---- GPU only ------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("mode,g_last", [("decode", None), ("verify", None), ("decode", True)])
def test_cuda_graph_1000_replays_bitwise(mode, g_last):
    """Captured once, replayed 1000 times from the same inputs and states: bitwise the same
    every time (the barrier counters, last-arriver counters and GL's gate count reset
    themselves). At 8 rows: verify with GL (the default), decode without it and with it."""
    graph_replays_bitwise(mode, "triton", g_last)


def graph_replays_bitwise(mode: str, impl: str, g_last=None) -> None:
    """The graph test's body for either device code (test_k1_flydsl runs it with "flydsl")."""
    import torch

    from sgl_k3_mono.k1.host import run_k1

    keep: dict = {}
    case = Case(f"graph {mode}", **REAL, rows=8, mode=mode, nvb=5, seed=70, phased=False, impl=impl, g_last=g_last)
    run_case(case, "cuda", scratch_keep=keep)
    plan, views, io, scratch = keep["plan"], keep["views"], keep["io"], keep["scratch"]
    pools = (io.conv_pool.clone(), io.ssm_pool.clone())
    outs = [io.out] + ([io.conv_pool, io.ssm_pool] if mode == "decode" else [io.verify_conv, io.verify_ssm])

    def restore():
        io.conv_pool.copy_(pools[0])
        io.ssm_pool.copy_(pools[1])

    m, vi = plan.rows, io.verify_index

    def poison():  # every element the launch writes
        io.out.fill_(float("nan"))
        if mode == "verify":
            io.verify_conv[vi, :m].fill_(float("nan"))
            io.verify_ssm[vi, :m].fill_(float("nan"))

    restore()
    poison()
    run_k1(plan, views, io, impl=impl, scratch=scratch)  # compiled and run eagerly before the capture
    torch.cuda.synchronize()
    first = [t.clone() for t in outs]
    g = torch.cuda.CUDAGraph()
    restore()
    with torch.cuda.graph(g):
        run_k1(plan, views, io, impl=impl, scratch=scratch)
    for i in range(1000):
        restore()
        poison()
        g.replay()
        if i % 50 == 49 or i < 3:
            torch.cuda.synchronize()
            for a, b in zip(outs, first):
                assert torch.equal(a, b), f"replay {i} differs from the eager run"
    torch.cuda.synchronize()
    assert int(scratch.counters.abs().sum()) == 0 and int(scratch.sync[:2].abs().sum()) == 0
    assert int(scratch.sync[3]) == 0, "GL's gate-tile count was not cleared at departure"


def _writes_from_same_states(keep: dict, mode: str, runs: list) -> list:
    """Runs K1 once per (plan, io) in `runs`, each from the states run_case left (the pools
    and the bank put back, the output poisoned), and returns what each run wrote: the
    options these tests check must change no bit of it."""
    import torch

    from sgl_k3_mono.k1.host import run_k1

    views, io0, scratch = keep["views"], keep["io"], keep["scratch"]
    pools = (io0.conv_pool.clone(), io0.ssm_pool.clone(), io0.bank.clone())
    got = []
    for plan, io in runs:
        io.conv_pool.copy_(pools[0]), io.ssm_pool.copy_(pools[1]), io.bank.copy_(pools[2])
        io.out.fill_(float("nan"))
        run_k1(plan, views, io, scratch=scratch, layer=3)
        torch.cuda.synchronize()
        got.append([t.clone() for t in [io.out, io.conv_pool, io.ssm_pool, io.bank]
                    + ([io.verify_conv, io.verify_ssm] if mode == "verify" else [])])
    return got


@pytest.mark.gpu
@pytest.mark.parametrize("mode,rows", [("decode", 2), ("verify", 8)])
def test_l2_next_is_a_hint_that_changes_no_bit(mode, rows):
    """K1IO.l2_next (the layer's o_proj, asked into L2 as the KDA phase starts): the launch
    asking for it writes bitwise what the launch without it writes, from the same states."""
    import dataclasses as dc

    import torch

    from sgl_k3_mono.k1.host import launch_args

    keep: dict = {}
    run_case(Case(f"l2 next {mode}", **REAL, rows=rows, mode=mode, nvb=3, seed=71, phased=False, g_last=False),
             "cuda", scratch_keep=keep)  # (l2_next and g_last both fill the recurrence's idle HBM: exclusive)
    plan, views, io, scratch = keep["plan"], keep["views"], keep["io"], keep["scratch"]
    plan = dc.replace(plan, l2_next=True)
    wo = torch.randn(7168, 1536, device="cuda").bfloat16()  # a TP-8 rank's o_proj
    nx = dc.replace(io, l2_next=wo)
    assert launch_args(plan, views, nx, scratch, layer=3, deadline_s=10)[1]["NXB"] > 0  # it does ask
    assert launch_args(plan, views, io, scratch, layer=3, deadline_s=10)[1]["NXB"] == 0  # nothing to ask for
    assert launch_args(dc.replace(plan, l2_next=False), views, nx, scratch, layer=3, deadline_s=10)[1]["NXB"] == 0
    got = _writes_from_same_states(keep, mode, [(plan, io), (plan, nx)])
    for a, b in zip(*got):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,rows", [("decode", 1), ("verify", 8)])
def test_fitted_carveout_changes_no_bit(mode, rows):
    """K1Plan.carve (the launch's carveout fitted to its block, a function attribute set
    before its first launch): the launch writes bitwise what the driver's carveout writes,
    from the same states, and the compiled function holds the fitted hint."""
    import dataclasses as dc

    import torch

    from sgl_k3_mono.k1.host import DEFAULT_DEADLINE_S, launch_args
    from sgl_k3_mono.k1.triton.kernel import k1_kernel
    from sgl_k3_mono.runtime import triton_smem

    keep: dict = {}
    run_case(Case(f"carve {mode}", **REAL, rows=rows, mode=mode, nvb=3, seed=72, phased=False), "cuda",
             scratch_keep=keep)
    plan, views, io, scratch = keep["plan"], keep["views"], keep["io"], keep["scratch"]
    got = _writes_from_same_states(keep, mode, [(dc.replace(plan, carve=c), io) for c in (False, True)])
    for carve in (False, True):
        p = dc.replace(plan, carve=carve)
        args, meta = launch_args(p, views, io, scratch, layer=3, deadline_s=DEFAULT_DEADLINE_S)  # run_k1's key
        assert meta["CARVE"] == carve
        if carve:
            ck = k1_kernel.warmup(*args, grid=(p.grid,), **meta, PHASE=-1, SEAM_STEP=0)
            print(f"\nK1GPU carve {mode} M={rows}: shared={ck.metadata.shared} hint={triton_smem.carveout_of(ck)}")
            assert triton_smem.carveout_of(ck) == triton_smem.fit_carveout(ck) > 0
    for a, b in zip(*got):
        assert torch.equal(a, b)


_STALL_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [{here!r}, {root!r}]
    import torch
    from k1_cases import Case, run_case
    case = Case("stall", 1024, 4, 2, mode={mode!r}, nvb=1, seed=1, phased=False)
    try:
        run_case(case, "cuda")
        torch.cuda.synchronize()
    except Exception as e:  # the deliberate fault after the record: the watcher ends the process
        print("after the fault:", type(e).__name__, file=sys.stderr, flush=True)
    time.sleep(30)
    print("not stopped", file=sys.stderr)
    sys.exit(3)
""")


@pytest.mark.gpu
@pytest.mark.parametrize("phase,mode", [("seam", "decode"), ("in_proj", "decode"), ("kda", "decode"),
                                        ("in_proj", "verify"), ("kda", "verify")])
def test_fault_injection_stops_the_process(phase, mode):
    """SGL_K3_MONO_STALL holds rank 0 at layer 3 in the chosen phase; with a 2 s deadline the
    process exits with EXIT_CODE within deadline + 5 s, and stderr names rank, layer, K1, phase.
    Verify at 2 rows runs GL (its default there): the gate's programs pass barrier 1 without
    waiting, and the stalled program is one of the recurrence's."""
    from sgl_k3_mono.runtime.failure import EXIT_CODE

    env = {**os.environ, "SGL_K3_MONO_STALL": f"0:3:k1:{phase}", "SGL_K3_MONO_DEADLINE_S": "2"}
    script = _STALL_SCRIPT.format(here=str(HERE), root=str(HERE.parent.parent), mode=mode)
    # warm the compile cache first, so the clock below measures the stall, not the compile
    warm = subprocess.run([sys.executable, "-c", script.replace("time.sleep(30)", "sys.exit(0)")],
                          env={k: v for k, v in env.items() if k != "SGL_K3_MONO_STALL"},
                          capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr[-3000:]
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert done.returncode == EXIT_CODE, (done.returncode, done.stderr[-3000:])
    assert took < 2 + 5 + 10, f"took {took:.1f} s (includes process start and CUDA init)"
    for text in ("rank 0", "layer 3", "launch K1", f"'{phase}'"):
        assert text in done.stderr, (text, done.stderr[-2000:])


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_kda_part_vs_sglang_kda_fused_decode(rows):
    """Our KDA phase against SGLang's CUDA fused KDA decode fed the same in-projection
    (read from our scratch) and the same states, TP 8 per-rank shapes."""
    import torch

    from sgl_k3_mono.numerics import measure, violations

    try:
        op = __import__("sglang.kernels.ops.attention.kda_fused_decode", fromlist=["_"])
    except Exception as e:
        pytest.skip(f"SGLang's kda_fused_decode does not import here ({type(e).__name__}: {e}); "
                    "run with the SGLang kit on PYTHONPATH")
    keep: dict = {}
    case = Case(f"vs sglang M={rows}", **REAL, rows=rows, nvb=3, seed=80 + rows, phased=False)
    res = run_case(case, "cuda", scratch_keep=keep)
    assert not res["all_violations"], res["all_violations"]
    plan, views, io, scratch = keep["plan"], keep["views"], keep["io"], keep["scratch"]
    # rerun our launch from saved states so both start from the same pools
    conv0, ssm0 = io.conv_pool.clone(), io.ssm_pool.clone()
    from sgl_k3_mono.k1.host import run_k1

    run_k1(plan, views, io, scratch=scratch)
    torch.cuda.synchronize()
    p, d = plan.proj, plan.head_dim
    proj = scratch.proj
    mixed, gate = proj[:, : 3 * p].contiguous(), proj[:, 3 * p : 4 * p].contiguous()
    f_a, b = proj[:, 4 * p : 4 * p + d], proj[:, 4 * p + d :].contiguous()
    a = (f_a.float() @ views.f_b.float().t()).bfloat16()
    conv_run, ssm_run = conv0.contiguous().clone(), ssm0.contiguous().clone()  # SGLang's op wants dense pools
    idx = io.slots.to(torch.int32)
    wt = views.conv.t().contiguous()  # SGLang's op takes per-tap weights [K, C] (a copy, test only)
    seg = p
    # dense pools and int32 slots: SGLang's op must take them; if it does not, the comparison
    # itself is broken, which is a failure, not a reason to skip
    assert op.covered(mixed, a, b, conv_run, ssm_run, idx, gate), "kda_fused_decode refused dense K3-shaped inputs"
    got = op.kda_fused_decode(mixed, a, b, conv_run, wt[:, :seg].contiguous(), wt[:, seg:2 * seg].contiguous(),
                              wt[:, 2 * seg:].contiguous(), torch.zeros(3 * seg, device="cuda"), views.a_log,
                              views.dt_bias, gate, views.o_norm.float(), ssm_run, idx, scale=d ** -0.5,
                              onorm_eps=1e-5, lower_bound=-5.0).reshape(rows, seg)
    live = (idx >= 0)
    mo = measure(io.out[live].float(), got[live].float())
    used = idx[live].long()
    ms = measure(io.ssm_pool[used], ssm_run[used])
    print(f"\nK1 vs SGLang kda_fused_decode M={rows}: out {mo}  ssm {ms}")
    # two implementations each within the declared bounds of the reference sit up to twice
    # that apart; held here to the declared bounds themselves (the H200 run: out max_abs
    # 0.0156, cosine >= 0.999994; state max_abs <= 0.0052, cosine >= 0.9999986)
    assert not violations("k1.attn_out", mo), (mo, violations("k1.attn_out", mo))
    assert not violations("k1.ssm_state", ms), (ms, violations("k1.ssm_state", ms))
    assert torch.equal(io.conv_pool[used], conv_run[used])


@pytest.mark.parametrize("rows", [1, 8])
def test_in_projection_prefetch_bytes_fit_the_threads_and_the_row(rows):
    """K1Plan.prefetch (off by default): the bytes of each in-projection row of a
    program's first tile asked into L2 during the seam, whole 16-byte pieces a thread
    over the tile's rows, never past the row (H bf16)."""
    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.k1.host import K1Plan

    d = K3Dims.from_config(load_config("kimi-k3"), tp=8)
    plan = K1Plan.from_dims(d, rows, "decode", grid=132)
    assert plan.prefetch_bytes == 0 and plan.constexprs()["PF"] == 0
    bn = 1 << (plan.row_tile - 1).bit_length()
    piece = 16 * max(32 * plan.num_warps // bn, 1)
    for want in (5000, 10 ** 6):
        got = dataclasses.replace(plan, prefetch=want).prefetch_bytes
        assert 0 < got <= min(want, 2 * d.hidden) and got % piece == 0, (want, got, piece)


def test_k1_scalars_that_change_between_layers_are_not_specialised():
    """K1's per-layer, per-step and per-rank scalars (K1_RUNTIME_SCALARS) are real
    arguments of the kernel that Triton does not specialise (a misspelt name would be
    ignored silently, and each value class it takes would compile its own K1)."""
    from sgl_k3_mono.k1.triton.kernel import K1_RUNTIME_SCALARS, k1_kernel

    params = {p.name: p for p in k1_kernel.params}
    assert set(K1_RUNTIME_SCALARS) <= set(params)
    assert all(params[n].do_not_specialize and not params[n].is_constexpr for n in K1_RUNTIME_SCALARS)


def test_gate_last_is_the_sm90_verify_default_and_its_split_covers_every_row():
    """K1Plan.g_last (the output gate's rows streamed during the recurrence): on sm_90 the
    default in verify from 2 rows and nowhere in decode; never on an AMD GPU, where FlyDSL,
    which has no such launch, refuses it. Its tiles cover every in-projection row and every
    gate row, the recurrence's items fit its programs in one round where they can, and at
    least a quarter of the grid streams the gate (grids of 132, 78, 16, 3 and 2 programs)."""
    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.k1.host import K1Plan, default_tiles, run_k1
    from sgl_k3_mono.k1.placeholders import tp8_placeholder_launch

    assert [default_tiles("verify", m, hip=False)["g_last"] for m in range(1, 9)] == [False] + [True] * 7
    assert not any(default_tiles("decode", m, hip=False)["g_last"] for m in range(1, 9))
    assert not any(default_tiles(mode, m, hip=True)["g_last"] for mode in ("decode", "verify") for m in (1, 8))
    d = K3Dims.from_config(load_config("kimi-k3"), tp=8)
    for grid in (132, 78, 16, 3, 2):
        for mode in ("decode", "verify"):
            for m in range(1, 9):
                plan = K1Plan.from_dims(d, m, mode, grid=grid, g_last=True)
                cx = plan.constexprs()
                assert cx["GL"] and (plan.in_proj_tiles <= grid or grid < 132)  # one round at 132 SMs: 130 tiles
                assert -(-plan.proj // cx["BNG_EFF"]) * cx["BNG_EFF"] >= plan.proj and cx["BNG_EFF"] <= 64
                items = plan.heads * (1 if mode == "verify" else m) * plan.v_split
                room = grid - max(1, grid // 4)  # the gate's programs: a quarter of the grid, at least one
                assert 1 <= cx["NKP"] <= room and cx["NKP"] == min(items, room)
    with pytest.raises(ValueError, match="exclusive"):
        K1Plan.from_dims(d, 2, "verify", grid=132, l2_next=True)
    plan, views, io, scratch, *_ = tp8_placeholder_launch("verify", 4, tiles=dict(g_last=True))
    with pytest.raises(ValueError, match="no g_last"):
        run_k1(plan, views, io, impl="flydsl", scratch=scratch)
