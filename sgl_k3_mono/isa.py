"""What the plugin knows about each ISA it serves. Pure Python.

One `IsaProfile` per ISA; the spec's DeviceLimits, the per-ISA refusals, the floor
times `check` prints and the README's "what ran where" all read this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8)
"""Step rows the launches take on every ISA (decode: requests; verify: tokens)."""


@dataclass(frozen=True)
class IsaProfile:
    """One ISA's launch geometry, limits and the facts users are told."""

    isa: str
    """The ISA as SGLang's device_isa() names it ("gfx950", "sm_90")."""
    gpu: str
    """The GPU the numbers below are for."""
    resident_blocks: int
    """Launch grid: one co-resident workgroup / CTA per CU / SM."""
    tp_sizes: tuple[int, ...]
    """TP sizes the launches are built for on this ISA."""
    bandwidth_tb_s: float
    """HBM bandwidth by the datasheet (TB/s), for the byte-floor times `check` prints."""
    memory_gb: float
    """HBM a GPU by the datasheet (GB), against which `check` sets the experts' bytes a rank."""
    decode_attention_backends: frozenset[str]
    """SGLang decode attention backends the 24 MLA layers may run on (unchanged)."""
    device_code: str
    """The language the launches' device code is written in on this ISA."""
    executed: bool
    """Whether the launches have been executed on this ISA's hardware by this project."""

    @property
    def widths(self) -> tuple[int, ...]:
        return WIDTHS


PROFILES = {
    "gfx950": IsaProfile(
        isa="gfx950",
        gpu="AMD Instinct MI355X",
        resident_blocks=256,
        tp_sizes=(8,),
        bandwidth_tb_s=8.0,
        memory_gb=288.0,
        # SGLang's AITER MLA decode; the K3 12-head layout is what the standard path runs.
        decode_attention_backends=frozenset({"aiter"}),
        device_code="FlyDSL",
        executed=False,
    ),
    "sm_90": IsaProfile(
        isa="sm_90",
        gpu="NVIDIA H200",
        resident_blocks=132,
        tp_sizes=(1, 2, 4, 8),
        bandwidth_tb_s=4.8,
        memory_gb=141.0,
        # The MLA decode backends SGLang 0.5.23 runs on Hopper (fa3 is its default there).
        decode_attention_backends=frozenset({"fa3", "flashmla", "flashinfer", "triton"}),
        device_code="Triton",
        # K1/K2 Triton launches ran on the H200 on 2026-11-30 (docs/evidence/k1-sm90.md, k2-sm90.md)
        executed=True,
    ),
}


def target_isa() -> Optional[str]:
    """The ISA SGLang's binding reports for this process (None without a GPU).

    Read through the binding module at call time, so the refusals always see the same
    ISA as SGLang's own checks (and `check --isa` can ask about another ISA).
    """
    from sglang.srt.kernel_plugins.amd import binding

    return binding.device_isa()


def sglang_default_decode_backend(isa: str, mla_heads_local: int) -> str:
    """The attention backend SGLang 0.5.23 picks for an MLA model on `isa` when none is
    given (get_default_attn_backend, watched by the drift guard): fa3 on Hopper; on
    gfx950 aiter only for 16 or 128 heads a rank, else triton. `check` needs it because
    a CPU machine resolves the CPU's default instead."""
    if isa == "sm_90":
        return "fa3"
    if isa.startswith("gfx"):
        return "aiter" if mla_heads_local in (16, 128) else "triton"
    raise ValueError(f"no default attention backend known for {isa!r}")
