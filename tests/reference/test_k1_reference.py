"""`k1_reference` against SGLang 0.5.23: its modules on the tiny model (CPU) and its
decode / verify kernel chain (Triton interpreter), at tiny and real per-rank shapes."""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.k1 import K1LocalWeights, K1Weights, KDAState, SeamInput, VerifyBuffers, k1_reference
from sgl_k3_mono.k1.reference import in_projection

from support import sglang_triton_cpu as helpers

EPS = 1e-5

# SGLang's unfused KDA chain: conv update -> packed decode (or the verify kernel with
# intermediate states) -> FusedRMSNormGated, on in-projection outputs given as inputs.
_CHAIN = """
from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
from sglang.kernels.ops.attention.fla.fused_recurrent import fused_recurrent_kda_packed_decode
from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import fused_sigmoid_gating_delta_rule_update
from sglang.kernels.ops.attention.fla.fused_norm_gate import FusedRMSNormGated
import sglang.kernels.ops.attention.fla.fused_recurrent as _fr
_fr.exp = lambda x: tl.exp(x)
for name, c in payload.items():
    H, D = c["heads"], c["head_dim"]
    M = c["qkv"].shape[0]
    conv, ssm = c["conv"].clone(), c["ssm"].clone()
    norm = FusedRMSNormGated(D, eps=1e-5, activation="sigmoid", dtype=torch.bfloat16)
    norm.weight.data = c["o_norm"].clone()
    if c["mode"] == "decode":
        y = causal_conv1d_update(c["qkv"], conv.transpose(-1, -2), c["conv_w"], None, activation="silu",
                                 conv_state_indices=c["slots"])
        o = torch.empty(M, 1, H, D, dtype=torch.bfloat16)
        fused_recurrent_kda_packed_decode(mixed_qkv=y, a=c["f"], b=c["b"], A_log=c["a_log"], dt_bias=c["dt_bias"],
            scale=D ** -0.5, initial_state=ssm, out=o, ssm_state_indices=c["slots"].long(),
            use_qk_l2norm_in_kernel=True, lower_bound=-5.0)
        o = o.transpose(0, 1)
        extra = None
    else:
        iconv, issm = c["iconv"].clone(), c["issm"].clone()
        vi = torch.tensor([c["index"]], dtype=torch.int32)
        y = causal_conv1d_update(c["qkv"].unsqueeze(0).transpose(1, 2), conv.transpose(-1, -2), c["conv_w"], None,
                                 activation="silu", conv_state_indices=c["slots"],
                                 intermediate_conv_window=iconv.transpose(-1, -2), intermediate_state_indices=vi)
        y = y.transpose(1, 2)[0]
        q, k, v = (t.reshape(1, M, H, D) for t in y.split(H * D, -1))
        o = fused_sigmoid_gating_delta_rule_update(A_log=c["a_log"], dt_bias=c["dt_bias"], q=q, k=k, v=v,
            a=c["f"].reshape(1, M, H, D), b=c["b"].unsqueeze(0), initial_state_source=ssm,
            initial_state_indices=c["slots"], cu_seqlens=torch.tensor([0, M], dtype=torch.int32),
            use_qk_l2norm_in_kernel=True, softplus_beta=1.0, softplus_threshold=20.0, is_kda=True,
            disable_state_update=True, intermediate_states_buffer=issm, intermediate_state_indices=vi,
            cache_steps=iconv.shape[1], retrieve_parent_token=None, lower_bound=-5.0)
        extra = (iconv, issm)
    out = norm(o, c["g"].reshape(1, M, H, D)).squeeze(0).flatten(-2)
    result[name] = (out, conv, ssm, extra)
"""


def _chain_case(lw: K1LocalWeights, proj: dict, state: KDAState, slots, mode, verify=None) -> dict:
    c = dict(heads=lw.heads, head_dim=lw.head_dim, mode=mode, conv_w=lw.conv, a_log=lw.a_log,
             dt_bias=lw.dt_bias, o_norm=lw.o_norm, conv=state.conv, ssm=state.ssm,
             slots=slots.to(torch.int32), **{k: v.bfloat16() for k, v in proj.items()})
    if verify is not None:
        c.update(iconv=verify.conv, issm=verify.ssm, index=verify.index)
    return c


