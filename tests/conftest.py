"""Shared fixtures. Tests that need a GPU carry the `gpu` marker and skip on a
machine without CUDA with the reason; everything else runs on the CPU against the
real SGLang 0.5.23."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
sys.path.insert(0, str(Path(__file__).resolve().parent))
# A worker a test starts as `python tests/.../worker.py` has its own folder first on sys.path,
# not the checkout, so it imported whatever sgl_k3_mono was installed (an older one, on a
# developer's machine): every process a test starts imports this checkout's package.
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])



def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (sm_90); run on the device, see docs/evidence/")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_config_dir() -> str:
    return str(CONFIGS / "k3-tiny")


@pytest.fixture(scope="session")
def real_config_dir() -> str:
    return str(CONFIGS / "kimi-k3")


@pytest.fixture
def private_registry(monkeypatch):
    """An empty SGLang monokernel registry for one test (find_spec reads the global)."""
    import sglang.kernels.plugin_kernels.amd.spec as spec_mod

    monkeypatch.setattr(spec_mod, "_REGISTRY", {})
    return spec_mod._REGISTRY


@pytest.fixture(autouse=True)
def mi355x_server_environment(monkeypatch):
    """SGLANG_USE_AITER=1, as ROCm's SGLang images and Kimi-K3's MI355X recipe set it, so a
    gfx950 setup resolves as such a server would (SGLang then keeps MXFP4 experts MXFP4;
    without it the flag refuses them for the FlyDSL K2: config_reasons._expert_form_reasons).
    SGLang's own reads of it are HIP-only, so on this CPU it changes only what the plugin
    asks; a test that wants it unset deletes it."""
    monkeypatch.setenv("SGLANG_USE_AITER", "1")
