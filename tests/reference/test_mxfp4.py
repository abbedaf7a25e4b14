"""MXFP4 pack / dequant against the OCP spec, compressed-tensors (the checkpoint format's
packer), triton_kernels (what SGLang's Mxfp4MoEMethod calls to upcast) and SGLang's own
MXFP4 expert path on the CPU (k3-small: loader + Mxfp4MoEMethod + KimiK3MoE.forward)."""

from __future__ import annotations

import pytest
import torch

from k2_support import CONFIGS, copy_moe_into_sglang, dims_of, rows, torch_twin_upcast
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference import mxfp4
from sgl_k3_mono.reference.experts import Mxfp4Experts, SeededExperts
from sgl_k3_mono.reference.moe import MoeWeights, moe_reference

pytestmark = pytest.mark.filterwarnings("ignore")

OCP_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
"""OCP MX v1.0 table 5 (FP4 E2M1), codes 0b0000..0b1111."""


def test_e2m1_table_is_the_ocp_table_and_matches_compressed_tensors_and_triton():
    from compressed_tensors.compressors.nvfp4.helpers import kE2M1ToFloat
    from triton_kernels.numerics_details.mxfp import cvt_e2m1_to_fp32

    table = mxfp4.e2m1_table()
    assert table.tolist() == OCP_E2M1 and torch.signbit(table[8])
    assert torch.equal(table[:8], kE2M1ToFloat)
    every_byte = torch.arange(256, dtype=torch.uint8).view(8, 32)
    assert torch.equal(mxfp4.unpack_e2m1(every_byte), cvt_e2m1_to_fp32(every_byte))
    # Low nibble first: byte 0x71 holds element 0 = code 1 (0.5), element 1 = code 7 (6.0).
    assert mxfp4.unpack_e2m1(torch.tensor([[0x71]], dtype=torch.uint8)).tolist() == [[0.5, 6.0]]


def test_e8m0_scale_semantics():
    s = torch.tensor([0, 1, 120, 127, 128, 254, 255], dtype=torch.uint8)
    v = mxfp4.e8m0_to_float(s)
    assert v[:6].tolist() == [2.0 ** -127, 2.0 ** -126, 2.0 ** -7, 1.0, 2.0, 2.0 ** 127]
    assert torch.isnan(v[6])


def test_dequant_of_compressed_tensors_packed_weights():
    from compressed_tensors.compressors.mx_utils import compress_mx_scale
    from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8

    g = torch.Generator().manual_seed(0)
    values = torch.tensor(OCP_E2M1)[torch.randint(0, 16, (64, 128), generator=g)]
    scale = 2.0 ** torch.randint(-12, 3, (64, 4), generator=g).float()
    packed = pack_fp4_to_uint8(values)
    scales = compress_mx_scale(scale, torch.uint8)
    expect = (values.view(64, 4, 32) * scale.unsqueeze(-1)).view(64, 128)
    assert torch.equal(mxfp4.dequant(packed, scales), expect)


@pytest.mark.parametrize("rounding", ["down", "up"])
def test_quantize_matches_triton_kernels_torch_quantizer_bitwise(rounding):
    from triton_kernels.numerics_details.mxfp import (
        DequantScaleRoundingMode,
        downcast_to_mxfp_torch,
        upcast_from_mxfp_torch,
    )

    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 512, generator=g) * torch.logspace(-4, 3, 96).unsqueeze(1)
    x[0, :32] = 0.0  # all-zero group
    x[1, :32] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0] * 4) * 0.5  # ties, saturation
    mode = DequantScaleRoundingMode.ROUND_DOWN if rounding == "down" else DequantScaleRoundingMode.ROUND_UP
    tp, ts = downcast_to_mxfp_torch(x, torch.uint8, axis=-1, DEQUANT_SCALE_ROUNDING_MODE=mode)
    p, s = mxfp4.quantize(x, scale_rounding=rounding)
    assert torch.equal(p, tp) and torch.equal(s, ts)
    nonzero = s.repeat_interleave(32, -1) > 0  # triton decodes scale code 0 as 0, OCP as 2^-127
    assert torch.equal(mxfp4.dequant(p, s)[nonzero], upcast_from_mxfp_torch(tp, ts, torch.float32, -1)[nonzero])


def test_quantize_rounds_to_nearest_even_and_saturates():
    x = torch.tensor([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.3, 100.0] + [0.0] * 22])
    p, s = mxfp4.quantize(x, scale_rounding="up")  # amax 100 -> scale 32: elements = x / 32
    assert s.item() == 127 + 5
    p, s = mxfp4.quantize(x[:, list(range(8)) + [8] * 24], scale_rounding="up")  # amax 6 -> scale 1
    assert s.item() == 127
    assert mxfp4.dequant(p, s)[0, :9].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5]


