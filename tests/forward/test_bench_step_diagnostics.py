"""`bench step --order-check` and `--kernels` on the CPU, with a fake step and timer: the
pairs time ours with the launches on and the bare step with them off, zero the pools before
each timing of the zeroed pairs only, and say how far the pools grew; the kernel list sums
its columns. (Their GPU runs: docs/evidence/step-sm90.md, forty-eighth session.)"""

from __future__ import annotations

import types

import torch

from sgl_k3_mono.forward import bench, launches


def _state():
    kda = {0: types.SimpleNamespace(conv_pool=torch.ones(2, 3), ssm_pool=torch.full((2, 2), 4.0))}
    return types.SimpleNamespace(kda=kda, mla={3: torch.ones(2, 5)})


def test_order_pairs_time_ours_with_the_launches_and_bare_without_and_zero_only_when_asked():
    state, lines, seen = _state(), [], []
    k1_on = launches.k1

    def step():  # a step that "runs" K1 when the launches are on: the pools grow
        on = launches.k1 is k1_on
        if on:
            state.kda[0].ssm_pool.add_(1.0)
        return on

    def timed(fn):
        on = fn()
        seen.append((on, float(state.kda[0].ssm_pool.abs().amax()), float(state.mla[3].abs().amax())))
        return 1000.0 if on else 400.0

    bench._order_pairs(lambda *a, **k: lines.append(a[0]), 1, "right after ours", step, timed, state)
    assert launches.k1 is k1_on  # restored
    assert [s[0] for s in seen] == [True, False] * 4  # ours (launches on), then bare (off), four pairs
    # the kept pairs see the pools grow (4 -> 5 -> 6); the zeroed ones see ours start from zero
    assert [s[1] for s in seen[:4]] == [5.0, 5.0, 6.0, 6.0]
    assert [s[1] for s in seen[4:]] == [1.0, 0.0, 1.0, 0.0] and seen[4][2] == 0.0
    assert len(lines) == 4 and all("ours   1000.0 bare    400.0 launches    600.0" in x for x in lines), lines
    assert lines[0].startswith("order M 1 right after ours (1)") and "max |ssm| 4, non-finite 0" in lines[0]
    assert lines[2].startswith("order M 1 right after ours, pools zeroed (1)"), lines


def test_the_kernel_list_prints_each_kernel_and_the_sums():
    lines = []
    bench._print_kernels(lines.append, 2, [("k1_kernel", 50.0, 0.5), ("k2_kernel", 140.0, 0.25)])
    assert lines[1].split()[3:] == ["0", "50.0", "0.5", "k1_kernel"], lines
    assert lines[-1].split()[3:] == ["sum", "190.0", "0.8"], lines


def test_a_missing_profiler_leaves_the_table_alone(capsys):
    def broken(fn, **k):
        raise RuntimeError("no CUPTI")

    import sgl_k3_mono.timing as timing

    real = timing.graph_kernels_us
    timing.graph_kernels_us = broken
    try:
        assert bench._kernels(print, lambda: None) is None
    finally:
        timing.graph_kernels_us = real
    assert "no kernel list (RuntimeError: no CUPTI)" in capsys.readouterr().out


def test_k2_block_is_parsed_as_bench_k2_spells_it():
    """`bench step --k2-block` amends the step's K2 launches with options named as bench k2's --block names them
    (options.check_overrides then refuses unknown keys: test_k2_options.py)."""
    from sgl_k3_mono.k2.options import check_overrides

    assert bench._parse_block("XL2B=256,XL2BD=128") == {"XL2B": 256, "XL2BD": 128}
    assert bench._parse_block("") == {}
    check_overrides(bench._parse_block("XL2B=256,XL2BD=128"))
