"""Per-layer refusals on a Kimi-K3 model SGLang itself built (tiny config, CPU), and
SGLang's install_monokernel_forward driving them and the build hook."""

from __future__ import annotations

import types

import msgspec
import pytest
import torch

from support.sglang_cpu import build_model, fake_device, publish, server_args

ARCH = "KimiK3ForConditionalGeneration"


@pytest.fixture(scope="module")
def model(tiny_config_dir):
    return build_model(tiny_config_dir)


@pytest.fixture
def swap():
    """setattr that restores nn.Module children too (pytest's monkeypatch deletes a
    registered submodule on undo instead of putting it back)."""
    undo = []

    def _swap(obj, name, value):
        undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    yield _swap
    for obj, name, old in reversed(undo):
        setattr(obj, name, old)


def reasons(model):
    from sgl_k3_mono.model_reasons import model_disable_reasons

    return model_disable_reasons(model, model.config, {})


def layer(model, i):
    return model.language_model.model.layers[i]


class Fp8LinearMethod:  # named like SGLang's: the refusal reads the class name
    pass


class Fp8MoEMethod(torch.nn.Module):  # FusedMoE holds its quant method as a child module
    pass


class Mxfp4MoEMethod(torch.nn.Module):
    pass


class FakeExperts(torch.nn.Module):
    """Stands in for a FusedMoE whose loader left MXFP4 tensors."""

    def __init__(self, method, **tensors):
        super().__init__()
        self.quant_method = method
        for name, t in tensors.items():
            self.register_buffer(name, t)


def test_sglang_built_model_has_no_reason(model):
    assert reasons(model) == []


def test_quantized_in_projection(model, swap):
    swap(layer(model, 1).self_attn.fused_qkvg_proj, "quant_method", Fp8LinearMethod())
    assert reasons(model) == ["layer 1: fused_qkvg_proj is quantized (Fp8LinearMethod); the launch reads bf16 "
                              "weights (UnquantizedLinearMethod)"]


def test_conv_weight_dtype(model, swap):
    conv = layer(model, 0).self_attn.qkv_conv1d
    swap(conv.weight, "data", conv.weight.detach().bfloat16())
    assert reasons(model) == ["layer 0: qkv_conv1d.weight is bfloat16 [768, 1, 4]; the launch reads float32 "
                              "[768, 1, 4]"]


def test_split_gates_are_read_when_not_merged(model, swap):
    attn = layer(model, 2).self_attn
    swap(attn, "_bfa_w", None)
    assert reasons(model) == []  # f_a_proj and b_proj are read instead
    swap(attn, "f_a_proj", None)
    assert reasons(model) == ["layer 2: f_a_proj is missing (the launch reads it)"]


def test_unsupported_expert_format(model, swap):
    swap(layer(model, 3).mlp, "experts", FakeExperts(Fp8MoEMethod()))
    assert reasons(model) == ["layer 3: routed experts use Fp8MoEMethod; K2 reads ['UnquantizedFusedMoEMethod', "
                              "'Mxfp4MoEMethod']"]


