# s52 call 3: call 1 (H100) found K2 warm after a 256 MB read by l2_stream's Triton kernel (133.0 us; warm 133.5) but
# cold after torch's sum of the same bytes (146.6): the loss may not be L2's contents. K2 after each read of
# _L2Flush.READS: torch's sum of 4 KB (a torch kernel last, L2 not emptied), the stream then that sum, the stream with
# its carveout fitted (SMs left mostly L1), and cuBLAS's gemv over 117 MB (as an MLA layer before its K2).
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16,mxfp4 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-after-reads.log"
