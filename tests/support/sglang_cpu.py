"""Stand up just enough of SGLang 0.5.23 on a CPU-only machine to resolve server
arguments, build a Kimi-K3 model and load a checkpoint through SGLang's own loader.

Three settings let resolution pass with no GPU (none touches the monokernel checks):
device "cpu" (no accelerator to detect), mamba radix cache "no_buffer" (snapshots need
a GPU platform) and no overlap schedule (no_buffer requires it).
"""

from __future__ import annotations

import contextlib
import socket
import types
from typing import Any

import torch

CPU_SERVER_ARGS = dict(
    skip_tokenizer_init=True,
    device="cpu",
    mamba_radix_cache_strategy="no_buffer",
    disable_overlap_schedule=True,
)


def server_args(model_path: str, **overrides: Any):
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(**{**CPU_SERVER_ARGS, "model_path": model_path, **overrides})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def publish(sa) -> None:
    """Publish resolved server args and (re)build world-size-1 gloo groups around them."""
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish as _publish, reset_context

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()  # publishing again drops the recorded groups
    reset_context()
    _publish(sa, role="test", ranks=SpawnRanks(world_rank=0))
    if not torch.distributed.is_initialized():
        ps.init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        )
    elif ps._WORLD is not None:
        get_parallel().override_permanently(world_group=ps._WORLD)
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(backend="gloo")
    initialize_dp_attention(server_args=sa)


@contextlib.contextmanager
def cpu_streams():
    """KimiK3LinearModel builds torch.cuda.Stream()s unless on HIP; stand in for them."""

    class _Stream:
        def __init__(self, *a, **k):
            pass

        def wait_stream(self, *a, **k):
            pass

    real, torch.cuda.Stream = torch.cuda.Stream, _Stream
    try:
        yield
    finally:
        torch.cuda.Stream = real


def build_model(model_path: str, *, load_format: str = "dummy", **overrides: Any):
    """Build (dummy weights) or load (safetensors) a Kimi-K3 through SGLang's loader."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import get_model_loader

    sa = server_args(model_path, load_format=load_format, **overrides)
    publish(sa)
    with cpu_streams():
        loader = get_model_loader(LoadConfig(load_format=load_format))
        return loader.load_model(
            model_config=ModelConfig.from_server_args(sa), device_config=DeviceConfig(device="cpu")
        )


def fake_device(monkeypatch, *, isa: str, compute_units: int) -> types.SimpleNamespace:
    """torch.cuda as install_monokernel_forward reads it, for one test function only
    (torch.compile, behind SGLang's CPU top-k, breaks on fake properties)."""
    major, minor = (9, 5) if isa.startswith("gfx") else (int(isa[3]), int(isa[4:]))
    props = types.SimpleNamespace(
        multi_processor_count=compute_units, gcnArchName=f"{isa}:sramecc+:xnack-",
        major=major, minor=minor, name=f"fake {isa}", total_memory=1 << 37,
    )
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: props)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_a, **_k: 0)
    return props
