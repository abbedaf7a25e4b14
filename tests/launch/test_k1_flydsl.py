"""K1's FlyDSL launch (gfx950) under the launch tests.

On a gfx950 GPU (never available to this project: these skip with that reason): the
same cases and bounds as test_k1.py's GPU tests, the persistent launch and the phases
as their own launches, 64 decode steps, and the stall switch.

On any machine: the host-side contract (one argument builder, launch_args; the phase
mask; refusals before tracing and off a HIP device) and the index arithmetic the
device code is written from, replayed in plain torch (the pattern of
tests/test_fly_tile_mapping.py): the in-projection's tile walk, the KDA items, the
8-lanes-a-row delta rule, the conv taps and windows.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from k1_cases import run_case  # noqa: E402
from test_k1 import GPU_CASES, GPU_STEPS, _STALL_SCRIPT, _check  # noqa: E402

from sgl_k3_mono.k1.flydsl import geometry as geo  # noqa: E402


def _on_gfx950() -> bool:
    if torch.version.hip is None or not torch.cuda.is_available():
        return False
    return "gfx950" in torch.cuda.get_device_properties(0).gcnArchName


gfx950 = pytest.mark.skipif(not _on_gfx950(), reason="needs an AMD gfx950 GPU (MI355X) with ROCm torch and "
                            "flydsl: the FlyDSL K1 has never been executed (docs/evidence/gfx950.md)")

FLY_IMPLS = [pytest.param(False, id="flydsl-persistent"), pytest.param(True, id="flydsl-phased")]


# ---- gfx950 GPU -----------------------------------------------------------------------------

@gfx950
@pytest.mark.gpu
@pytest.mark.parametrize("phased", FLY_IMPLS)
def test_fly_k1_matches_reference(phased):
    """test_k1's GPU cases (M 1..8, decode and verify, TP shapes, block write, padding)."""
    _check([run_case(dataclasses.replace(c, phased=phased, impl="flydsl"), "cuda") for c in GPU_CASES])


@gfx950
@pytest.mark.gpu
def test_fly_k1_64_decode_steps_stay_within_bounds():
    _check([run_case(dataclasses.replace(c, phased=False, impl="flydsl"), "cuda") for c in GPU_STEPS])


@gfx950
@pytest.mark.gpu
@pytest.mark.parametrize("phase", list(geo.PHASES))
def test_fly_fault_injection_stops_the_process(phase):
    """The stall switch on the FlyDSL launch: the process exits with EXIT_CODE, naming
    rank, layer, K1 and the phase."""
    from sgl_k3_mono.runtime.failure import EXIT_CODE

    env = {**os.environ, "SGL_K3_MONO_STALL": f"0:3:k1:{phase}", "SGL_K3_MONO_DEADLINE_S": "2"}
    script = _STALL_SCRIPT.format(here=str(HERE), root=str(HERE.parent.parent), mode="decode").replace(
        "phased=False)", "phased=False, impl='flydsl')")
    assert "impl='flydsl'" in script
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_CODE, (done.returncode, done.stderr[-3000:])
    assert time.monotonic() - t0 < 120
    for text in ("rank 0", "layer 3", "launch K1", f"'{phase}'"):
        assert text in done.stderr, (text, done.stderr[-2000:])


# ---- any machine: the host-side contract ------------------------------------------------------

def _tp8(mode="decode", rows=4, **kw):
    from sgl_k3_mono.k1.flydsl.variants import tp8_launch

    return tp8_launch(mode, rows, **kw)


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_fly_arguments_are_the_triton_launch_arguments(mode):
    """No second argument builder: every FlyDSL tensor is one launch_args packed."""
    from sgl_k3_mono.k1.flydsl.launch import GRID, fly_arguments

    plan, views, io, scratch, args, meta = _tp8(mode, 8, contribution=True)
    call = fly_arguments(args, meta)
    ids = {id(a) for a in args}
    assert all(id(x) in ids or isinstance(x, int) for x in call.args)
    assert call.args[0] is io.prefix and call.args[20] is io.out and call.args[26] is scratch.sync
    c = call.consts
    assert (c["BN_EFF"], c["NV"], c["BV"]) == (plan.row_tile, plan.v_split, plan.v_block)
    assert c["GRID"] == GRID == plan.grid
    assert c["VERIFY"] == (mode == "verify") and c["ROUND_MIX"] is False  # gfx950 keeps the mix fp32
    assert c["PHASE_MASK"] == 0b111 and c["NB"] == 8


