"""SGLang's own monokernel_disable_reasons, with this plugin's spec, on the real Kimi-K3
config: no reason for every supported setup, exactly the expected reasons otherwise.

Server arguments are SGLang's ServerArgs (unresolved, as the resolution hook sees a
resolving view); the ISA is what SGLang's binding.device_isa() answers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from support.sglang_cpu import server_args

GFX = dict(tp_size=8, attention_backend="aiter")
H200 = dict(tp_size=8, attention_backend="fa3")


def feature(name: str) -> str:
    return f"{name} is in use and the spec does not accept it"


# (id, isa, server args, env, config edit, the exact reasons)
CASES = [
    ("gfx950 tp8 aiter", "gfx950", GFX, {}, None, []),
    ("sm90 tp8 fa3", "sm_90", H200, {}, None, []),
    ("sm90 tp1", "sm_90", dict(H200, tp_size=1), {}, None, []),
    ("sm90 tp2 flashmla", "sm_90", dict(tp_size=2, attention_backend="flashmla"), {}, None, []),
    ("sm90 tp4 triton", "sm_90", dict(tp_size=4, attention_backend="triton"), {}, None, []),
    ("split decode backend", "gfx950", dict(tp_size=8, attention_backend="triton",
                                            decode_attention_backend="aiter"), {}, None, []),
    ("eagle chain 4 tokens", "sm_90", dict(H200, speculative_algorithm="EAGLE", speculative_eagle_topk=1,
                                           speculative_num_steps=3, speculative_num_draft_tokens=4), {}, None, []),
    ("dspark 8 tokens", "gfx950", dict(GFX, speculative_algorithm="DSPARK", speculative_num_draft_tokens=8),
     {}, None, []),
    # bf16 experts where the launch reads them: the Triton K2 on gfx950, and sm_90 (whose SGLang
    # dequantizes an MXFP4 checkpoint's experts to bf16 at load whatever SGLANG_USE_AITER says)
    ("gfx950 bf16 checkpoint triton K2", "gfx950", GFX, {"SGL_K3_MONO_GFX950_IMPL": "triton"},
     {"quantization_config": None}, []),
    ("sm90 mxfp4 without SGLANG_USE_AITER", "sm_90", H200, {"SGLANG_USE_AITER": "0"}, None, []),
    ("sm90 bf16 checkpoint", "sm_90", H200, {}, {"quantization_config": None}, []),
    # ---- refusals ----
    ("gfx950 tp4", "gfx950", dict(GFX, tp_size=4), {}, None, ["tp_size 4 is not one of ['8']"]),
    ("sm90 tp16", "sm_90", dict(H200, tp_size=16), {}, None, ["tp_size 16 is not one of ['1', '2', '4', '8']"]),
    ("sm90 tp3", "sm_90", dict(H200, tp_size=3), {}, None, ["tp_size 3 is not one of ['1', '2', '4', '8']"]),
    ("pipeline", "gfx950", dict(GFX, pp_size=2), {}, None, [feature("pipeline parallelism")]),
    ("multi node", "gfx950", dict(GFX, nnodes=2), {}, None, [feature("multi-node tensor parallelism")]),
    ("dp attention", "gfx950", dict(GFX, enable_dp_attention=True, dp_size=8), {}, None, [feature("DP attention")]),
    ("expert parallel", "gfx950", dict(GFX, ep_size=8), {}, None, [feature("expert parallelism")]),
    ("eplb", "gfx950", dict(GFX, enable_eplb=True), {}, None, [feature("EPLB")]),
    ("decode context parallel", "gfx950", dict(GFX, dcp_size=2), {}, None, [feature("context parallelism")]),
    ("two-batch overlap", "gfx950", dict(GFX, enable_two_batch_overlap=True), {}, None,
     [feature("two-batch / single-batch overlap")]),
    ("single-batch overlap", "gfx950", dict(GFX, enable_single_batch_overlap=True), {}, None,
     [feature("two-batch / single-batch overlap")]),
    ("lora", "gfx950", dict(GFX, enable_lora=True), {}, None, [feature("LoRA")]),
    ("pd disaggregation", "gfx950", dict(GFX, disaggregation_mode="decode"), {}, None, [feature("PD disaggregation")]),
    ("routed experts out", "gfx950", dict(GFX, enable_return_routed_experts=True), {}, None,
     [feature("--enable-return-routed-experts")]),
    ("indexer top-k out", "gfx950", dict(GFX, enable_return_indexer_topk=True), {}, None,
     [feature("--enable-return-indexer-topk")]),
    ("hierarchical cache", "gfx950", dict(GFX, enable_hierarchical_cache=True), {}, None, [feature("KV offload")]),
    ("memory saver", "gfx950", dict(GFX, enable_memory_saver=True), {}, None, [feature("memory release")]),
    ("cpu offload", "gfx950", dict(GFX, cpu_offload_gb=4), {}, None, [feature("CPU offload")]),
    ("torch compile", "gfx950", dict(GFX, enable_torch_compile=True), {}, None, [feature("torch-compiled decode")]),
    ("ragged verify", "gfx950", dict(GFX, speculative_algorithm="DSPARK", speculative_num_draft_tokens=8),
     {"SGLANG_RAGGED_VERIFY_MODE": "compact"}, None,
     [feature("uneven tokens per request in verify (SGLANG_RAGGED_VERIFY_MODE)")]),
    ("eagle3", "gfx950", dict(GFX, speculative_algorithm="EAGLE3", speculative_eagle_topk=1,
                              speculative_num_draft_tokens=4), {}, None,
     [feature("EAGLE3 hidden states at covered layers"),
      "--speculative-algorithm EAGLE3: accepted are ['DSPARK', 'EAGLE', 'FROZEN_KV_MTP', 'NEXTN', "
      "'STANDALONE'] (one chain of draft tokens a request)"]),
    ("ngram", "gfx950", dict(GFX, speculative_algorithm="NGRAM", speculative_num_draft_tokens=4), {}, None,
     ["--speculative-algorithm NGRAM: accepted are ['DSPARK', 'EAGLE', 'FROZEN_KV_MTP', 'NEXTN', "
      "'STANDALONE'] (one chain of draft tokens a request)"]),
    ("eagle tree", "gfx950", dict(GFX, speculative_algorithm="EAGLE", speculative_eagle_topk=4,
                                  speculative_num_draft_tokens=8), {}, None,
     ["--speculative-eagle-topk 4: a tree verify does not fit the KDA recurrence; accepted is 1"]),
    ("draft tokens unset", "gfx950", dict(GFX, speculative_algorithm="DSPARK"), {}, None,
     ["--speculative-num-draft-tokens is not set: set it (1 to 8) so SGLang sizes the verify graphs to "
      "the launches' widths"]),
    ("draft tokens 16", "gfx950", dict(GFX, speculative_algorithm="DSPARK", speculative_num_draft_tokens=16),
     {}, None, ["--speculative-num-draft-tokens 16: a verify step of one request is at most 8 rows; "
                "accepted is 1 to 8"]),
    ("fp16", "gfx950", dict(GFX, dtype="float16"), {}, None, ["dtype 'float16' is not one of ['bfloat16']"]),
    ("gfx950 triton mla", "gfx950", dict(GFX, attention_backend="triton"), {}, None,
     ["decode attention backend 'triton' on gfx950: the MLA layers keep SGLang's attention, accepted there "
      "is ['aiter'] (--decode-attention-backend)"]),
    ("sm90 aiter", "sm_90", dict(H200, attention_backend="aiter"), {}, None,
     ["decode attention backend 'aiter' on sm_90: the MLA layers keep SGLang's attention, accepted there "
      "is ['fa3', 'flashinfer', 'flashmla', 'triton'] (--decode-attention-backend)"]),
    ("sm90 torch_native", "sm_90", dict(H200, attention_backend="torch_native"), {}, None,
     ["decode attention backend 'torch_native' is not one of ['aiter', 'fa3', 'flashinfer', 'flashmla', "
      "'triton']",
      "decode attention backend 'torch_native' on sm_90: the MLA layers keep SGLang's attention, accepted "
      "there is ['fa3', 'flashinfer', 'flashmla', 'triton'] (--decode-attention-backend)"]),
    ("watchdog 4 s", "gfx950", dict(GFX, watchdog_timeout=4), {}, None,
     ["--watchdog-timeout 4 s leaves the waits a deadline under 5 s"]),
    ("deterministic", "gfx950", dict(GFX, enable_deterministic_inference=True), {}, None,
     ["--enable-deterministic-inference needs a BITWISE spec, and this one is not"]),
    ("bf16 ssm flag", "gfx950", dict(GFX, mamba_ssm_dtype="bfloat16"), {}, None,
     ["KDA recurrent state dtype 'bfloat16' (--mamba-ssm-dtype / SGLANG_MAMBA_SSM_DTYPE): K1 updates an "
      "fp32 state; accepted is float32"]),
    ("fp16 ssm env", "sm_90", H200, {"SGLANG_MAMBA_SSM_DTYPE": "float16"}, None,
     ["KDA recurrent state dtype 'float16' (--mamba-ssm-dtype / SGLANG_MAMBA_SSM_DTYPE): K1 updates an "
      "fp32 state; accepted is float32"]),
    ("fp32 conv env", "gfx950", GFX, {"SGLANG_MAMBA_CONV_DTYPE": "float32"}, None,
     ["SGLANG_MAMBA_CONV_DTYPE 'float32' is not 'bfloat16'"]),
    ("hidden 4096", "gfx950", GFX, {}, {"hidden_size": 4096},
     ["config.hidden_size 4096 is not 7168",
      "config hidden_size = 4096 (the residual width): the launches are built for Kimi-K3's 7168"]),
    ("256 experts top-8", "gfx950", GFX, {}, {"num_experts": 256, "num_experts_per_token": 8},
     ["config num_experts = 256 (the routed experts): the launches are built for Kimi-K3's 896",
      "config num_experts_per_token = 8 (the experts per token): the launches are built for Kimi-K3's 16"]),
    ("scaling 2.5", "gfx950", GFX, {}, {"routed_scaling_factor": 2.5},
     ["config routed_scaling_factor = 2.5 (the routed output scale (AITER's MXFP4 path drops it)): the "
      "launches are built for Kimi-K3's 1.0"]),
    ("conv width 3", "sm_90", H200, {}, {"linear_attn_config.short_conv_kernel_size": 3},
     ["config linear_attn_config.short_conv_kernel_size = 3 (the KDA short-conv width): the launches are "
      "built for Kimi-K3's 4"]),
    ("gfx950 aiter moe", "gfx950", dict(GFX, moe_runner_backend="aiter"), {}, None, []),
    ("sm90 triton moe", "sm_90", dict(H200, moe_runner_backend="triton"), {}, None, []),
    ("sm90 marlin moe", "sm_90", dict(H200, moe_runner_backend="marlin"), {}, None,
     ["--moe-runner-backend marlin on sm_90: SGLang repacks the routed experts for that runner after loading, "
      "where K2 reads them as SGLang's auto, triton runners leave them; accepted are ['auto', 'triton']"]),
    ("sm90 flashinfer mxfp4 moe", "sm_90", dict(H200, moe_runner_backend="flashinfer_mxfp4"), {}, None,
     ["--moe-runner-backend flashinfer_mxfp4 on sm_90: SGLang repacks the routed experts for that runner after "
      "loading, where K2 reads them as SGLang's auto, triton runners leave them; accepted are ['auto', 'triton']"]),
    ("gfx950 triton_kernel moe", "gfx950", dict(GFX, moe_runner_backend="triton_kernel"), {}, None,
     ["--moe-runner-backend triton_kernel on gfx950: SGLang repacks the routed experts for that runner after "
      "loading, where K2 reads them as SGLang's auto, triton, aiter runners leave them; accepted are "
      "['auto', 'triton', 'aiter']"]),
    # the FlyDSL K2 reads MXFP4 experts only: refused where SGLang will hold them in bf16
    ("gfx950 mxfp4 without SGLANG_USE_AITER", "gfx950", GFX, {"SGLANG_USE_AITER": "0"}, None,
     ["SGLANG_USE_AITER is not set, so SGLang's post-load dequantizes the checkpoint's MXFP4 experts to bf16, "
      "and the FlyDSL K2 reads MXFP4 experts only: set SGLANG_USE_AITER=1 for an MXFP4 checkpoint (SGLang then "
      "keeps them MXFP4 in AITER's layout), or SGL_K3_MONO_GFX950_IMPL=triton (the Triton K2 reads bf16 experts)"]),
    ("gfx950 bf16 checkpoint", "gfx950", GFX, {}, {"quantization_config": None},
     ["the checkpoint's routed experts are bf16, and the FlyDSL K2 reads MXFP4 experts only: set "
      "SGLANG_USE_AITER=1 for an MXFP4 checkpoint (SGLang then keeps them MXFP4 in AITER's layout), or "
      "SGL_K3_MONO_GFX950_IMPL=triton (the Triton K2 reads bf16 experts)"]),
    ("fp8 checkpoint", "gfx950", GFX, {}, {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                                   "weight_block_size": [128, 128]}},
     ["checkpoint quantization 'fp8' (format ''): the launches read bf16 dense weights and bf16 or MXFP4 "
      "(compressed-tensors mxfp4-pack-quantized) experts"]),
]


@pytest.fixture(autouse=True)
def _pinned_flydsl(monkeypatch):
    """The table is about the server setup, not this machine's packages: FlyDSL is the
    pinned, working one here (tests/contract/test_kernel_selection.py varies it)."""
    from sgl_k3_mono import kernels

    monkeypatch.setattr(kernels, "_installed_version", lambda: kernels.FLYDSL_VERSION)
    monkeypatch.setattr(kernels, "_import_probe", lambda: None)
    monkeypatch.setattr(kernels, "_conflict", lambda: None)


def _edited_config(tmp_path: Path, real_config_dir: str, edit: dict) -> str:
    cfg = json.loads((Path(real_config_dir) / "config.json").read_text())
    for key, value in edit.items():
        target = cfg["text_config"]
        *parents, leaf = key.split(".")
        for p in parents:
            target = target[p]
        target[leaf] = copy.deepcopy(value)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reasons(case, real_config_dir, private_registry, monkeypatch, tmp_path):
    from sglang.srt.arg_groups.overrides import model_config_of, resolving_view
    from sglang.srt.kernel_plugins.amd import binding

    from sgl_k3_mono.plugin import register
    from sgl_k3_mono.spec import SPEC

    _, isa, args, env, edit, expected = case
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = _edited_config(tmp_path, real_config_dir, edit) if edit else real_config_dir
    register()
    monkeypatch.setattr(binding, "device_isa", lambda: isa)
    sa = server_args(path, **args)
    spec, reasons = binding.monokernel_disable_reasons(cfg=resolving_view(sa), model_config=model_config_of(sa),
                                                       isa=isa)
    assert spec is SPEC
    assert reasons == expected


def test_at_least_twenty_refusals_and_every_feature_probe():
    from sglang.kernels.plugin_kernels.amd.spec import Feature
    from sglang.srt.kernel_plugins.amd.binding import _PROBES

    refusals = [c for c in CASES if c[-1]]
    assert len(refusals) >= 20
    covered = {r for c in refusals for r in c[-1]}
    from sgl_k3_mono.spec import FEATURES

    for f in _PROBES:  # every probe SGLang has is exercised, refused or (ours) accepted
        if f in FEATURES:
            assert any(c[2].get("speculative_algorithm") and not c[-1] for c in CASES)
        else:
            assert feature(f.value) in covered, f
    assert Feature.PARTITIONED_GPU not in _PROBES  # checked at install: see test_install
