"""The attn-res reference against SGLang 0.5.23's own code.

- gfx950: SGLang's ROCm kernel `attn_res_hip` (run by Triton's interpreter on the CPU).
- sm_90: SGLang's 2-kernel Triton pipeline `_mix_fused` (interpreted) + RMSNorm.
- both: the eager `aggregate_stream_torch` (which rounds scores to bf16, so only close).
- the bank life cycle (pending add, block write, restart) by driving SGLang's
  `AttnBankState` / `AttnBankOutputRead` with each ISA's dispatch forced.
"""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.reference import attn_res as ar

from support import sglang_triton_cpu as helpers

EPS = 1e-5
NB = 8


def _case(m: int, h: int, nvb: int, seed: int) -> dict:
    """Realistic magnitudes: rows of very different scale (embedding vs block sums)."""
    g = torch.Generator().manual_seed(seed)
    scale = 10 ** (torch.rand(m, NB + 1, 1, generator=g) * 2 - 1)
    rows = torch.randn(m, NB + 1, h, generator=g) * scale
    return dict(
        m=m, h=h, nvb=nvb,
        bank=rows[:, :NB].bfloat16(),
        prefix=rows[:, NB].bfloat16(),
        addend=(torch.randn(m, h, generator=g) * 0.3).bfloat16(),
        proj=(torch.randn(1, h, generator=g) * 0.05).bfloat16(),
        score_norm=(1 + 0.1 * torch.randn(h, generator=g)).bfloat16(),
        out_norm=(1 + 0.1 * torch.randn(h, generator=g)).bfloat16(),
    )


CASES = [_case(m=(nvb % 8) + 1, h=7168, nvb=nvb, seed=nvb) for nvb in range(0, 9)]

_KERNELS = """
from types import SimpleNamespace as NS
from sglang.kernels.ops.attention.attn_res_hip import attn_res_hip
from sglang.srt.layers import attn_residual as A
from sglang.srt.layers.layernorm import RMSNorm
for i, c in enumerate(payload["cases"]):
    if c["nvb"] == 0:
        continue
    cw = c["score_norm"].float() * c["proj"].float().squeeze()
    # gfx950: one kernel, with the pending add and the bank write folded in.
    bank = c["bank"].clone(); out = torch.empty_like(c["prefix"]); pout = torch.empty_like(c["prefix"])
    attn_res_hip(c["prefix"], bank, cw, c["out_norm"], out, c["nvb"], 1e-5, 1e-5,
                 addend=c["addend"], prefix_out=pout, write_prefix=c["nvb"] < 8)
    result[("hip", i)] = (out, pout, bank)
    # sm_90: score + combine kernels, then SGLang's RMSNorm on the bf16 mix.
    proj = NS(weight=c["proj"]); snorm = NS(weight=c["score_norm"], variance_epsilon=1e-5)
    onorm = RMSNorm(c["h"], eps=1e-5); onorm.weight.data = c["out_norm"].clone()
    mix = A._mix_fused(c["prefix"], c["bank"], c["nvb"], proj, snorm)
    result[("sm90", i)] = onorm.forward_native(mix)
    # what aggregate_stream hands a DSpark draft: sm_90's mix as is, gfx950's kernel without its out norm
    result[("stream sm90", i)] = mix
    result[("stream hip", i)] = A._aggregate_hip(c["prefix"], None, c["bank"].clone(), c["nvb"], proj, snorm, None)[0]
"""


@pytest.fixture(scope="module")
def sglang_kernels():
    return helpers.run_interpreted(_KERNELS, {"cases": CASES})


def _ref(c, prefix, isa):
    return ar.aggregate(c["bank"], c["nvb"], prefix, c["proj"], c["score_norm"], c["out_norm"], EPS, isa=isa)


def _assert_bf16_close(ref, got, what, ulps=1):
    """Equal up to fp32 summation order: a bf16 ulp or so apart, almost all equal.

    sm_90 rounds twice (mix, then out norm), so one ulp in the mix can become two."""
    ref, got = ref.float(), got.float()
    ulp = torch.clamp(ref.abs(), min=1e-3) * 2.0 ** -7
    assert ((ref - got).abs() <= ulps * ulp).all(), what
    assert (ref != got).float().mean().item() < 0.01, what


@pytest.mark.parametrize("i", range(1, 9))
def test_gfx950_matches_attn_res_hip(sglang_kernels, i):
    c = CASES[i]
    out, pout, bank = sglang_kernels[("hip", i)]
    prefix = ar.add_prefix(c["prefix"], c["addend"])
    assert torch.equal(prefix, pout), "pending add must round exactly like the kernel"
    ref = _ref(c, prefix, "gfx950")
    mx, cos = helpers.errors(ref, out)
    print(f"gfx950 nvb={c['nvb']} M={c['m']}: max_abs={mx:.3e} cos={cos:.7f}")
    _assert_bf16_close(ref, out, f"nvb={c['nvb']}")
    if c["nvb"] < NB:
        assert torch.equal(bank[:, c["nvb"]], prefix), "block write stores the added prefix"
        assert torch.equal(bank[:, : c["nvb"]], c["bank"][:, : c["nvb"]])