def _mxfp4(swap, mlp, shuffled=False):
    E, two_i, L = mlp.experts.w13_weight.shape
    I = two_i // 2
    u8 = dict(dtype=torch.uint8)
    fake = FakeExperts(Mxfp4MoEMethod(), w13_weight=torch.zeros(E, two_i, L // 2, **u8),
                       w13_weight_scale=torch.zeros(E, two_i, L // 32, **u8),
                       w2_weight=torch.zeros(E, L, I // 2, **u8), w2_weight_scale=torch.zeros(E, L, I // 32, **u8))
    if shuffled:  # what SGLang's AITER path tags its preshuffled tensors with
        fake.w13_weight.is_shuffled = fake.w2_weight.is_shuffled = True
    swap(mlp, "experts", fake)


def test_mxfp4_experts_in_sglang_layout_are_read(model, swap):
    _mxfp4(swap, layer(model, 1).mlp)
    assert reasons(model) == []


def test_mxfp4_nan_scales_are_refused(model, swap):
    """K2 decodes without the NaN-scale select (fast_math): a NaN scale is refused, each tensor counted."""
    mlp = layer(model, 1).mlp
    _mxfp4(swap, mlp)
    mlp.experts.w13_weight_scale[0, 1, :3] = 255
    mlp.experts.w2_weight_scale[-1, 0, 0] = 255
    assert reasons(model) == [
        f"layer 1: experts.{name} holds {n} NaN scales (E8M0 255); K2's MXFP4 decode does not carry NaN "
        "scales, so the weights are refused rather than served as finite numbers"
        for name, n in (("w13_weight_scale", 3), ("w2_weight_scale", 1))]


def test_bf16_experts_aiter_would_shuffle_are_refused(model, monkeypatch):
    """SGLang's AITER MoE path shuffles bf16 experts in place after loading and leaves no tag:
    its own condition decides. Off gfx950 (gfx942: AITER's CK MoE takes any 128-aligned
    layer) they are shuffled, refused; on gfx950 Kimi-K3's SiTU keeps the CK MoE off, so the
    experts stay plain and are read."""
    from sglang.srt.layers.quantization import unquant

    monkeypatch.setattr(unquant, "_use_aiter", True)
    monkeypatch.setattr(unquant, "is_gfx95_supported", lambda: False)
    moe_layers = [i for i, ly in enumerate(model.language_model.model.layers) if hasattr(ly.mlp, "experts")]
    assert reasons(model) == [f"layer {i}: bf16 experts hold AITER's 16x16 preshuffle (SGLANG_USE_AITER=1 and "
                              "AITER's CK MoE takes this layer, so SGLang shuffled w13 / w2 after loading); K2 reads "
                              "bf16 experts in SGLang's loaded [E, 2I, L] / [E, L, I] rows" for i in moe_layers]
    monkeypatch.setattr(unquant, "is_gfx95_supported", lambda: True)
    assert reasons(model) == []


@pytest.mark.parametrize("flag, value", [("use_marlin", True), ("_fi_kernel", "cutlass_sm90"),
                                         ("use_triton_kernels", True)])
def test_mxfp4_experts_repacked_for_another_runner_are_refused(model, swap, flag, value):
    mlp = layer(model, 1).mlp
    _mxfp4(swap, mlp)
    setattr(mlp.experts.quant_method, flag, value)  # a fresh fake a test
    assert reasons(model) == [f"layer 1: routed experts were repacked for another MoE runner "
                              f"(Mxfp4MoEMethod.{flag}={value!r}); K2 reads them as SGLang's auto / triton / aiter "
                              "runners leave them"]


def _aiter(swap, mlp, kind, pad=256, fill=0):
    """The experts as SGLang 0.5.23's AITER post-load leaves them: padded, shuffled, 2-D
    scales, tagged is_shuffled (reference/mxfp4_aiter.held_like_sglang)."""
    from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout, held_like_sglang

    E, two_i, L = mlp.experts.w13_weight.shape
    I = two_i // 2
    g = torch.Generator().manual_seed(0)
    u8 = lambda *sh: torch.randint(0, 255, sh, generator=g, dtype=torch.uint8)  # noqa: E731 (no 255: no NaN)
    h = held_like_sglang(u8(E, two_i, L // 2), u8(E, two_i, L // 32), u8(E, L, I // 2), u8(E, L, I // 32),
                         AiterLayout(kind, I, -(-I // pad) * pad), fill=fill)
    fake = FakeExperts(Mxfp4MoEMethod(), w13_weight=h.w13, w13_weight_scale=h.w13_scale, w2_weight=h.w2,
                       w2_weight_scale=h.w2_scale)
    fake.w13_weight.is_shuffled = fake.w2_weight.is_shuffled = True
    fake.intermediate_size_per_partition = I
    swap(mlp, "experts", fake)
    return fake


@pytest.fixture
def aiter_env(monkeypatch):
    """SGLang's default environment, and an importable AITER whose shuffle is the layout K2
    reads (tests/support/fake_aiter.py: AITER does not install on a CPU machine)."""
    from support import fake_aiter

    for k in ("AITER_SITUV2_A4W4", "AITER_SITUV2_A8W4", "SGLANG_AITER_K3_OPT"):
        monkeypatch.delenv(k, raising=False)
    fake_aiter.install(monkeypatch)
    return monkeypatch


def test_an_aiter_whose_layout_moved_or_that_will_not_import_is_refused(model, swap, aiter_env):
    """The installed AITER's own shuffle is run on a probe and compared with the layout K2
    reads: one that moved (here its 16-byte chunks reversed) is refused, naming what moved;
    one that does not import (the tensors say SGLang ran it) cannot be checked, refused too."""
    import sys

    from support import fake_aiter

    aiter_env.setenv("AITER_SITUV2_A4W4", "1")
    mlp = layer(model, 1).mlp
    _aiter(swap, mlp, "generic")
    assert reasons(model) == []
    fake_aiter.install(aiter_env, moved=True)
    (line,) = reasons(model)
    assert line.startswith("layer 1: experts hold AITER generic 16x16 preshuffle, expert width padded 128 -> 256, "
                           "but the installed AITER's generic shuffle differs from the layout K2 reads (w13 weights, "
                           "w2 weights)"), line
    aiter_env.setitem(sys.modules, "aiter", None)
    for name in ("aiter.ops", "aiter.ops.shuffle"):
        aiter_env.delitem(sys.modules, name)
    (line,) = reasons(model)
    assert "aiter does not import here" in line and "cannot be checked against the layout K2 reads" in line, line


@pytest.mark.parametrize("pad, opt", [(256, False), (128, True)])
def test_aiter_generic_preshuffle_is_read_in_place(model, swap, aiter_env, pad, opt):
    """The generic 16 x 16 preshuffle (AITER_SITUV2_A4W4=1), padded or not: accepted; its
    padding may hold NaN scale codes (AITER pads with torch.empty), the weights' may not."""
    aiter_env.setenv("AITER_SITUV2_A4W4", "1")
    if opt:
        aiter_env.setenv("SGLANG_AITER_K3_OPT", "1")
    mlp = layer(model, 1).mlp
    fake = _aiter(swap, mlp, "generic", pad, fill=255)
    assert reasons(model) == []
    from sgl_k3_mono.k2.views import rank_weights_from_sglang

    assert rank_weights_from_sglang(layer(model, 1), rank=0, tp=1).moe.experts.layout == "generic"
    fake.w2_weight_scale[0, 0] = 255  # expert 0, w2 row 0, group 0: a scale the weights use
    from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout

    inter = mlp.experts.w13_weight.shape[1] // 2
    what = AiterLayout.from_env(128, dict(AITER_SITUV2_A4W4="1", SGLANG_AITER_K3_OPT=str(int(opt)))).describe()
    assert what.endswith("unpadded" if opt else "padded 128 -> 256") and inter == (128 if opt else 256)
    assert reasons(model) == [f"layer 1: experts.w2_weight_scale holds 1 NaN scales (E8M0 255) where the weights "
                              f"use them ({what}); K2's MXFP4 decode does not carry NaN scales, so the weights "
                              "are refused rather than served as finite numbers"]


def test_aiter_a16w4_preshuffle_off_its_blocks_is_refused(model, swap, aiter_env):
    """k3-tiny's L 128 gives w13 scale rows of 4 groups, which a16w4's 8-group scale blocks
    cannot hold (SGLang's AITER load fails on them too): refused by name."""
    mlp = layer(model, 1).mlp
    _aiter(swap, mlp, "generic")  # the tensors' shapes are the same; the environment says a16w4
    assert reasons(model) == ["layer 1: experts hold AITER gate/up-interleaved a16w4 preshuffle, expert width "
                              "padded 128 -> 256; K2 reads it in place only with a16w4 scale blocks of 8 groups: "
                              "L/32 4, I_pad/32 8"]


def test_aiter_scales_of_the_wrong_shape_are_refused(model, swap, aiter_env):
    aiter_env.setenv("AITER_SITUV2_A4W4", "1")
    mlp = layer(model, 1).mlp
    fake = _aiter(swap, mlp, "generic")
    swap(fake, "w13_weight_scale", fake.w13_weight_scale[:, :4].contiguous())
    (line,) = reasons(model)
    assert line.startswith("layer 1: experts.w13_weight_scale is uint8 [") and line.endswith(", 8]"), line


def test_mla_layer(model, swap):
    attn = layer(model, 3).self_attn
    swap(attn.o_proj.weight, "data", attn.o_proj.weight.detach().to(torch.float8_e4m3fn))
    swap(attn, "g_proj", None)
    assert reasons(model) == [
        "layer 3: g_proj (the MLA output gate) is missing; K2 expects the gated output",
        "layer 3: o_proj.weight is float8_e4m3fn [256, 128]; the launch reads bfloat16 [256, 128]",
    ]


def test_every_problem_is_listed_at_once(model, swap):
    bias = layer(model, 1).mlp.gate.e_score_correction_bias
    swap(bias, "data", bias.detach().bfloat16())
    swap(layer(model, 2).self_attn.attn, "lower_bound", None)
    swap(layer(model, 3).mlp.shared_experts.down_proj, "quant_method", Fp8LinearMethod())
    assert reasons(model) == [
        "layer 1: gate.e_score_correction_bias is bfloat16 [16]; the launch reads float32 [16]",
        "layer 2: attn.lower_bound is None; K1 applies the safe gate with the config's -5.0",
        "layer 3: shared_experts.down_proj is quantized (Fp8LinearMethod); the launch reads bf16 weights "
        "(UnquantizedLinearMethod)",
    ]


def test_not_a_kimi_k3_model():
    from sgl_k3_mono.model_reasons import model_disable_reasons

    assert model_disable_reasons(torch.nn.Linear(2, 2), types.SimpleNamespace(text_config={
        "num_hidden_layers": 1, "hidden_size": 2, "vocab_size": 2, "num_attention_heads": 1}), {}, tp=1) == [
        "Linear has no language_model.model.layers: not a Kimi-K3 model SGLang built"]


def test_mutations_above_are_undone(model):
    assert reasons(model) == []


# ---- SGLang's install_monokernel_forward with this spec --------------------------------

from sgl_k3_mono.spec import SPEC  # noqa: E402

# The tiny model is not Kimi-K3's size, which the resolution-time checks refuse; install
# only runs the after-load checks and build, so the test publishes (resolves) without
# the size checks, at TP 1 on sm_90.
INSTALL_SPEC = msgspec.structs.replace(
    SPEC, config_disable_reasons=None, requires=msgspec.structs.replace(SPEC.requires, hf_config={}))


@pytest.fixture
def installing(model, tiny_config_dir, private_registry, monkeypatch):
    from sglang.kernels.plugin_kernels.amd.spec import register
    from sglang.srt.kernel_plugins.amd import binding

    register(backend="amd", architecture=ARCH, path=f"{__name__}:INSTALL_SPEC")
    monkeypatch.setattr(binding, "device_isa", lambda: "sm_90")
    publish(server_args(tiny_config_dir, enable_amd_monokernel=True, attention_backend="fa3"))
    yield
    publish(server_args(tiny_config_dir))


def test_install_runs_model_checks_then_build_refuses_a_model_off_the_gpu(model, installing, monkeypatch):
    """The real spec's build on the CPU: the model checks pass, then build stops (the
    Triton launches need a GPU) with the reason, and nothing is installed."""
    from sglang.srt.kernel_plugins.amd.binding import install_monokernel_forward

    from sgl_k3_mono.forward.build import StepRefused

    fake_device(monkeypatch, isa="sm_90", compute_units=132)
    original = model.forward
    with pytest.raises(StepRefused, match="the model is on cpu; the Triton launches run on a GPU"):
        install_monokernel_forward(model=model, hf_config=model.config, capture_tail_hooks=[])
    assert model.forward == original  # nothing installed


def test_install_refuses_model_reasons_on_every_rank_before_build(model, installing, monkeypatch, swap):
    from sglang.srt.kernel_plugins.amd.binding import install_monokernel_forward

    fake_device(monkeypatch, isa="sm_90", compute_units=132)
    swap(layer(model, 1).mlp, "experts", FakeExperts(Fp8MoEMethod()))
    with pytest.raises(ValueError) as e:
        install_monokernel_forward(model=model, hf_config=model.config, capture_tail_hooks=[])
    assert str(e.value) == ("--enable-amd-monokernel: rank 0: layer 1: routed experts use Fp8MoEMethod; K2 reads "
                            "['UnquantizedFusedMoEMethod', 'Mxfp4MoEMethod']")


def test_install_refuses_a_partitioned_gpu(model, installing, monkeypatch):
    from sglang.srt.kernel_plugins.amd.binding import install_monokernel_forward

    fake_device(monkeypatch, isa="sm_90", compute_units=114)  # e.g. an H100 PCIe, or an MIG slice
    with pytest.raises(ValueError, match="partitioned GPUs: 114 compute units, the launch grid needs 132"):
        install_monokernel_forward(model=model, hf_config=model.config, capture_tail_hooks=[])
