"""K2's in-launch traces kept whole, and read program by program on any machine.

`bench k2 --trace --trace-out DIR` saves every traced launch's [grid, TRACE_SLOTS] stamps
(triton/frame.py: each program's entry into each phase, its arrival at the barrier that
ends it, its exit, the seam's links) to DIR/k2-traces-<block>.pt, one file a block with
every format and row count. The benchmark prints medians; this reads the spread behind
them after the device call, on the CPU:

    python -m sgl_k3_mono.k2.trace_report DIR/k2-traces-default.pt [--slowest 5]

For each phase: a program's own work (entry to its barrier arrival, the median over the
launches), its quantiles over the grid and the slowest programs; and its wait at the
barrier (arrival to the next phase's entry).
"""

from __future__ import annotations

import argparse
from typing import Optional

import torch


def save(path: str, traces: dict, *, block: dict, grid: int) -> None:
    """traces: {(fmt, rows): [runs, grid, slots] int64 ns}."""
    torch.save({"block": dict(block), "grid": grid,
                "traces": {f"{fmt}/M{rows}": t for (fmt, rows), t in traces.items()}}, path)


def phase_spans(t: torch.Tensor) -> dict:
    """[runs, grid, slots] -> {phase: (work [grid] us, wait [grid] us or None)}, each the
    median over the runs, for the phases every program entered."""
    from sgl_k3_mono.k2.triton.frame import PHASES, TRACE_ARRIVE, TRACE_EXIT

    ran = [p for p in range(len(PHASES)) if bool((t[:, :, p] >= 0).all())]
    out = {}
    for i, p in enumerate(ran):
        end = TRACE_EXIT.value if p == len(PHASES) - 1 else TRACE_ARRIVE.value + p
        if not bool((t[:, :, end] >= 0).all()):
            continue
        work = ((t[:, :, end] - t[:, :, p]).double() / 1e3).median(dim=0).values
        wait = None
        if i + 1 < len(ran) and end != TRACE_EXIT.value:
            wait = ((t[:, :, ran[i + 1]] - t[:, :, end]).double() / 1e3).median(dim=0).values
        out[PHASES[p]] = (work, wait)
    return out


def _q(v: torch.Tensor) -> str:
    qs = torch.quantile(v, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=v.dtype))
    return "/".join(f"{x:.1f}" for x in qs.tolist())


def report(t: torch.Tensor, slowest: int = 5) -> list[str]:
    """Lines: per phase, work quantiles min/p10/p50/p90/max over the programs, the slowest
    programs (program:us), and the barrier wait's quantiles."""
    lines = []
    for name, (work, wait) in phase_spans(t).items():
        top = torch.argsort(work, descending=True)[:slowest].tolist()
        line = (f"{name:13s} work {_q(work)}  slowest " + " ".join(f"{g}:{work[g]:.1f}" for g in top))
        if wait is not None:
            line += f"  wait {_q(wait)}"
        lines.append(line)
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sgl_k3_mono.k2.trace_report")
    ap.add_argument("file")
    ap.add_argument("--slowest", type=int, default=5)
    a = ap.parse_args(argv)
    saved = torch.load(a.file)
    print(f"block {saved['block'] or 'default'}, grid {saved['grid']}; us a program, the median of the launches; "
          "quantiles min/p10/p50/p90/max")
    for key, t in saved["traces"].items():
        print(f"== {key} ({t.shape[0]} launches)")
        for line in report(t, a.slowest):
            print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
