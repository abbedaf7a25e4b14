"""The drift guard agrees with the installed SGLang 0.5.23, reports a changed source
by name with what to re-verify, records digests only through `drift --update`, and
survives modules that cannot be imported on this machine."""

from __future__ import annotations

import hashlib
import json
import textwrap

from sgl_k3_mono import drift


def test_every_digest_matches_installed_sglang():
    recorded = drift.load_digests()
    assert set(recorded) == {g.path for g in drift.GUARDS}, "drift_digests.json and GUARDS disagree"
    results = drift.check()
    bad = [(r.status, r.guard.path, r.where) for r in results if r.status != "ok"]
    assert not bad, bad


def test_guard_list_is_complete_and_unique():
    paths = [g.path for g in drift.GUARDS]
    assert len(paths) == len(set(paths))
    assert all(g.reverify.strip() for g in drift.GUARDS)
    must = {
        # section 9's starred core set
        "sglang.srt.models.kimi_k3.KimiK3DecoderLayer.forward",
        "sglang.srt.models.kimi_k3.KimiK3DeltaAttention.forward",
        "sglang.srt.models.kimi_k3.KimiK3MoE._forward_fused",
        "sglang.srt.layers.attn_residual.AttnResidual.forward",
        "sglang.srt.models.kimi_k3.KimiK3MLAAttention.__init__",
        # the contract and resolution pieces the plugin relies on
        "sglang.srt.arg_groups.model_override_base.get_default_attn_backend",
        "sglang.srt.configs.mamba_utils.KimiLinearStateShape.create",
        "sglang.srt.kernel_plugins.amd.binding.monokernel_disable_reasons",
        "sglang.srt.kernel_plugins.amd.binding.covered_capture_sizes",
        "sglang.srt.kernel_plugins.amd.binding.handle_amd_monokernel",
        "sglang.srt.kernel_plugins.amd.binding.install_monokernel_forward",
        "sglang.srt.kernel_plugins.amd.binding._install_forward",
        "sglang.srt.kernel_plugins.amd.binding.shape_key",
        "sglang.kernels.plugin_kernels.amd.spec.find_spec",
        "sglang.kernels.plugin_kernels.amd.spec.register",
        "sglang.kernels.plugin_kernels.amd.spec.Feature",
        "sglang.kernels.plugin_kernels.amd.spec.MONOKERNEL_API_VERSION",
        "sglang/kernels/kda_kernels/csrc/attention/kda_decode_gfx950.cu",
    }
    assert must <= set(paths), must - set(paths)


def test_digest_is_the_inspect_source():
    """For an importable function the digest is sha256(inspect.getsource(...))."""
    import inspect

    from sglang.srt.layers.attn_residual import aggregate_stream_torch
    from sglang.kernels.ops.attention.attn_res_hip import _agg_kernel

    for obj, path in ((aggregate_stream_torch, "sglang.srt.layers.attn_residual.aggregate_stream_torch"),
                      (_agg_kernel.fn, "sglang.kernels.ops.attention.attn_res_hip._agg_kernel")):
        want = hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()
        assert drift.digest_of(drift.Guard(path, "x"))[0] == want


def test_changed_source_is_reported_with_name_and_reverify_text(monkeypatch, capsys):
    """A digest table that no longer matches (as after an SGLang upgrade) fails the
    run and names the object and what to re-verify."""
    target = next(g for g in drift.GUARDS if g.path.endswith("KimiK3MoE._forward_fused"))
    table = drift.load_digests()
    table[target.path] = "0" * 64
    monkeypatch.setattr(drift, "load_digests", lambda *a, **k: dict(table))
    assert drift.main(["--no-import"]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if target.path in ln)
    assert line.startswith("changed")
    assert "KimiK3MoE._forward_fused" in line
    assert f"re-verify: {target.reverify}" in out
    assert "1 changed" in out.splitlines()[-1]


def test_edited_source_file_is_reported_changed(monkeypatch, capsys):
    """Edit one function's text (not its neighbours): only that guard drifts."""
    real_read = drift._read_source

    def edited(path):
        text = real_read(path)
        if path.name == "attn_residual.py":
            text = text.replace("def get_cw(", "def get_cw(  # patched upstream\n", 1)
        return text

    monkeypatch.setattr(drift, "_read_source", edited)
    results = {r.guard.path: r.status for r in drift.check()}
    assert results["sglang.srt.layers.attn_residual.get_cw"] == "changed"
    assert results["sglang.srt.layers.attn_residual.aggregate_stream"] == "ok"
    assert sum(s != "ok" for s in results.values()) == 1
    assert drift.main(["--no-import"]) == 1
    assert "get_cw" in capsys.readouterr().out


def test_update_writes_the_digest_file(tmp_path, capsys):
    path = tmp_path / "digests.json"
    assert drift.main(["--update", "--no-import", "--digests", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert doc["sglang"] == drift.SGLANG_VERSION
    assert doc["digests"] == drift.load_digests()  # the shipped file is current
    assert drift.main(["--no-import", "--digests", str(path)]) == 0
    # An empty record is drift ("unrecorded"), which --update then accepts.
    path.write_text(json.dumps({"digests": {}}))
    assert drift.main(["--no-import", "--digests", str(path)]) == 1
    assert "unrecorded" in capsys.readouterr().out


def test_gpu_only_module_is_unimportable_not_a_crash(tmp_path, monkeypatch, capsys):
    """A module that raises at import (no GPU driver) still gets its digest from the
    file; the import column says why it does not import. A vanished name is missing."""
    pkg = tmp_path / "fakesgl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "gpu_only.py").write_text(textwrap.dedent("""\
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")


        class Kernel:
            @staticmethod
            def launch(x):
                return x + 1
        """))
    (pkg / "reexport.py").write_text("from .gpu_only import Kernel as K\n")
    monkeypatch.setattr(drift, "site_root", lambda: tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    guards = (drift.Guard("fakesgl.gpu_only.Kernel.launch", "launch semantics"),
              drift.Guard("fakesgl.reexport.K.launch", "same object, re-exported"),
              drift.Guard("fakesgl.gpu_only.Kernel.gone", "a removed method"))
    digest = drift.digest_of(guards[0])[0]
    assert drift.digest_of(guards[1])[0] == digest
    results = drift.check(guards, digests={g.path: digest for g in guards}, import_check=True)
    assert [r.status for r in results] == ["ok", "ok", "missing"]
    assert results[0].imported.startswith("unimportable: RuntimeError: CUDA driver")
    drift.print_table(results)
    out = capsys.readouterr().out
    assert "why: fakesgl.gpu_only.Kernel.gone: no 'gone'" in out
