"""Find the Kimi-K3 model configurations that ship with sgl-k3-mono.

The configurations live at the top of the repository (configs/<name>/config.json).
A wheel force-includes that folder as `sgl_k3_mono/_configs`; an editable install
has no such folder and reads the checkout's configs/ instead. Both are searched, the
wheel's first, so an installed package never reads a stale checkout next to it.

Pure Python: no torch, no SGLang.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"

_PACKAGE_DIR = Path(__file__).resolve().parent


def search_roots() -> list[Path]:
    """Folders that hold one sub-folder per configuration, in search order."""
    roots = [_PACKAGE_DIR / "_configs", _PACKAGE_DIR.parent / "configs"]
    return [r for r in roots if r.is_dir()]


def available() -> list[str]:
    """Names of every configuration that can be found, sorted."""
    names: set[str] = set()
    for root in search_roots():
        names.update(p.parent.name for p in root.glob(f"*/{CONFIG_FILE}"))
    return sorted(names)


def config_dir(name: str) -> Path:
    """The folder holding configuration `name`'s config.json.

    `name` may also be a path to such a folder (or to the config.json itself), so
    every command that takes a configuration name also takes a model directory.
    """
    given = Path(name).expanduser()
    if given.name == CONFIG_FILE and given.is_file():
        return given.parent.resolve()
    if (given / CONFIG_FILE).is_file() and (given.is_absolute() or "/" in name or name.startswith(".")):
        return given.resolve()
    for root in search_roots():
        candidate = root / name
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    if (given / CONFIG_FILE).is_file():
        return given.resolve()
    known = ", ".join(available()) or "none"
    raise FileNotFoundError(f"no Kimi-K3 configuration named {name!r} (known: {known})")


def load_config(name: str) -> dict[str, Any]:
    """The whole config.json of `name` (the KimiK3Config wrapper: text + vision)."""
    with open(config_dir(name) / CONFIG_FILE) as f:
        return json.load(f)


def text_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The KimiLinearConfig part of a config dict (or the dict itself if text-only)."""
    return config.get("text_config") or config


def load_text_config(name: str) -> dict[str, Any]:
    """The text_config (KimiLinearConfig fields) of configuration `name`."""
    return text_config_of(load_config(name))
