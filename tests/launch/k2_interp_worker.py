"""Runs K2 cases under Triton's CPU interpreter (phase by phase; with --persistent first,
as the persistent launch on a one-program grid) and prints one JSON line per case.
Started by test_k2.py in a fresh process with TRITON_INTERPRET=1."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from support.triton_interp import patch, patch_clock  # noqa: E402

patch()
from k2_cases import Case, run_case  # noqa: E402

persistent = sys.argv[1:2] == ["--persistent"]
if persistent:
    patch_clock()
for spec in sys.argv[1 + persistent:]:
    case = Case(**json.loads(spec))
    try:
        res = run_case(case, "cpu", phase=None, grid=1) if persistent else run_case(case, "cpu")
    except Exception as e:  # report, let the test fail with the message
        res = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps({"case": case.name, **res}), flush=True)
