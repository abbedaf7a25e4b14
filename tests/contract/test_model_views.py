"""The launches' weight views of a Kimi-K3 SGLang built on the CPU: every layer covered
by the right launch, and not one weight byte copied."""

from __future__ import annotations

import pytest

from support.sglang_cpu import build_model


@pytest.fixture(scope="module")
def model(tiny_config_dir):
    return build_model(tiny_config_dir)


def test_every_layer_has_its_launches_and_nothing_is_copied(model):
    from sgl_k3_mono.model_views import copied_bytes, model_views

    layers = model_views(model, model.config, rank=0, tp=1)
    assert [lv.attention for lv in layers] == ["kda", "kda", "kda", "mla"]
    assert [lv.k1 is not None for lv in layers] == [True, True, True, False]
    assert [lv.k2 is not None for lv in layers] == [False, True, True, True]  # layer 0 is dense
    assert [lv.block_write for lv in layers] == [True, False, True, False]  # attn_res_block_size 2
    assert copied_bytes(layers, model) == 0


def test_views_are_sglangs_tensors(model):
    from sgl_k3_mono.model_views import model_views

    layer = model.language_model.model.layers[1]
    lv = model_views(model, model.config, rank=0, tp=1)[1]
    assert lv.k1.qkvg.data_ptr() == layer.self_attn.fused_qkvg_proj.weight.data_ptr()
    assert lv.k2.o_proj.data_ptr() == layer.self_attn.o_proj.weight.data_ptr()
    assert lv.k2.moe.experts.w13.data_ptr() == layer.mlp.experts.w13_weight.data_ptr()


def test_a_copy_is_counted(model):
    import dataclasses

    from sgl_k3_mono.model_views import copied_bytes, model_views

    layers = model_views(model, model.config, rank=0, tp=1)
    k2 = layers[1].k2
    copied = dataclasses.replace(k2, o_proj=k2.o_proj.clone())
    layers[1] = dataclasses.replace(layers[1], k2=copied)
    assert copied_bytes(layers, model) == k2.o_proj.numel() * 2
