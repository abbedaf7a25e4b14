"""K2's FlyDSL launch (gfx950) under the launch tests: the whole layer against the
reference (persistent and phase by phase, the Triton launch's cases at the real TP-8
rank shapes), the dense phases against their plain-torch definitions, and the stall
switch, on a gfx950 GPU (never available to this project: they skip with that reason);
and, on any machine, the host-side contract: the same argument builder as Triton, the
phase numbering, the barrier plan, refusals before tracing."""

from __future__ import annotations

import pytest
import torch


def _on_gfx950() -> bool:
    if torch.version.hip is None or not torch.cuda.is_available():
        return False
    return "gfx950" in torch.cuda.get_device_properties(0).gcnArchName


gfx950 = pytest.mark.skipif(not _on_gfx950(), reason="needs an AMD gfx950 GPU (MI355X) with ROCm torch and "
                            "flydsl: the FlyDSL launches have never been executed (docs/evidence/gfx950.md)")


def _tp8_args(rows: int):
    """K2Launch.launch_args at a real TP-8 rank's shapes (compile_check's builder, CPU)."""
    from sgl_k3_mono.compile_check import _k2_variant

    _, args, meta = _k2_variant("mxfp4", "gfx950", rows, "gfx950", tp=8)
    return args, meta


def _named(args) -> dict:
    from sgl_k3_mono.k2.triton.kernel import k2_kernel

    return dict(zip(k2_kernel.arg_names, args))


PHASE_SETS = [(p,) for p in ("o_proj", "seam", "front", "route", "experts_up", "experts_down", "combine", "reduce",
                              "latent_up")] + [None]


@pytest.mark.parametrize("phases", PHASE_SETS, ids=lambda p: "persistent" if p is None else p[0])
def test_fly_arguments_are_the_triton_launch_arguments(phases):
    """No second argument builder: every FlyDSL argument is an object launch_args packed,
    the strides compiled in are launch_args' values."""
    from sgl_k3_mono.k2.flydsl.launch import _STRIDES, _TENSORS, GRID, fly_arguments, persistent_phases

    args, meta = _tp8_args(4)
    call = fly_arguments(args, meta, phases=phases or persistent_phases(8))
    ids = {id(a) for a in args}
    assert all(id(x) in ids or isinstance(x, int) for x in call.args)
    named = _named(args)
    assert {k: call.consts[k] for k in ("H", "A", "S2", "E", "L", "I", "I_UP", "TOPK", "TP", "GRID")} == \
        dict(H=meta["H"], A=meta["A"], S2=meta["S2"], E=meta["E"], L=meta["L"], I=meta["I"], I_UP=meta["I_UP"],
             TOPK=meta["TOPK"], TP=8, GRID=GRID)
    assert all(call.consts[k] == named[n] for k, n in _STRIDES.items())
    assert call.consts["FRONT_BF16"] is True  # gfx950 rounds the front GEMM to bf16, as SGLang's HIP path
    assert call.consts["MIX_BF16"] is False
    assert call.args[_TENSORS.index("red_ptr")] is named["red_ptr"]  # TP 8: the reduced [latent | shared]


def test_every_phase_is_written_and_numbered_as_triton():
    from sgl_k3_mono.k2.flydsl.geometry import BIT
    from sgl_k3_mono.k2.flydsl.launch import FLY_PHASES, missing_phases, persistent_phases
    from sgl_k3_mono.k2.triton.frame import PHASES

    assert missing_phases() == () and FLY_PHASES == PHASES
    assert [BIT[p] for p in PHASES] == [1 << i for i in range(len(PHASES))]
    assert persistent_phases(8) == PHASES
    assert persistent_phases(1) == tuple(p for p in PHASES if p != "reduce")  # as Triton: no reduce at TP 1


