"""`sgl-k3-mono check` gives SGLang's own verdict, with the plan, on this CPU machine."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.fixture
def check(private_registry, monkeypatch, capsys):
    """Run `sgl-k3-mono check ARGS` in this process; SGLang's loader registers the plugin."""
    import sglang.srt.plugins as plugins

    from sgl_k3_mono.check import main

    for k in ("AITER_SITUV2_A4W4", "AITER_SITUV2_A8W4", "SGLANG_AITER_K3_OPT"):  # SGLang's defaults
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SGLANG_USE_AITER", "1")  # as ROCm's SGLang images and Kimi-K3's MI355X recipe set it

    def run(*args):
        monkeypatch.setattr(plugins, "_plugins_loaded", False)
        monkeypatch.setenv("SGLANG_PLUGINS", "sgl_k3_mono")
        code = main(list(args))
        return code, capsys.readouterr().out

    return run


def test_default_is_real_kimi_k3_at_tp8_on_gfx950(check):
    code, out = check()
    lines = out.splitlines()
    assert code == 0, out
    assert lines[0] == "sgl-k3-mono check: 93-layer Kimi-K3 text model at TP 8 on gfx950 (AMD Instinct MI355X)"
    assert "--tp 8 --attention-backend aiter --enable-amd-monokernel" in lines[1]
    assert lines[2] == "verdict: SERVE: SGLang accepts --enable-amd-monokernel for this setup"
    assert "has not yet run inside a SGLang server on any GPU" in lines[3]
    assert "steps: decode steps (1 token a request); launch widths [1, 2, 3, 4, 5, 6, 7, 8] rows" in lines
    assert any(line.startswith("  monokernels: [1, 2, 3, 4, 5, 6, 7, 8]; standard path: [9,") for line in lines)
    assert "  K1 (KDA front) + K2 (layer launch): 68 layer(s): 1-2, 4-6, 8-10, 12-14, 16-18, 20-22, 24-26, " \
           "28-30, 32-34, 36-38, 40-42, 44-46, 48-50, 52-54, 56-58, 60-62, 64-66, 68-70, 72-74, 76-78, 80-82, " \
           "84-86, 88-90" in lines
    assert "  SGLang MLA attention + K2 (layer launch): 24 layer(s): 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, " \
           "47, 51, 55, 59, 63, 67, 71, 75, 79, 83, 87, 91-92" in lines
    assert "  K1 (KDA front) + SGLang o_proj + dense MLP: 1 layer(s): 0" in lines
    assert "  attn-res bank writes inside K1: 0, 12, 24, 36, 48, 60, 72, 84" in lines
    # where SGLang's AITER post-load leaves the MXFP4 experts by default (the environment's choice)
    assert any(line.startswith("routed experts: MXFP4, AITER gate/up-interleaved a16w4 preshuffle, expert width "
                               "padded 384 -> 512 as SGLang's AITER post-load leaves them") for line in lines), out
    assert "  mxfp4 routed experts held: 241.1 GB a rank" in lines  # I_l padded to 512, as AITER holds them
    # the byte floor at M=1: 6.38 GB (K1, 69 layers) and 18.97 GB (K2, 92 layers) at 8 TB/s
    assert "     1 |   6.38        0.797 |  18.97        2.371 |          3.168" in lines
    assert lines[-1] == "device code on gfx950: FlyDSL, NOT executed on this hardware by this project"


def test_expert_layout_line_follows_the_environment():
    from sgl_k3_mono.check import expert_layout_line

    aiter = {"SGLANG_USE_AITER": "1"}
    for isa, env in (("sm_90", aiter), ("gfx950", {})):  # Mxfp4MoEMethod's post-load upcast
        assert expert_layout_line(isa, 384, env).startswith("MXFP4 in the checkpoint, dequantized to bf16 by "
                                                            "SGLang's post-load"), (isa, env)
    line = expert_layout_line("gfx950", 384, {**aiter, "AITER_SITUV2_A4W4": "1", "SGLANG_AITER_K3_OPT": "1"})
    assert line.startswith("MXFP4, AITER generic 16x16 preshuffle, expert width 384 unpadded")


def test_sm90_counts_the_bf16_experts_sglang_leaves(check):
    """On sm_90 SGLang serves the MXFP4 checkpoint's experts dequantized to bf16, so K2 reads
    bf16 experts and the byte floor counts their bytes (more than the MXFP4 table's)."""
    code, out = check("--isa", "sm_90")
    lines = out.splitlines()
    assert code == 0, out
    assert any(line.startswith("routed experts: MXFP4 in the checkpoint, dequantized to bf16 by SGLang's "
                               "post-load (CUDA") for line in lines), out
    assert any(line.startswith("bytes per step per rank (bf16 experts") for line in lines), out
    assert "  bf16 routed experts held: 680.7 GB a rank" in lines
    assert "  more than the NVIDIA H200's 141 GB: SGLang cannot hold them at this TP" in lines


def test_refused_setup_lists_every_reason(check):
    code, out = check("--tp", "4", "--attention-backend", "triton", "--enable-torch-compile")
    assert code == 1
    assert "verdict: REFUSE: SGLang stops at startup with 3 reason(s):" in out
    assert "  - torch-compiled decode is in use and the spec does not accept it" in out
    assert "  - tp_size 4 is not one of ['8']" in out
    assert "  - decode attention backend 'triton' on gfx950: the MLA layers keep SGLang's attention" in out


def test_gfx950_without_a_backend_gets_sglangs_default_and_is_told(check, real_config_dir):
    code, out = check("--model-path", real_config_dir, "--tp", "8")
    assert code == 1
    assert "--attention-backend triton" in out.splitlines()[1]  # what SGLang picks for 12 heads a rank
    assert "accepted there is ['aiter'] (--decode-attention-backend)" in out


def test_sm90_h200_at_tp2(check, real_config_dir):
    code, out = check("--isa", "sm_90", "--model-path", real_config_dir, "--tp", "2")
    assert code == 0, out
    assert "at TP 2 on sm_90 (NVIDIA H200)" in out and "--attention-backend fa3" in out
    assert "floor = bytes / 4.8 TB/s datasheet" in out


def test_isa_the_spec_does_not_serve(check):
    code, out = check("--isa", "gfx942")
    assert code == 1
    assert "monokernel backend 'amd' has no spec for ['KimiK3ForConditionalGeneration'] on gfx942" in out


def test_console_script_help():
    done = subprocess.run([sys.executable, "-m", "sgl_k3_mono.cli", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "check" in done.stdout and "make-checkpoint" in done.stdout
