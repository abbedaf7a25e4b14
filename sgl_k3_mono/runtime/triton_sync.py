"""Device-side synchronisation for the Triton launches: bounded waits, the grid
barrier, the failure path and fault injection. Shared by K1 and K2.

Every wait polls with acquire loads and reads the GPU's global timer; past the
deadline it records (rank, layer, launch, phase, waited ms) in the pinned-host error
record (see failure.py) and faults on purpose, so the process stops instead of hanging.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import cuda as _cuda

try:  # the HIP timer (s_memrealtime, 100 MHz) for the gfx950 build of the Triton launches
    from triton.language.extra.hip import memrealtime as _memrealtime
except ImportError:  # an older Triton: the HIP build then fails to compile, loudly
    _memrealtime = None

# sync buffer layout (int32 words, one buffer per launch slot)
ARRIVE, DEPART, EPOCH = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
TALLY = tl.constexpr(3)
"""A count the launch keeps for itself (K1's gate tiles under GL), back to 0 at `depart`
when the launch asks (CLEAR_TALLY)."""
SYNC_WORDS = 4


@triton.jit
def now_ns(HIP: tl.constexpr = False):
    """Nanoseconds from the GPU's constant-rate timer (globaltimer; s_memrealtime on AMD)."""
    if HIP:
        return _memrealtime().to(tl.int64) * 10
    else:
        return _cuda.globaltimer()


@triton.jit
def fail(err_addr, rank, layer, launch_id, phase, waited_ns):
    """Record the expired wait (first writer wins) in host memory, then fault."""
    rec = err_addr.to(tl.pointer_type(tl.int32))
    if tl.atomic_cas(rec + 6, 0, 1, sem="relaxed", scope="sys") == 0:
        tl.atomic_xchg(rec + 1, rank, sem="relaxed", scope="sys")
        tl.atomic_xchg(rec + 2, layer, sem="relaxed", scope="sys")
        tl.atomic_xchg(rec + 3, launch_id, sem="relaxed", scope="sys")
        tl.atomic_xchg(rec + 4, phase, sem="relaxed", scope="sys")
        tl.atomic_xchg(rec + 5, (waited_ns // 1000000).to(tl.int32), sem="relaxed", scope="sys")
        tl.atomic_xchg(rec, 1, sem="release", scope="sys")
    # a store to address 0: the GPU faults, and no wrong number leaves this launch
    null = (err_addr * 0).to(tl.pointer_type(tl.int32))
    tl.store(null, 1)


@triton.jit
def wait_geq(ptr, target, t0, deadline_ns, err_addr, rank, layer, launch_id, phase, SCOPE: tl.constexpr,
             HIP: tl.constexpr = False):
    """Spin until *ptr >= target (acquire), bounded by the deadline."""
    seen = tl.atomic_add(ptr, 0, sem="acquire", scope=SCOPE)
    while seen < target:
        waited = now_ns(HIP) - t0
        if waited > deadline_ns:
            fail(err_addr, rank, layer, launch_id, phase, waited)
            seen = target
        else:
            seen = tl.atomic_add(ptr, 0, sem="acquire", scope=SCOPE)


@triton.jit
def wait_eq(ptr, tag, t0, deadline_ns, err_addr, rank, layer, launch_id, phase, SCOPE: tl.constexpr,
            HIP: tl.constexpr = False):
    """Spin until *ptr == tag (acquire): an epoch-tagged slot is ready."""
    seen = tl.atomic_add(ptr, 0, sem="acquire", scope=SCOPE)
    while seen != tag:
        waited = now_ns(HIP) - t0
        if waited > deadline_ns:
            fail(err_addr, rank, layer, launch_id, phase, waited)
            seen = tag
        else:
            seen = tl.atomic_add(ptr, 0, sem="acquire", scope=SCOPE)


@triton.jit
def arrive(sync_ptr):
    """This program's arrival at the launch's next grid barrier, with its writes released,
    without waiting there: for a program whose next work needs nothing the barrier guards."""
    tl.debug_barrier()
    tl.atomic_add(sync_ptr + ARRIVE, 1, sem="release", scope="gpu")


@triton.jit
def grid_barrier(sync_ptr, index, nprog, t0, deadline_ns, err_addr, rank, layer, launch_id, phase,
                 HIP: tl.constexpr = False):
    """Barrier `index` (0, 1, ...) of this launch over all co-resident programs."""
    arrive(sync_ptr)
    wait_geq(sync_ptr + ARRIVE, (index + 1) * nprog, t0, deadline_ns, err_addr, rank, layer, launch_id, phase,
             "gpu", HIP)
    tl.debug_barrier()


@triton.jit
def depart(sync_ptr, nprog, CLEAR_TALLY: tl.constexpr = False):
    """After the launch's last barrier: the last program out resets the counters and
    advances the epoch, so the next launch on this slot starts from zero (stream order)."""
    tl.debug_barrier()
    if tl.atomic_add(sync_ptr + DEPART, 1, sem="acq_rel", scope="gpu") == nprog - 1:
        if CLEAR_TALLY:  # every program is past its last wait on it
            tl.atomic_xchg(sync_ptr + TALLY, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(sync_ptr + ARRIVE, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(sync_ptr + DEPART, 0, sem="relaxed", scope="gpu")
        tl.atomic_add(sync_ptr + EPOCH, 1, sem="release", scope="gpu")


@triton.jit
def maybe_stall(stall_phase, phase, t0, deadline_ns, err_addr, rank, layer, launch_id, HIP: tl.constexpr = False):
    """Fault injection: program 0 of the chosen rank/layer/launch holds at `phase`
    until its deadline, as a hung peer would."""
    if stall_phase == phase:
        if tl.program_id(0) == 0:
            waited = now_ns(HIP) - t0
            while waited <= deadline_ns:
                waited = now_ns(HIP) - t0
            fail(err_addr, rank, layer, launch_id, phase, waited)
