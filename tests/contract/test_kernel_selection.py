"""The device-code choice per ISA (sgl_k3_mono.kernels) and its refusals, through SGLang's
own monokernel_disable_reasons on the real Kimi-K3 config, as test_config_refusals does.

FlyDSL's state (installed version, whether it imports) is set per case, so the table
means the same on every machine; one test probes the real installation.
"""

from __future__ import annotations

import pytest

from support.sglang_cpu import server_args

GFX = dict(tp_size=8, attention_backend="aiter")
H200 = dict(tp_size=8, attention_backend="fa3")
PIN = "0.5.0"
FIX = f"pip install flydsl=={PIN}, or set SGL_K3_MONO_GFX950_IMPL=triton"
OK = (PIN, None)

# (id, isa, server args, env, (installed flydsl version or None, import failure or None), reasons)
CASES = [
    ("gfx950 default flydsl ok", "gfx950", GFX, {}, OK, []),
    ("gfx950 triton asked, flydsl absent", "gfx950", GFX, {"SGL_K3_MONO_GFX950_IMPL": "triton"}, (None, None), []),
    ("gfx950 flydsl asked ok", "gfx950", GFX, {"SGL_K3_MONO_GFX950_IMPL": "FlyDSL"}, OK, []),
    ("sm90 never needs flydsl", "sm_90", H200, {}, (None, None), []),
    ("sm90 ignores the gfx950 switch", "sm_90", H200, {"SGL_K3_MONO_GFX950_IMPL": "flydsl"}, (None, None), []),
    # ---- refusals ----
    ("gfx950 flydsl missing", "gfx950", GFX, {}, (None, None),
     [f"FlyDSL launches on gfx950 (default for gfx950) need flydsl=={PIN}, but package flydsl is not "
      f"installed: {FIX}"]),
    ("gfx950 flydsl other version", "gfx950", GFX, {}, ("0.4.2", None),
     [f"FlyDSL launches on gfx950 (default for gfx950) need flydsl=={PIN}, but flydsl==0.4.2 is installed: "
      f"{FIX}"]),
    ("gfx950 flydsl broken", "gfx950", GFX, {"SGL_K3_MONO_GFX950_IMPL": "flydsl"},
     (PIN, "import failed (ImportError: libfly_jit_runtime.so: cannot open shared object file)"),
     [f"FlyDSL launches on gfx950 (SGL_K3_MONO_GFX950_IMPL=flydsl) need flydsl=={PIN}, but flydsl=={PIN} is "
      "broken: import failed (ImportError: libfly_jit_runtime.so: cannot open shared object file): "
      f"{FIX}"]),
    ("gfx950 unknown impl", "gfx950", GFX, {"SGL_K3_MONO_GFX950_IMPL": "hip"}, OK,
     ["SGL_K3_MONO_GFX950_IMPL='hip': accepted on gfx950 are ['flydsl', 'triton']"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reasons(case, real_config_dir, private_registry, monkeypatch):
    from sglang.srt.arg_groups.overrides import model_config_of, resolving_view
    from sglang.srt.kernel_plugins.amd import binding

    from sgl_k3_mono import kernels
    from sgl_k3_mono.plugin import register

    _, isa, args, env, (version, broken), expected = case
    monkeypatch.delenv(kernels.IMPL_ENV, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(kernels, "_installed_version", lambda: version)
    monkeypatch.setattr(kernels, "_import_probe", lambda: broken)
    monkeypatch.setattr(kernels, "_conflict", lambda: None)
    register()
    monkeypatch.setattr(binding, "device_isa", lambda: isa)
    sa = server_args(real_config_dir, **args)
    _, reasons = binding.monokernel_disable_reasons(cfg=resolving_view(sa), model_config=model_config_of(sa),
                                                    isa=isa)
    assert reasons == expected


def test_a_conflicting_mlir_binding_in_the_process_is_a_refusal(monkeypatch):
    """FlyDSL's MLIR bindings abort a process that already loaded the CuTe DSL's."""
    import sys
    import types

    from sgl_k3_mono import kernels

    monkeypatch.setattr(kernels, "_installed_version", lambda: PIN)
    monkeypatch.setattr(kernels, "_import_probe", lambda: None)
    monkeypatch.delenv(kernels.IMPL_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "cutlass._mlir", raising=False)
    monkeypatch.setattr(kernels, "CONFLICTING_MLIR", {"sgl_k3_mono_fake_mlir": "a fake MLIR binding"})
    monkeypatch.setattr(kernels, "_rocm_process", lambda: True)  # the server's process on gfx950
    assert kernels.selection_reasons("gfx950") == []
    monkeypatch.setitem(sys.modules, "sgl_k3_mono_fake_mlir._mlir_libs", types.ModuleType("x"))
    assert kernels.selection_reasons("gfx950") == [
        f"FlyDSL launches on gfx950 (default for gfx950) need flydsl=={PIN}, but this process has loaded a "
        "fake MLIR binding (sgl_k3_mono_fake_mlir), whose MLIR bindings make importing FlyDSL's abort the "
        f"process: {FIX}"]
    assert kernels.selection_reasons("gfx950", {"SGL_K3_MONO_GFX950_IMPL": "triton"}) == []
    monkeypatch.setattr(kernels, "_rocm_process", lambda: False)  # `check` on another machine
    assert kernels.selection_reasons("gfx950") == []


@pytest.mark.parametrize("isa, env, impl", [
    ("sm_90", {}, "triton"), ("sm_90", {"SGL_K3_MONO_GFX950_IMPL": "flydsl"}, "triton"),
    ("gfx950", {}, "flydsl"), ("gfx950", {"SGL_K3_MONO_GFX950_IMPL": " Triton "}, "triton"),
])
def test_choose(isa, env, impl):
    from sgl_k3_mono.kernels import choose

    assert choose(isa, env).impl == impl


def test_choose_refuses_unknown_isa():
    from sgl_k3_mono.kernels import choose

    with pytest.raises(ValueError, match="no launches for ISA 'gfx942'"):
        choose("gfx942", {})


def test_pin_matches_the_toolchain_script():
    from pathlib import Path

    from sgl_k3_mono.kernels import FLYDSL_VERSION

    script = (Path(__file__).resolve().parents[2] / "tools" / "setup_gfx950_toolchain.sh").read_text()
    assert f'FLYDSL_PIN="${{FLYDSL_PIN:-{FLYDSL_VERSION}}}"' in script


def test_real_probe_answers_one_line():
    """The real probe on this machine: None (FlyDSL present and importable) or one line."""
    from sgl_k3_mono import kernels

    kernels._import_probe.cache_clear()
    problem = kernels.flydsl_problem()
    assert problem is None or ("\n" not in problem and "flydsl" in problem.lower())


def _tiny_plan():
    from sgl_k3_mono.k2.host import K2Plan

    return K2Plan(rows=2, isa="gfx950", hidden=64, attn_width=32, shared2=32, experts=16, latent=64, inter=32,
                  inter_up=32, top_k=2, bank_rows=8, eps=1e-6, situ_beta=4.0, situ_linear_beta=25.0, mxfp4=True)


@pytest.mark.parametrize("hip, env, impl", [
    (True, {"SGL_K3_MONO_GFX950_IMPL": "triton"}, "triton"), (False, {}, "triton"),
    (False, {"SGL_K3_MONO_GFX950_IMPL": "flydsl"}, "triton"),
])
def test_k2_host_side_follows_the_choice(hip, env, impl, monkeypatch):
    """K2Launch.build: the device code is the selection's, on the one shared host side."""
    from sgl_k3_mono.k2.host import K2Launch

    monkeypatch.delenv("SGL_K3_MONO_GFX950_IMPL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert K2Launch.build(_tiny_plan(), "cpu", hip=hip).impl == impl


def test_k2_default_on_gfx950_is_the_whole_flydsl_k2(monkeypatch):
    """gfx950's default is FlyDSL, and every K2 phase is written in it: building the
    default (at startup) takes it; the launch's own refusals (MXFP4 experts only, its
    tile shapes) come before anything is traced (test_k2_flydsl.py)."""
    from sgl_k3_mono.k2.flydsl.launch import missing_phases
    from sgl_k3_mono.k2.host import K2Launch

    import dataclasses

    monkeypatch.delenv("SGL_K3_MONO_GFX950_IMPL", raising=False)
    assert missing_phases() == ()
    k3 = dataclasses.replace(_tiny_plan(), hidden=7168, attn_width=1536, shared2=768, experts=896, latent=3584,
                             inter=384, inter_up=384, top_k=16, bank_rows=8, mxfp4=True)
    assert K2Launch.build(k3, "cpu", hip=True).impl == "flydsl"
    with pytest.raises(ValueError, match="K2 FlyDSL"):  # the tiny shapes are off its tiles: refused at build
        K2Launch.build(_tiny_plan(), "cpu", hip=True)


def test_k2_flydsl_on_a_cuda_build_is_refused():
    from sgl_k3_mono.k2.host import K2Launch

    with pytest.raises(ValueError, match="impl 'flydsl' for a CUDA build"):
        K2Launch.build(_tiny_plan(), "cpu", hip=False, impl="flydsl")


def test_k1_flydsl_is_wired_and_fails_closed_off_hip():
    """run_k1 takes impl "flydsl" (the gfx950 default) and launches the FlyDSL K1
    (k1/flydsl/), never a silent Triton run; off a HIP device it refuses by name
    (tests/launch/test_k1_flydsl.py runs the refusal)."""
    import inspect

    from sgl_k3_mono.k1 import host

    assert "flydsl" in host.IMPLS
    assert "_launch_flydsl" in inspect.getsource(host.run_k1)
    assert "HIP (gfx950) device only" in inspect.getsource(host._launch_flydsl)
