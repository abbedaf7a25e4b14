"""K2's traces kept whole (bench k2 --trace-out) and read program by program on the CPU
(sgl_k3_mono/k2/trace_report.py), on a synthetic trace whose answer is known."""

from __future__ import annotations

import torch

from sgl_k3_mono.k2 import trace_report
from sgl_k3_mono.k2.triton.frame import PHASES, TRACE_ARRIVE, TRACE_EXIT, TRACE_SLOTS


def _trace(runs=3, grid=8):
    """Phases 0 (o_proj), 1 (seam), 2 (front) and 8 (latent_up) ran (FR: no route phase; no
    experts, for brevity). Program g's front takes 10 + g us, every other phase 5 us;
    after its arrival each program waits until the slowest has arrived."""
    t = torch.full((runs, grid, TRACE_SLOTS.value), -1, dtype=torch.int64)
    for r in range(runs):
        start = 1_000_000 * (r + 1)
        for g in range(grid):
            now = start
            for p in (0, 1, 2, 8):
                t[r, g, p] = now
                work = (10 + g if p == 2 else 5) * 1000
                end = TRACE_EXIT.value if p == len(PHASES) - 1 else TRACE_ARRIVE.value + p
                t[r, g, end] = now + work
                longest = (10 + grid - 1 if p == 2 else 5) * 1000
                now = now + longest + 500  # the barrier releases 0.5 us after the last arrival
    return t


def test_phase_spans_are_each_programs_work_and_barrier_wait():
    spans = trace_report.phase_spans(_trace())
    assert list(spans) == ["o_proj", "seam", "front", "latent_up"]
    work, wait = spans["front"]
    assert torch.allclose(work, torch.arange(8, dtype=torch.float64) + 10)
    assert torch.allclose(wait, 7 - torch.arange(8, dtype=torch.float64) + 0.5)  # the pole waits 0.5 us
    assert spans["latent_up"][1] is None  # the last phase ends at the exit, no barrier


def test_saved_traces_read_back_and_report_the_slowest_programs(tmp_path, capsys):
    path = str(tmp_path / "k2-traces-default.pt")
    trace_report.save(path, {("mxfp4", 1): _trace(), ("mxfp4", 8): _trace(grid=4)}, block={}, grid=8)
    assert trace_report.main([path, "--slowest", "2"]) == 0
    out = capsys.readouterr().out
    assert "== mxfp4/M1 (3 launches)" in out and "== mxfp4/M8 (3 launches)" in out
    front = [line for line in out.splitlines() if line.strip().startswith("front")]
    assert "work 10.0/10.7/13.5/16.3/17.0" in front[0] and "slowest 7:17.0 6:16.0" in front[0]
    assert "wait 0.5/" in front[0]
