"""tools/k2_code_by_phase.py: each instruction goes to the phase whose block of
k2/triton/kernel.py it was inlined from, and every phase's block is found; the code after
the last EXIT counts as out of line, and a phase's span is taken from its in-line code."""

from __future__ import annotations

from support import tools


def _tool():
    return tools.load("k2_code_by_phase")


def test_every_phase_block_is_found_in_order():
    from sgl_k3_mono.k2.triton.frame import PHASES

    starts = _tool().phase_starts()
    assert [n for _, n in starts] == ["entry", *PHASES]
    assert [no for no, _ in starts] == sorted(no for no, _ in starts)


def test_an_instruction_goes_to_the_outermost_kernel_line():
    tool = _tool()
    starts = [(0, "entry"), (100, "o_proj"), (200, "seam")]
    sass = "\n".join([
        '\t//## File "/x/sgl_k3_mono/k2/triton/kernel.py", line 5',
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
        '\t//## File "/x/sgl_k3_mono/k2/triton/frame.py", line 35 inlined at "/x/sgl_k3_mono/k2/triton/kernel.py", '
        "line 150",
        '\t//## File "/x/sgl_k3_mono/k2/triton/kernel.py", line 150',
        "        /*0010*/                   S2R R0, SR_CTAID.X ;",
        "        /*0090*/                   MOV R2, R3 ;",
        '\t//## File "/x/sgl_k3_mono/k2/triton/kernel.py", line 250',
        "        /*00a0*/                   EXIT ;",
    ])
    assert dict(tool.by_phase(sass, starts)) == {"entry": [0], "o_proj": [0x10, 0x90], "seam": [0xA0]}


def test_out_of_line_code_is_after_the_last_exit_and_left_out_of_the_span():
    tool = _tool()
    sass = "\n".join([
        "        /*0000*/                   MOV R2, R3 ;",
        "        /*0400*/              @P0 EXIT ;",
        "        /*0800*/                   EXIT ;",
        ".L_x_1:",
        "        /*0810*/                   SHFL.BFLY P5, R12, R136, R11, R10 ;",
    ])
    assert tool.last_exit(sass) == 0x800
    addrs = [0x400 * i for i in range(21)] + [0x10000]  # 0 .. 20 KB in line, one instruction far out of line
    assert tool.span_kb(addrs, 0x5000) == (1.0, 19.0)
    assert all(x != x for x in tool.span_kb([0x10000], 0x5000))  # nothing in line: no span (nan)
