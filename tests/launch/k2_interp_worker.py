"""Runs K2 cases under Triton's CPU interpreter (phase by phase; with --persistent first,
as the persistent launch on a one-program grid) and prints one JSON line per case. With
--bitwise-vs TILES (after --persistent, if any) each case runs a second time with those
tiles instead of its own (or, given "layout=L", with its experts held in layout L; given
"off=KEY", with its own tiles but KEY=0), and the line says how many outputs of the two
runs differ.
Started by test_k2.py in a fresh process with TRITON_INTERPRET=1."""

import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from support.triton_interp import patch, patch_clock  # noqa: E402

patch()
from k2_cases import Case, run_case  # noqa: E402

args = sys.argv[1:]
persistent = args[:1] == ["--persistent"]
args = args[persistent:]
against = None
if args[:1] == ["--bitwise-vs"]:
    against, args = args[1], args[2:]
if persistent:
    patch_clock()


def _run(case):
    if persistent:
        return run_case(case, "cpu", phase=None, grid=1, keep_out=against is not None)
    return run_case(case, "cpu", keep_out=against is not None)


for spec in args:
    case = Case(**json.loads(spec))
    try:
        res = _run(case)
        if against is not None:  # "layout=L": the same tiles, the experts held in layout L
            if against.startswith("layout="):
                twin = dataclasses.replace(case, layout=against[7:])
            elif against.startswith("off="):
                twin = dataclasses.replace(case, tiles=case.tiles.replace(f"{against[4:]}=1", f"{against[4:]}=0"))
            else:
                twin = dataclasses.replace(case, tiles=against)
            other = _run(twin)
            res["apart_from"] = {"tiles": against, "apart": int((res.pop("out") != other.pop("out")).sum())}
    except Exception as e:  # report, let the test fail with the message
        res = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps({"case": case.name, **res}), flush=True)
