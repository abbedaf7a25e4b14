"""The step (embed, K1 | seam + MLA, K2 | layer 0, final read) on the tiny harness model,
against the whole-step reference, on the CPU: with the launches' references (must agree
exactly: the same oracles in the same order) and with the Triton launches under the
CPU interpreter (within the launches' bounds). The harness's MLA is the reference's
math batched over a fixed-length masked cache (capturable), so its fp32 sums differ in
order from the reference's per-row loop: the agreement is to a bf16 ulp, not bitwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sgl_k3_mono.forward import harness
from sgl_k3_mono.forward.build import ServerStep, plans_for
from sgl_k3_mono.forward.plan import StepBuffers
from sgl_k3_mono.forward.step import run_step
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.step import DecodeState, decode_step

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tiny():
    w = harness.random_weights(harness.shape("tiny"), seed=0)
    return w, harness.step_model(w)


def test_schedule_of_the_tiny_model(tiny):
    _, model = tiny
    assert model.reasons() == []
    assert [(lr.attention, lr.write, lr.nvb, lr.k2 is not None) for lr in model.layers] == [
        ("kda", True, 0, False), ("kda", False, 1, True), ("kda", True, 1, True), ("mla", False, 2, True)]
    assert model.nvb_final == 2


@pytest.mark.parametrize("rows", [1, 3])
def test_reference_impls_equal_the_reference_step(tiny, rows):
    w, model = tiny
    plan = plans_for(model, (rows,), ServerStep("decode", 1), tp=1, rank=0, isa="sm_90", impl="reference",
                     grid=4)[("decode", rows, 1)]
    bufs = StepBuffers.allocate(plan, "cpu", deadline_s=10)
    slots = torch.arange(rows) * 2  # slots 0, 2, 4: not the row order
    state = harness.HarnessState.fresh(w, slots, 2 * rows, 8, "cpu")
    hooks = harness.HarnessHooks(w, state, slots)
    ref_state = DecodeState.fresh(w.dims, 1, 2 * rows)
    g = torch.Generator().manual_seed(rows)
    for _ in range(3):
        ids = torch.randint(0, w.dims.vocab, (rows,), generator=g)
        got = run_step(model, plan, bufs, hooks, ids, deadline_s=10)
        ref = decode_step(w, ref_state, ids, slots, tp=1, isa="sm_90")
        m = measure(got, ref)
        assert m["max_abs"] <= 0.02 and m["cosine"] > 0.99999, m
        assert torch.equal(got.argmax(-1), ref.argmax(-1))
    for i in w.dims.kda_layers:
        assert measure(state.kda[i].ssm_pool, ref_state.kda[i][0].ssm)["cosine"] > 0.99999
        assert measure(state.kda[i].conv_pool, ref_state.kda[i][0].conv)["cosine"] > 0.99999
    for i in w.dims.mla_layers:
        for s in slots.tolist():
            assert measure(state.mla[i][s, :3], ref_state.mla[i][s])["cosine"] > 0.99999


def test_plans_refuse_a_verify_of_two_requests(tiny):
    from sgl_k3_mono.forward.build import step_reasons

    _, model = tiny
    (reason,) = step_reasons(model, (4, 8), ServerStep("target_verify", 4))
    assert "verify steps of [2] requests" in reason and "one request a step" in reason


def test_triton_launches_interpreted_match_the_reference_step():
    """Three decode steps of 2 rows with K1 and K2 as Triton kernels (phase by phase under
    the interpreter) through `compare.compare`, the GPU test's comparison: every bound of
    the case holds (KL, logit error, greedy agreement, router scores, states: 2 times
    the recorded yardstick, `yardstick.bounds_for`). Where a router near-tie flips a
    top-k choice the reference follows the launch's set, since the launch's scores
    explain it (`compare.RouteFollower`). Every layer's output is captured for a draft and
    held to the reference's (`StepBounds.aux_cosine`)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(HERE / "interp_worker.py"), "2", "3"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    print(summary)
    assert summary["row_steps"] == 6 and summary["route_problems"] == 0, summary
    assert sorted(summary["aux"]) == ["0", "1", "2", "3"], summary["aux"]
    assert summary["violations"] == [], summary["violations"]


def test_route_follower_takes_the_launch_set_only_where_its_scores_explain_it():
    from sgl_k3_mono.forward.compare import RouteFollower

    bias = torch.zeros(6)
    f = RouteFollower({7: bias})
    ref_logits = torch.tensor([[3.0, 2.0, 1.0, 0.999, -1.0, -2.0]] * 2)
    ref_ids = torch.tensor([[0, 1, 2]] * 2)
    ours = ref_logits.clone()
    ours[0, 3] = 1.001  # row 0: a near-tie the launch's own scores resolve the other way
    our_ids = torch.tensor([[0, 1, 3], [0, 1, 4]])  # row 1: not the launch's own top-3
    f.ours = {7: (our_ids, ours)}
    got = f(7, ref_logits, ref_ids)
    assert got[0].tolist() == [0, 1, 3] and got[1].tolist() == [0, 1, 2]
    assert f.followed == 1 and len(f.problems) == 1 and "row 1" in f.problems[0]
    assert max(f.score_err) < 1e-3


