"""K2's mma_fp4 decode and fragment layout, checked on the CPU: the inline PTX the kernel
issues (the module's own strings) runs through a small 32-lane emulator of the handful of
instructions it uses, and one word's two m16n8k16 mmas must equal the product the module
docstring promises: thread (g, c)'s code i of its word against code i of x row n's
thread (n, c), with e2m1 values and 2^(S-127) scales. The GPU tests check the whole launch;
this pins the bit-level claims (pair placement, masks, prmt selectors, fragment order)."""

from __future__ import annotations

import re

import numpy as np
import pytest

mma_fp4 = pytest.importorskip("sgl_k3_mono.k2.triton.mma_fp4")

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])
M32 = 0xFFFFFFFF


def _bf16(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


def _to_bf16_bits(x):
    """Round-to-nearest-even float -> bf16 bits (exact for the products here)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def _lop3(a, b, c, lut):
    out = np.zeros_like(a)
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a & M32) & (b if i & 2 else ~b & M32) & (c if i & 1 else ~c & M32)
    return out


def _prmt(a, b, sel):
    pool = [(a >> (8 * k)) & 0xFF for k in range(4)] + [(b >> (8 * k)) & 0xFF for k in range(4)]
    return sum(pool[(sel >> (4 * k)) & 7] << (8 * k) for k in range(4))


def _mma(regs, d, a, b, c):
    """m16n8k16 row.col bf16 -> f32 across the 32 lanes (PTX ISA fragment layouts)."""
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for i, reg in enumerate(a):
        v = regs[reg]
        rows = g + 8 * (i % 2)
        cols = 2 * q + 8 * (i // 2)
        A[rows, cols] = _bf16(v & 0xFFFF)
        A[rows, cols + 1] = _bf16(v >> 16)
    for i, reg in enumerate(b):
        v = regs[reg]
        B[2 * q + 8 * i, g] = _bf16(v & 0xFFFF)
        B[2 * q + 8 * i + 1, g] = _bf16(v >> 16)
    D = A @ B
    acc = [regs[r] for r in c]
    for i, reg in enumerate(d):
        regs[reg] = acc[i] + D[g + 8 * (i // 2), 2 * q + i % 2]


def run_ptx(asm: str, args: list) -> dict:
    """Run inline PTX on 32 lanes: args are $0.. (outputs first, then inputs), each a [32]
    array; returns the registers, $n included."""
    regs = {f"${i}": np.asarray(v) for i, v in enumerate(args)}
    imm = lambda s: regs[s] if s in regs else np.full(32, int(s, 0), dtype=np.int64)  # noqa: E731
    for ins in re.split(r"[;\n]", asm):
        ins = ins.strip()
        if not ins or ins in "{}" or ins.startswith(".reg"):
            continue
        op, rest = ins.split(None, 1)
        ops = [s.strip() for s in re.split(r",(?![^{]*})", rest)]
        if op.startswith("mma.sync"):
            lists = [re.findall(r"[$\w]+", s) for s in ops]
            _mma(regs, *lists)
            continue
        x = [imm(s) for s in ops[1:]]
        if op == "and.b32":
            out = x[0] & x[1]
        elif op == "shl.b32":
            out = (x[0] << x[1]) & M32
        elif op == "shr.b32":
            out = x[0] >> x[1]
        elif op == "lop3.b32":
            out = _lop3(x[0], x[1], x[2], int(ops[4], 0))
        elif op == "prmt.b32":
            out = np.array([_prmt(int(p), int(r), int(ops[3], 0)) for p, r in zip(x[0], x[1])])
        elif op == "mul.rn.bf16x2":
            lo = _to_bf16_bits(_bf16(x[0] & 0xFFFF) * _bf16(x[1] & 0xFFFF))
            hi = _to_bf16_bits(_bf16(x[0] >> 16) * _bf16(x[1] >> 16))
            out = lo | (hi << 16)
        else:
            raise AssertionError(f"the emulator does not know {op}")
        regs[ops[0]] = np.asarray(out, dtype=np.int64)
    return regs


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
    xbits = _to_bf16_bits(xe).astype(np.int64)
    xw = [xbits[:, 2 * i] | (xbits[:, 2 * i + 1] << 16) for i in range(4)]

    frag = run_ptx(mma_fp4._BFRAG.value, [0, 0, 0, 0, *xw])
    mult = lambda s: ((s + 126) << 7) * 65537  # noqa: E731  (the kernel's _scales)
    acc0 = rng.standard_normal((4, 32))
    out = run_ptx(mma_fp4._WORD_MMA.value, [0, 0, 0, 0, wa, wb, mult(sa), mult(sb),
                                            *(frag[f"${i}"] for i in range(4)), *acc0])

    def codes(words, s):
        nib = (words[:, None] >> (4 * np.arange(8))) & 15
        return E2M1[nib] * np.exp2(s.astype(np.float64) - 127)[:, None]  # [lane, code i]

    xv = _bf16(xbits)  # [lane, i]
    for half, (words, s) in enumerate(((wa, sa), (wb, sb))):
        w = codes(words, s)
        # D[row, n] = sum over c, i of W[(row, c), i] * X[(n, c), i]
        want = np.einsum("gci,nci->gn", w.reshape(8, 4, 8), xv.reshape(8, 4, 8))
        for j in range(2):  # columns 2c, 2c + 1
            got = out[f"${2 * half + j}"]
            ref = acc0[2 * half + j] + want[g, 2 * c + j]
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


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
            np.testing.assert_array_equal(_bf16(v & 0xFFFF), E2M1[lane[base:base + 32] & 15])
            np.testing.assert_array_equal(_bf16(v >> 16), E2M1[lane[base:base + 32] >> 4])
