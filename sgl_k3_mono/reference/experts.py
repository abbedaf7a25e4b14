"""Routed-expert weight stores: where a reference reads one expert's w13 / w2 from.

Every store answers `weights(e)` with fp32 values, w13 [2*inter, L] (gate rows, then up
rows: K3 loads w1/w3 non-interleaved) and w2 [L, inter], and `shard(rank, tp)` with the
store a TP rank holds: rows [r*I_l, (r+1)*I_l) of the gate and of the up half of w13,
the same columns of w2 (FusedMoE's `_load_w13` / `_load_w2` narrowing, I_l = inter/tp).

- `DenseExperts`: bf16 w13/w2 [E, 2I, L] / [E, L, I], as SGLang holds unquantized experts.
- `Mxfp4Experts`: packed + E8M0 scales as `Mxfp4MoEMethod` holds them before any
  backend post-processing (padding rows/columns past `inter` allowed, see mxfp4.py).
- `SeededExperts`: expert e generated on demand from (seed, e), so real-size layers
  need only the experts a step routes to (896 full experts are 59 GB in bf16).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from sgl_k3_mono.reference import mxfp4


def _check_split(inter: int, tp: int, what: str, group: int = 1) -> int:
    if tp < 1 or inter % tp or (inter // tp) % group:
        need = f" into multiples of {group}" if group > 1 else ""
        raise ValueError(f"{what}: intermediate {inter} does not split over tp={tp}{need}")
    return inter // tp


def _rank_rows(inter: int, half: int, rank: int, tp: int) -> torch.Tensor:
    """w13 row indices a rank keeps: its gate slice then its up slice (up starts at `half`)."""
    il = inter // tp
    gate = torch.arange(rank * il, (rank + 1) * il)
    return torch.cat([gate, gate + half])


class ExpertStore:
    """Interface of the stores below (plain base class; frozen dataclasses implement it)."""

    num_experts: int
    inter: int
    latent: int

    def weights(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def shard(self, rank: int, tp: int) -> "ExpertStore":
        raise NotImplementedError

    def _check_expert(self, e: int) -> None:
        if not 0 <= e < self.num_experts:
            raise ValueError(f"expert id {e} outside 0..{self.num_experts - 1}")


@dataclass(frozen=True)
class DenseExperts(ExpertStore):
    """Unquantized experts, exactly the FusedMoE parameters."""

    w13: torch.Tensor
    """[E, 2*inter, L] bf16: gate rows [0, inter), up rows [inter, 2*inter)."""
    w2: torch.Tensor
    """[E, L, inter] bf16."""

    def __post_init__(self):
        if self.w13.dtype != torch.bfloat16 or self.w2.dtype != torch.bfloat16:
            raise ValueError(f"DenseExperts: w13/w2 must be bf16, got {self.w13.dtype}/{self.w2.dtype}")
        e, two_i, lat = self.w13.shape
        if two_i % 2 or tuple(self.w2.shape) != (e, lat, two_i // 2):
            raise ValueError(f"DenseExperts: w13 {tuple(self.w13.shape)} and w2 {tuple(self.w2.shape)} disagree")

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def inter(self) -> int:
        return self.w13.shape[1] // 2

    @property
    def latent(self) -> int:
        return self.w13.shape[2]

    def weights(self, e):
        self._check_expert(e)
        return self.w13[e].float(), self.w2[e].float()

    def shard(self, rank, tp):
        if tp == 1 and rank == 0:  # the whole store, as is (a copy of a real layer's is 7.4 GB a TP-8 rank)
            return self
        il = _check_split(self.inter, tp, "DenseExperts")
        rows = _rank_rows(self.inter, self.inter, rank, tp)
        return DenseExperts(self.w13[:, rows], self.w2[:, :, rank * il:(rank + 1) * il])


@dataclass(frozen=True)
class Mxfp4Experts(ExpertStore):
    """MXFP4 experts as Mxfp4MoEMethod holds them: its loaded layout ("plain"), or on
    gfx950 one of AITER's preshuffles ("a16w4", "generic"; reference/mxfp4_aiter.py),
    which a rank holds as SGLang left it (`from_sglang` views its 2-D scales, no copy)."""

    w13: torch.Tensor
    """[E, 2*I_pad, L/2] uint8: gate rows [0, inter), up rows [I_pad, I_pad+inter) (in the
    AITER layouts, those rows' bytes where the shuffle put them)."""
    w13_scale: torch.Tensor
    """[E, 2*I_pad, C'] uint8 E8M0, C' = L/32 (generic: rounded up to 8)."""
    w2: torch.Tensor
    """[E, L, I_pad/2] uint8: columns [0, inter) are real."""
    w2_scale: torch.Tensor
    """[E, L, C'] uint8 E8M0, C' = I_pad/32 (generic: rounded up to 8)."""
    inter: int
    """True (unpadded) intermediate width."""
    layout: str = "plain"
    """"plain" (SGLang's loaded layout), "a16w4" or "generic" (AITER's preshuffles)."""

    def __post_init__(self):
        from sgl_k3_mono.reference.mxfp4_aiter import LAYOUTS, scale_cols

        if self.layout != "plain" and self.layout not in LAYOUTS:
            raise ValueError(f"Mxfp4Experts: layout {self.layout!r} is not 'plain' or one of {LAYOUTS}")
        for t in (self.w13, self.w13_scale, self.w2, self.w2_scale):
            if t.dtype != torch.uint8:
                raise ValueError(f"Mxfp4Experts: packed weights and scales must be uint8, got {t.dtype}")
            if self.layout == "plain" and getattr(t, "is_shuffled", False):
                raise ValueError("Mxfp4Experts: a tensor tagged is_shuffled (AITER-preshuffled) held as the plain "
                                 "layout")
        e, rows, half_l = self.w13.shape
        if rows % 2 or self.inter > rows // 2 or self.w2.shape[:2] != (e, half_l * 2):
            raise ValueError(f"Mxfp4Experts: w13 {tuple(self.w13.shape)}, w2 {tuple(self.w2.shape)}, "
                             f"inter={self.inter} disagree")
        if self.layout != "plain":
            ip, lat = rows // 2, half_l * 2
            want = ((e, rows, scale_cols(self.layout, lat // 32)), (e, lat, scale_cols(self.layout, ip // 32)))
            if (tuple(self.w13_scale.shape), tuple(self.w2_scale.shape)) != want or self.w2.shape[2] != ip // 2:
                raise ValueError(f"Mxfp4Experts: {self.layout} scales {tuple(self.w13_scale.shape)} / "
                                 f"{tuple(self.w2_scale.shape)}, w2 {tuple(self.w2.shape)} are not {want}")

    @classmethod
    def from_sglang(cls, w13, w13_scale, w2, w2_scale, inter: int, layout: str = "plain") -> "Mxfp4Experts":
        """The store over FusedMoE's tensors as they are; AITER's 2-D scales viewed 3-D."""
        if layout != "plain":
            from sgl_k3_mono.reference.mxfp4_aiter import expert_view

            e, rows, half_l = w13.shape
            w13_scale = expert_view(w13_scale, layout, e, rows, half_l * 2 // 32)
            w2_scale = expert_view(w2_scale, layout, e, half_l * 2, rows // 2 // 32)
        return cls(w13, w13_scale, w2, w2_scale, inter, layout)

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def latent(self) -> int:
        return self.w13.shape[2] * 2

    @property
    def inter_pad(self) -> int:
        return self.w13.shape[1] // 2

    def plain(self, e: int) -> tuple[torch.Tensor, ...]:
        """Expert e's (w13, w13_scale, w2, w2_scale) in the plain layout at I_pad."""
        if self.layout == "plain":
            return self.w13[e], self.w13_scale[e], self.w2[e], self.w2_scale[e]
        from sgl_k3_mono.reference.mxfp4_aiter import plain_expert

        p = plain_expert(self.w13[e], self.w13_scale[e], self.w2[e], self.w2_scale[e], self.layout,
                         latent=self.latent, inter_pad=self.inter_pad)
        return p.w13, p.w13_scale, p.w2, p.w2_scale

    def weights(self, e):
        self._check_expert(e)
        w13, s13, w2, s2 = self.plain(e)
        return mxfp4.dequant_w13(w13, s13, self.inter), mxfp4.dequant_w2(w2, s2, self.inter)

    def real_scales(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every expert's scales the weights use (gate and up rows, w2's real groups), the
        padding left out (AITER's may hold anything), as plain [E, 2 inter, L/32] and
        [E, L, inter/32]; the AITER layouts' are unshuffled copies."""
        ip, g2 = self.inter_pad, -(-self.inter // mxfp4.GROUP)
        if self.layout == "plain":
            s13, s2 = self.w13_scale, self.w2_scale
        else:
            from sgl_k3_mono.reference.mxfp4_aiter import plain_scales

            s13 = plain_scales(self.w13_scale, self.layout, True, self.latent // mxfp4.GROUP)
            s2 = plain_scales(self.w2_scale, self.layout, False, ip // mxfp4.GROUP)
        rows = _rank_rows(self.inter, ip, 0, 1).to(s13.device)
        return s13[:, rows], s2[:, :, :g2]

    def shard(self, rank, tp):
        if self.layout != "plain":
            raise ValueError(f"Mxfp4Experts.shard: a {self.layout} store is one rank's, as AITER shuffled it")
        if tp == 1 and rank == 0 and self.w13.shape[1] == 2 * self.inter:  # unpadded: the whole store, as is
            return self
        # w2 is sharded in whole scale groups: the loader narrows bytes and scales alike.
        il = _check_split(self.inter, tp, "Mxfp4Experts", group=mxfp4.GROUP)
        rows = _rank_rows(self.inter, self.w13.shape[1] // 2, rank, tp)
        c0 = rank * il
        return Mxfp4Experts(
            self.w13[:, rows], self.w13_scale[:, rows],
            self.w2[:, :, c0 // 2:(c0 + il) // 2].contiguous(),
            self.w2_scale[:, :, c0 // mxfp4.GROUP:(c0 + il) // mxfp4.GROUP].contiguous(),
            il,
        )


@dataclass(frozen=True, eq=False)
class SeededExperts(ExpertStore):
    """Experts generated on demand: expert e depends only on (seed, e), never on tp.

    bf16: normal * 1/sqrt(fan_in), rounded to bf16. mxfp4: uniformly random E2M1 codes
    and E8M0 scales drawn from the two powers of two around 1/(2.93 sqrt(fan_in)) (2.93
    is the RMS of a uniform code), so both formats have ~1/sqrt(fan_in) weights.
    """

    num_experts: int
    """E."""
    inter: int
    """Intermediate width over all ranks."""
    latent: int
    """L."""
    seed: int
    """Base seed; expert e uses a generator seeded from (seed, e)."""
    fmt: str = "bf16"
    """"bf16" or "mxfp4"."""

    def __post_init__(self):
        if self.fmt not in ("bf16", "mxfp4"):
            raise ValueError(f"SeededExperts: fmt must be 'bf16' or 'mxfp4', got {self.fmt!r}")
        if self.fmt == "mxfp4" and (self.latent % mxfp4.GROUP or self.inter % mxfp4.GROUP):
            raise ValueError("SeededExperts: mxfp4 needs latent and inter multiples of 32")

    def _gen(self, e: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + e)

    def packed(self, e: int) -> tuple[torch.Tensor, ...]:
        """mxfp4 only: expert e's (w13, w13_scale, w2, w2_scale), unpadded, uint8."""
        if self.fmt != "mxfp4":
            raise ValueError("SeededExperts.packed: only the mxfp4 format has packed weights")
        self._check_expert(e)
        g, i, lat = self._gen(e), self.inter, self.latent
        out = []
        for rows, k in ((2 * i, lat), (lat, i)):
            w = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, generator=g)
            base = int(torch.floor(torch.log2(torch.tensor(1.0 / (2.93 * k ** 0.5)))))
            s = (127 + base + torch.randint(0, 2, (rows, k // mxfp4.GROUP), generator=g)).to(torch.uint8)
            out += [w, s]
        return tuple(out)

    @functools.lru_cache(maxsize=2)
    def weights(self, e):
        self._check_expert(e)
        if self.fmt == "mxfp4":
            w13, s13, w2, s2 = self.packed(e)
            return mxfp4.dequant(w13, s13), mxfp4.dequant(w2, s2)
        g, i, lat = self._gen(e), self.inter, self.latent
        w13 = (torch.randn(2 * i, lat, generator=g) / lat ** 0.5).bfloat16().float()
        w2 = (torch.randn(lat, i, generator=g) / i ** 0.5).bfloat16().float()
        return w13, w2

    def shard(self, rank, tp):
        _check_split(self.inter, tp, "SeededExperts", group=mxfp4.GROUP if self.fmt == "mxfp4" else 1)
        return _SeededShard(self, rank, tp)

    def materialize(self) -> ExpertStore:
        """All E experts as a DenseExperts / Mxfp4Experts (small dims only)."""
        if self.fmt == "bf16":
            ws = [self.weights(e) for e in range(self.num_experts)]
            return DenseExperts(torch.stack([a for a, _ in ws]).bfloat16(),
                                torch.stack([b for _, b in ws]).bfloat16())
        ps = [self.packed(e) for e in range(self.num_experts)]
        return Mxfp4Experts(*(torch.stack([p[j] for p in ps]) for j in range(4)), self.inter)


@dataclass(frozen=True)
class _SeededShard(ExpertStore):
    """One rank's view of a SeededExperts; shares the parent's per-expert cache."""

    base: SeededExperts
    rank: int
    tp: int

    @property
    def num_experts(self):
        return self.base.num_experts

    @property
    def inter(self):
        return self.base.inter // self.tp

    @property
    def latent(self):
        return self.base.latent

    def weights(self, e):
        w13, w2 = self.base.weights(e)
        il = self.inter
        return w13[_rank_rows(self.base.inter, self.base.inter, self.rank, self.tp)], \
            w2[:, self.rank * il:(self.rank + 1) * il]

    def shard(self, rank, tp):
        raise ValueError("SeededExperts: a rank's shard cannot be sharded again")
