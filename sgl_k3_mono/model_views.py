"""The whole model as the launches read it: one entry per decoder layer with the K1 and
K2 weight views of this rank, and an account of any byte that is not SGLang's own.

This is what `build` will hand the launches; building it reads the loaded model only
(no collective, no allocation of weights), so it can run right after the refusals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.model_reasons import language_model


@dataclass(frozen=True)
class LayerViews:
    """One decoder layer: which launches run it and the tensors they read."""

    index: int
    """0-based layer index."""
    attention: str
    """"kda" (K1) or "mla" (SGLang's MLA attention)."""
    k1: Optional[Any]
    """K1Views for a KDA layer, else None."""
    k2: Optional[Any]
    """K2RankWeights for a MoE layer, else None (the dense layer 0 stays on SGLang's path)."""
    block_write: bool
    """K1 stores the prefix into the attn-res bank on this layer."""
    bank_rows_attn: int
    """Valid bank rows at this layer's attention read."""


def model_views(model: Any, hf_config: Any, *, rank: int, tp: int) -> list[LayerViews]:
    from sgl_k3_mono.k1.host import K1Views
    from sgl_k3_mono.k2.views import rank_weights_from_sglang

    d = K3Dims.from_config(hf_config, tp=tp)
    layers = language_model(model).model.layers
    out = []
    for i, layer in enumerate(layers):
        kda = d.is_kda(i)
        out.append(LayerViews(
            index=i, attention="kda" if kda else "mla",
            k1=K1Views.from_sglang(layer) if kda else None,
            k2=rank_weights_from_sglang(layer, rank=rank, tp=tp) if d.is_moe(i) else None,
            block_write=d.is_block_write(i), bank_rows_attn=d.bank_rows_at_attn(i)))
    return out


def _tensors(obj: Any, seen: set) -> Iterable[torch.Tensor]:
    """Every tensor reachable through dataclass fields (views and stores included)."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _tensors(getattr(obj, name), seen)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x, seen)


def copied_bytes(layers: list[LayerViews], model: Any) -> int:
    """Bytes the views hold outside the model's own parameter and buffer storage."""
    own = set()
    for t in list(model.parameters()) + list(model.buffers()):
        own.add(t.untyped_storage().data_ptr())
    for m in model.modules():  # derived tensors SGLang keeps as plain attributes (_bfa_w, _front_w, ...)
        for v in vars(m).values():
            if isinstance(v, torch.Tensor):
                own.add(v.untyped_storage().data_ptr())
    total, seen = 0, set()
    for t in _tensors(layers, set()):
        key = t.untyped_storage().data_ptr()
        if key not in own and key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total