def test_the_standard_step_bench_step_times_computes_the_same_step():
    """`bench step`'s standard column swaps each launch for the standard path's composition
    (`forward.standard`); it must compute the same step (else the speedup compares
    different work): logits within a few bf16 roundings of the reference step, argmax
    equal. (Its roundings differ from the launches': bf16 router logits, a bf16 mix.) On
    the CPU its routed experts are the gathered bmm; SGLang's fused MoE kernels, which
    `bench step` runs, are checked on the GPU (test_forward_gpu.py)."""
    from standard_check import standard_step_against_reference

    what, ms = standard_step_against_reference("cpu")
    assert what["experts"].startswith("gathered bmm"), what
    for m in ms:
        assert m["cosine"] > 0.9998 and m["rel"] < 0.03, m


def test_the_bench_bf16_hooks_compute_the_same_step(tiny):
    """`bench step --common bf16` (the default) runs MLA, layer 0 and the logits as bf16
    GEMMs in both of its steps: the step must stay the same function (logits within
    bf16 rounding of the reference step's, argmax equal), else the bare column would time
    different work. The reference launches keep the launch side exact."""
    from sgl_k3_mono.forward.bench_hooks import Bf16BenchHooks

    w, model = tiny
    rows = 3
    plan = plans_for(model, (rows,), ServerStep("decode", 1), tp=1, rank=0, isa="sm_90", impl="reference",
                     grid=4)[("decode", rows, 1)]
    bufs = StepBuffers.allocate(plan, "cpu", deadline_s=10)
    slots = torch.arange(rows) * 2
    state = harness.HarnessState.fresh(w, slots, 2 * rows, 8, "cpu")
    hooks = Bf16BenchHooks(w, state, slots)
    ref_state = DecodeState.fresh(w.dims, 1, 2 * rows)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        ids = torch.randint(0, w.dims.vocab, (rows,), generator=g)
        got = run_step(model, plan, bufs, hooks, ids, deadline_s=10)
        ref = decode_step(w, ref_state, ids, slots, tp=1, isa="sm_90")
        m = measure(got.float(), ref)
        assert m["cosine"] > 0.9998 and m["rel"] < 0.03, m
        assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_every_gpu_case_has_a_recorded_yardstick():
    """The GPU step tests read their bounds from yardstick.json; a case without one fails
    there only after minutes of device time (the fifth session's TP-2 stall run did)."""
    from step_cases import TP1, TP8_STALL, TP8_STEPS, TP_STALL, TP_STEPS

    from sgl_k3_mono.forward import yardstick

    missing = []
    for name, fmt, rows, steps, *_ in [*TP1, TP_STEPS, TP_STALL, TP8_STEPS, TP8_STALL]:
        try:
            yardstick.bounds_for(name, fmt, rows, steps)
        except KeyError as e:
            missing.append(str(e))
    assert missing == [], missing


@pytest.mark.parametrize("key", ["tiny:bf16:2:3", "tiny:bf16:3:64", "tiny8:bf16:2:4"])
def test_recorded_yardstick_is_what_the_reference_computes(key):
    """forward/yardstick.json is what the step bounds are read from: recompute a case (the
    reference at TP 2 against TP 1, on the host) and find the recorded figures.

    A few steps reproduce them to 1e-7 on any CPU. Over 64 steps the max-type statistics
    move with the CPU's fp32 BLAS (its summation order, AVX2 against AVX-512), since the
    recurrence compounds each difference and a near-tie may resolve otherwise: on the
    AVX2 EPYC of 2026-12-01 kl_max came out 0.76x the recorded value and 1 - ssm_cosine_min
    1.45x. Those are held to a factor of 2, which still catches a stale file."""
    from sgl_k3_mono.forward import yardstick

    name, fmt, rows, steps = key.split(":")
    run = yardstick.yardstick(harness.shape(name, expert_format=fmt), rows=int(rows), steps=int(steps))
    got = yardstick.yardstick_record(run)
    want = json.loads(yardstick.YARDSTICK_FILE.read_text())["cases"][key]
    lo, hi = (0.99, 1.01) if int(steps) <= 3 else (0.5, 2.0)
    pairs = [(k, got[k], want[k]) for k in ("kl_max", "err_max", "router_score_max_abs")]
    pairs.append(("1 - ssm_cosine_min", 1 - got["ssm_cosine_min"], 1 - want["ssm_cosine_min"]))
    for k, g, w in pairs:
        assert lo <= g / w <= hi, (k, g, w)


def test_a_plan_takes_the_mma_experts_only_if_every_layer_allows_them():
    """One plan serves every MoE layer, so K2's mma_fp4 path (2^(S-1) in bf16: scale codes
    up to 128) must hold for all of them: a single scale of 129 in the last MoE layer sends
    the plan to tl.dot_scaled, though the layer the plan's shapes come from is in range."""
    w = harness.random_weights(harness.shape("tiny", expert_format="mxfp4"), seed=0)
    model = harness.step_model(w)
    moe = [lr.k2 for lr in model.layers if lr.k2 is not None]
    assert len(moe) >= 2 and all(int(k2.moe.experts.w2_scale.max()) <= 128 for k2 in moe)

    def plan():
        return plans_for(model, (2,), ServerStep("decode", 1), tp=1, rank=0, isa="sm_90", impl="reference",
                         grid=4)[("decode", 2, 1)]

    def mma_at_real_widths():  # the tiny widths fit no mma tile; the scales decide the rest
        import dataclasses

        return dataclasses.replace(plan().k2, latent=3584, inter=384).mma_experts

    assert mma_at_real_widths()
    moe[-1].moe.experts.w2_scale[0, 0, 0] = 129
    assert plan().k2.scale_max == 129 and not mma_at_real_widths()
