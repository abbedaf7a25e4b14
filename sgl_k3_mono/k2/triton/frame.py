"""K2's persistent frame on sm_90 (Triton): the phases it walks and how a program enters
and leaves each (the fault-injection hold, the grid barrier, the trace stamps), and the
cross-rank handshake of its two reduces (publish this rank's partials, wait for every
rank's). The waits themselves are runtime/triton_sync's, shared with K1."""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_k3_mono.runtime.triton_sync import grid_barrier, maybe_stall, now_ns, wait_eq

PHASES = ("o_proj", "seam", "front", "route", "experts_up", "experts_down", "combine", "reduce", "latent_up")
TRACE_SLOTS = tl.constexpr(32)
"""int64 slots a program in the phase trace (TRACE): its entry time into each phase, by
number, then its exit time in slot TRACE_EXIT; from slot TRACE_ARRIVE, by phase number,
its arrival at the grid barrier that ends the phase (its own work done: the barrier's
wait is what lies between that and the next entry)."""
TRACE_EXIT = tl.constexpr(len(PHASES))
TRACE_ARRIVE = tl.constexpr(16)
TRACE_SEAM = tl.constexpr(10)
"""From this slot, five stamps inside the split seam (triton_seam.split_seam_persistent's
TRACE_AT): its start, step A done, A's row wait done, step C done, C's wait done."""
LAUNCH_ID = tl.constexpr(1)  # runtime.failure.LAUNCHES.index("k2")
# K2's words of its sync buffer past triton_sync's (host.K2_SYNC_WORDS in all): FR's counts
# of the router's and the shared gate/up's front tiles stored this launch
FRONT_ROUTER, FRONT_SHARED = tl.constexpr(4), tl.constexpr(5)


@triton.jit
def enter(phase, stall_phase, t0, deadline_ns, err_addr, rank, layer, trace_ptr, HIP: tl.constexpr,
          TRACE: tl.constexpr):
    """A persistent launch enters `phase`: the fault-injection hold, and (TRACE) this
    program's timestamp in its row of the trace ([grid, TRACE_SLOTS] int64 ns)."""
    maybe_stall(stall_phase, phase, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, HIP)
    if TRACE:
        tl.store(trace_ptr + tl.program_id(0) * TRACE_SLOTS + phase, now_ns(HIP))


@triton.jit
def barrier(phase, number, sync_ptr, nprog, t0, deadline_ns, err_addr, rank, layer, trace_ptr,
            HIP: tl.constexpr, TRACE: tl.constexpr):
    """The grid barrier that ends `phase`, the launch's `number`-th (the count every
    program has passed: one less than the phase from the experts on under FR, which has
    no routing barrier); (TRACE) this program's arrival stamped first."""
    if TRACE:
        tl.store(trace_ptr + tl.program_id(0) * TRACE_SLOTS + TRACE_ARRIVE + phase, now_ns(HIP))
    grid_barrier(sync_ptr, number, nprog, t0, deadline_ns, err_addr, rank, layer, LAUNCH_ID, phase, HIP)


@triton.jit
def publish(flag_ptr, rank, slot, tag, pid):
    """Program 0, after the grid barrier: this rank's partials of `slot` are ready. The
    system-scope release also publishes the writes the barrier made visible to it."""
    if pid == 0:
        mine = tl.load(flag_ptr + rank).to(tl.pointer_type(tl.int32))
        tl.atomic_xchg(mine + slot, tag, sem="release", scope="sys")


@triton.jit
def wait_peers(flag_ptr, slot, tag, TP: tl.constexpr, t0, deadline_ns, err_addr, rank, layer, phase,
               HIP: tl.constexpr):
    """Every rank's partials of `slot` carry this launch's tag (bounded, system scope)."""
    for q in tl.static_range(TP):
        theirs = tl.load(flag_ptr + q).to(tl.pointer_type(tl.int32))
        wait_eq(theirs + slot, tag, t0, deadline_ns, err_addr, rank, layer, 1, phase, "sys", HIP)