def _state(lw: K1LocalWeights, slots: int, seed: int) -> KDAState:
    g = torch.Generator().manual_seed(seed)
    d = lw.head_dim
    return KDAState(
        conv=torch.randn(slots, lw.conv_width - 1, 3 * lw.proj, generator=g).bfloat16(),
        ssm=torch.randn(slots, lw.heads, d, d, generator=g) * 0.05,
    )


def _seam(m: int, h: int, nvb: int, write: bool, seed: int) -> SeamInput:
    g = torch.Generator().manual_seed(seed)
    return SeamInput(
        prefix=torch.randn(m, h, generator=g).bfloat16(),
        contribution=(torch.randn(m, h, generator=g) * 0.3).bfloat16(),
        bank=(torch.randn(m, 8, h, generator=g) * 10 ** (torch.rand(m, 8, 1, generator=g) - 0.5)).bfloat16(),
        nvb=nvb, write=write,
    )


def _verify_buffers(lw: K1LocalWeights, steps: int) -> VerifyBuffers:
    d = lw.head_dim
    return VerifyBuffers(
        conv=torch.zeros(3, steps, lw.conv_width - 1, 3 * lw.proj, dtype=torch.bfloat16),
        ssm=torch.zeros(3, steps, lw.heads, d, d), index=1,
    )


def _assert_close_bf16(ref, got, what, ulps=2):
    ref, got = ref.float(), got.float()
    mx, cos = helpers.errors(ref, got)
    print(f"{what}: max_abs={mx:.3e} cos={cos:.7f} mismatched={(ref != got).float().mean().item():.4f}")
    tol = ulps * torch.clamp(ref.abs(), min=1e-2) * 2.0 ** -8
    assert ((ref - got).abs() <= tol).all(), what
    assert cos > 0.99999, what


# ---- the SGLang-built tiny model -------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_config_dir):
    from support.sglang_cpu import build_model

    model = build_model(tiny_config_dir)
    with torch.no_grad():
        helpers.randomize(model)
    return model.language_model.model


@pytest.fixture(scope="module")
def tiny_layer(tiny):
    return tiny.layers[1]


def test_weights_from_sglang_match_its_modules(tiny_layer):
    lw = K1LocalWeights.from_sglang(tiny_layer)
    attn = tiny_layer.self_attn
    assert attn._bfa_w is not None
    assert torch.equal(lw.bfa[: lw.head_dim], attn.f_a_proj.weight)
    assert torch.equal(lw.bfa[lw.head_dim : lw.head_dim + lw.heads], attn.b_proj.weight)
    assert lw.lower_bound == -5.0 and lw.conv.dtype == torch.float32
    w = K1Weights.from_sglang(tiny_layer)
    for name in ("qkvg", "bfa", "f_b", "conv", "a_log", "dt_bias", "o_norm"):
        assert torch.equal(getattr(w.shard(0, 1), name), getattr(lw, name)), name


def test_in_projection_matches_sglang_modules(tiny_layer):
    attn = tiny_layer.self_attn
    lw = K1LocalWeights.from_sglang(tiny_layer)
    h = torch.randn(5, lw.qkvg.shape[1], generator=torch.Generator().manual_seed(3)).bfloat16()
    ours = in_projection(lw, h)
    with torch.no_grad():
        qkv, beta, f, g = attn.forward_qkvbfg_fused(h)
        _, _, f_a, _ = attn.forward_qkvbfg_fused(h, defer_f_b=True)
    for name, got in (("qkv", qkv), ("g", g), ("b", beta), ("f_a", f_a), ("f", f)):
        _assert_close_bf16(ours[name], got, f"in-proj {name} vs forward_qkvbfg_fused", ulps=2)


