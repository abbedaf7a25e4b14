"""Scripts under tools/ imported as modules, for their CPU tests: tools/ is a folder of
scripts run by path, not a package."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load(name: str) -> types.ModuleType:
    """tools/<name>.py, executed once per call under its own name."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
