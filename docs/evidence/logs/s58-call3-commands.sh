# s58 call 3 (not run: for the next session, after call 2 on the same machine): `bench step --full --fmt mxfp4` (no standard column: SGLang keeps no MXFP4 experts on sm_90),
# rows 1 and 8 first, then 2 and 4; the compiles brought back. Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; grep TCACHE /tmp/env.log
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
( timeout 520 python3 -m sgl_k3_mono.cli bench step --full --fmt mxfp4 --rows 1,8,2,4 2>&1 \
  | grep -v "Config file not found" ) | tee "$OUT/step-full-mxfp4.log"
tcache_compiled | tail -30
python3 tools/device/tcache.py harvest "$OUT/tc-harvest.txz"
