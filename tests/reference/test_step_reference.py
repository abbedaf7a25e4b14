"""The whole-decode-step reference on the SGLang-built tiny Kimi-K3 (random weights)."""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.reference.mla import MLAWeights, latent_row, mla_decode
from sgl_k3_mono.reference.ops import bf16

from support import sglang_triton_cpu as helpers

STEPS = 3


@pytest.fixture(scope="module")
def tiny(tiny_config_dir):
    from support.sglang_cpu import build_model

    model = build_model(tiny_config_dir)
    with torch.no_grad():
        helpers.randomize(model)
    return model


@pytest.fixture(scope="module")
def dims(tiny):
    return K3Dims.from_config(tiny.config)


@pytest.fixture(scope="module")
def weights(tiny, dims):
    pytest.importorskip("sgl_k3_mono.k2.reference", reason="the K2 reference is not written yet")
    from sgl_k3_mono.reference.step import ModelWeights

    return ModelWeights.from_sglang(tiny, dims)


def _run(weights, dims, tp: int, isa: str = "gfx950"):
    from sgl_k3_mono.reference.step import DecodeState, decode_step

    state = DecodeState.fresh(dims, tp, slots=4)
    g = torch.Generator().manual_seed(0)
    slots = torch.tensor([2, 0, 3])
    logits, routes = [], []
    for _ in range(STEPS):
        ids = torch.randint(0, dims.vocab, (3,), generator=g)
        trace = []
        logits.append(decode_step(weights, state, ids, slots, tp=tp, isa=isa, trace=trace))
        routes.append([None if t["expert_ids"] is None else t["expert_ids"].sort(-1).values for t in trace])
    return logits, state, routes


@pytest.fixture(scope="module")
def tp1(weights, dims):
    return _run(weights, dims, 1)


def test_step_runs_and_logits_are_finite(tp1, dims):
    logits, state, _ = tp1
    assert len(logits) == STEPS and all(x.shape == (3, dims.vocab) for x in logits)
    assert all(torch.isfinite(x).all() for x in logits)
    assert not torch.equal(logits[0], logits[1])
    # states moved: KDA states of the used slots are nonzero, slot 1 untouched; MLA caches grew.
    for i in dims.kda_layers:
        st = state.kda[i][0]
        assert st.ssm[[0, 2, 3]].abs().sum() > 0 and (st.ssm[1] == 0).all()
    for i in dims.mla_layers:
        assert all(c.shape[0] == STEPS for c in state.mla[i].values())


@pytest.mark.parametrize("tp", [2])
def test_tp_emulation_agrees(tp1, weights, dims, tp):
    """Logits agree while the routing agrees; once a rounding difference flips a top-k
    choice (random weights make near-ties common) the runs may diverge, as they would
    on real hardware at two TP sizes."""
    logits, state, routes = tp1
    got, st, got_routes = _run(weights, dims, tp)
    same_routing = True
    for step, (a, b) in enumerate(zip(logits, got)):
        same_routing &= all(x is None or torch.equal(x, y) for x, y in zip(routes[step], got_routes[step]))
        mx, cos = helpers.errors(a, b)
        print(f"step {step} tp=1 vs tp={tp}: max_abs={mx:.3e} cos={cos:.7f} same routing so far: {same_routing}")
        if same_routing:
            assert cos > 0.999
    assert all(x is None or torch.equal(x, y) for x, y in zip(routes[0], got_routes[0]))
    # rank r's KDA state is heads [r*h/tp, (r+1)*h/tp) of the TP-1 state
    i = dims.kda_layers[-1]
    hl = dims.kda_heads // tp
    full = state.kda[i][0].ssm
    for r in range(tp):
        mx, cos = helpers.errors(full[:, r * hl : (r + 1) * hl], st.kda[i][r].ssm)
        assert cos > 0.999


def test_sm90_seam_rounding_changes_little(tp1, weights, dims):
    logits, _, _ = tp1
    got, _, _ = _run(weights, dims, 1, isa="sm_90")
    mx, cos = helpers.errors(logits[0], got[0])
    print(f"gfx950 vs sm_90 seams: max_abs={mx:.3e} cos={cos:.7f}")
    assert cos > 0.999


def test_mla_absorbed_equals_naive_attention(tiny, dims):
    """The absorbed form against decompressing k/v per head (fp64, NoPE)."""
    layer = tiny.language_model.model.layers[dims.mla_layers[0]]
    w = MLAWeights.from_sglang(layer.self_attn, dims.rms_eps)
    g = torch.Generator().manual_seed(1)
    hist = [bf16(torch.randn(s, dims.hidden, generator=g)) for s in (1, 4)]
    caches = [latent_row(w, x)[1] for x in hist]
    h = torch.stack([x[-1] for x in hist])
    got = mla_decode(w, h, caches)
    q_a, _ = latent_row(w, h)
    q = bf16(q_a @ w.q_b.float().t()).double().reshape(2, w.heads, -1)
    kvb = w.kv_b.double().reshape(w.heads, w.nope + w.v, w.kv_lora)
    for i, c in enumerate(caches):
        kv, pe = c[:, : w.kv_lora].double(), c[:, w.kv_lora :].double()
        k_nope = torch.einsum("sl,hnl->hsn", kv, kvb[:, : w.nope])
        v = torch.einsum("sl,hvl->hsv", kv, kvb[:, w.nope :])
        k = torch.cat([k_nope, pe.expand(w.heads, -1, -1)], -1)
        p = torch.softmax(torch.einsum("hd,hsd->hs", q[i], k) / (w.nope + w.rope) ** 0.5, -1)
        o = torch.einsum("hs,hsv->hv", p, v).reshape(-1)
        gate = torch.sigmoid(h[i].double() @ w.g.double().t())
        ref = o * gate
        mx, cos = helpers.errors(ref, got[i])
        assert cos > 0.9999, (mx, cos)


def test_bad_step_inputs_raise(weights, dims):
    from sgl_k3_mono.reference.step import DecodeState, decode_step

    st = DecodeState.fresh(dims, 1, 2)
    with pytest.raises(ValueError, match="1..8 ids"):
        decode_step(weights, st, torch.arange(9), torch.arange(9))
    with pytest.raises(ValueError, match="does not divide"):
        decode_step(weights, st, torch.tensor([1]), torch.tensor([0]), tp=3)