def test_fly_phase_masks_follow_the_triton_numbering():
    from sgl_k3_mono.k1.flydsl.launch import fly_arguments
    from sgl_k3_mono.k1.triton.kernel import PHASES

    assert geo.PHASES == PHASES
    *_, args, meta = _tp8()
    for i, p in enumerate(PHASES):
        assert fly_arguments(args, meta, phases=(p,)).consts["PHASE_MASK"] == 1 << i
    with pytest.raises(ValueError, match="unknown phases"):
        fly_arguments(args, meta, phases=("o_proj",))
    assert geo.barrier_plan(0b111) == {"seam": {"barrier": True}, "in_proj": {"barrier": True},
                                       "kda": {"barrier": False}}
    assert geo.barrier_plan(geo.BIT["kda"]) == {"kda": {"barrier": False}}


def test_fly_shapes_are_refused_before_tracing():
    from sgl_k3_mono.k1.flydsl.launch import fly_arguments

    *_, args, meta = _tp8()
    with pytest.raises(ValueError, match="head_dim 64"):
        fly_arguments(args, dict(meta, D=64))
    with pytest.raises(ValueError, match="hidden 1000"):
        fly_arguments(args, dict(meta, H=1000))
    with pytest.raises(ValueError, match="row tile 24"):
        fly_arguments(args, dict(meta, BN_EFF=24))


def test_run_k1_flydsl_refuses_off_a_hip_device():
    """impl "flydsl" is wired (no longer refused by name) and fails closed where it cannot run."""
    from sgl_k3_mono.k1.host import run_k1

    if _on_gfx950():
        pytest.skip("on gfx950 the launch runs (test_fly_k1_matches_reference)")
    plan, views, io, scratch, _, _ = _tp8("decode", 2)
    with pytest.raises(ValueError, match="HIP"):
        run_k1(plan, views, io, impl="flydsl", scratch=scratch)


# ---- any machine: the index arithmetic, replayed in torch -------------------------------------

