"""A 32-lane emulator of the handful of PTX instructions K2's inline-asm mma path issues
(mma_fp4), for the CPU layout tests: registers are [32] int64 arrays of 32-bit
patterns (f32 registers hold their bits), so a test can run the module's own asm strings
and compare with the product its docstring promises."""

from __future__ import annotations

import re

import numpy as np

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])
M32 = 0xFFFFFFFF


def bf16_value(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


def to_bf16_bits(x):
    """Round-to-nearest-even float -> bf16 bits."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)


def f32_value(bits):
    return (np.asarray(bits, dtype=np.int64) & M32).astype(np.uint32).view(np.float32).astype(np.float64)


def _lop3(a, b, c, lut):
    out = np.zeros_like(a)
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a & M32) & (b if i & 2 else ~b & M32) & (c if i & 1 else ~c & M32)
    return out


def _prmt(a, b, sel):
    pool = [(a >> (8 * k)) & 0xFF for k in range(4)] + [(b >> (8 * k)) & 0xFF for k in range(4)]
    return sum(pool[(sel >> (4 * k)) & 7] << (8 * k) for k in range(4))


def _mma_bf16(regs, d, a, b, c):
    """m16n8k16 row.col bf16 -> f32 across the 32 lanes (PTX ISA fragment layouts): the
    products summed in float64, the result rounded once to the f32 register."""
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for i, reg in enumerate(a):
        v = regs[reg]
        rows = g + 8 * (i % 2)
        cols = 2 * q + 8 * (i // 2)
        A[rows, cols] = bf16_value(v & 0xFFFF)
        A[rows, cols + 1] = bf16_value(v >> 16)
    for i, reg in enumerate(b):
        v = regs[reg]
        B[2 * q + 8 * i, g] = bf16_value(v & 0xFFFF)
        B[2 * q + 8 * i + 1, g] = bf16_value(v >> 16)
    D = A @ B
    acc = [f32_value(regs[r]) for r in c]
    for i, reg in enumerate(d):
        regs[reg] = f32_bits(acc[i] + D[g + 8 * (i // 2), 2 * q + i % 2])


def run_ptx(asm: str, args: list) -> dict:
    """Run inline PTX on 32 lanes: args are $0.. (outputs first, then inputs), each a [32]
    array of 32-bit patterns; returns the registers, $n included."""
    regs = {f"${i}": np.asarray(v, dtype=np.int64) for i, v in enumerate(args)}

    def imm(s):
        if s in regs:
            return regs[s]
        return np.full(32, int(s, 0), dtype=np.int64)

    for ins in re.split(r"[;\n]", asm):
        ins = ins.strip()
        if not ins or ins in "{}" or ins.startswith(".reg"):
            continue
        op, rest = ins.split(None, 1)
        ops = [s.strip() for s in re.split(r",(?![^{]*})", rest)]
        if op.startswith("mma.sync"):
            lists = [re.findall(r"[$\w]+", s) for s in ops]
            _mma_bf16(regs, *lists)
            continue
        x = [imm(s) for s in ops[1:]]
        if op == "and.b32":
            out = x[0] & x[1]
        elif op == "mul.lo.u32":
            out = (x[0] * x[1]) & M32
        elif op == "shl.b32":
            out = (x[0] << x[1]) & M32
        elif op == "shr.b32":
            out = (x[0] & M32) >> x[1]
        elif op == "lop3.b32":
            out = _lop3(x[0], x[1], x[2], int(ops[4], 0))
        elif op == "prmt.b32":
            out = np.array([_prmt(int(p), int(r), int(ops[3], 0)) for p, r in zip(x[0], x[1])])
        elif op == "mul.rn.bf16x2":
            lo = to_bf16_bits(bf16_value(x[0] & 0xFFFF) * bf16_value(x[1] & 0xFFFF))
            hi = to_bf16_bits(bf16_value(x[0] >> 16) * bf16_value(x[1] >> 16))
            out = lo | (hi << 16)
        else:
            raise AssertionError(f"the emulator does not know {op}")
        regs[ops[0]] = np.asarray(out, dtype=np.int64)
    return regs
