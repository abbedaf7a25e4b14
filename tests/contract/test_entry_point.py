"""The plugin is found the way SGLang finds it, and registering it stays light."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import sgl_k3_mono.plugin as plugin

GROUP = "sglang.srt.plugins"


def ours():
    return [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.value == "sgl_k3_mono.plugin:register"]


def test_entry_point_is_installed():
    (ep,) = ours()
    assert ep.load() is plugin.register


def test_loading_the_entry_point_does_not_import_torch():
    code = (
        "import importlib.metadata, sys\n"
        f"(ep,) = [e for e in importlib.metadata.entry_points(group={GROUP!r}) if e.value.startswith('sgl_k3_mono')]\n"
        "ep.load()\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'sglang')))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"loading the entry point imported: {done.stdout} {done.stderr[-2000:]}"


def test_sglang_load_plugins_registers_every_kimi_k3_architecture(private_registry, monkeypatch):
    import sglang.srt.plugins as plugins

    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.setenv("SGLANG_PLUGINS", "sgl_k3_mono")  # only ours: other installed plugins stay out
    plugins.load_plugins()
    assert private_registry["amd"] == {arch: plugin.SPEC_PATH for arch in plugin.ARCHITECTURES}


@pytest.mark.parametrize("isa", ["gfx950", "sm_90"])
def test_find_spec_serves_gfx950_and_sm90(private_registry, isa):
    from sglang.kernels.plugin_kernels.amd.spec import find_spec

    from sgl_k3_mono.spec import SPEC

    plugin.register()
    for arch in plugin.ARCHITECTURES:
        spec, why = find_spec(backend="amd", architectures=[arch], isa=isa)
        assert spec is SPEC and why == ""


@pytest.mark.parametrize("isa", ["gfx942", "gfx90a", "sm_100", "sm_89", "sm_120"])
def test_find_spec_refuses_other_isas(private_registry, isa):
    from sglang.kernels.plugin_kernels.amd.spec import find_spec

    plugin.register()
    spec, why = find_spec(backend="amd", architectures=["KimiK3ForConditionalGeneration"], isa=isa)
    assert spec is None
    assert why == f"monokernel backend 'amd' has no spec for ['KimiK3ForConditionalGeneration'] on {isa}"


def test_registering_twice_is_harmless(private_registry):
    plugin.register()
    plugin.register()  # SGLang calls load_plugins in several processes and code paths
    assert len(private_registry["amd"]) == 2


def test_spec_is_a_valid_api_v1_monospec():
    from sglang.kernels.plugin_kernels.amd.spec import MONOKERNEL_API_VERSION, MonoSpec, NumericsKind

    from sgl_k3_mono.spec import SPEC

    assert isinstance(SPEC, MonoSpec) and SPEC.api_version == MONOKERNEL_API_VERSION == 1
    assert SPEC.devices["gfx950"].resident_blocks == 256 and SPEC.devices["gfx950"].tp_sizes == (8,)
    assert SPEC.devices["sm_90"].resident_blocks == 132 and SPEC.devices["sm_90"].tp_sizes == (1, 2, 4, 8)
    assert SPEC.widths("gfx950") == SPEC.widths("sm_90") == tuple(range(1, 9))
    assert SPEC.numerics.kind is NumericsKind.TOLERANCE
    for name in SPEC.numerics.bounds:
        launch, output, metric = name.split(".")
        assert launch in ("k1", "k2") and metric in ("max_abs", "rel", "cosine")
