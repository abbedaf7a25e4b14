"""K2's mma_fp4 decode and fragment layout, checked on the CPU: the inline PTX the kernel
issues (the module's own strings) runs through a small 32-lane emulator of the handful of
instructions it uses, and one word's two m16n8k16 mmas must equal the product the module
docstring promises: thread (g, c)'s code i of its word against code i of x row n's
thread (n, c), with e2m1 values and 2^(S-127) scales. The GPU tests check the whole launch;
this pins the bit-level claims (pair placement, masks, prmt selectors, fragment order)."""

from __future__ import annotations

import numpy as np
import pytest

from support.ptx_emu import E2M1, bf16_value, f32_bits, f32_value, run_ptx, to_bf16_bits

mma_fp4 = pytest.importorskip("sgl_k3_mono.k2.triton.mma_fp4")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_word_of_both_rows_against_the_promised_product(seed):
    rng = np.random.default_rng(seed)
    lane = np.arange(32)
    g, c = lane // 4, lane % 4
    wa = rng.integers(0, 2 ** 32, 32, dtype=np.int64)  # row g's 8 codes of this word
    wb = rng.integers(0, 2 ** 32, 32, dtype=np.int64)  # row g + 8's
    sa = rng.integers(100, 129, 32)  # ue8m0 codes, up to the path's 128
    sb = rng.integers(100, 129, 32)
    xe = rng.standard_normal((32, 8)).astype(np.float32)  # the lane's 8 x elements (bf16)
    xbits = to_bf16_bits(xe).astype(np.int64)
    xw = [xbits[:, 2 * i] | (xbits[:, 2 * i + 1] << 16) for i in range(4)]

    frag = run_ptx(mma_fp4._BFRAG.value, [0, 0, 0, 0, *xw])
    mult = lambda s: ((s + 126) << 7) * 65537  # noqa: E731  (the kernel's _scales)
    acc0 = rng.standard_normal((4, 32))
    out = run_ptx(mma_fp4._WORD_MMA.value, [0, 0, 0, 0, wa, wb, mult(sa), mult(sb),
                                            *(frag[f"${i}"] for i in range(4)), *f32_bits(acc0)])

    def codes(words, s):
        nib = (words[:, None] >> (4 * np.arange(8))) & 15
        return E2M1[nib] * np.exp2(s.astype(np.float64) - 127)[:, None]  # [lane, code i]

    xv = bf16_value(xbits)  # [lane, i]
    for half, (words, s) in enumerate(((wa, sa), (wb, sb))):
        w = codes(words, s)
        # D[row, n] = sum over c, i of W[(row, c), i] * X[(n, c), i]
        want = np.einsum("gci,nci->gn", w.reshape(8, 4, 8), xv.reshape(8, 4, 8))
        for j in range(2):  # columns 2c, 2c + 1
            got = f32_value(out[f"${2 * half + j}"])
            ref = acc0[2 * half + j].astype(np.float32) + want[g, 2 * c + j]
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_the_decode_is_exact_for_every_code_pair():
    """Each pair (nibbles n, n + 4) of a word lands as e2m1 x 2^-126 in a bf16x2 lane pair:
    all 256 pairs of every position, scale 1 (S = 127)."""
    lane = np.arange(256)
    for n in range(4):
        words = ((lane & 15) << (4 * n)) | ((lane >> 4) << (4 * n + 16))
        one = ((127 + 126) << 7) * 65537  # 2^(S-1) with S = 127: multiplies by 2^126
        # decode through the kernel's pair code alone, no mma
        asm = mma_fp4._DECODE_PAIRS.format(w="$1", p="p", s="$2")
        for base in range(0, 256, 32):
            regs = run_ptx(asm, [0, words[base:base + 32], np.full(32, one)])
            v = regs[f"p{n}"]
            np.testing.assert_array_equal(bf16_value(v & 0xFFFF), E2M1[lane[base:base + 32] & 15])
            np.testing.assert_array_equal(bf16_value(v >> 16), E2M1[lane[base:base + 32] >> 4])