def test_barrier_plan_publishes_after_a_barrier_and_waits_only_on_this_launchs_tags():
    from sgl_k3_mono.k2.flydsl.geometry import BIT, PHASES, barrier_plan

    full = barrier_plan(sum(BIT.values()), 8)
    assert [p for p in PHASES if full[p]["barrier"]] == list(PHASES[:-1])  # latent_up is last: depart only
    assert [p for p in PHASES if full[p]["publish"]] == ["o_proj", "combine"]
    assert [p for p in PHASES if full[p]["wait"]] == ["seam", "reduce"]
    alone = {p: barrier_plan(BIT[p], 8)[p] for p in PHASES}
    assert alone["o_proj"] == dict(barrier=True, publish=True, wait=False)  # complete grid-wide, then the tag
    assert alone["seam"] == dict(barrier=False, publish=False, wait=False)  # as Triton's phase launch: no wait
    assert not any(v["publish"] or v["wait"] for v in barrier_plan(sum(BIT.values()), 1).values())


def test_fly_refuses_what_its_tiles_cannot_take():
    from sgl_k3_mono.k2.flydsl import launch

    args, meta = _tp8_args(1)
    with pytest.raises(ValueError, match="input width 1000"):
        launch.fly_arguments(args, dict(meta, A=1000))
    with pytest.raises(ValueError, match="multiple of 1024"):
        launch.fly_arguments(args, dict(meta, H=7168 + 512))
    with pytest.raises(NotImplementedError, match="MXFP4 routed experts only"):
        launch.fly_arguments(args, dict(meta, MXFP4=False))
    with pytest.raises(NotImplementedError, match="not written in FlyDSL"):
        launch.fly_arguments(args, meta, phases=("dispatch",))


def test_fly_refuses_tensors_past_a_buffer_descriptor(monkeypatch):
    """Byte offsets through a buffer descriptor are 32-bit: a tensor past 2 GiB (the
    experts of a TP-1 rank) is refused, not wrapped."""
    from sgl_k3_mono.k2.flydsl import launch

    args, meta = _tp8_args(1)
    monkeypatch.setattr(launch, "BUFFER_BYTES", 1 << 30)  # the TP-8 w13 is 1.15 GiB
    with pytest.raises(ValueError, match="w13_ptr"):
        launch.fly_arguments(args, meta)


def _gpu_named(rows: int, seed: int):
    """launch_args' tensors on the GPU, inputs random, outputs poisoned."""
    g = torch.Generator().manual_seed(seed)
    args, meta = _tp8_args(rows)
    a = {}
    for n, x in _named(args).items():
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = (0.05 * torch.randn(x.shape, generator=g)).to(x.dtype)
        a[n] = x.cuda() if isinstance(x, torch.Tensor) else x
    # the emulated peers' tag table holds CPU addresses: point every rank at one GPU word pair
    a["_tags"] = torch.zeros(4, dtype=torch.int32, device="cuda")
    a["flag_ptr"] = torch.full_like(a["flag_ptr"], a["_tags"].data_ptr())
    return a, meta, args


def _run(a, meta, args, phase):
    from sgl_k3_mono.k2.flydsl.launch import run_fly

    names = list(_named(args))
    a["sync_ptr"].zero_()
    run_fly(tuple(a[n] for n in names), meta, phase=phase)
    torch.cuda.synchronize()


def _close(got, want):
    from sgl_k3_mono.numerics import measure

    assert torch.isfinite(got.float()).all(), "a poisoned output survived"
    assert measure(got.float().cpu(), want.float().cpu())["rel"] < 1e-2


@gfx950
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_fly_o_proj(rows):
    a, meta, args = _gpu_named(rows, rows)
    a["part1_ptr"].fill_(float("nan"))
    _run(a, meta, args, "o_proj")
    _close(a["part1_ptr"].view(2, rows, -1)[0], (a["attn_ptr"].float() @ a["wo_ptr"].float().T).bfloat16())


@gfx950
@pytest.mark.parametrize("rows", [1, 8])
def test_fly_front(rows):
    a, meta, args = _gpu_named(rows, 10 + rows)
    for k in ("gu_ptr", "logit_ptr", "xin_ptr"):
        a[k].fill_(float("nan"))
    _run(a, meta, args, "front")
    h2 = a["h2_ptr"][:rows].float()
    _close(a["gu_ptr"], (h2 @ a["wgu_ptr"].float().T).bfloat16().float())
    _close(a["logit_ptr"], (h2 @ a["wr_ptr"].float().T).bfloat16().float())
    _close(a["xin_ptr"], (h2 @ a["wdn_ptr"].float().T).bfloat16())


