"""The one-token KDA pieces against SGLang 0.5.23's own kernels and independent loops.

SGLang's Triton kernels (the decode/verify chain CUDA and the unfused ROCm path run)
execute here through Triton's interpreter: `causal_conv1d_update`,
`fused_recurrent_kda_packed_decode`, `fused_sigmoid_gating_delta_rule_update`
(verify, intermediate states) and `FusedRMSNormGated`. The gfx950 HIP kernel
(`kda_decode_gfx950.cu`) cannot run here; its math is what the reference follows.
"""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.reference import kda
from sgl_k3_mono.reference.ops import bf16

from support import sglang_triton_cpu as helpers

# Real per-rank KDA shape at TP 8: 12 heads x 128; 8 rows; pool of 11 slots.
H_L, D, KW, M, SLOTS, T = 12, 128, 4, 8, 11, 6
C = 3 * H_L * D


def _inputs(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return dict(
        x=(torch.randn(M, C, generator=g)).bfloat16(),
        xs=(torch.randn(T, C, generator=g)).bfloat16(),
        conv_state=(torch.randn(SLOTS, KW - 1, C, generator=g)).bfloat16(),
        conv_w=torch.randn(C, KW, generator=g) / 2,
        f=(torch.randn(M, H_L * D, generator=g)).bfloat16(),
        fs=(torch.randn(T, H_L * D, generator=g)).bfloat16(),
        b=(torch.randn(M, H_L, generator=g) * 2).bfloat16(),
        bs=(torch.randn(T, H_L, generator=g) * 2).bfloat16(),
        a_log=torch.log(torch.empty(H_L).uniform_(1, 16, generator=g)),
        dt_bias=0.5 * torch.randn(H_L * D, generator=g),
        ssm=torch.randn(SLOTS, H_L, D, D, generator=g) * 0.05,
        slots=torch.tensor([3, -1, 0, 7, 10, 1, -1, 5], dtype=torch.int32),
        gate=(torch.randn(M, H_L, D, generator=g) * 2).bfloat16(),
        o=(torch.randn(M, H_L, D, generator=g)).bfloat16(),
        onorm_w=(1 + 0.1 * torch.randn(D, generator=g)).bfloat16(),
        vslot=4, vindex=2,
    )


_SGLANG = """
import copy
from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
from sglang.kernels.ops.attention.fla.fused_recurrent import fused_recurrent_kda_packed_decode
from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import fused_sigmoid_gating_delta_rule_update
from sglang.kernels.ops.attention.fla.fused_norm_gate import FusedRMSNormGated
import sglang.kernels.ops.attention.fla.fused_recurrent as _fr
# fla binds `exp = tl.exp` at import; the interpreter only patches names it sees through `tl`.
_fr.exp = lambda x: tl.exp(x)
p = payload
H, D, M, T = p["H_L"], p["D"], p["M"], p["T"]
# decode conv: SGLang's pool is [slots, K-1, C]; kernels take the transposed view.
conv = p["conv_state"].clone()
y = causal_conv1d_update(p["x"], conv.transpose(-1, -2), p["conv_w"], None, activation="silu",
                         conv_state_indices=p["slots"])
result["conv_y"], result["conv_state"] = y, conv
# packed decode on the conv output (pad rows: slot < 0)
ssm = p["ssm"].clone()
out = torch.empty(M, 1, H, D, dtype=torch.bfloat16)
fused_recurrent_kda_packed_decode(mixed_qkv=p["qkv_in"], a=p["f"], b=p["b"], A_log=p["a_log"],
    dt_bias=p["dt_bias"], scale=D ** -0.5, initial_state=ssm, out=out,
    ssm_state_indices=p["slots"].long(), use_qk_l2norm_in_kernel=True, lower_bound=-5.0)
result["o"], result["ssm"] = out, ssm
# verify: T tokens of one request, conv windows and states into the scratch
conv = p["conv_state"].clone()
iconv = torch.zeros(3, T, 3, H * D * 3, dtype=torch.bfloat16)
vs = torch.tensor([p["vslot"]], dtype=torch.int32); vi = torch.tensor([p["vindex"]], dtype=torch.int32)
yv = causal_conv1d_update(p["xs"].unsqueeze(0).transpose(1, 2), conv.transpose(-1, -2), p["conv_w"], None,
                          activation="silu", conv_state_indices=vs,
                          intermediate_conv_window=iconv.transpose(-1, -2), intermediate_state_indices=vi)
result["v_conv_y"], result["v_iconv"], result["v_conv_state"] = yv.transpose(1, 2)[0], iconv, conv
qkv = p["v_qkv_in"]
q, k, v = (t.reshape(1, T, H, D) for t in qkv.split(H * D, -1))
ssm = p["ssm"].clone()
issm = torch.zeros(3, T, H, D, D)
ov = fused_sigmoid_gating_delta_rule_update(A_log=p["a_log"], dt_bias=p["dt_bias"], q=q, k=k, v=v,
    a=p["fs"].reshape(1, T, H, D), b=p["bs"].unsqueeze(0), initial_state_source=ssm, initial_state_indices=vs,
    cu_seqlens=torch.tensor([0, T], dtype=torch.int32), use_qk_l2norm_in_kernel=True, softplus_beta=1.0,
    softplus_threshold=20.0, is_kda=True, disable_state_update=True, intermediate_states_buffer=issm,
    intermediate_state_indices=vi, cache_steps=T, retrieve_parent_token=None, lower_bound=-5.0)
result["v_o"], result["v_issm"], result["v_ssm"] = ov, issm, ssm
# gated output norm
norm = FusedRMSNormGated(D, eps=1e-5, activation="sigmoid", dtype=torch.bfloat16)
norm.weight.data = p["onorm_w"].clone()
result["onorm"] = norm(p["o"], p["gate"])
"""


@pytest.fixture(scope="module")
def case():
    p = _inputs()
    p.update(H_L=H_L, D=D, M=M, T=T)
    # The kernels consume the conv output; give both sides the same (reference) conv output.
    live = p["slots"] >= 0
    y, _ = kda.conv_update(p["conv_state"][p["slots"].clamp(min=0).long()], p["x"], p["conv_w"])
    p["qkv_in"] = torch.where(live[:, None], y, 0).bfloat16()
    win, ys = p["conv_state"][p["vslot"]].unsqueeze(0), []
    for t in range(T):
        yt, win = kda.conv_update(win, p["xs"][t : t + 1], p["conv_w"])
        ys.append(yt)
    p["v_qkv_in"] = torch.cat(ys).bfloat16()
    return p, helpers.run_interpreted(_SGLANG, p)


def _report(what, ref, got):
    mx, cos = helpers.errors(ref, got)
    print(f"{what}: max_abs={mx:.3e} cos={cos:.7f}")
    return mx, cos


def _qkv_heads(y):
    n = y.shape[0]
    q, k, v = (t.reshape(n, H_L, D) for t in y.float().split(H_L * D, -1))
    return kda.l2norm(q) * D ** -0.5, kda.l2norm(k), v


def test_conv_decode_matches_causal_conv1d_update(case):
    p, sg = case
    live = (p["slots"] >= 0).nonzero().flatten()
    sl = p["slots"][live].long()
    y, win = kda.conv_update(p["conv_state"][sl], p["x"][live], p["conv_w"])
    _report("conv y (decode)", y, sg["conv_y"][live])
    assert torch.equal(y.bfloat16(), sg["conv_y"][live])  # same tap order, one rounding
    assert torch.equal(win, sg["conv_state"][sl])
    untouched = torch.ones(SLOTS, dtype=torch.bool)
    untouched[sl] = False
    assert torch.equal(sg["conv_state"][untouched], p["conv_state"][untouched])


def test_conv_matches_torch_conv1d_on_the_window():
    p = _inputs(1)
    win = p["conv_state"][:M]
    y, new = kda.conv_update(win, p["x"], p["conv_w"])
    full = torch.cat([win.float(), p["x"].float().unsqueeze(1)], 1).transpose(1, 2)  # [M, C, K]
    ref = torch.nn.functional.conv1d(full.double(), p["conv_w"].double().unsqueeze(1), groups=C)[..., -1]
    ref = torch.nn.functional.silu(ref)
    mx, _ = _report("conv vs conv1d", ref, y)
    assert mx <= 2.0 ** -7 * ref.abs().max().item()
    assert torch.equal(new, torch.cat([win, p["x"].unsqueeze(1)], 1)[:, 1:])


def test_decode_recurrence_matches_packed_decode(case):
    p, sg = case
    live = (p["slots"] >= 0).nonzero().flatten()
    sl = p["slots"][live].long()
    q, k, v = _qkv_heads(p["qkv_in"][live])
    g = kda.log_decay(p["f"][live].reshape(-1, H_L, D), p["a_log"], p["dt_bias"].reshape(H_L, D), -5.0)
    beta = torch.sigmoid(p["b"][live].float())
    o, s = kda.delta_rule_step(p["ssm"][sl], q, k, v, torch.exp(g), beta)
    _report("o (packed decode)", bf16(o), sg["o"][live, 0])
    _report("state (packed decode)", s, sg["ssm"][sl])
    assert torch.allclose(bf16(o), sg["o"][live, 0].float(), rtol=2 ** -7, atol=1e-4)
    assert torch.allclose(s, sg["ssm"][sl], rtol=1e-5, atol=1e-5)
    pad = (p["slots"] < 0).nonzero().flatten()
    assert (sg["o"][pad] == 0).all()
    untouched = torch.ones(SLOTS, dtype=torch.bool)
    untouched[sl] = False
    assert torch.equal(sg["ssm"][untouched], p["ssm"][untouched])


def test_verify_matches_intermediate_scratch(case):
    p, sg = case
    win, s = p["conv_state"][p["vslot"]].unsqueeze(0), p["ssm"][p["vslot"]].unsqueeze(0)
    for t in range(T):
        y, win = kda.conv_update(win, p["xs"][t : t + 1], p["conv_w"])
        assert torch.equal(y.bfloat16()[0], sg["v_conv_y"][t])
        assert torch.equal(win[0], sg["v_iconv"][p["vindex"], t])
        q, k, v = _qkv_heads(y)
        g = kda.log_decay(p["fs"][t : t + 1].reshape(1, H_L, D), p["a_log"], p["dt_bias"].reshape(H_L, D), -5.0)
        o, s = kda.delta_rule_step(s, q, k, v, torch.exp(g), torch.sigmoid(p["bs"][t : t + 1].float()))
        _report(f"verify t={t} o / state", bf16(o), sg["v_o"][0, t])
        assert torch.allclose(bf16(o)[0], sg["v_o"][0, t].float(), rtol=2 ** -7, atol=1e-4)
        assert torch.allclose(s[0], sg["v_issm"][p["vindex"], t], rtol=1e-5, atol=1e-5)
    assert torch.equal(sg["v_ssm"], p["ssm"]), "verify leaves the committed ssm pool alone"
    # SGLang's conv update rewrites the committed conv slot with the last window (never read).
    assert torch.equal(sg["v_conv_state"][p["vslot"]], win[0])


def test_gated_rmsnorm_matches_fused_rmsnorm_gated(case):
    p, sg = case
    ref = bf16(kda.gated_rmsnorm(p["o"], p["onorm_w"], p["gate"]))
    _report("o_norm vs FusedRMSNormGated", ref, sg["onorm"])
    assert torch.allclose(ref, sg["onorm"].float(), rtol=2 ** -7, atol=1e-5)


def test_gated_rmsnorm_silu_matches_rms_norm_ref():
    from sglang.kernels.ops.attention.fla.layernorm_gated import rms_norm_ref

    p = _inputs(2)
    got = rms_norm_ref(p["o"], p["onorm_w"], None, z=p["gate"], eps=1e-5)
    ref = bf16(kda.gated_rmsnorm(p["o"], p["onorm_w"], p["gate"], activation="silu"))
    _report("gated_rmsnorm(silu) vs rms_norm_ref", ref, got)
    assert torch.allclose(ref, got.float(), rtol=2 ** -7, atol=1e-5)


def test_delta_rule_matches_float64_outer_product_loop():
    """An independent formulation: S' = diag-decayed S + beta k (v - S k)^T in K x V
    orientation, o = S'^T q, per (row, head) in float64."""
    p = _inputs(3)
    q, k, v = _qkv_heads(p["x"])
    g = kda.log_decay(p["f"].reshape(M, H_L, D), p["a_log"], p["dt_bias"].reshape(H_L, D), -5.0)
    beta = torch.sigmoid(p["b"].float())
    state = p["ssm"][:M]
    o, s = kda.delta_rule_step(state, q, k, v, torch.exp(g), beta)
    for n in range(M):
        for h in range(0, H_L, 5):
            skv = state[n, h].double().t()  # [K, V]
            skv = torch.diag(torch.exp(g[n, h].double())) @ skv
            kk, qq = k[n, h].double(), q[n, h].double()
            skv = skv + beta[n, h].double() * torch.outer(kk, v[n, h].double() - skv.t() @ kk)
            assert torch.allclose(s[n, h].double(), skv.t(), rtol=1e-4, atol=1e-5)
            assert torch.allclose(o[n, h].double(), skv.t() @ qq, rtol=1e-4, atol=1e-5)


def test_gate_lower_bound_bounds_the_decay():
    f = torch.linspace(-50, 50, 101).reshape(1, 1, -1)
    g = kda.log_decay(f, torch.tensor([2.0]), torch.zeros(1, 101), -5.0)
    assert (g >= -5.0).all() and (g <= 0).all()
    g2 = kda.log_decay(f, torch.tensor([0.0]), torch.zeros(1, 101), None)
    assert torch.allclose(g2[0, 0, -1], torch.tensor(-50.0))  # softplus above the threshold is identity
