"""Loud, collective failure of a launch wait.

A wait inside a launch that passes its deadline writes (rank, layer, launch, phase)
into a small record in pinned host memory (the GPU writes it over PCIe with
system-scope stores, so it survives the GPU fault that follows), then faults the
kernel on purpose (a store to address 0). A watcher thread on the host polls the
record; when it is set, it logs the message and ends the process with EXIT_CODE.
Every peer waiting on the failed rank passes its own deadline and does the same, so
every rank stops within deadline + a poll period: no hang.

Fault injection: SGL_K3_MONO_STALL="rank:layer:launch:phase" (launch "k1"/"k2", phase a
name from that launch's PHASES) stalls that rank there until its deadline.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

logger = logging.getLogger("sgl_k3_mono")

EXIT_CODE = 86
"""Process exit status after an expired wait (distinct from Python's 1 and signals)."""
STALL_ENV = "SGL_K3_MONO_STALL"
LAUNCHES = ("k1", "k2")

# record layout (int32): flag, rank, layer, launch, phase, waited_ms
FLAG, RANK, LAYER, LAUNCH, PHASE, WAITED = range(6)
RECORD_WORDS = 8


@dataclass(frozen=True)
class Stall:
    """Where fault injection stalls: this rank, layer, launch and phase."""

    rank: int
    layer: int
    launch: str
    phase: str

    @classmethod
    def from_env(cls, env: Optional[dict] = None) -> Optional["Stall"]:
        text = (env if env is not None else os.environ).get(STALL_ENV, "").strip()
        if not text:
            return None
        parts = text.split(":")
        if len(parts) != 4 or parts[2] not in LAUNCHES:
            raise ValueError(f"{STALL_ENV}={text!r}: expected rank:layer:launch:phase with launch in {LAUNCHES}")
        return cls(int(parts[0]), int(parts[1]), parts[2], parts[3])

    def phase_index(self, rank: int, layer: int, launch: str, phases: Sequence[str]) -> int:
        """The phase index this launch stalls at, or -1."""
        if (self.rank, self.layer, self.launch) != (rank, layer, launch):
            return -1
        if self.phase not in phases:
            raise ValueError(f"{STALL_ENV}: {launch} has no phase {self.phase!r}; phases: {list(phases)}")
        return list(phases).index(self.phase)


class ErrorRecord:
    """The pinned-host record a failed wait writes, and the thread that watches it."""

    def __init__(self, phases: dict[str, Sequence[str]], poll_s: float = 0.05):
        self.host = torch.zeros(RECORD_WORDS, dtype=torch.int32, pin_memory=torch.cuda.is_available())
        self.phases = {k: list(v) for k, v in phases.items()}
        self.poll_s = poll_s
        self._watcher: Optional[threading.Thread] = None

    @property
    def address(self) -> int:
        """The address kernels write (pinned memory is mapped at the same address on the GPU)."""
        return self.host.data_ptr()

    def message(self) -> Optional[str]:
        r = self.host.tolist()
        if r[FLAG] == 0:
            return None
        launch = LAUNCHES[r[LAUNCH]] if 0 <= r[LAUNCH] < len(LAUNCHES) else f"launch#{r[LAUNCH]}"
        names = self.phases.get(launch, [])
        phase = names[r[PHASE]] if 0 <= r[PHASE] < len(names) else f"phase#{r[PHASE]}"
        return (f"sgl-k3-mono: rank {r[RANK]}, layer {r[LAYER]}, launch {launch.upper()}, phase {phase!r}: "
                f"a wait passed its deadline after {r[WAITED]} ms; stopping this process "
                f"(every rank waiting on it stops the same way)")

    def watch(self, on_failure=None) -> None:
        """Start the watcher thread: on a recorded failure, log and exit the process."""
        if self._watcher is not None:
            return

        def loop():
            while True:
                msg = self.message()
                if msg is not None:
                    logger.error(msg)
                    print(msg, file=sys.stderr, flush=True)
                    (on_failure or (lambda: os._exit(EXIT_CODE)))()
                    return
                time.sleep(self.poll_s)

        self._watcher = threading.Thread(target=loop, name="sgl-k3-mono-watch", daemon=True)
        self._watcher.start()


def deadline_ns(deadline_s: float) -> int:
    return int(deadline_s * 1e9)
