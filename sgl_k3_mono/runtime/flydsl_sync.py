"""Device-side synchronisation for the FlyDSL launches (gfx950), shared by K1 and K2:
the same semantics as triton_sync.py, so the host side (failure.py's error record,
the sync words, the stall switch) is the same for both device codes.

- Every wait polls with acquire loads at the wait's scope and reads the constant-rate
  timer (s_memrealtime, 100 MHz); past the deadline it records (rank, layer, launch,
  phase, waited ms) in the pinned-host error record with system-scope atomics and
  traps (s_trap 2), so the process stops instead of hanging.
- The grid barrier: one arrival a workgroup (agent-scope release add), a bounded
  acquire spin, workgroup barriers either side. `depart` resets the words and advances
  the epoch once every workgroup is past the last barrier.
- Fault injection: workgroup 0 of the chosen rank/layer/launch holds at a phase until
  its deadline, as a hung peer would.

These are traced helpers: called from inside an @flyc.kernel, they emit IR. Python
`if`/`while` on device values inside them need FlyDSL's AST rewrite, which `_device`
applies (the kernel body gets it from @flyc.kernel). Only FlyDSL imports this module.
"""

from __future__ import annotations

import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import llvm as _llvm
from flydsl.compiler.ast_rewriter import ASTRewriter

ARRIVE, DEPART, EPOCH = 0, 1, 2
"""int32 words of a launch's sync buffer (as in triton_sync.py)."""
AGENT = fx.rocdl.SyncScope.Agent
SYSTEM = None
"""FlyDSL's system scope: the peers' buffers and the pinned-host record need it."""
ACQ, REL, ACQREL, RELAXED = (fx.AtomicOrdering.Acquire, fx.AtomicOrdering.Release, fx.AtomicOrdering.AcqRel,
                             fx.AtomicOrdering.Monotonic)


def _device(fn):
    """FlyDSL's control-flow rewrite for a helper defined outside a kernel body."""
    return ASTRewriter.transform(fn)


def now_ns():
    """Nanoseconds from the 100 MHz constant-rate counter (s_memrealtime; the wait
    makes the scalar load complete before the value is used)."""
    ticks = _llvm.inline_asm(ir.IntegerType.get_signless(64), [], "s_memrealtime $0\ns_waitcnt lgkmcnt(0)", "=s",
                             has_side_effects=True)
    return fx.Int64(ticks) * 10


def trap():
    """A deliberate GPU fault: HIP reports it and the process ends (never a hang).
    Inline asm, so no optimiser can drop it as it may a store to null."""
    _llvm.inline_asm(ir.IntegerType.get_signless(32), [], "s_trap 2", "=v", has_side_effects=True)