@pytest.mark.parametrize("i", range(1, 9))
def test_sm90_matches_mix_fused_then_rmsnorm(sglang_kernels, i):
    c = CASES[i]
    got = sglang_kernels[("sm90", i)]
    ref = _ref(c, c["prefix"], "sm_90")
    mx, cos = helpers.errors(ref, got)
    print(f"sm_90 nvb={c['nvb']} M={c['m']}: max_abs={mx:.3e} cos={cos:.7f}")
    _assert_bf16_close(ref, got, f"nvb={c['nvb']}", ulps=2)


@pytest.mark.parametrize("i", range(0, 9))
def test_stream_value_is_what_aggregate_stream_hands_the_draft(sglang_kernels, i):
    """`stream_value` (a DSpark / DFlash capture) against both of SGLang's aggregate_stream
    kernels: the fp32 mix rounded to bf16 once; nvb 0 hands back the prefix itself."""
    c = CASES[i]
    ref = ar.stream_value(c["bank"], c["nvb"], c["prefix"], c["proj"], c["score_norm"], EPS)
    assert ref.dtype == torch.bfloat16
    if c["nvb"] == 0:
        assert torch.equal(ref, c["prefix"])
        return
    for kind in ("stream sm90", "stream hip"):
        got = sglang_kernels[(kind, i)]
        mx, cos = helpers.errors(ref, got)
        print(f"{kind} nvb={c['nvb']} M={c['m']}: max_abs={mx:.3e} cos={cos:.7f}")
        _assert_bf16_close(ref, got, f"{kind} nvb={c['nvb']}")


def test_isas_differ_only_by_the_mix_rounding():
    c = CASES[5]
    a, b = _ref(c, c["prefix"], "gfx950"), _ref(c, c["prefix"], "sm_90")
    assert not torch.equal(a, b), "sm_90 rounds the mix to bf16 before the out norm"
    assert helpers.errors(a, b)[1] > 0.9999


@pytest.mark.parametrize("i", range(0, 9))
def test_close_to_aggregate_stream_torch(i):
    from types import SimpleNamespace as NS

    from sglang.srt.layers.attn_residual import aggregate_stream_torch
    from sglang.srt.layers.layernorm import RMSNorm

    c = CASES[i]
    snorm = RMSNorm(c["h"], eps=EPS)
    snorm.weight.data = c["score_norm"].clone()
    onorm = RMSNorm(c["h"], eps=EPS)
    onorm.weight.data = c["out_norm"].clone()
    proj = NS(weight=c["proj"])
    proj_call = lambda x: (torch.nn.functional.linear(x, proj.weight), None)  # noqa: E731
    mix = aggregate_stream_torch(c["prefix"], c["bank"], c["nvb"], proj_call, snorm.forward_native)
    got = onorm.forward_native(mix)
    for isa in ar.ISAS:
        ref = _ref(c, c["prefix"], isa)
        mx, cos = helpers.errors(ref, got)
        print(f"aggregate_stream_torch {isa} nvb={c['nvb']} M={c['m']}: max_abs={mx:.3e} cos={cos:.7f}")
        # aggregate_stream_torch rounds normed rows and scores to bf16; the kernels do not.
        assert cos > 0.999
        if c["nvb"] == 0:
            assert torch.equal(ref, got.float())


# ---- the bank life cycle through SGLang's own AttnBankState -----------------------

LAYERS, BLOCK, H_SEQ, M_SEQ = 6, 2, 2048, 3

_BANK_SEQ = """
from types import SimpleNamespace as NS
from sglang.srt.layers import attn_residual as A
from sglang.srt.layers.layer_boundary.residual.attn_bank import AttnBank, AttnBankState, AttnBankOutputRead
from sglang.srt.layers.layernorm import RMSNorm

def norm(w):
    n = RMSNorm(w.numel(), eps=1e-5); n.weight.data = w.clone(); return n

def proj(w):
    return NS(weight=w)

for isa in ("gfx950", "sm_90"):
    A._use_hip_fused = (lambda h, nvb: True) if isa == "gfx950" else (lambda h, nvb: False)
    p = payload
    holder = AttnBank()
    holder.open(p["emb"], p["nb"])
    outs = []
    residual = None
    for L in range(p["layers"]):
        w = p["w"][L]
        st = AttnBankState(holder, proj(w["ap"]), norm(w["an"]), proj(w["fp"]), norm(w["fn"]),
                           writes_block=L % p["block"] == 0)
        if L == 0:
            normed, residual = st.read_attn_input(p["emb"], norm(w["in"]))
        elif L == 1:  # layer 0's dense MLP: a pending plain add
            normed, residual = st.update_and_read_attn_input(p["mlp"][0], residual, norm(w["in"]))
        else:  # a latent MoE wrote the stream: no add
            normed, residual = st.read_attn_input(p["mlp"][L - 1], norm(w["in"]))
        outs.append(("attn", normed, residual))
        if residual is None:
            normed, residual = st.update_and_read_ffn_input(p["attn"][L], None, norm(w["post"]))
        else:
            normed, residual = st.update_and_read_ffn_input(p["attn"][L], residual, norm(w["post"]))
        outs.append(("ffn", normed, residual))
    final = AttnBankOutputRead(holder, proj(p["ow"]["p"]), norm(p["ow"]["n"]), norm(p["ow"]["o"]))
    outs.append(("final", final(p["mlp"][p["layers"] - 1]), None))
    result[isa] = (outs, holder.current.block_residual.clone(), holder.current.num_valid_blocks)
"""


