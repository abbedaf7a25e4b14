"""The index arithmetic of the FlyDSL MFMA tile (k2/flydsl/tile.py, geometry.py), replayed in plain
torch: which input columns each lane feeds each MFMA, the MFMA's documented operand and
result layout (16x16x32 bf16, wave64), the LDS sum and `out_row` / `out_col`. A wrong
permutation or output mapping gives a wrong product here. The kernel itself has never
run (no gfx950 GPU); this checks the arithmetic it is written from."""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.k2.flydsl import geometry as tile  # the numbers tile.py's device code uses


def _mfma_16x16x32(a_lanes: torch.Tensor, b_lanes: torch.Tensor) -> torch.Tensor:
    """a_lanes, b_lanes [64, 8]: lane l feeds row (A) / column (B) l % 16 with the 8
    K-values 8 (l // 16) .. +8. Returns the per-lane result [64, 4]: value v of lane l is
    D[4 (l // 16) + v][l % 16]."""
    A = torch.zeros(16, 32)
    B = torch.zeros(32, 16)
    for lane in range(64):
        g = lane // 16
        A[lane % 16, 8 * g:8 * g + 8] = a_lanes[lane]
        B[8 * g:8 * g + 8, lane % 16] = b_lanes[lane]
    D = A @ B
    return torch.stack([D[4 * (ln // 16):4 * (ln // 16) + 4, ln % 16] for ln in range(64)])


@pytest.mark.parametrize("K", [512, 1536])
def test_tile_sum_is_the_product(K):
    g = torch.Generator().manual_seed(K)
    W = torch.randn(16, K, generator=g)
    X = torch.randn(16, K, generator=g)
    k_wave = K // tile.WAVES
    red = torch.zeros(tile.LDS_FLOATS)
    for wave in range(tile.WAVES):
        acc = torch.zeros(64, 4)
        for c in range(k_wave // tile.KC):
            for j in range(4):
                ks = [wave * k_wave + (ln // 16) * 32 + c * tile.KC + j * 8 for ln in range(64)]
                a = torch.stack([W[ln % 16, k:k + 8] for ln, k in enumerate(ks)])
                b = torch.stack([X[ln % 16, k:k + 8] for ln, k in enumerate(ks)])
                acc += _mfma_16x16x32(a, b)
        for ln in range(64):  # generic_store(red + wave*THREADS + lane*4, acc)
            red[wave * tile.THREADS + ln * 4:wave * tile.THREADS + ln * 4 + 4] = acc[ln]
    want = W @ X.T  # [weight row, step row]
    for t in range(tile.THREADS):
        total = sum(red[w * tile.THREADS + t] for w in range(tile.WAVES))
        assert torch.allclose(total, want[tile.out_row(t), tile.out_col(t)], rtol=1e-4, atol=1e-3), t
    # every (row, column) of the tile is produced by exactly one thread
    assert len({(tile.out_row(t), tile.out_col(t)) for t in range(tile.THREADS)}) == 256


def test_first_tile_walks_round_robin():
    """Segments [a, b) walked from first_tile(bid, n, a) in steps of n together give each
    tile exactly once, and the same workgroup as one walk from 0 would."""
    n, bounds = 7, (0, 96, 152, 376)
    owner = {}
    for bid in range(n):
        for a, b in zip(bounds, bounds[1:]):
            for t in range(tile.first_tile(bid, n, a), b, n):
                assert t not in owner
                owner[t] = bid
    assert owner == {t: t % n for t in range(376)}
