"""K2's tile options as a closed contract (sgl_k3_mono/k2/options.py), on the CPU: every key
a block holds is documented; a key no option has is refused by name, never carried along
unread (a sweep row labelled with a misspelt option would time the defaults); every
block the tests and the device tools ask for names real options."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sgl_k3_mono.k2 import host, tiles
from sgl_k3_mono.k2.options import TILE_OPTIONS, check_overrides

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"(?:[A-Za-z_][A-Za-z_0-9]*=-?\d+,)*[A-Za-z_][A-Za-z_0-9]*=-?\d+")
HOST_ONLY = {"num_warps", "SDUQ", "FRH"}
"""Options the host consumes (a launch option; SDUT's sixteenths; the runtime argument frh):
every other option is one of the kernel's constexprs."""


def _plan(rows=4):
    return host.K2Plan(rows=rows, isa="sm_90", hidden=7168, attn_width=1536, shared2=1536, experts=896,
                       latent=3584, inter=384, inter_up=384, top_k=16, bank_rows=8, eps=1e-5, situ_beta=4.0,
                       situ_linear_beta=25.0, mxfp4=True)


def test_every_option_is_documented_and_every_kernel_option_is_a_constexpr():
    from sgl_k3_mono.k2.triton.kernel import k2_kernel

    params = set(k2_kernel.arg_names)
    for name, opt in TILE_OPTIONS.items():
        assert opt.name == name and len(opt.doc) > 20, name
        assert name in params or name in HOST_ONLY, f"{name}: neither a K2 constexpr nor host-only"


@pytest.mark.parametrize("rows", [1, 2, 4, 8])
@pytest.mark.parametrize("mxfp4,mma", [(True, True), (True, False), (False, False)])
def test_every_key_a_default_block_holds_is_an_option(rows, mxfp4, mma):
    b = tiles.default_tiles(rows, mxfp4=mxfp4, mma=mma)
    fitted = tiles.fit_tiles(tiles.resolve_ksx(b, rows=rows, top_k=16, experts=896, inter=384, grid=132, mma=mma),
                             hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=mma)
    assert set(b) <= set(TILE_OPTIONS) and set(fitted) <= set(TILE_OPTIONS), set(fitted) - set(TILE_OPTIONS)
    assert all(TILE_OPTIONS[k].settable for k in fitted)


def test_launch_args_leave_only_option_keys_in_the_tiles_used():
    import torch

    from sgl_k3_mono.k2.reference import K2Weights

    from k2_cases import dims

    rw = K2Weights.random(dims("k3-small"), seed=0, expert_format="mxfp4").shard(0, 1)
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
    launch = host.K2Launch.build(plan, "cpu", impl="triton")
    bf = torch.bfloat16
    launch.launch_args(rw, torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf), 2,
                       None, torch.empty(2, plan.hidden, dtype=bf))
    assert set(launch.tiles_used) <= set(TILE_OPTIONS), set(launch.tiles_used) - set(TILE_OPTIONS)


def test_set_block_refuses_unknown_and_derived_keys_all_at_once():
    launch = host.K2Launch.build(_plan(), "cpu", impl="triton")
    before = dict(launch.block)
    with pytest.raises(ValueError) as e:
        launch.set_block(XLL2=1, KSX=2, SDUT=3, frobnicate=1)
    msg = str(e.value)
    assert "'XLL2' is no K2 option (did you mean XL2" in msg
    assert "'frobnicate' is no K2 option" in msg and "'SDUT' is derived by the launch" in msg
    assert "Options: BI, BK, " in msg
    assert launch.block == before  # nothing applied
    launch.set_block(KSX=2, SPASS=2)
    assert (launch.block["KSX"], launch.block["SPASS"]) == (2, 2)


def test_fit_tiles_refuses_a_key_no_option_has():
    b = dict(tiles.default_tiles(4, mma=True), XS=1)
    with pytest.raises(ValueError, match="'XS' is no K2 option"):
        tiles.fit_tiles(b, hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    check_overrides(dict(tiles.default_tiles(4, mma=True), SDUT=2, FRH=0), derived_ok=True)


def _blocks_in_tests_and_tools():
    """Every block the tests and device tools ask K2 for: quoted KEY=int,... strings in K2's
    and the forward's tests and the device tools' Python, and bench.sh's k2_sweep blocks."""
    found = []
    quoted = re.compile(r"""["'](""" + BLOCK.pattern + r""")["']""")
    files = [*ROOT.glob("tests/launch/*k2*.py"), *ROOT.glob("tests/forward/*.py"), *ROOT.glob("tools/device/*.py")]
    for p in files:
        found += [(p.name, m.group(1)) for m in quoted.finditer(p.read_text())]
    sh = (ROOT / "tools/device/bench.sh").read_text().replace("\\\n", " ")
    for line in sh.splitlines():
        words = shlex.split(line.split("#")[0]) if "k2_sweep " in line and "()" not in line else []
        if "k2_sweep" in words:
            blocks = (re.sub(r"^[\d,]+:", "", w) for w in words[words.index("k2_sweep") + 5:])  # (ROWS:BLOCK)
            found += [("bench.sh", b) for b in blocks if BLOCK.fullmatch(b)]
    return found


def test_every_block_the_tests_and_tools_ask_for_names_real_options():
    found = _blocks_in_tests_and_tools()
    assert len(found) > 60 and any(f == "bench.sh" for f, _ in found)  # the scan sees them
    bad = [(f, b) for f, b in found if not set(kv.split("=")[0] for kv in b.split(",")) <= set(TILE_OPTIONS)]
    assert not bad, bad
