#!/bin/bash
# GPU tests owed a run; ~8 min on nvidia-h200-x2. Logs under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # name, timeout, pytest args...
  local name=$1 t=$2; shift 2
  ( timeout "$t" python3 -m pytest -q -s -p no:cacheprovider -rf --tb=short "$@" 2>&1 ) > "$OUT/$name.log"
  echo "== $name (rc $?)"; grep -E "K1GPU|K2GPU|STEPCMP|passed|failed|FAILED|Error|rank [01]: exit" "$OUT/$name.log" | tail -25
}
run k2-tp2 150 tests/launch/test_k2_tp.py
run forward-tiny 150 "tests/forward/test_forward_gpu.py::test_steps_match_the_reference_step[tiny-bf16-M3]"
run k1-gpu 240 tests/launch/test_k1.py -k "not interpret"