@pytest.fixture(scope="module")
def tiny_chain(tiny_layer):
    lw = K1LocalWeights.from_sglang(tiny_layer)
    cases, refs = {}, {}
    for mode, m in (("decode", 6), ("verify", 5)):
        seam = _seam(m, lw.qkvg.shape[1], 2, mode == "decode", seed=m)
        state = _state(lw, 9, seed=m)
        slots = torch.tensor([4, -1, 0, 8, 2, -1]) if mode == "decode" else torch.tensor([6])
        vb = _verify_buffers(lw, 6) if mode == "verify" else None
        ref = k1_reference(lw, seam, state, slots, mode=mode, verify=vb)
        proj = in_projection(lw, ref.seam.normed)
        cases[mode] = _chain_case(lw, proj, state, slots, mode, vb)
        refs[mode] = (ref, state, slots)
    return refs, helpers.run_interpreted(_CHAIN, cases)


def test_tiny_decode_matches_sglang_chain(tiny_chain):
    refs, got = tiny_chain
    ref, state, slots = refs["decode"]
    out, conv, ssm, _ = got["decode"]
    live = slots >= 0
    _assert_close_bf16(ref.out[live], out[live], "tiny decode out")
    assert (ref.out[~live] == 0).all()  # SGLang's rows for pad slots are garbage (conv skips them)
    assert torch.equal(ref.state.conv, conv)
    assert torch.allclose(ref.state.ssm, ssm, rtol=1e-5, atol=1e-6)


def test_tiny_verify_matches_sglang_chain(tiny_chain):
    refs, got = tiny_chain
    ref, state, slots = refs["verify"]
    out, conv, ssm, (iconv, issm) = got["verify"]
    _assert_close_bf16(ref.out, out, "tiny verify out")
    assert torch.equal(ref.verify.conv, iconv)
    assert torch.allclose(ref.verify.ssm, issm, rtol=1e-5, atol=1e-6)
    assert torch.equal(ref.state.ssm, state.ssm) and torch.equal(ssm, state.ssm)


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_emulation_concatenates_to_tp1(tiny_layer, tp):
    w = K1Weights.from_sglang(tiny_layer)
    seam = _seam(4, w.q.shape[1], 1, False, seed=9)
    full = _state(w.shard(0, 1), 5, seed=2)
    slots = torch.tensor([1, 3, -1, 0])
    ref = k1_reference(w, seam, full, slots, tp=1)
    p_l, hl = w.proj // tp, w.heads // tp
    for r in range(tp):
        ch = torch.cat([torch.arange(j * w.proj + r * p_l, j * w.proj + (r + 1) * p_l) for j in range(3)])
        st = KDAState(full.conv[..., ch].contiguous(), full.ssm[:, r * hl : (r + 1) * hl].contiguous())
        out = k1_reference(w, seam, st, slots, tp=tp, rank=r)
        _assert_close_bf16(ref.out[:, r * p_l : (r + 1) * p_l], out.out, f"tp={tp} rank={r}", ulps=2)
        assert torch.equal(out.state.conv, ref.state.conv[..., ch])
        assert torch.allclose(out.state.ssm, ref.state.ssm[:, r * hl : (r + 1) * hl], rtol=1e-5, atol=1e-6)


def test_verify_equals_sequential_decode(tiny_layer):
    lw = K1LocalWeights.from_sglang(tiny_layer)
    m = 6
    seam = _seam(m, lw.qkvg.shape[1], 3, False, seed=21)
    state = _state(lw, 4, seed=5)
    vb = _verify_buffers(lw, 8)
    ver = k1_reference(lw, seam, state, torch.tensor([2]), mode="verify", verify=vb)
    st = state
    for t in range(m):
        row = SeamInput(seam.prefix[t : t + 1], seam.contribution[t : t + 1], seam.bank[t : t + 1], 3, False)
        dec = k1_reference(lw, row, st, torch.tensor([2]))
        assert torch.equal(dec.out[0], ver.out[t])
        assert torch.equal(dec.state.ssm[2], ver.verify.ssm[1, t])
        assert torch.equal(dec.state.conv[2], ver.verify.conv[1, t])
        st = dec.state
    assert torch.equal(ver.state.ssm, state.ssm) and torch.equal(ver.state.conv, state.conv)


def test_padding_touches_nothing(tiny_layer):
    lw = K1LocalWeights.from_sglang(tiny_layer)
    seam = _seam(3, lw.qkvg.shape[1], 0, True, seed=1)
    state = _state(lw, 4, seed=1)
    out = k1_reference(lw, seam, state, torch.tensor([0, 0, 3]), pad_slot=0)  # gfx950: slot 0 pads
    assert (out.out[:2] == 0).all() and (out.out[2] != 0).any()
    assert torch.equal(out.state.ssm[:3], state.ssm[:3]) and torch.equal(out.state.conv[:3], state.conv[:3])
    assert out.seam.nvb == 1 and out.seam.prefix is None  # block write restarts the residual


