# s46 call 1: K1's untouched GPU tests on the head (main tree), then the seam probes (this tree)
set -u
source tools/device/env.sh >/dev/null 2>&1
t k1-rest 330 tests/launch/test_k1.py -k "gpu and (fault_injection or carveout or kda_part)" &
tp=$!
cd .ab-old/probe
export PYTHONPATH=/tmp/site:$PWD
k1="timeout 200 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1,2,4 --warm-only"
k2="timeout 300 python3 -m sgl_k3_mono.k2.bench --rows 1,2 --formats bf16 --warm-only"
warm "$OUT/probe-warm.log" "$k1" "SGL_K3_MONO_PROBE_NOSEAM=1 $k1" "$k2 --block ''" "$k2 --block SPASS=0"
wait $tp
for pass in 1 2; do
  for v in "" "SGL_K3_MONO_PROBE_NOSEAM=1"; do
    ( echo "K1PROBE pass $pass variant '$v'"
      env $v timeout 150 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1,2,4 --no-phases 2>&1 \
        | grep -E "^ *[0-9]+ +(decode|verify)|Error|bandwidth" ) | tee -a "$OUT/k1-probe.log"
  done
done
timeout 240 python3 -m sgl_k3_mono.k2.bench --rows 1,2 --formats bf16 --no-phases --trace \
  --block "" --block SPASS=0 --block "" --block SPASS=0 > "$OUT/k2-probe.log" 2>&1
echo "k2 probe rc $?"; grep -vE "^\s*$" "$OUT/k2-probe.log" | tail -40