@gfx950
@pytest.mark.parametrize("rows", [1, 8])
def test_fly_latent_up(rows):
    a, meta, args = _gpu_named(rows, 20 + rows)
    a["out_ptr"].fill_(float("nan"))
    _run(a, meta, args, "latent_up")
    L = meta["L"]
    red = a["red_ptr"].float()
    lat = red[:, :L]
    xn = (lat * torch.rsqrt(lat.pow(2).mean(-1, keepdim=True) + meta["EPS"]) * a["lnorm_ptr"].float()).bfloat16()
    y = (xn.float() @ a["wup_ptr"].float().T).bfloat16().float()
    x = (y + red[:, L:]).bfloat16().float()
    _close(a["out_ptr"], (x + a["p_ptr"].float()).bfloat16())


def _stall_child() -> None:
    """On the GPU: o_proj with the stall switch from the environment (K2Launch reads it)."""
    a, meta, args = _gpu_named(1, 0)
    _run(a, meta, args, "o_proj")


@gfx950
def test_fly_stall_stops_the_process():
    """SGL_K3_MONO_STALL=0:0:k2:o_proj: workgroup 0 holds past the deadline, records and
    traps; the process ends with an error instead of hanging (the timeout would say so)."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import test_k2_flydsl as t; t._stall_child()"],
                          capture_output=True, text=True, timeout=120, cwd=os.path.dirname(__file__),
                          env={**os.environ, "SGL_K3_MONO_STALL": "0:0:k2:o_proj"})
    assert done.returncode != 0, done.stdout


REAL_CASES = [(m, nvb, seed) for m, nvb, seed in ((1, 1, 11), (4, 3, 14), (8, 0, 18))]


@gfx950
@pytest.mark.parametrize("phase", [None, "all"], ids=["persistent", "phase-by-phase"])
@pytest.mark.parametrize("case", REAL_CASES, ids=lambda c: f"M{c[0]}-nvb{c[1]}")
def test_fly_k2_matches_reference(case, phase, monkeypatch):
    """test_k2.py's check (every output within the spec's bounds, routing equal to the
    reference's) on the FlyDSL K2 at a real TP-8 rank's shapes, MXFP4 experts."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from k2_cases import Case, run_case
    from test_k2 import _check

    monkeypatch.setenv("SGL_K3_MONO_GFX950_IMPL", "flydsl")
    m, nvb, seed = case
    _check(run_case(Case("kimi-k3-tp8-rank", m, "mxfp4", "gfx950", nvb=nvb, seed=seed), "cuda", phase=phase))


def test_fly_build_refuses_from_the_plan_at_startup():
    """A bare K2Launch.build with the FlyDSL device code refuses what its tiles cannot take
    before any launch (bf16 experts, shapes off its tiles): a startup error, not step 1's."""
    import dataclasses

    from sgl_k3_mono.k2.host import K2Launch, K2Plan

    mx = K2Plan(rows=8, isa="gfx950", hidden=7168, attn_width=1536, shared2=768, experts=896, latent=3584,
                inter=384, inter_up=384, top_k=16, bank_rows=8, eps=1e-5, situ_beta=4.0, situ_linear_beta=25.0,
                mxfp4=True, grid=256)
    K2Launch.build(mx, "cpu", hip=True, impl="flydsl")  # K3's own shapes: accepted
    with pytest.raises(NotImplementedError, match="MXFP4 routed experts only"):
        K2Launch.build(dataclasses.replace(mx, mxfp4=False), "cpu", hip=True, impl="flydsl")
    with pytest.raises(ValueError, match="multiple of"):
        K2Launch.build(dataclasses.replace(mx, hidden=7168 + 512), "cpu", hip=True, impl="flydsl")
    tp4 = dataclasses.replace(mx, attn_width=3072, shared2=1536, inter=768, inter_up=768)  # a TP-4 rank
    with pytest.raises(ValueError, match="exceed a buffer descriptor"):
        K2Launch.build(tp4, "cpu", hip=True, impl="flydsl")