# ---- real per-rank shapes (TP 8: 12 heads x 128, H = 7168), one layer --------------------

@pytest.fixture(scope="module")
def real_chain():
    w = K1Weights.random(7168, 12, 128, seed=4)  # 12 heads at TP 1 == one TP-8 rank's shapes
    lw = w.shard(0, 1)
    seam = _seam(8, 7168, 5, False, seed=8)
    state = _state(lw, 10, seed=8)
    slots = torch.tensor([9, 2, -1, 0, 5, 7, 1, 3])
    ref = k1_reference(lw, seam, state, slots)
    case = _chain_case(lw, in_projection(lw, ref.seam.normed), state, slots, "decode")
    return ref, slots, helpers.run_interpreted(_CHAIN, {"real": case})["real"]


def test_real_shape_decode_matches_sglang_chain(real_chain):
    ref, slots, (out, conv, ssm, _) = real_chain
    live = slots >= 0
    _assert_close_bf16(ref.out[live], out[live], "real-shape decode out (M=8, 12x128)")
    assert torch.equal(ref.state.conv, conv)
    assert torch.allclose(ref.state.ssm, ssm, rtol=1e-5, atol=1e-6)


def test_real_shape_tp8_shard_is_the_rank_slice():
    w = K1Weights.random(7168, 96, 128, seed=1)  # full K3 layer; only rank 5's slice is computed
    lw = w.shard(5, 8)
    assert lw.qkvg.shape == (6144, 7168) and lw.bfa.shape == (144, 7168) and lw.f_b.shape == (1536, 128)
    assert lw.conv.shape == (4608, 4) and lw.a_log.shape == (12,) and lw.dt_bias.shape == (1536,)
    assert torch.equal(lw.qkvg[:1536], w.q[5 * 1536 : 6 * 1536])
    assert torch.equal(lw.bfa[128:140], w.b[60:72]) and (lw.bfa[140:] == 0).all()
    assert torch.equal(lw.conv[3072:], w.conv[2 * 12288 + 5 * 1536 : 2 * 12288 + 6 * 1536])


# ---- refusals ----------------------------------------------------------------------------

def test_bad_inputs_raise(tiny_layer):
    w = K1Weights.from_sglang(tiny_layer)
    lw = w.shard(0, 1)
    state = _state(lw, 4, seed=0)
    seam = _seam(2, lw.qkvg.shape[1], 0, False, seed=0)
    slots = torch.tensor([0, 1])
    cases = [
        (dict(weights=w, tp=3), "does not divide"),
        (dict(weights=w, tp=2, rank=2), "rank 2 outside"),
        (dict(mode="prefill"), "unknown mode"),
        (dict(seam=_seam(9, lw.qkvg.shape[1], 0, False, 0), slots=torch.arange(9)), "M=9"),
        (dict(slots=torch.tensor([1, 1])), "share a state slot"),
        (dict(slots=torch.tensor([0, 7])), ">= the pool"),
        (dict(slots=torch.tensor([0])), "one slot per row"),
        (dict(state=KDAState(state.conv.float(), state.ssm)), "conv state must be bf16"),
        (dict(state=KDAState(state.conv, state.ssm.bfloat16())), "ssm state must be fp32"),
        (dict(mode="verify", slots=torch.tensor([0])), "needs VerifyBuffers"),
        (dict(mode="verify", slots=torch.tensor([0]), verify=_verify_buffers(lw, 1)), "exceed"),
        (dict(isa="sm_100"), "unknown isa"),
        (dict(weights="nope"), "must be K1Weights"),
    ]
    for over, msg in cases:
        args = dict(weights=lw, seam=seam, state=state, slots=slots)
        args.update(over)
        with pytest.raises(ValueError, match=msg):
            k1_reference(args.pop("weights"), args.pop("seam"), args.pop("state"), args.pop("slots"), **args)