@pytest.mark.parametrize("grid", [256, 132, 7])
def test_in_proj_walk_is_the_triton_walk(grid):
    """The three per-weight walks from first_tile together give tile t to workgroup t % grid
    (Triton's `for tile in range(pid, TQ + TF + TB, nprog)`), and every weight row to
    exactly one (tile, 16-row MFMA tile, row), stored into its own proj column."""
    from sgl_k3_mono.k1.host import _row_tile

    P, D, HL = 1536, 128, 12
    bn_eff = _row_tile((4 * P, D, HL), grid)
    cols = {}
    owner = {}
    for bid in range(grid):
        for start, ntiles, nrows, col0 in geo.proj_segments(4 * P, D, HL, bn_eff):
            for tile in range(geo.first_tile(bid, grid, start), start + ntiles, grid):
                owner[tile] = bid
                r0 = (tile - start) * bn_eff
                for sub in range(bn_eff // geo.MFMA_ROWS):
                    rb = r0 + sub * geo.MFMA_ROWS
                    for r in range(geo.MFMA_ROWS):
                        if rb < nrows and rb + r < nrows:
                            assert col0 + rb + r not in cols
                            cols[col0 + rb + r] = bid
    assert sorted(cols) == list(range(4 * P + D + HL))
    assert owner == {t: t % grid for t in owner}


@pytest.mark.parametrize("M,verify,nv", [(1, False, 8), (8, False, 2), (5, True, 8), (8, True, 4)])
def test_kda_items_cover_every_row_head_slice_once(M, verify, nv):
    HL = 12
    seen = set()
    for item in range(geo.kda_items(M, HL, nv, verify)):
        row, head, vs, t0, T = geo.kda_item(item, M, HL, nv, verify)
        assert (row, head, vs) not in seen
        seen.add((row, head, vs))
        assert (t0, T) == ((0, M) if verify else (row, 1))
    assert len(seen) == (1 if verify else M) * HL * nv


def _lane_delta_rule(S, q, k, v, decay, beta):
    """The delta rule as the lanes compute it: row v = 8 lanes, 16 K columns a lane,
    the row sums by the xor butterfly over the 8 lanes (every lane the same value)."""
    rows, D = S.shape
    S = S.clone()
    o = torch.empty(rows, dtype=S.dtype)
    for rp in range(rows):
        parts = [geo.kda_lane(rp * geo.LANES_PER_ROW + p) for p in range(geo.LANES_PER_ROW)]
        assert [r for r, _ in parts] == [rp] * geo.LANES_PER_ROW
        segs = [slice(d0, d0 + geo.COLS_PER_LANE) for _, d0 in parts]

        def grp(vals):
            vals = list(vals)
            for off in (1, 2, 4):
                vals = [vals[i] + vals[i ^ off] for i in range(len(vals))]
            assert all(x == vals[0] for x in vals)
            return vals[0]

        for s in segs:
            S[rp, s] *= decay[s]
        hk = grp((S[rp, s] * k[s]).sum() for s in segs)
        v_new = beta * (v[rp] - hk)
        for s in segs:
            S[rp, s] += v_new * k[s]
        o[rp] = grp((S[rp, s] * q[s]).sum() for s in segs)
    return S, o


def test_lane_split_delta_rule_is_the_row_formula():
    g = torch.Generator().manual_seed(0)
    D, rows = geo.D_FLY, geo.ROWS_PER_PASS
    S = torch.randn(rows, D, generator=g, dtype=torch.float64)
    q, k, decay = (torch.randn(D, generator=g, dtype=torch.float64) for _ in range(3))
    v = torch.randn(rows, generator=g, dtype=torch.float64)
    S2, o = _lane_delta_rule(S, q, k, v, decay, 0.7)
    Sd = S * decay[None, :]
    want_S = Sd + (0.7 * (v - Sd @ k))[:, None] * k[None, :]
    assert torch.allclose(S2, want_S) and torch.allclose(o, want_S @ q)
    # every (row, column) of a pass belongs to exactly one lane
    cells = {(r, d0 + c) for t in range(geo.THREADS) for r, d0 in [geo.kda_lane(t)] for c in range(geo.COLS_PER_LANE)}
    assert len(cells) == geo.THREADS * geo.COLS_PER_LANE == rows * D


@pytest.mark.parametrize("T", [1, 3, 8])
def test_conv_taps_and_windows_are_the_reference_conv(T):
    """Tap i of token u and the window after u, as the device code addresses them, equal
    the causal conv over [window ++ x] and its last KW-1 inputs."""
    KW = 4
    g = torch.Generator().manual_seed(T)
    win = torch.randn(KW - 1, generator=g)
    x = torch.randn(T, generator=g)
    w = torch.randn(KW, generator=g)
    seq = torch.cat([win, x])

    def val(tap):
        kind, i = tap
        return win[i] if kind == "win" else x[i]

    for u in range(T):
        got = sum(val(geo.conv_tap(u, i, KW)) * w[i] for i in range(KW))
        assert torch.allclose(got, (seq[u:u + KW] * w).sum())
        assert torch.equal(torch.stack([val(t) for t in geo.window_after(u, KW)]), seq[u + 1:u + KW])


def test_finishing_step_moves_every_q_and_k_channel_once():
    P, D = 1536, 128
    for head in (0, 11):
        ch = [geo.qk_channel(t, head, P, D) for t in range(geo.THREADS)]
        assert sorted(ch) == [head * D + j for j in range(D)] + [P + head * D + j for j in range(D)]


def test_check_shapes_rules():
    geo.check_shapes(7168, 128, 8, 32, 8, 16, 8)
    for bad in [dict(H=7000), dict(D=256), dict(BN_EFF=40), dict(NB=16), dict(rows=9), dict(BV=64, NV=1)]:
        args = dict(H=7168, D=128, NB=8, BN_EFF=32, NV=8, BV=16, rows=8, **{})
        args.update(bad)
        with pytest.raises(ValueError):
            geo.check_shapes(**args)


def _seam_replay(bank, nvb, p, cw, won, eps, round_mix):
    """seam.py's arithmetic for one row: thread t holds columns (i * THREADS + t) * 4 + 0..3,
    the score partials summed per thread, per wave (64 threads) and over the waves in
    order; softmax max over [bank rows, p], normaliser bank rows then p; the mix bank
    rows first, p last; h = bf16(mix * rstd * w)."""
    H = p.numel()
    steps = H // (geo.SEAM_VEC * geo.THREADS)
    cols = torch.stack([torch.arange(geo.SEAM_VEC) + (i * geo.THREADS + t) * geo.SEAM_VEC
                        for t in range(geo.THREADS) for i in range(steps)]).reshape(geo.THREADS, -1)
    assert sorted(cols.reshape(-1).tolist()) == list(range(H))  # every column once

    def block_total(x):  # per-thread partials -> per-wave -> waves in order
        per_thread = x[cols].sum(1)
        waves = per_thread.reshape(geo.WAVES, 64).sum(1)
        total = waves[0]
        for w in range(1, geo.WAVES):
            total = total + waves[w]
        return total

    def score(v):
        return block_total(v * cw) / torch.sqrt(block_total(v * v) / H + eps)

    s_p = score(p)
    s_j = [score(bank[j]) for j in range(nvb)]
    mx = s_p
    for s in s_j:
        mx = torch.maximum(mx, s)
    z = torch.zeros(())
    for s in s_j:
        z = z + torch.exp(s - mx)
    e_p = torch.exp(s_p - mx)
    z = z + e_p
    mix = torch.zeros(H)
    for j, s in enumerate(s_j):
        mix = mix + (torch.exp(s - mx) / z) * bank[j]
    mix = mix + (e_p / z) * p
    if round_mix:
        mix = mix.bfloat16().float()
    rstd = 1.0 / torch.sqrt(block_total(mix * mix) / H + eps)
    return (mix * rstd * won).bfloat16().float()


@pytest.mark.parametrize("nvb,isa", [(0, "gfx950"), (3, "gfx950"), (8, "gfx950"), (5, "sm_90")])
def test_seam_replay_is_the_reference_aggregate(nvb, isa):
    from sgl_k3_mono.reference.attn_res import aggregate, score_weight

    H, NB, eps = 2048, 8, 1e-5
    g = torch.Generator().manual_seed(nvb)
    bank = torch.randn(1, NB, H, generator=g).bfloat16()
    p = torch.randn(1, H, generator=g).bfloat16()
    proj, sn, on = (torch.randn(H, generator=g).bfloat16() for _ in range(3))
    want = aggregate(bank, nvb, p, proj, sn, on, eps, isa=isa)[0]
    got = _seam_replay(bank[0].float(), nvb, p[0].float(), score_weight(proj, sn), on.float(), eps,
                       round_mix=isa == "sm_90")
    ulp = torch.abs(got - want) / torch.clamp(torch.abs(want), min=1e-3)
    assert float(ulp.max()) <= 2 ** -7  # one bf16 rounding flip at most (sum order only)


# ---- any machine: the compile check lists the K1 variants, and one compiles ------------------

def test_compile_check_lists_every_k1_variant():
    from sgl_k3_mono import compile_check_fly as fly

    names = [v.name for v in fly.variants(False) if v.name.startswith("fly-k1-")]
    assert {f"fly-k1-persistent-{m}-tp8-M{r}" for m in ("decode", "verify") for r in (1, 8)} <= set(names)
    assert {f"fly-k1-{p}-{m}-tp8-M8" for p in geo.PHASES for m in ("decode", "verify")} <= set(names)
    full = [v.name for v in fly.variants(True) if v.name.startswith("fly-k1-persistent")]
    assert len(full) == 8 and len(set(names)) == len(names)
    need = {v.name: v.require for v in fly.variants(False)}
    assert set(fly.PROJECTION) <= set(need["fly-k1-persistent-decode-tp8-M1"])
    assert set(fly.BARRIER) <= set(need["fly-k1-persistent-verify-tp8-M8"])


@pytest.mark.skipif(__import__("sgl_k3_mono.compile_check_fly", fromlist=["x"]).shim_path() is None,
                    reason="the gfx950 toolchain is not installed: tools/setup_gfx950_toolchain.sh <venv>")
def test_one_real_k1_variant_compiles_and_passes():
    done = subprocess.run([sys.executable, "-m", "sgl_k3_mono.compile_check", "--impls", "flydsl",
                           "--targets", "gfx950", "--only", "fly-k1-persistent-verify-tp8-M8"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "1 passed, 0 failed" in done.stdout


# ---- any machine: the whole K1 as the FlyDSL kernel walks it, replayed in torch ------------------

def _kda_replay(plan, lw, proj, slots, conv, ssm, vconv, vssm, vindex, pad_slot):
    """kda.py's walk in torch: items in order (the last item of a (row, head) in item order
    is the finisher), f and the decay of every token first, the V rows BV a pass, each row
    as 8 lanes x 16 columns (geometry.kda_lane), conv taps and windows through
    geometry.conv_tap / window_after, q/k windows moved by the finisher (qk_channel).
    Writes out, opre, the pools (decode) or the verify scratch in place, as the kernel."""
    M, HL, D, KW, NV, BV = plan.rows, plan.heads, plan.head_dim, plan.conv_width, plan.v_split, plan.v_block
    P, verify = HL * D, plan.mode == "verify"
    FA, B, G = 4 * P, 4 * P + D, 3 * P
    bf = lambda t: t.bfloat16().float()  # noqa: E731
    out = torch.zeros(M, P)
    opre = torch.full((M, P), float("nan"))
    done = {}
    w = lw.conv.float()

    def tap(win, t0, u, i, ch):
        kind, r = geo.conv_tap(u, i, KW)
        return win[r, ch] if kind == "win" else proj[t0 + r, ch]

    def silu_conv(win, t0, u, ch):
        acc = tap(win, t0, u, 0, ch) * w[ch, 0]
        for i in range(1, KW):
            acc = acc + tap(win, t0, u, i, ch) * w[ch, i]
        return bf(acc / (1.0 + torch.exp(-acc)))

    def window(win, t0, u, ch):
        return torch.stack([win[r, ch] if kind == "win" else proj[t0 + r, ch]
                            for kind, r in geo.window_after(u, KW)])

    for item in range(geo.kda_items(M, HL, NV, verify)):
        row, head, vs, t0, T = geo.kda_item(item, M, HL, NV, verify)
        slot = int(slots[row])
        if slot < 0 or slot == pad_slot:
            continue  # out stays zero
        win = conv[slot]  # a view: in-place moves land in the pool, as on the device
        hd = torch.arange(D) + head * D
        f = bf(proj[t0:t0 + T, FA:FA + D] @ lw.f_b.float()[hd].t())
        dec = torch.exp(kda_log_decay(f, lw, head))  # [T, D]
        for c in range(D // NV // BV):
            for rp in range(BV):
                vr = vs * (D // NV) + c * BV + rp
                S = ssm[slot, head, vr].clone()
                chv = 2 * P + head * D + vr
                for u in range(T):
                    lanes = [geo.kda_lane(rp * geo.LANES_PER_ROW + p)[1] for p in range(geo.LANES_PER_ROW)]
                    cols = torch.cat([torch.arange(d0, d0 + geo.COLS_PER_LANE) for d0 in lanes])
                    assert torch.equal(cols, torch.arange(D))
                    q = torch.stack([silu_conv(win, t0, u, head * D + d) for d in range(D)])
                    k = torch.stack([silu_conv(win, t0, u, P + head * D + d) for d in range(D)])
                    v = silu_conv(win, t0, u, chv)
                    q = q / torch.sqrt((q * q).sum() + 1e-6) * D ** -0.5
                    k = k / torch.sqrt((k * k).sum() + 1e-6)
                    beta = torch.sigmoid(proj[t0 + u, B + head])
                    S = S * dec[u]
                    S = S + beta * (v - (S * k).sum()) * k
                    opre[t0 + u, head * D + vr] = bf((S * q).sum())
                    if verify:
                        vssm[vindex, u, head, vr] = S
                        vconv[vindex, u, :, chv] = window(win, t0, u, chv)
                if not verify:
                    ssm[slot, head, vr] = S
                    win[:, chv] = window(win, t0, 0, chv)
        done[(row, head)] = done.get((row, head), 0) + 1
        if done[(row, head)] == NV:  # the finisher
            for u in range(T):
                o = opre[t0 + u, hd]
                gate = proj[t0 + u, G + hd]
                y = o / torch.sqrt((o * o).sum() / D + 1e-5) * lw.o_norm.float() * torch.sigmoid(gate)
                out[t0 + u, hd] = bf(y)
                if verify:
                    for t in range(geo.THREADS):
                        ch = geo.qk_channel(t, head, P, D)
                        vconv[vindex, u, :, ch] = window(win, t0, u, ch)
            if not verify:
                for t in range(geo.THREADS):
                    ch = geo.qk_channel(t, head, P, D)
                    win[:, ch] = window(win, t0, 0, ch)
    return out


def kda_log_decay(f, lw, head):
    from sgl_k3_mono.reference import kda

    D = lw.head_dim
    return kda.log_decay(f.unsqueeze(1), lw.a_log.reshape(-1)[head:head + 1],
                         lw.dt_bias.reshape(-1, D)[head:head + 1], lw.lower_bound)[:, 0]


@pytest.mark.parametrize("mode,rows,grid", [("decode", 3, 16), ("decode", 2, 256), ("verify", 4, 16)])
def test_kda_walk_replayed_is_the_reference(mode, rows, grid):
    """The FlyDSL KDA walk (items, V split, passes, taps, windows, finisher) on the
    reference's own in-projection gives the reference's output, state and windows."""
    from sgl_k3_mono.k1.host import K1Plan, K1Views
    from sgl_k3_mono.k1.reference import KDAState, SeamInput, VerifyBuffers, in_projection, k1_reference
    from sgl_k3_mono.k1.weights import K1Weights
    from sgl_k3_mono.reference.attn_res import attn_seam

    H, heads, D = 1024, 2, 128
    g = torch.Generator().manual_seed(rows)
    lw = K1Weights.random(H, heads, D, seed=rows).shard(0, 1)
    plan = K1Plan.for_weights(K1Views.from_local(lw), rows, mode, grid=grid, isa="gfx950")
    P, n_slots = heads * D, rows + 3
    conv0 = torch.randn(n_slots, 3, 3 * P, generator=g).bfloat16()
    ssm0 = 0.1 * torch.randn(n_slots, heads, D, D, generator=g)
    seam = SeamInput(torch.randn(rows, H, generator=g).bfloat16(), None,
                     torch.randn(rows, 8, H, generator=g).bfloat16(), 2, False)
    if mode == "decode":
        slots = torch.randperm(n_slots, generator=g)[:rows].to(torch.int32)
        slots[-1] = -1
        vb = None
    else:
        slots = torch.tensor([1], dtype=torch.int32)
        vb = VerifyBuffers(torch.zeros(2, rows, 3, 3 * P).bfloat16(), torch.zeros(2, rows, heads, D, D), 1)
    ref = k1_reference(lw, seam, KDAState(conv0, ssm0), slots, mode=mode, isa="gfx950", verify=vb)
    pj = in_projection(lw, attn_seam(seam.bank, seam.nvb, seam.prefix, None, lw.seam, 1e-5, write=False,
                                     isa="gfx950").normed)
    proj = torch.cat([pj["qkv"], pj["g"], pj["f_a"], pj["b"]], 1)  # the scratch's q|k|v|g|f_a|b columns
    conv, ssm = conv0.float().clone(), ssm0.clone()
    vconv = vssm = None
    if vb is not None:
        vconv, vssm = vb.conv.float().clone(), vb.ssm.clone()
    out = _kda_replay(plan, lw, proj, slots, conv, ssm, vconv, vssm, 1, None)
    assert torch.allclose(out, ref.out, atol=2e-2, rtol=2e-2), float((out - ref.out).abs().max())
    if mode == "decode":
        assert torch.equal(conv.bfloat16(), ref.state.conv)  # a copy: bitwise
        assert torch.allclose(ssm, ref.state.ssm, atol=1e-4, rtol=1e-4)
    else:
        assert torch.equal(vconv.bfloat16(), ref.verify.conv)
        assert torch.allclose(vssm, ref.verify.ssm, atol=1e-4, rtol=1e-4)


@gfx950
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_fly_graph_1000_replays_bitwise(mode):
    """test_k1's graph test on the FlyDSL launch (captured on the caller's stream)."""
    from test_k1 import graph_replays_bitwise

    graph_replays_bitwise(mode, "flydsl")