def test_round_trip_preserves_values():
    g = torch.Generator().manual_seed(2)
    p = torch.randint(0, 256, (16, 64), dtype=torch.uint8, generator=g)
    s = torch.randint(100, 140, (16, 4), dtype=torch.uint8, generator=g)
    v = mxfp4.dequant(p, s)
    assert torch.equal(mxfp4.dequant(*mxfp4.quantize(v)), v)


def test_expert_layout_padding_and_refusals():
    g = torch.Generator().manual_seed(3)
    inter, pad, lat = 64, 128, 96
    w13 = torch.randint(0, 256, (2 * pad, lat // 2), dtype=torch.uint8, generator=g)
    s13 = torch.randint(120, 130, (2 * pad, lat // 32), dtype=torch.uint8, generator=g)
    full = mxfp4.dequant(w13, s13)
    got = mxfp4.dequant_w13(w13, s13, inter)
    assert torch.equal(got[:inter], full[:inter]) and torch.equal(got[inter:], full[pad:pad + inter])
    shuffled = w13.clone()
    shuffled.is_shuffled = True
    with pytest.raises(ValueError, match="is_shuffled"):
        mxfp4.dequant(shuffled, s13)
    with pytest.raises(ValueError, match="scales"):
        mxfp4.dequant(w13, s13[:, :1])
    with pytest.raises(ValueError, match="uint8"):
        mxfp4.dequant(w13.float(), s13)
    with pytest.raises(ValueError, match="multiple of 32"):
        mxfp4.quantize(torch.ones(2, 48))
    store = SeededExperts(4, 64, 96, seed=0, fmt="mxfp4").materialize()
    tagged = store.w13.clone()
    tagged.is_shuffled = True  # what Mxfp4MoEMethod leaves on AITER (gfx950)
    with pytest.raises(ValueError, match="preshuffled"):
        Mxfp4Experts(tagged, store.w13_scale, store.w2, store.w2_scale, 64)
    with pytest.raises(ValueError, match="multiples of 32"):
        store.shard(0, 4)  # 64 / 4 = 16: w2 would split a scale group


def test_sglang_triton_upcast_cannot_run_on_cpu():
    """Why the SGLang end-to-end test below swaps in triton_kernels' torch twin."""
    from triton_kernels.numerics_details.mxfp import upcast_from_mxfp

    with pytest.raises(Exception, match="driver"):
        upcast_from_mxfp(torch.zeros(32, 16, dtype=torch.uint8), torch.full((32, 1), 127, dtype=torch.uint8),
                         torch.bfloat16, axis=-1)


@pytest.fixture(scope="module")
def small_mxfp4_moe():
    """k3-small (compressed-tensors mxfp4-pack-quantized experts) built by SGLang on the
    CPU; layer 1's experts reloaded through SGLang's own loader from checkpoint-named
    per-expert w1/w3/w2 packed tensors, then Mxfp4MoEMethod.process_weights_after_loading."""
    from support.sglang_cpu import build_model

    with torch_twin_upcast():
        model = build_model(str(CONFIGS / "k3-small"))
        moe = model.language_model.model.layers[1].mlp
        ex = moe.experts
        d = dims_of("k3-small")
        store = SeededExperts(d.experts, d.expert_inter, d.latent, seed=5, fmt="mxfp4")
        ex.quant_method.create_weights(layer=ex, num_experts=d.experts, hidden_size=d.latent,
                                       intermediate_size_per_partition=d.expert_inter,
                                       params_dtype=torch.bfloat16, weight_loader=ex.weight_loader)
        name = "language_model.model.layers.1.block_sparse_moe.experts"
        ckpt, i = [], d.expert_inter
        for e in range(d.experts):
            w13, s13, w2, s2 = store.packed(e)
            for proj, w, s in (("w1", w13[:i], s13[:i]), ("w3", w13[i:], s13[i:]), ("w2", w2, s2)):
                ckpt += [(f"{name}.{e}.{proj}.weight_packed", w.clone()),
                         (f"{name}.{e}.{proj}.weight_scale", s.clone())]
        model.load_weights(iter(ckpt))
        held = Mxfp4Experts(ex.w13_weight.data.clone(), ex.w13_weight_scale.data.clone(),
                            ex.w2_weight.data.clone(), ex.w2_weight_scale.data.clone(),
                            ex.intermediate_size_per_partition)
        ex.quant_method.process_weights_after_loading(ex)
    w = MoeWeights.random(d, seed=12, experts=held)
    copy_moe_into_sglang(moe, w)
    return moe, w, store


def test_sglang_loader_layout_and_dequant_match(small_mxfp4_moe):
    moe, w, store = small_mxfp4_moe
    assert moe.experts.w13_weight.dtype == torch.bfloat16  # upcast by Mxfp4MoEMethod (CPU path)
    for e in (0, 7, w.experts.num_experts - 1):
        ours13, ours2 = w.experts.weights(e)
        assert torch.equal(moe.experts.w13_weight[e].float(), ours13)
        assert torch.equal(moe.experts.w2_weight[e].float(), ours2)
        assert torch.equal(ours13, store.weights(e)[0])  # w1 rows then w3 rows


@pytest.mark.parametrize("m", [1, 8])
def test_mxfp4_moe_vs_kimik3moe_forward(small_mxfp4_moe, m, monkeypatch):
    import sglang.srt.layers.quantization.mxfp4 as sgl_mxfp4

    # Mxfp4MoEMethod.apply's CPU branch (moe_forward_native) is keyed on SGLANG_USE_CPU_ENGINE
    # read at import; without it apply picks the Triton runner, which has no CPU kernel.
    monkeypatch.setattr(sgl_mxfp4, "_is_cpu", True)
    moe, w, _ = small_mxfp4_moe
    h = w.router.shape[1]
    x, prefix = rows(m, h, seed=60 + m), rows(m, h, seed=70 + m)
    with torch.no_grad():
        theirs = moe(x, prefix_sum=prefix.clone()).float()
    ref = moe_reference(x, prefix, w, tp=1, isa="sglang_cpu")
    got = measure(theirs, ref.out)
    print(f"\nk3-small MXFP4 KimiK3MoE.forward M={m} vs reference: {got}")
    assert got["cosine"] > 0.99999 and got["max_abs"] <= 2 ** -7 * ref.out.abs().max().item()


def test_sglang_upcast_experts_are_served_as_bf16():
    """On CUDA (sm_90 with the default auto / triton MoE runner) and on HIP without
    SGLANG_USE_AITER, Mxfp4MoEMethod's post-load dequantizes the experts to bf16 [E, 2I, L] /
    [E, L, I] and deletes the scales. The flag serves those layers through K2's bf16 expert
    path, reading SGLang's tensors in place, instead of refusing them as MXFP4 of the wrong
    dtype. k3-small built by SGLang on the CPU, whose post-load takes that same branch (the
    upcast through triton_kernels' torch twin). A bf16 w13 that still has its scales is no
    state SGLang leaves: refused."""
    from support.sglang_cpu import build_model

    from sgl_k3_mono.k2.views import rank_weights_from_sglang
    from sgl_k3_mono.model_reasons import model_disable_reasons
    from sgl_k3_mono.reference.experts import DenseExperts

    with torch_twin_upcast():
        model = build_model(str(CONFIGS / "k3-small"))
    moe_layers = [(i, lay) for i, lay in enumerate(model.language_model.model.layers) if hasattr(lay.mlp, "experts")]
    assert moe_layers
    for _, lay in moe_layers:
        ex = lay.mlp.experts
        assert type(ex.quant_method).__name__ == "Mxfp4MoEMethod"
        assert ex.w13_weight.dtype == torch.bfloat16 and getattr(ex, "w13_weight_scale", None) is None
    assert model_disable_reasons(model, model.config, {}) == []
    i, lay = moe_layers[0]
    ex = lay.mlp.experts
    served = rank_weights_from_sglang(lay, rank=0, tp=1).moe.experts
    assert isinstance(served, DenseExperts)
    assert served.w13.data_ptr() == ex.w13_weight.data_ptr() and served.w2.data_ptr() == ex.w2_weight.data_ptr()
    E, two_i, L = ex.w13_weight.shape
    ex.w13_weight_scale = torch.nn.Parameter(torch.zeros(E, two_i, L // 32, dtype=torch.uint8), requires_grad=False)
    try:
        assert model_disable_reasons(model, model.config, {}) == [
            f"layer {i}: experts.w13_weight is bfloat16 [{E}, {two_i}, {L}]; the launch reads uint8 "
            f"[{E}, {two_i}, {L // 2}]",
            f"layer {i}: experts.w2_weight is bfloat16 [{E}, {L}, {two_i // 2}]; the launch reads uint8 "
            f"[{E}, {L}, {two_i // 4}]",
            f"layer {i}: experts.w2_weight_scale is missing (the launch reads a uint8 [{E}, {L}, {two_i // 64}] tensor)"]
    finally:
        del ex.w13_weight_scale