def _bank_payload() -> dict:
    g = torch.Generator().manual_seed(7)

    def act(s):
        return (torch.randn(M_SEQ, H_SEQ, generator=g) * s).bfloat16()

    def wts():
        return dict(
            p=(torch.randn(1, H_SEQ, generator=g) * 0.05).bfloat16(),
            n=(1 + 0.1 * torch.randn(H_SEQ, generator=g)).bfloat16(),
            o=(1 + 0.1 * torch.randn(H_SEQ, generator=g)).bfloat16(),
        )

    layers = []
    for _ in range(LAYERS):
        a, f = wts(), wts()
        layers.append(dict(ap=a["p"], an=a["n"], **{"in": a["o"]}, fp=f["p"], fn=f["n"], post=f["o"]))
    return dict(
        emb=act(0.05), nb=-(-LAYERS // BLOCK), layers=LAYERS, block=BLOCK, w=layers,
        attn=[act(0.5) for _ in range(LAYERS)], mlp=[act(1.0) for _ in range(LAYERS)], ow=wts(),
    )


def _reference_sequence(p: dict, isa: str):
    bank = torch.zeros(M_SEQ, p["nb"], H_SEQ, dtype=torch.bfloat16)
    nvb, outs, residual = 0, [], None
    for L in range(LAYERS):
        w = p["w"][L]
        aw = ar.SeamWeights(w["ap"], w["an"], w["in"])
        fw = ar.SeamWeights(w["fp"], w["fn"], w["post"])
        if L == 0:
            prefix, add = p["emb"], None
        elif L == 1:
            prefix, add = residual, p["mlp"][0]
        else:
            prefix, add = p["mlp"][L - 1], None
        s = ar.attn_seam(bank, nvb, prefix, add, aw, EPS, write=L % BLOCK == 0, isa=isa)
        outs.append(("attn", s.normed, s.prefix))
        s = ar.ffn_seam(s.bank, s.nvb, s.prefix, p["attn"][L], fw, EPS, isa=isa)
        outs.append(("ffn", s.normed, s.prefix))
        bank, nvb, residual = s.bank, s.nvb, s.prefix
    ow = ar.SeamWeights(p["ow"]["p"], p["ow"]["n"], p["ow"]["o"])
    final = ar.aggregate(bank, nvb, p["mlp"][LAYERS - 1], ow.proj, ow.score_norm, ow.out_norm, EPS, isa=isa)
    outs.append(("final", final, None))
    return outs, bank, nvb


@pytest.fixture(scope="module")
def bank_runs():
    p = _bank_payload()
    return p, helpers.run_interpreted(_BANK_SEQ, p)


@pytest.mark.parametrize("isa", ar.ISAS)
def test_bank_life_cycle_matches_attn_bank_state(bank_runs, isa):
    p, got = bank_runs
    sg_outs, sg_bank, sg_nvb = got[isa]
    outs, bank, nvb = _reference_sequence(p, isa)
    assert nvb == sg_nvb == p["nb"]
    # The snapshots are stored values, never recomputed: bit-exact.
    assert torch.equal(bank[:, :nvb], sg_bank[:, :nvb])
    for (kind, ref_n, ref_p), (skind, n, pr) in zip(outs, sg_outs):
        assert kind == skind
        mx, cos = helpers.errors(ref_n, n)
        print(f"{isa} {kind}: max_abs={mx:.3e} cos={cos:.7f}")
        _assert_bf16_close(ref_n, n, f"{isa} {kind}", ulps=1 if isa == "gfx950" else 2)
        assert (ref_p is None) == (pr is None), f"{isa} {kind}: residual restart differs"
        if ref_p is not None:
            assert torch.equal(ref_p, pr)


def test_bad_inputs_raise():
    c = CASES[2]
    args = (c["proj"], c["score_norm"], c["out_norm"], EPS)
    with pytest.raises(ValueError, match="unknown isa"):
        ar.aggregate(c["bank"], 2, c["prefix"], *args, isa="sm_100")
    with pytest.raises(ValueError, match="nvb"):
        ar.aggregate(c["bank"], 9, c["prefix"], *args, isa="gfx950")
    with pytest.raises(ValueError, match="does not match"):
        ar.aggregate(c["bank"], 2, c["prefix"][:, :-1], *args, isa="gfx950")
    with pytest.raises(ValueError, match="differ in shape"):
        ar.add_prefix(c["prefix"], c["prefix"][:1])
    full = c["bank"][:, :NB]
    w = ar.SeamWeights(c["proj"], c["score_norm"], c["out_norm"])
    with pytest.raises(ValueError, match="block write"):
        ar.attn_seam(full, NB, c["prefix"], None, w, EPS, write=True, isa="gfx950")
