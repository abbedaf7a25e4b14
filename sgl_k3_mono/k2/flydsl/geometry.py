"""The FlyDSL K2 tile's geometry, in plain Python (no FlyDSL import): the host side, the
tests and the device code (tile.py) share these numbers and index maps.

Why a separate module: FlyDSL's MLIR Python bindings abort a process that has already
loaded another MLIR binding of the same kind (NVIDIA's CuTe DSL, which SGLang's CUDA
install brings), so host code must not import FlyDSL just to check a shape.
"""

from __future__ import annotations

WAVES = 4
THREADS = 64 * WAVES
BN = 16
"""Weight rows a tile (one 16 x 16 MFMA tile)."""
KC = 128
"""Input columns a wave takes per chunk: 4 MFMAs of 32."""
LDS_FLOATS = WAVES * THREADS
"""The per-wave partial tiles: 4 KB."""


def check_k(k: int, what: str) -> None:
    """The tile's divisibility, said before tracing (a traced kernel would read past rows)."""
    if k % (WAVES * KC):
        raise ValueError(f"K2 FlyDSL {what}: input width {k} must be a multiple of {WAVES * KC}")


def out_row(tid):
    """Weight row (within the tile) of the result thread `tid` holds after the LDS sum."""
    return (tid // 64) * 4 + tid % 4


def out_col(tid):
    """Step row of the result thread `tid` holds after the LDS sum."""
    return (tid // 4) % 16


def first_tile(bid, nblk, start):
    """The first tile index >= start this workgroup takes when the grid walks tiles
    round-robin from 0 (so consecutive segments share one balanced walk)."""
    return start + ((bid - start) % nblk + nblk) % nblk
