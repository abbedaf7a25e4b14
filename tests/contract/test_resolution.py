"""`--enable-amd-monokernel` through SGLang's whole argument resolution on this CPU
machine: SGLang's handle_amd_monokernel hook accepts or refuses with our spec, rewrites
the decode graph sizes, and a plugin that failed to register still stops the server."""

from __future__ import annotations

import logging

import pytest

from support.sglang_cpu import server_args

FLAG_ERROR = "--enable-amd-monokernel cannot run this setup:"


@pytest.fixture
def isa(monkeypatch):
    from sglang.srt.kernel_plugins.amd import binding

    def answer(value):
        monkeypatch.setattr(binding, "device_isa", lambda: value)

    return answer


def test_accepted_setup_resolves_and_captures_the_launch_widths(real_config_dir, private_registry, isa):
    from sglang.srt.arg_groups.overrides import resolving_view

    from sgl_k3_mono.plugin import register

    register()
    isa("gfx950")
    sa = server_args(real_config_dir, tp_size=8, attention_backend="aiter", enable_amd_monokernel=True)
    sa.resolve_once()
    bs = resolving_view(sa).cuda_graph_config.decode.bs
    assert bs[:8] == [1, 2, 3, 4, 5, 6, 7, 8] and all(b > 8 for b in bs[8:])


def test_refused_setup_stops_resolution_with_every_reason(real_config_dir, private_registry, isa):
    from sgl_k3_mono.plugin import register

    register()
    isa("gfx950")
    sa = server_args(real_config_dir, tp_size=4, attention_backend="triton", enable_amd_monokernel=True,
                     enable_lora=True)
    with pytest.raises(ValueError) as e:
        sa.resolve_once()
    lines = str(e.value).splitlines()
    assert lines[0] == FLAG_ERROR
    assert "  - LoRA is in use and the spec does not accept it" in lines
    assert "  - tp_size 4 is not one of ['8']" in lines
    assert any("decode attention backend 'triton' on gfx950" in line for line in lines)


def test_deprecated_alias_takes_the_same_path(real_config_dir, private_registry, isa):
    from sglang.srt.server_args import prepare_server_args

    from sgl_k3_mono.plugin import register

    register()
    isa("gfx950")
    sa = prepare_server_args(["--model-path", real_config_dir, "--tp", "4", "--monokernel-backend", "amd",
                              "--attention-backend", "aiter", "--device", "cpu", "--skip-tokenizer-init",
                              "--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"])
    with pytest.raises(ValueError, match="tp_size 4 is not one of"):
        sa.resolve_once()


def test_without_the_flag_nothing_is_checked(real_config_dir, private_registry, isa):
    isa("gfx950")
    server_args(real_config_dir, tp_size=4).resolve_once()  # no plugin, refused setup: irrelevant


def test_a_plugin_that_fails_to_register_still_stops_the_server(real_config_dir, private_registry, isa,
                                                                 monkeypatch, caplog):
    """SGLang's load_plugins logs and swallows a failing plugin; with the flag set,
    SGLang's own find_spec then refuses, so the server never runs without the launches."""
    import sglang.srt.plugins as plugins

    import sgl_k3_mono.plugin as plugin

    def broken():
        raise RuntimeError("simulated broken install")

    monkeypatch.setattr(plugin, "register", broken)
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.setenv("SGLANG_PLUGINS", "sgl_k3_mono")
    with caplog.at_level(logging.ERROR):
        plugins.load_plugins()  # does not raise
    assert "simulated broken install" in caplog.text
    assert private_registry == {}
    isa("gfx950")
    sa = server_args(real_config_dir, tp_size=8, attention_backend="aiter", enable_amd_monokernel=True)
    with pytest.raises(ValueError) as e:
        sa.resolve_once()
    assert str(e.value) == (
        f"{FLAG_ERROR}\n  - no monokernel backend 'amd' is registered (registered: []); install the plugin "
        "that provides it")


def test_a_spec_that_fails_to_import_is_a_refusal(real_config_dir, private_registry, isa):
    from sglang.kernels.plugin_kernels.amd.spec import register

    register(backend="amd", architecture="KimiK3ForConditionalGeneration", path="sgl_k3_mono.no_such:SPEC")
    isa("sm_90")
    sa = server_args(real_config_dir, tp_size=8, attention_backend="fa3", enable_amd_monokernel=True)
    with pytest.raises(ValueError, match="sgl_k3_mono.no_such:SPEC does not import: ModuleNotFoundError"):
        sa.resolve_once()


def test_no_gpu_is_a_refusal(real_config_dir, private_registry):
    from sgl_k3_mono.plugin import register

    register()
    sa = server_args(real_config_dir, tp_size=8, enable_amd_monokernel=True)
    with pytest.raises(ValueError, match="no GPU is visible"):
        sa.resolve_once()