@_device
def fail(rec, rank, layer, launch_id, phase, waited_ns):
    """Record the expired wait (first writer wins) in the pinned-host record, then trap.
    `rec` is an int32 pointer to failure.ErrorRecord's words: [flag, rank, layer,
    launch, phase, waited ms, claim]."""
    old, won = fx.atomic_cas(rec + 6, fx.Int32(0), fx.Int32(1), syncscope=SYSTEM)
    if old == 0:
        fx.atomic_xchg(rec + 1, fx.Int32(rank), syncscope=SYSTEM, ordering=RELAXED)
        fx.atomic_xchg(rec + 2, fx.Int32(layer), syncscope=SYSTEM, ordering=RELAXED)
        fx.atomic_xchg(rec + 3, fx.Int32(launch_id), syncscope=SYSTEM, ordering=RELAXED)
        fx.atomic_xchg(rec + 4, fx.Int32(phase), syncscope=SYSTEM, ordering=RELAXED)
        fx.atomic_xchg(rec + 5, fx.Int32(waited_ns // 1000000), syncscope=SYSTEM, ordering=RELAXED)
        fx.atomic_xchg(rec, fx.Int32(1), syncscope=SYSTEM, ordering=REL)
    trap()


@_device
def wait_geq(ptr, target, t0, deadline_ns, rec, rank, layer, launch_id, phase, scope):
    """One thread: spin until *ptr >= target (acquire at `scope`), bounded by the deadline."""
    seen = fx.generic_load(ptr, memory_order=ACQ, syncscope=scope)
    while seen < target:
        waited = now_ns() - t0
        if waited > deadline_ns:
            fail(rec, rank, layer, launch_id, phase, waited)
        fx.rocdl.s_sleep(1)
        seen = fx.generic_load(ptr, memory_order=ACQ, syncscope=scope)


@_device
def wait_eq(ptr, tag, t0, deadline_ns, rec, rank, layer, launch_id, phase, scope):
    """One thread: spin until *ptr == tag (acquire at `scope`): an epoch-tagged slot is ready."""
    seen = fx.generic_load(ptr, memory_order=ACQ, syncscope=scope)
    while seen != tag:
        waited = now_ns() - t0
        if waited > deadline_ns:
            fail(rec, rank, layer, launch_id, phase, waited)
        fx.rocdl.s_sleep(1)
        seen = fx.generic_load(ptr, memory_order=ACQ, syncscope=scope)


@_device
def grid_barrier(sync, index, nblk, t0, deadline_ns, rec, rank, layer, launch_id, phase):
    """Barrier `index` (0, 1, ...) of this launch over all co-resident workgroups."""
    tid = fx.thread_idx.x
    fx.gpu.barrier()
    if tid == 0:
        fx.atomic_add(sync + ARRIVE, fx.Int32(1), syncscope=AGENT, ordering=REL)
        wait_geq(sync + ARRIVE, (index + 1) * nblk, t0, deadline_ns, rec, rank, layer, launch_id, phase, AGENT)
    fx.gpu.barrier()


@_device
def depart(sync, nblk):
    """After the launch's last barrier: the last workgroup out resets the counters and
    advances the epoch, so the next launch on this buffer starts from zero (stream order)."""
    tid = fx.thread_idx.x
    fx.gpu.barrier()
    if tid == 0:
        old = fx.atomic_add(sync + DEPART, fx.Int32(1), syncscope=AGENT, ordering=ACQREL)
        if old == nblk - 1:
            fx.atomic_xchg(sync + ARRIVE, fx.Int32(0), syncscope=AGENT, ordering=RELAXED)
            fx.atomic_xchg(sync + DEPART, fx.Int32(0), syncscope=AGENT, ordering=RELAXED)
            fx.atomic_add(sync + EPOCH, fx.Int32(1), syncscope=AGENT, ordering=REL)


@_device
def maybe_stall(stall_phase, phase, t0, deadline_ns, rec, rank, layer, launch_id):
    """Fault injection: thread 0 of workgroup 0 holds at `phase` until the deadline."""
    if stall_phase == phase:
        if fx.block_idx.x == 0:
            if fx.thread_idx.x == 0:
                waited = now_ns() - t0
                while waited <= deadline_ns:
                    fx.rocdl.s_sleep(8)
                    waited = now_ns() - t0
                fail(rec, rank, layer, launch_id, phase, waited)
    fx.gpu.barrier()


@_device
def publish(flags, i32_ptr, rank, slot, tag):
    """Workgroup 0, thread 0, after a grid barrier: this rank's partials of `slot` are
    ready. The system-scope release (its fence before the swap) also publishes the
    writes the barrier made visible to this thread, so the peers' reads see them."""
    if fx.block_idx.x == 0:
        if fx.thread_idx.x == 0:
            mine = fx.inttoptr(i32_ptr.type, fx.Int64(fx.ptr_load(fx.get_iter(flags) + rank)))
            fx.atomic_xchg(mine + slot, tag, syncscope=SYSTEM, ordering=REL)


@_device
def wait_peers(active, flags, i32_ptr, tp, slot, tag, t0, deadline_ns, rec, rank, layer, launch_id, phase):
    """Thread 0 of an `active` workgroup waits (bounded, system-scope acquire) until
    every rank's tag of `slot` is `tag`; the workgroup barrier then holds the other
    threads until it has."""
    if (fx.thread_idx.x == 0) & active:
        for q in fx.range_constexpr(tp):
            theirs = fx.inttoptr(i32_ptr.type, fx.Int64(fx.ptr_load(fx.get_iter(flags) + q)))
            wait_eq(theirs + slot, tag, t0, deadline_ns, rec, rank, layer, launch_id, phase, SYSTEM)
    fx.gpu.barrier()


FRAME_WORDS = 8
"""Int64 words of a wave's frame in LDS (six used, padded to 8)."""


class PhaseFrame:
    """The persistent frame around a launch's phases (plain Python at trace time: it
    decides from the barrier plan which barriers and stall points to emit).

    The values only the waits and the stall switch read (start time, deadline, error
    record, rank, layer, stall phase) live in LDS, one copy a wave written and read by
    that wave: held in scalar registers they would be live across every phase, and the
    persistent launch runs out of SGPRs (spills). The waits are off the hot path.
    `words`: LDS for WAVES * FRAME_WORDS int64; `plan[name]["barrier"]`: whether phase
    `name` ends in a grid barrier."""

    def __init__(self, plan, sync_p, words, deadline_ns, err_addr, rank, layer, stall, *, launch_id, phases):
        self.plan, self.sync_p, self.launch_id, self.phases = plan, sync_p, launch_id, phases
        self.barriers = 0  # grid barrier i waits for (i + 1) arrivals a workgroup
        self.at = words.ptr + (fx.thread_idx.x // 64) * FRAME_WORDS
        for i, v in enumerate((now_ns(), deadline_ns, err_addr, rank, layer, stall)):
            fx.generic_store(self.at + i, fx.Int64(v))

    def _word(self, i):
        return fx.Int64(fx.ptr_load(self.at + i))

    @property
    def rank(self):
        return fx.Int32(self._word(3))

    def wait_args(self):
        """(t0, deadline, record, rank, layer) for a wait."""
        rec = fx.inttoptr(self.sync_p.type, self._word(2))
        return self._word(0), self._word(1), rec, self.rank, fx.Int32(self._word(4))

    def start(self, name):
        maybe_stall(fx.Int32(self._word(5)), self.phases.index(name), *self.wait_args(), self.launch_id)

    def end(self, name):
        """After phase `name`: the grid barrier where the plan has one."""
        if self.plan[name]["barrier"]:
            grid_barrier(self.sync_p, self.barriers, fx.grid_dim.x, *self.wait_args(), self.launch_id,
                         self.phases.index(name))
            self.barriers += 1
