"""The shipped-variant set CI compiles (sgl_k3_mono/compile_every.py): every width, TP
size the spec accepts on the ISA, mode and expert format is a member, and members are
grouped only where their compile keys agree. Enumeration only: nothing compiles here."""

from __future__ import annotations

import warnings

import pytest

from sgl_k3_mono import compile_every as ce
from sgl_k3_mono.isa import PROFILES, WIDTHS


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_every_width_tp_mode_and_format_is_a_member(target):
    names = {m.name for m in ce.triton_members(target)}
    for tp in PROFILES[target].tp_sizes:
        for m in WIDTHS:
            assert {f"k2-{fmt}-tp{tp}-M{m}" for fmt in ce.FORMATS} <= names
            assert {f"k1-{mode}-add-tp{tp}-M{m}" for mode in ce.MODES} <= names
    assert {f"k1-{mode}-{kind}-tp8-M8" for mode in ce.MODES for kind in ce.KINDS} <= names
    # gfx950: the MXFP4 experts in the AITER layouts SGLang leaves there too, at every width
    aiter = {f"k2-mxfp4-{lay}-tp8-M{m}" for lay in ("a16w4-512", "generic-512", "generic-384") for m in WIDTHS}
    assert aiter <= names if target == "gfx950" else not aiter & names


def test_groups_follow_the_tile_classes():
    """sm_90 K2 with MXFP4 experts compiles five kernels a TP: 1 row, 2 rows (the experts'
    shared-memory ring: tiles.k2_tiles), 3 rows, 4 rows (experts_down's k-blocks in one
    step from there, KUD 3; at TP 8 also experts_up's K split, ksx_choice's 2), and from 5
    rows (the split seam's slices widen to 512 columns to fit the grid); no group mixes
    TP sizes, formats or K1 modes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        groups = ce.group(ce.triton_members("sm_90"), lambda m: ce.triton_key("sm_90", m.build("sm_90")))
    by_rep = {rep.name: names for rep, names in groups}
    for tp in (1, 2, 4, 8):
        assert by_rep[f"k2-mxfp4-tp{tp}-M1"] == [f"k2-mxfp4-tp{tp}-M1"]
        assert by_rep[f"k2-mxfp4-tp{tp}-M2"] == [f"k2-mxfp4-tp{tp}-M2"]
        assert by_rep[f"k2-mxfp4-tp{tp}-M3"] == [f"k2-mxfp4-tp{tp}-M3"]
        assert by_rep[f"k2-mxfp4-tp{tp}-M4"] == [f"k2-mxfp4-tp{tp}-M4"]
        assert by_rep[f"k2-mxfp4-tp{tp}-M5"] == [f"k2-mxfp4-tp{tp}-M{m}" for m in range(5, 9)]
    for names in by_rep.values():
        assert len({n.rsplit("-M", 1)[0] for n in names}) == 1, names  # one launch, kind, TP and format


def test_flydsl_refusals_are_listed_not_compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        groups, refused = ce.fly_groups()
    names = [n for _, ns in groups for n in ns]
    assert not any("bf16" in n for n in names)
    assert any("bf16" in r and "MXFP4 routed experts only" in r for r in refused)
    assert {f"fly-every-k2-mxfp4-tp8-M{m}" for m in WIDTHS} <= set(names)
    assert {f"fly-every-k2-mxfp4-a16w4-512-tp8-M{m}" for m in WIDTHS} <= set(names)  # SGLang's default there
