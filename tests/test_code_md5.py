"""tools/code_md5.py, the check behind "the same code" claims: the gfx950 digest covers the
code and nothing that names source lines, so moving code between files keeps it while a
changed instruction changes it."""

from __future__ import annotations

from types import SimpleNamespace

from support import tools


def _tool():
    return tools.load("code_md5")


def _amdgcn(file: str, line: int, op: str = "v_add_f32 v1, v2, v3") -> SimpleNamespace:
    asm = (f'\t.file\t1 "/src/{file}"\n'
           "k2_kernel:\n"
           f"\t.loc\t1 {line} 0 prologue_end            ; {file}:{line}:0\n"
           f"\ts_load_dword s0, s[0:1], 0x0            ; {file}:{line}:4\n"
           f"\t{op}\n"
           ".LBB0_1:\n"
           "\ts_endpgm\n"
           "\t.section\t.debug_abbrev\n"
           f"\t.byte\t{line % 251}\n")
    return SimpleNamespace(asm={"amdgcn": asm})


def test_gfx950_digest_is_the_code_not_its_source_lines():
    tool = _tool()
    here = tool.machine_code(_amdgcn("kernel.py", 311), "gfx950")
    moved = tool.machine_code(_amdgcn("frame.py", 35), "gfx950")
    assert here == moved
    assert here.splitlines() == ["k2_kernel:", "\ts_load_dword s0, s[0:1], 0x0", "\tv_add_f32 v1, v2, v3",
                                 ".LBB0_1:", "\ts_endpgm"]
    assert tool.machine_code(_amdgcn("kernel.py", 311, "v_mul_f32 v1, v2, v3"), "gfx950") != here


def test_usage_without_a_tree_and_target():
    assert _tool().main([]) == 2
